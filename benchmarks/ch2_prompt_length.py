"""Chapter 2's claim a-two-timescale against the prompt length: the attention model with Gamma at its optimum at every
step and the static model, trained on the same prompts of 16 to 1,024 points, at quick mode's other sizes.

    python benchmarks/ch2_prompt_length.py [--lengths 16 64 256 1024]

For each length, both models train by SGD from the same neurons on one training set of that length; the file records
their losses along the run, the largest factor between their median losses either way after the first tenth of the
run (the claim's statistic) and the factor at the end. Writes results/ch2-prompt-length-cpu.json, which chapter 2
quotes when the file's sizes are its own. About 3 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.common import float64_cpu_generator, write_json
from icl_utils.dynamics import mean_field as mf
from icl_utils.tasks.features import TeacherFeatures

# chapter 2's quick Config: the problem, the training set's size and the SGD
SIZES = {
    "dim": 10,
    "k": 3,
    "teacher_width": 16,
    "width": 60,
    "seeds": 5,
    "prompts": 512,
    "batch": 8,
    "n_eval": 4096,
    "steps": 1500,
    "eta": 0.2,
}
RECORD = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    s = SIZES
    gen = float64_cpu_generator(0)
    teacher = TeacherFeatures(dim=s["dim"], k=s["k"], width=s["teacher_width"], seed=1)
    init = mf.init_particles(s["width"], s["dim"], s["k"], gen, seeds=s["seeds"]).double()
    rows = []
    for length in args.lengths:
        start = time.perf_counter()
        data = mf.FeaturePrompts.sample(teacher, s["prompts"], length, gen)
        losses = {}
        for name, options in (("attention", {"gamma": "optimal"}), ("static", {})):
            model = "attention" if name == "attention" else "static"
            run = mf.run_gradient_descent(
                model,
                data,
                init,
                steps=s["steps"],
                eta=s["eta"],
                batch=s["batch"],
                generator=gen,
                eval_size=s["n_eval"],
                record_every=RECORD,
                progress=False,
                **options,
            )
            losses[name] = np.asarray(run.losses)
        ratio = np.median(losses["attention"], 1) / np.median(losses["static"], 1)
        late = np.asarray(run.steps) >= s["steps"] // 10
        row = {
            "length": length,
            "largest_ratio": float(np.max(np.maximum(ratio, 1 / ratio)[late])),
            "final_ratio": float(ratio[-1]),
            "steps": run.steps.tolist(),
            "losses": {name: v.T.tolist() for name, v in losses.items()},
            "seconds": time.perf_counter() - start,
        }
        rows.append(row)
        print(
            f"length {length}: largest ratio {row['largest_ratio']:.2f}, final {row['final_ratio']:.2f} "
            f"({row['seconds']:.0f} s)",
            flush=True,
        )
    write_json(args.out / "ch2-prompt-length-cpu.json", {"what": __doc__.splitlines()[0], "sizes": s, "rows": rows})


if __name__ == "__main__":
    main()
