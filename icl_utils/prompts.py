"""The prompt: what every sampler returns, every estimator and every model reads.

A batch of ``B`` prompts, each with ``n`` context examples in ``d`` dimensions and one query::

    x        (B, n, d)   context inputs x_1..x_n
    y        (B, n)      context labels y_1..y_n
    x_query  (B, d)      the query input
    y_query  (B,)        the query's label (what a prediction is scored against)

The same prompt also reads as one sequence of ``n + 1`` labelled points, the query last. ``prefix(k)`` keeps the
first ``k`` points as context and makes point ``k`` the query, which is how an "error against the number of
in-context examples" curve is computed for an estimator. ``tokens()`` is the interleaved form a transformer reads.

Every length in the package counts context examples, ``n``, never the query: samplers, training
(:class:`icl_utils.train.TrainConfig`) and model sizes (:class:`icl_utils.models.gpt.GPTConfig`) alike.

A *task family* (:class:`TaskFamily`) has a dimension ``dim`` and ``sample(batch, n, generator)``, which returns
a :class:`Prompt` on the generator's device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Protocol, runtime_checkable

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from icl_utils.declared import Count, Integer, NonEmpty, Size, checked, finite_flag, values_checked


@checked
@dataclass(frozen=True)
class Prompt:
    """A batch of in-context prompts (see the module docstring for shapes); a batch holds at least one prompt,
    so an empty selection is refused where it is made."""

    x: Annotated[Float[Tensor, "B n d"], NonEmpty]
    y: Float[Tensor, "B n"]
    x_query: Float[Tensor, "B d"]
    y_query: Float[Tensor, " B"]

    def __post_init__(self) -> None:
        if self.x.device.type == "meta":  # no values: every estimator would return meta tensors
            raise ValueError("x must hold values, but is on the meta device")
        for name in ("y", "x_query", "y_query"):
            other = getattr(self, name)
            if other.device != self.x.device or other.dtype != self.x.dtype:
                raise ValueError(
                    f"{name} is {other.dtype} on {other.device} but x is {self.x.dtype} on {self.x.device}; "
                    "all fields of a Prompt must share device and dtype"
                )

    @property
    def batch_size(self) -> int:
        return self.x.shape[0]

    @property
    def n_context(self) -> int:
        return self.x.shape[1]

    @property
    def dim(self) -> int:
        return self.x.shape[2]

    @classmethod
    def from_points(cls, xs: Tensor, ys: Tensor) -> Prompt:
        """The prompt whose ``n + 1`` labelled points are ``xs`` ``(B, n+1, d)`` and ``ys`` ``(B, n+1)``, the last
        one the query: how every sampler builds its prompts."""
        # by hand, not declared: every sampler calls it at every training step
        if not isinstance(xs, Tensor) or not isinstance(ys, Tensor) or xs.ndim != 3 or ys.shape != xs.shape[:2]:
            said = [tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__ for t in (xs, ys)]
            raise ValueError(
                f"xs and ys must be tensors of shape (B, n+1, d) and (B, n+1), got {said[0]} and {said[1]}"
            )
        if xs.shape[1] == 0 or not xs.is_floating_point() or xs.dtype != ys.dtype:  # a query; one float dtype
            raise ValueError(
                f"xs and ys must be float tensors of one dtype with at least one point (the query), got {xs.dtype} "
                f"and {ys.dtype} "
                f"with {xs.shape[1]} points"
            )
        if xs.device.type == "meta":
            raise ValueError("xs and ys must hold values, but are on the meta device")
        return cls(x=xs[:, :-1], y=ys[:, :-1], x_query=xs[:, -1], y_query=ys[:, -1])

    def points(self) -> tuple[Tensor, Tensor]:
        """The prompt as ``n + 1`` labelled points, query last: ``(B, n+1, d)`` inputs and ``(B, n+1)`` labels."""
        xs = torch.cat([self.x, self.x_query[:, None, :]], dim=1)
        ys = torch.cat([self.y, self.y_query[:, None]], dim=1)
        return xs, ys

    @checked
    def prefix(self, k: Size) -> Prompt:
        """The prompt whose context is the first ``k`` points and whose query is point ``k`` (0-based)."""
        if k > self.n_context:
            raise ValueError(f"k must be an int in [0, {self.n_context}], got {k!r}")
        xs, ys = self.points()
        return Prompt(x=xs[:, :k], y=ys[:, :k], x_query=xs[:, k], y_query=ys[:, k])

    def tokens(self) -> Tensor:
        """Interleaved tokens ``[x_1, y_1, ..., x_n, y_n, x_query]`` of shape ``(B, 2n+1, d+1)``.

        An x token is ``(x, 0)`` and a y token is ``(x, y)``: the y token repeats its input, so one attention layer
        can pair every label with its input. (Garg et al. write the y token as ``(y, 0, ..., 0)``; the model must
        then first learn to copy each input into the next token, which a short training run may not get past.) A
        causal model reads its predictions off the x
        positions ``0, 2, ..., 2n``, which see every earlier pair but not their own label.
        """
        xs, ys = self.points()
        batch, m, d = xs.shape
        x_tok = torch.cat([xs, xs.new_zeros(batch, m, 1)], dim=2)
        y_tok = torch.cat([xs, ys[:, :, None]], dim=2)
        return torch.stack([x_tok, y_tok], dim=2).reshape(batch, 2 * m, d + 1)[:, :-1]

    @checked
    def take(self, index: slice | Int[Tensor, " k"] | Bool[Tensor, " {self.batch_size}"]) -> Prompt:
        """The prompts selected by ``index`` along the batch dimension (a slice, indices or a boolean mask)."""
        if isinstance(index, slice) and index.step is not None and index.step <= 0:  # torch slices forward only
            raise ValueError(f"index must be a slice with a positive step, got {index}")
        try:
            x = self.x[index]
        except (IndexError, TypeError) as err:  # an index past the batch, a slice of floats
            raise ValueError(f"index must select prompts of the batch of {self.batch_size}: {err}") from None
        if not len(x):
            raise ValueError(f"index must select at least one prompt, got {index}")
        return Prompt(x, self.y[index], self.x_query[index], self.y_query[index])

    @checked
    def split(self, size: Count) -> list[Prompt]:
        """The batch in consecutive pieces of ``size`` prompts (the last one may be smaller), as ``torch.split``."""
        return [self.take(slice(start, start + size)) for start in range(0, self.batch_size, size)]

    @staticmethod
    def cat(prompts: list[Prompt] | tuple[Prompt, ...]) -> Prompt:
        """The batches ``prompts`` one after the other (they must share ``n``, ``d``, dtype and device)."""
        if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, Prompt) for p in prompts):
            got = type(prompts).__name__ if not isinstance(prompts, (list, tuple)) else f"{len(prompts)} items"
            raise TypeError(f"prompts must be a non-empty list or tuple of icl_utils.Prompt, got {got}")
        shapes = {(p.n_context, p.dim, p.x.dtype, p.x.device) for p in prompts}
        if len(shapes) > 1:
            raise ValueError(f"prompts must share n, d, dtype and device to be joined, got {sorted(map(str, shapes))}")
        return Prompt(*(torch.cat([getattr(p, f) for p in prompts]) for f in ("x", "y", "x_query", "y_query")))


@runtime_checkable
class TaskFamily(Protocol):
    """What training and risk estimation ask of a task family: its input dimension and a sampler of prompts.
    :class:`~icl_utils.tasks.linear.LinearRegression` also takes ``active_dims`` for a curriculum."""

    dim: int

    def sample(self, batch: int, n: int, generator: torch.Generator) -> Prompt: ...


def squared_errors(preds: Tensor, prompt: Prompt) -> Tensor:
    """Squared errors of predictions on ``prompt``: at every point for ``(B, n+1)`` predictions (a causal
    transformer predicts each label from the points before it), at the query for ``(B,)`` predictions. Computed in
    the wider of the two dtypes; any other shape is a ValueError, and a NaN or infinite prediction too (outside
    :func:`icl_utils.checks.nonfinite_allowed`): an error that is NaN would vanish from a ``nanmean``."""
    errors = unchecked_squared_errors(preds, prompt)
    if values_checked() and not bool(finite_flag(preds)):
        bad = int((~torch.isfinite(preds)).sum())
        raise ValueError(
            f"preds (the predictions) must be finite, but hold {bad} NaN or infinite value(s) of {preds.numel()}"
        )
    return errors


def unchecked_squared_errors(preds: Tensor, prompt: Prompt) -> Tensor:
    """:func:`squared_errors` without the finiteness check of the predictions, which syncs with the device: the
    training loss, whose divergence the training loop reports itself."""
    if not isinstance(preds, Tensor):  # called once per chunk inside the scoring loops: a check, not a declaration
        raise TypeError(f"preds (the predictions) must be a torch.Tensor, got {type(preds).__name__}")
    if not preds.is_floating_point():
        raise TypeError(f"preds (the predictions) must be a float tensor, got {preds.dtype}")
    if not isinstance(prompt, Prompt):
        raise TypeError(f"prompt must be an icl_utils.Prompt, got {type(prompt).__name__}")
    every, query = (prompt.batch_size, prompt.n_context + 1), (prompt.batch_size,)
    if tuple(preds.shape) not in (every, query):
        raise ValueError(
            f"preds (the predictions) must have shape {query} (the query) or {every} (every point), got "
            f"{tuple(preds.shape)}"
        )
    targets = prompt.points()[1] if preds.ndim == 2 else prompt.y_query
    if preds.device != targets.device:
        raise ValueError(
            f"preds (the predictions) must be on the prompt's device, {targets.device}, got {preds.device}"
        )
    return (preds.to(torch.promote_types(preds.dtype, targets.dtype)) - targets).square()


@checked
def swap_contexts(prompt: Prompt, shift: Integer = 1) -> Prompt:
    """The prompts with each query's context replaced by that of prompt ``(b + shift) mod B`` of the batch: a
    context from another task of the same family. A learner that reads its context does worse on them; one that
    ignores it does not notice (the control for an in-context gain)."""
    if prompt.batch_size < 2:
        raise ValueError(f"prompt must hold at least 2 prompts to swap contexts between, got {prompt.batch_size}")
    if shift % prompt.batch_size == 0:
        raise ValueError(
            f"shift must be an int that moves every prompt to another (batch of {prompt.batch_size}), got {shift!r}"
        )
    shift %= prompt.batch_size  # torch's roll takes a 64-bit shift; only the shift modulo the batch matters
    return Prompt(prompt.x.roll(shift, 0), prompt.y.roll(shift, 0), prompt.x_query, prompt.y_query)
