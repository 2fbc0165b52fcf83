"""What more training does to chapter 0's quick transformer, without noise: its plateau after k = d (largest error /
d over d < k <= 2d, claim ls-transition) and its effective ridge penalty, after 500 to 4,000 steps.

    python benchmarks/ch0_training_length.py [--steps 500 1000 2000 4000]

Writes results/ch0-training-length-cpu.json, which chapter 0 reads to say whether its ls-transition claim fails for
lack of training: the chapter checks that the file's model and schedule are its own. One run per length, in
parallel processes (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

import icl_utils
from benchmarks.common import write_json
from icl_utils.models import GPTConfig, ICLTransformer
from icl_utils.risk import effective_ridge, mean_and_band, model_errors
from icl_utils.tasks import LinearRegression
from icl_utils.train import TrainConfig, train_parallel

# chapter 0's quick Config: its GPT and its schedule, with the number of steps varied
MODEL = GPTConfig(n_dims=5, n_context=10, n_embd=32, n_layer=3, n_head=2)
TRAIN = TrainConfig(steps=1500, batch_size=64, n_context=10, lr=1e-3, schedule="cosine", bf16=True)
SEED, N_TEST, LAMS = 10, 4096, np.geomspace(1e-3, 10, 21).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    d = MODEL.n_dims
    task = LinearRegression(dim=d)
    icl_utils.seed_everything(0)
    models = [ICLTransformer(MODEL) for _ in args.steps]
    init = models[0].state_dict()
    for model in models:  # one initialization: only the training length differs
        model.load_state_dict(init)
    configs = [dataclasses.replace(TRAIN, steps=s) for s in args.steps]
    histories = [train_parallel([m], task, c, seeds=[SEED], progress=False)[0] for m, c in zip(models, configs)]
    test = task.sample(N_TEST, TRAIN.n_context, icl_utils.make_generator(1, "cpu"))
    rows = []
    for steps, model, hist in zip(args.steps, models, histories):
        curve = mean_and_band(model_errors(model, test))[0]
        lam, distance = effective_ridge(curve, test, LAMS)
        rows.append(
            {
                "steps": steps,
                "plateau": float((curve[d + 1 : 2 * d + 1] / d).max()),
                "error_at_d": float(curve[d] / d),
                "effective_lambda": lam,
                "rms_distance": distance / d,
                "final_loss": float(hist.smoothed()[-1]),
                "seconds": hist.seconds,
            }
        )
        print(rows[-1])
    write_json(
        args.out / "ch0-training-length-cpu.json",
        {
            "what": __doc__.splitlines()[0],
            "model": dataclasses.asdict(MODEL),
            "train": {k: v for k, v in dataclasses.asdict(TRAIN).items() if k != "steps"},
            "seed": SEED,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
