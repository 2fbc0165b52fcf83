"""Training speed of the book's transformer against the reference in-context-learning code (Garg et al. 2022).

Trains the reference configuration (GPT-2 backbone, width 256, 12 layers, 8 heads; d = 20, prompts of 40 examples
and a query, batch 64, Adam 1e-4) for a fixed number of steps, in one run on one device, three ways:

* ``reference``: a faithful re-implementation of the reference training loop on Hugging Face's ``GPT2Model``
  (eager attention, float32, prompts sampled on the CPU and copied over, ``loss.item()`` every step, the
  point-wise loss computed every step as the reference logs it);
* ``package, plain``: :func:`icl_utils.train.train` without its fast path (``TrainConfig(cuda_graph=False)``: float32,
  no CUDA graph);
* ``package, fast``: ``TrainConfig(bf16=True)`` and the default on CUDA: bfloat16 autocast, fused Adam, the whole
  step in a CUDA graph.

Then it trains ``S`` models at once with :func:`icl_utils.train.train_ensemble` (the chapters' seeds and sweeps),
for every model the chapters train with Adam, against one (:func:`icl_utils.train.train`), and on the CPU against
``S`` separate runs (:func:`icl_utils.train.train_parallel`). Each rate is measured as
``(S2 - S1) / (t(S2) - t(S1))`` from two runs of ``S1`` and ``S2`` steps, so one-time costs (graph capture,
warm-up, forking) cancel. On the CPU each ensemble row also holds a floor under its time ratio from arithmetic
(:func:`products_floor`). Results go to ``results/train_speed-<device>.json``, which the book's performance
appendix reads.

    python benchmarks/train_speed.py                  # the reference configuration on the GPU, if there is one
    python benchmarks/train_speed.py --config small   # a small configuration on the CPU in about two minutes
    python benchmarks/train_speed.py --config smoke --out /tmp   # every path in seconds (the unit test)
"""

from __future__ import annotations

import argparse
import gc
import io
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import RESULTS, environment, slug, write_json
from icl_utils.models import LSA, LTB, GPTConfig, ICLTransformer, MLPAttention
from icl_utils.tasks import LinearRegression
from icl_utils.tasks.nonparametric import NonparametricTasks
from icl_utils.train import TrainConfig, batched_by_default, train, train_ensemble, train_parallel

CONFIGS = {
    # Garg et al.'s configuration: standard.yaml with the final curriculum stage (all dims, 40 examples and a query).
    "garg": dict(
        dim=20,
        n_context=40,
        width=256,
        layers=12,
        heads=8,
        batch=64,
        lr=1e-4,
        steps=(300, 900),
        ensemble=64,
        ensemble_steps=(200, 600),
    ),
    "small": dict(
        dim=5,
        n_context=10,
        width=64,
        layers=2,
        heads=2,
        batch=16,
        lr=1e-4,
        steps=(20, 120),
        ensemble=8,
        ensemble_steps=(40, 240),  # a step of an LTB takes about a millisecond: fewer steps time mostly noise
    ),
    # the unit test's: every path of the script in seconds; its rates mean nothing (write it to a scratch --out)
    "smoke": dict(
        dim=5,
        n_context=10,
        width=16,
        layers=1,
        heads=1,
        batch=4,
        lr=1e-4,
        steps=(2, 4),
        ensemble=2,
        ensemble_steps=(2, 4),
    ),
}


class ReferenceModel(nn.Module):
    """The reference model: read-in, Hugging Face GPT2Model, read-out at the x positions; a y token is
    ``(y, 0, ..., 0)``. It reads sequences of ``n_context + 1`` labelled points (the reference's ``n_points``)."""

    def __init__(self, dim: int, n_context: int, width: int, layers: int, heads: int):
        super().__init__()
        from transformers import GPT2Config, GPT2Model

        config = GPT2Config(
            n_positions=2 * (n_context + 1),
            n_embd=width,
            n_layer=layers,
            n_head=heads,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            use_cache=False,
            attn_implementation="eager",
        )
        self.read_in = nn.Linear(dim, width)
        self.backbone = GPT2Model(config)
        self.read_out = nn.Linear(width, 1)

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        batch, points, dim = xs.shape
        y_tokens = torch.cat([ys[:, :, None], xs.new_zeros(batch, points, dim - 1)], dim=2)
        tokens = torch.stack([xs, y_tokens], dim=2).reshape(batch, 2 * points, dim)
        hidden = self.backbone(inputs_embeds=self.read_in(tokens)).last_hidden_state
        return self.read_out(hidden)[:, ::2, 0]


