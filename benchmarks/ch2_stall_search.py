"""Chapter 2's panel (b) searched: how much the modified dynamics gain over the plain (static) flow from random
starts of several scales on a degenerate teacher, at quick mode's sizes.

    python benchmarks/ch2_stall_search.py [--scales 0.03 0.1 0.3 1] [--ranks 1 2]

For each initial scale of the first-layer weights (``init_particles(scale=...)``) and each teacher rank (one teacher
each), five students train by SGD under the static and the modified dynamics from the same neurons; the file
records their losses along the run and the interventions that fired. Writes results/ch2-stall-search-cpu.json,
which chapter 2 reads when the file's sizes are its own. About a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import numpy as np

from benchmarks.common import float64_cpu_generator, write_json
from icl_utils.dynamics import mean_field as mf
from icl_utils.tasks.features import TeacherFeatures

# chapter 2's quick Config: the problem, the training set and the SGD
SIZES = {
    "dim": 10,
    "k": 3,
    "teacher_width": 16,
    "width": 60,
    "seeds": 5,
    "prompts": 512,
    "length": 64,
    "batch": 8,
    "n_eval": 4096,
    "steps": 1500,
    "eta": 0.2,
    "tolerance": 0.01,
}
RECORD = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.03, 0.1, 0.3, 1.0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    s = SIZES
    gen = float64_cpu_generator(0)
    rows = []
    for rank, scale in itertools.product(args.ranks, args.scales):
        start = time.perf_counter()
        teacher = TeacherFeatures(dim=s["dim"], k=s["k"], width=s["teacher_width"], rank=rank, seed=2)
        data = mf.FeaturePrompts.sample(teacher, s["prompts"], s["length"], gen)
        init = mf.init_particles(s["width"], s["dim"], s["k"], gen, scale=scale, seeds=s["seeds"]).double()
        row = {"rank": rank, "scale": scale}
        for model in ("static", "modified"):
            run = mf.run_gradient_descent(
                model,
                data,
                init,
                steps=s["steps"],
                eta=s["eta"],
                batch=s["batch"],
                generator=gen,
                tolerance=s["tolerance"],
                eval_size=s["n_eval"],
                record_every=RECORD,
                progress=False,
            )
            losses = np.asarray(run.losses)
            row[model] = {
                "steps": run.steps.tolist(),
                "losses": losses.T.tolist(),
                "final": losses[-1].tolist(),
                "interventions": len(run.events),
            }
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
        print(
            f"rank {rank} scale {scale}: start {np.median([l[0] for l in row['static']['losses']]):.3f}; static "
            f"{np.median(row['static']['final']):.4f} modified {np.median(row['modified']['final']):.4f}; "
            f"interventions "
            f"{row['modified']['interventions']} ({row['seconds']:.0f} s)",
            flush=True,
        )
    write_json(args.out / "ch2-stall-search-cpu.json", {"what": __doc__.splitlines()[0], "sizes": s, "rows": rows})


if __name__ == "__main__":
    main()
