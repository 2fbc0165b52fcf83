"""Chapter 1's other route to a separation from learners on the prompt alone: rough basis functions. Tasks over the
orthonormalized piecewise-constant B-splines (order 0: indicators of dyadic cubes) in d = 4, s = 1, noise 0.5,
where a prompt-only learner must estimate a discontinuous function of d variables.

    python benchmarks/ch1_rough_basis.py [--seeds 3] [--device cuda]

For each context length n: linear attention on the true basis's first N(n) = ceil(2 n^(1/3)) functions with its
best Gamma (exact); MLP feature maps of width N(n) pretrained exactly as the chapter pretrains them (L-BFGS on the
ICL risk with the best Gamma, on infinitely many tasks; the chapter's first-layer scale 10), their exact excess risk;
and Gaussian and additive kernel ridge on the prompt alone, with an intercept, tuned by leave-one-out, on the same
test prompts (noiseless queries). Writes results/ch1-rough-basis-<device>.json; a few minutes on one GPU.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import RESULTS, environment, slug, write_json
from icl_utils import risk
from icl_utils.estimators import kernel_ridge
from icl_utils.exact import AttentionMoments, attention_risk, best_attention_excess
from icl_utils.models import MLPAttention
from icl_utils.tasks.nonparametric import NonparametricTasks
from icl_utils.train import fit_features_exact

TASK = {
    "dim": 4,
    "smoothness": 1.0,
    "basis": "bspline",
    "order": 0,
    "n_basis": 64,
    "noise_std": 0.5,
    "orthonormal": True,
}
NS = (16, 64, 256, 1024)
SIZES = {"hidden": 64, "input_scale": 10.0, "lbfgs_iter": 200, "train_points": 2**14, "eval_points": 2**16}
TEST_PROMPTS = {16: 128, 64: 128, 256: 128, 1024: 32}  # kernel ridge costs n^3 a prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    dev = torch.device(args.device)
    task = NonparametricTasks(**TASK)
    widths = [math.ceil(2 * n ** (1 / 3)) for n in NS]
    out = {
        "environment": environment(dev),
        "task": TASK,
        "ns": NS,
        "widths": widths,
        "sizes": SIZES,
        "test_prompts": TEST_PROMPTS,
    }
    path = args.out / f"ch1-rough-basis-{slug(dev)}.json"
    points = SIZES["eval_points"]
    out["true_basis"] = [
        float(
            best_attention_excess(
                AttentionMoments.of(lambda x, w=w: task.features(x)[..., :w], task, points=points), [n], task.noise_var
            )[0]
        )
        for n, w in zip(NS, widths)
    ]
    pretrained = np.empty((args.seeds, len(NS)))
    for j, (n, w) in enumerate(zip(NS, widths)):
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            model = MLPAttention(task.dim, w, hidden=SIZES["hidden"], input_scale=SIZES["input_scale"]).to(dev)
            fit_features_exact(model, task, n, max_iter=SIZES["lbfgs_iter"], points=SIZES["train_points"])
            pretrained[seed, j] = (
                attention_risk(model.features, task, n, model.gamma, points=points).item() - task.noise_var
            )
        print(f"n = {n}: true basis {out['true_basis'][j]:.4f}, pretrained {np.round(pretrained[:, j], 4)}", flush=True)
    out["pretrained"] = pretrained.tolist()
    write_json(path, out)
    # On the CPU: batched float64 eigh of large kernels has failed inside cuSOLVER on these GPUs.
    gen = torch.Generator().manual_seed(0)
    lams = (1e-2, 1e-1, 1.0, 10.0)
    learners = {
        "kernel ridge": lambda p: kernel_ridge(p, lams, (0.1, 0.2, 0.4, 0.8, 1.6), center=True),
        "additive kernel ridge": lambda p: kernel_ridge(p, lams, (0.05, 0.1, 0.2, 0.4), additive=True, center=True),
    }
    errors = {name: [] for name in learners}
    for n in NS:
        start = time.perf_counter()
        got = risk.paired_query_errors(learners, task.noiseless(), n, TEST_PROMPTS[n], gen, chunk_size=32)
        for name in learners:
            errors[name].append([float(got[name].mean()), float(got[name].std(ddof=1) / math.sqrt(got[name].size))])
        print(
            f"n = {n}: "
            + ", ".join(f"{k} {v[-1][0]:.4f}" for k, v in errors.items())
            + f" ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    out["prompt_only"] = errors
    out["slopes"] = {
        "true basis": risk.fit_slope(NS, out["true_basis"]),
        "pretrained": risk.fit_slope(NS, np.median(pretrained, 0)),
        **{name: risk.fit_slope(NS, [e[0] for e in v]) for name, v in errors.items()},
    }
    print("slopes: " + ", ".join(f"{k} {v:.3f}" for k, v in out["slopes"].items()))
    write_json(path, out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