def reference_run(cfg: dict, steps: int, device: torch.device) -> float:
    """Seconds for ``steps`` steps of the reference loop (model built outside the clock)."""
    torch.manual_seed(0)
    model = ReferenceModel(cfg["dim"], cfg["n_context"], cfg["width"], cfg["layers"], cfg["heads"])
    model = model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    sync(device)
    start = time.perf_counter()
    bar = tqdm(range(steps), file=io.StringIO())  # the reference shows the loss in its bar every step
    for _ in bar:
        xs = torch.randn(cfg["batch"], cfg["n_context"] + 1, cfg["dim"])  # on the CPU, as the reference does
        w = torch.randn(cfg["batch"], cfg["dim"], 1)
        ys = (xs @ w)[:, :, 0]
        xs, ys = xs.to(device), ys.to(device)
        optimizer.zero_grad()
        output = model(xs, ys)
        loss = (output - ys).square().mean()
        loss.backward()
        optimizer.step()
        loss_value = loss.detach().item()
        point_wise = (output.detach() - ys).square().mean(dim=0)  # noqa: F841 (logged every 10 steps there)
        bar.set_description(f"loss {loss_value}")
    sync(device)
    return time.perf_counter() - start


def package_run(cfg: dict, steps: int, device: torch.device, **fast) -> float:
    """Seconds for ``steps`` steps of :func:`icl_utils.train.train` on the book's GPT (model built outside);
    ``fast`` are the fast-path fields of the :class:`~icl_utils.train.TrainConfig` (``bf16``, ``cuda_graph``)."""
    torch.manual_seed(0)
    model = ICLTransformer(
        GPTConfig(
            n_dims=cfg["dim"],
            n_context=cfg["n_context"],
            n_embd=cfg["width"],
            n_layer=cfg["layers"],
            n_head=cfg["heads"],
        )
    ).to(device)
    gen = torch.Generator(device=device).manual_seed(0)
    config = TrainConfig(
        steps=steps, batch_size=cfg["batch"], n_context=cfg["n_context"], lr=cfg["lr"], log_every=100, **fast
    )
    sync(device)
    start = time.perf_counter()
    train(model, LinearRegression(dim=cfg["dim"]), config, generator=gen, progress=False)
    sync(device)
    return time.perf_counter() - start


def ensemble_run(
    make, task, n_models: int, steps: int, batch: int, n_context: int, bf16: bool, device: torch.device, how: str
) -> float:
    """Seconds for ``steps`` steps of ``n_models`` models trained ``how``: "one" (:func:`train`, one model),
    "ensemble" (:func:`train_ensemble`, its default path) or "separate" (:func:`train_parallel`)."""
    torch.manual_seed(0)
    models = [make().to(device) for _ in range(n_models)]
    gen = torch.Generator(device=device).manual_seed(0)
    config = TrainConfig(steps=steps, batch_size=batch, n_context=n_context, lr=1e-3, bf16=bf16, log_every=100)
    sync(device)
    start = time.perf_counter()
    if how == "one":
        train(models[0], task, config, generator=gen, progress=False)
    elif how == "ensemble":
        train_ensemble(models, task, config, generator=gen, progress=False)
    else:
        train_parallel(models, task, config, seeds=list(range(n_models)), progress=False)
    sync(device)
    return time.perf_counter() - start


#: the matrix products of a training step: (operator, index of its first operand)
PRODUCTS = {
    torch.ops.aten.mm.default: 0,
    torch.ops.aten.bmm.default: 0,
    torch.ops.aten.addmm.default: 1,
    torch.ops.aten.baddbmm.default: 1,
}


