"""The book's house style and its recurring figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, LogLocator
from torch import Tensor

from icl_utils.risk import mean_and_band

# One colour per method, the same in every chapter.
COLORS = {
    "Transformer": "#1b4f9c",
    "Bayes (tuned ridge)": "#111111",
    "Bayes": "#111111",
    "Least squares": "#d1495b",
    "One-step GD": "#edae49",
    "Averaging": "#66a182",
    "3-nearest neighbours": "#8d6a9f",
}


def use_house_style() -> None:
    """Readable defaults for every figure of the book."""
    plt.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 110,
            "savefig.dpi": 150,
            "font.size": 11,
            "axes.titlesize": 12,
            "axes.labelsize": 11,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "legend.frameon": False,
            "legend.fontsize": 9,
            "lines.linewidth": 2.0,
        }
    )


def plot_error_curves(
    curves: Mapping[str, Tensor],
    *,
    ax: Axes | None = None,
    normalize: float = 1.0,
    x: Sequence[float] | None = None,
    reference: Mapping[str, float] | None = None,
    xlabel: str = "number of in-context examples",
    ylabel: str = "squared error",
    ylim: tuple[float, float] | None = None,
    logy: bool = False,
) -> Axes:
    """Mean error against the number of in-context examples, one line per method with a 95% band.

    ``curves`` maps a method's name to its squared errors, shape ``(B, K)`` (prompts by prefix length, as returned
    by :func:`icl_utils.risk.prefix_errors`); every error is divided by ``normalize``. ``reference`` draws
    horizontal dashed lines (name to value, already normalized), for a noise floor or a trivial predictor.
    ``logy`` puts the errors on a log scale, where ratios between methods read as distances.
    """
    if not curves:
        raise ValueError("curves must name at least one method")
    ax = ax if ax is not None else plt.gca()
    for name, errors in curves.items():
        mean, band = (t.numpy() / normalize for t in mean_and_band(errors))
        xs = np.arange(len(mean)) if x is None else np.asarray(x)
        if len(xs) != len(mean):
            raise ValueError(f"x has {len(xs)} values but {name!r} has {len(mean)} prefix lengths")
        color = COLORS.get(name)
        ax.plot(xs, mean, label=name, color=color)
        ax.fill_between(xs, mean - band, mean + band, color=ax.lines[-1].get_color(), alpha=0.2, linewidth=0)
    _reference_lines(ax, reference)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        log_y(ax)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    return ax


def _reference_lines(ax: Axes, reference: Mapping[str, float] | None) -> None:
    for name, value in (reference or {}).items():
        ax.axhline(value, linestyle="--", color="0.5", linewidth=1.2, label=name)


def log_y(ax: Axes) -> None:
    """Log-scaled y axis labelled at 1, 2, 5 times powers of ten, in plain numbers (0.2, not 2x10^-1)."""
    ax.set_yscale("log")
    ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    for axis_formatter in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


def plot_training_loss(
    histories: Mapping[str, object],
    *,
    ax: Axes | None = None,
    window: int = 50,
    reference: Mapping[str, float] | None = None,
) -> Axes:
    """Smoothed training loss against step for one or more :class:`~icl_utils.train.TrainHistory`, on a log scale,
    with optional dashed reference levels (name to value), such as the Bayes-optimal loss. A history of several
    models trained together (losses of shape ``(steps, S)``) is drawn as ``S`` lines of one colour, labelled once."""
    ax = ax if ax is not None else plt.gca()
    for name, hist in histories.items():
        smooth = hist.smoothed(window).reshape(len(hist.losses), -1)
        label = name if smooth.shape[1] == 1 else f"{name} ({smooth.shape[1]} runs)"
        lines = ax.plot(np.arange(1, len(hist.losses) + 1), smooth, color=COLORS.get(name), linewidth=1.5)
        for line in lines[1:]:
            line.set_color(lines[0].get_color())
        lines[0].set_label(label)
    _reference_lines(ax, reference)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"training loss ({window}-step average)")
    log_y(ax)
    ax.legend()
    return ax


def plot_attention_heatmaps(attn: Sequence[np.ndarray], titles: Sequence[str], *, axes: Sequence[Axes]) -> None:
    """One ``K x K`` heatmap per training time: row ``k`` is the attention a query on ``v_k`` pays to each
    feature (expected over contexts), on a shared 0-1 colour scale with one colour bar."""
    if len(attn) != len(titles) or len(attn) != len(axes):
        raise ValueError("attn, titles and axes must have the same length")
    for a, title, ax in zip(attn, titles, axes):
        image = ax.imshow(a, vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(title)
        ax.set_xlabel("feature attended to")
        ax.grid(False)
        ticks = np.arange(a.shape[0])
        ax.set_xticks(ticks, [str(t + 1) for t in ticks])
        ax.set_yticks(ticks, [str(t + 1) for t in ticks])
    axes[0].set_ylabel("query feature $k$")
    axes[0].figure.colorbar(image, ax=list(axes), shrink=0.8, label="attention")


def plot_lines(
    steps: np.ndarray,
    series: Mapping[str, np.ndarray],
    *,
    ax: Axes | None = None,
    xlabel: str = "gradient-descent step",
    ylabel: str = "",
    logy: bool = False,
    logx: bool = False,
    styles: Mapping[str, dict] | None = None,
) -> Axes:
    """Several quantities against training step (or any ``x``), one labelled line each (``styles`` passes plot
    keywords); ``logx`` and ``logy`` put the axes on log scales, where a power law is a straight line."""
    ax = ax if ax is not None else plt.gca()
    for name, values in series.items():
        ax.plot(steps, values, label=name, **(styles or {}).get(name, {}))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        log_y(ax)
    if logx:
        ax.set_xscale("log", base=2)
    ax.legend()
    return ax
