"""Chapter 3's comparison of the pretrained model with the prompt-only learners at larger d than quick mode's: the
examples each needs to reach the target error, at r = 2, from the chapter's quick model and sizes.

    python benchmarks/ch3_larger_d.py [--dims 16 24 32]

Writes results/ch3-larger-d-cpu.json, which chapter 3 reads when the file's sizes are its own. The pretrained
model's risk curve is exact in n* (floor + spread / n*, from risk.attention_risk_terms); the prompt-only learners'
curves are read on a grid of n* up to 1,024. About 4 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

import icl_utils
from benchmarks.common import write_json
from icl_utils import risk
from icl_utils.estimators import kernel_ridge_fit, two_layer_network_fit
from icl_utils.models import FeatureAttention, two_stage_fit
from icl_utils.tasks.single_index import SingleIndexTasks

# chapter 3's quick Config: the model, the two stages' sizes, the target and the prompt-only learners' test sizes
SIZES = {
    "r": 2,
    "width": 32,
    "t1_factor": 2,
    "n_tasks_2": 8192,
    "n_context_2": 256,
    "lam": 1e-4,
    "terms_tasks": 512,
    "terms_points": 256,
    "target": 0.55,
    "prompt_tests": 48,
    "queries": 256,
}
GRID = (16, 32, 64, 128, 256, 512, 1024)
LEARNERS = {"kernel ridge": kernel_ridge_fit, "two-layer net": two_layer_network_fit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[16, 24, 32])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    s = SIZES
    gen = icl_utils.seed_everything(0)
    rows = []
    for d in args.dims:
        start = time.perf_counter()
        floors, spreads = [], []
        for seed in range(args.seeds):
            task = SingleIndexTasks(dim=d, subspace_dim=s["r"], noise_std=0.1, subspace_seed=seed)
            model = FeatureAttention(d, s["width"], generator=torch.Generator().manual_seed(seed))
            two_stage_fit(
                model,
                task,
                stage1_tasks=s["t1_factor"] * d**3,
                stage1_n=d**2,
                stage2_tasks=s["n_tasks_2"],
                stage2_n=s["n_context_2"],
                lam=s["lam"],
                generator=gen,
            )
            terms = risk.attention_risk_terms(model, task, s["terms_tasks"], s["terms_points"], gen)
            floors.append(terms.floor)
            spreads.append(terms.spread)
        need = risk.examples_needed(np.array(floors), np.array(spreads), s["target"])
        row = {"d": d, "floors": floors, "spreads": spreads, "pretrained_needed": float(np.median(need))}
        task = SingleIndexTasks(dim=d, subspace_dim=s["r"], noise_std=0.1, subspace_seed=0)
        for name, fit in LEARNERS.items():
            errors = [
                float(risk.held_out_errors(fit, task, n, s["prompt_tests"], s["queries"], gen).mean()) for n in GRID
            ]
            row[name] = {"errors": errors, "needed": risk.examples_to_reach(GRID, errors, s["target"])}
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
        print(
            {k: v for k, v in row.items() if k not in LEARNERS},
            {name: round(row[name]["needed"], 1) for name in LEARNERS},
            flush=True,
        )
    write_json(
        args.out / "ch3-larger-d-cpu.json",
        {"what": __doc__.splitlines()[0], "sizes": s, "grid": list(GRID), "seeds": args.seeds, "rows": rows},
    )


if __name__ == "__main__":
    main()