class _Products(TorchDispatchMode):
    """Records the operand shapes of every matrix product run inside it."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[torch.Size, torch.Size]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in PRODUCTS:
            first = PRODUCTS[func]
            self.shapes.append((args[first].shape, args[first + 1].shape))
        return func(*args, **(kwargs or {}))


def products_floor(make, task, batch: int, n_models: int, reps: int = 20, *, n_context: int) -> dict:
    """Seconds of one training step's matrix products on the CPU (the linear layers' ``mm``/``bmm``, forward and
    backward, recorded on one model's batch; fused attention kernels are not among them), for one model and for
    ``n_models`` models, the latter the faster of one batched product of every model's operands and ``n_models``
    separate ones. Then ``n_models`` models' step takes at least ``products_many + (t_one - products_one)``, with
    ``t_one`` one model's whole step, if (1) the rest of a step (attention's kernel, elementwise work, Adam,
    sampling) takes S models no less time than one and (2) each product costs inside a step what it costs timed
    alone here (warm caches, random operands). A product left out of the record only lowers the floor."""
    model = make()
    prompt = task.sample(batch, n_context, torch.Generator().manual_seed(0))
    with _Products() as recorder:
        model(prompt).square().mean().backward()

    def seconds(a_shape: torch.Size, b_shape: torch.Size, copies: int) -> float:
        lead = a_shape[:-2].numel()  # a bmm's batch; 1 for mm
        a, b = torch.randn(copies * lead, *a_shape[-2:]), torch.randn(copies * lead, *b_shape[-2:])
        torch.bmm(a, b)
        start = time.perf_counter()
        for _ in range(reps):
            torch.bmm(a, b)
        return (time.perf_counter() - start) / reps

    one = many = 0.0
    for shapes in recorder.shapes:
        alone = seconds(*shapes, 1)
        one += alone
        many += min(seconds(*shapes, n_models), n_models * alone)  # batched, or one product per model
    return {"products": len(recorder.shapes), "products_one_s": one, "products_many_s": many}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rate(run, steps: tuple[int, int]) -> float:
    """Steps per second from two runs, one-time costs cancelled."""
    t1, t2 = run(steps[0]), run(steps[1])
    gc.collect()
    gc.freeze()  # so do the modules imported since (transformers): each full collection had taken 0.3 s
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return (steps[1] - steps[0]) / max(t2 - t1, 1e-9)


def main(argv: list[str] | None = None) -> dict:
    gc.collect()
    gc.freeze()  # what exists now is long-lived (modules): the collections between runs skip it, every run alike
    try:
        return _main(argv)
    finally:
        gc.unfreeze()  # for a caller's process (the unit test): its objects can be collected again


def _main(argv: list[str] | None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--config", choices=sorted(CONFIGS), default=None, help="garg (default on a GPU) or small (default on the CPU)"
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results file")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    config_name = args.config or ("garg" if device.type == "cuda" else "small")
    cfg = CONFIGS[config_name]
    steps, batch = cfg["steps"], cfg["batch"]

    try:
        import transformers

        reference_version = transformers.__version__
    except ImportError:
        print("transformers is not installed: no reference (pip install -e '.[bench]')")
        reference_version = None
    rows, ensembles = [], []
    result = {
        "config": config_name,
        **cfg,
        **environment(device),
        "transformers": reference_version,
        "complete": False,
        "rows": rows,
        "ensembles": ensembles,
    }
    path = args.out / f"train_speed-{slug(device)}.json"
    # Rows are saved as they come to a separate file (not matched by the book's train_speed-*.json), so that an
    # interrupted run keeps what it measured without replacing a complete results file.
    partial = path.with_name(f"{path.stem}.partial")

    def record(name: str, steps_per_s: float) -> None:
        """Add a row and rewrite the partial results file."""
        rows.append({"name": name, "steps_per_s": steps_per_s, "prompts_per_s": steps_per_s * batch})
        if reference_version is not None:
            rows[-1]["ratio_to_reference"] = steps_per_s / rows[0]["steps_per_s"]
        print(f"{name:32s} {steps_per_s:9.1f} steps/s {steps_per_s * batch:11.0f} prompts/s", flush=True)
        write_json(partial, result)

    if reference_version is not None:
        record("reference (HF GPT2)", rate(lambda s: reference_run(cfg, s, device), steps))
    record("package, plain", rate(lambda s: package_run(cfg, s, device, cuda_graph=False), steps))
    if device.type == "cuda":
        record("package, fast", rate(lambda s: package_run(cfg, s, device, bf16=True), steps))

    n_models, e_steps = cfg["ensemble"], cfg["ensemble_steps"]
    lin5, fourier = (
        LinearRegression(dim=5, noise_std=0.5),
        NonparametricTasks(dim=4, smoothness=1.0, n_basis=128, noise_std=0.5),
    )
    gpt = GPTConfig(n_dims=5, n_context=10, n_embd=32, n_layer=3, n_head=2)
    paired = GPTConfig(n_dims=3, n_context=8, n_embd=32, n_layer=2, n_head=2, tokens="paired", residual_init=True)
    single_index = GPTConfig(n_dims=1, n_context=16, n_embd=32, n_layer=2, n_head=2)
    cases = {  # the models the chapters train with Adam, at their quick sizes (a GPT in bfloat16 on a GPU)
        "LTB (chapter 5), batch 512": (lambda: LTB(5), lin5, 512, 10, False),
        "LSA (chapter 5), batch 512": (lambda: LSA(5), lin5, 512, 10, False),
        "GPT 3x32 (chapter 1), batch 64": (lambda: ICLTransformer(gpt), lin5, 64, 10, True),
        "GPT 2x32 (chapter 4), batch 64": (lambda: ICLTransformer(single_index), LinearRegression(dim=1), 64, 16, True),
        "GPT 2x32, paired tokens (chapter 5), batch 128": (
            lambda: ICLTransformer(paired),
            LinearRegression(dim=3),
            128,
            8,
            True,
        ),
        # chapter 2 fits it by L-BFGS: a model whose memory traffic, not its arithmetic, sets its time
        "MLP+attention (chapter 2), batch 64": (
            lambda: MLPAttention(4, 32, hidden=64, input_scale=10.0),
            fourier,
            64,
            32,
            False,
        ),
    }
    for name, (make, task, e_batch, n_context, bf16) in cases.items():

        def run(models: int, steps: int, how: str, case=(make, task, e_batch, n_context, bf16)) -> float:
            make, task, e_batch, n_context, bf16 = case
            return ensemble_run(make, task, models, steps, e_batch, n_context, bf16, device, how)

        one = rate(lambda s: run(1, s, "one"), e_steps)
        many = rate(lambda s: run(n_models, s, "ensemble"), e_steps)
        batched = batched_by_default(
            make().to(device), task, TrainConfig(steps=1, batch_size=e_batch, n_context=n_context)
        )
        row = {
            "name": name,
            "models": n_models,
            "bf16": bf16 and device.type == "cuda",
            "path": "batched" if batched else "separate",
            "steps_per_s_one": one,
            "steps_per_s_many": many,
            "time_ratio": one / many,
        }
        if device.type == "cpu":  # separate runs in processes, train_parallel: what an ensemble must not lose to
            row["steps_per_s_separate"] = rate(lambda s: run(n_models, s, "separate"), e_steps)
            row["time_ratio_separate"] = one / row["steps_per_s_separate"]
            floor = products_floor(make, task, e_batch, n_models, n_context=n_context)
            step = 1 / one
            row |= floor | {
                "time_ratio_floor": (floor["products_many_s"] + max(step - floor["products_one_s"], 0.0)) / step
            }
        ensembles.append(row)
        print(
            f"{name:48s} {row['path']:8s} {n_models} models {one / many:5.2f}x the time of one"
            + (
                f", separate runs {row['time_ratio_separate']:5.2f}x, floor {row['time_ratio_floor']:5.2f}x"
                if "time_ratio_separate" in row
                else ""
            ),
            flush=True,
        )
        write_json(partial, result)
    result["complete"] = True
    write_json(path, result)
    partial.unlink(missing_ok=True)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
