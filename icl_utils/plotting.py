"""The book's house style and its figures: every figure that takes more than a few lines is a function here, so
that a notebook's figure cell is one readable call. Functions shared by chapters come first, then each chapter's."""

from __future__ import annotations

import itertools
import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from beartype.vale import Is
from jaxtyping import Float
from matplotlib.axes import Axes
from matplotlib.figure import Figure, FigureBase
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, Locator, MaxNLocator
from torch import Tensor

from icl_utils import checks, config
from icl_utils.checks import (
    Count,
    NonNegative,
    Positive,
    Probability,
    Real,
    Reals,
    Seed,
    Series,
    Size,
    Width,
    checked,
    declare,
    mapping_of,
    sequence_of,
)
from icl_utils.gd import GDHistory
from icl_utils.risk import fit_slope, local_slopes, mean_and_band
from icl_utils.tasks.nonparametric import MAX_ORDER, NonparametricTasks, cardinal_bspline
from icl_utils.train import TrainHistory

# ---- the house style: one colour per method ------------------------------------------------------------------
#: Each method or model the book draws, by a phrase its label contains (the first phrase that matches, in
#: lower case), to its colour in every figure. A method drawn more than once on one axes (two widths, two norms)
#: takes lighter shades of its colour, in order; :func:`off_style` checks every legend against this table.
METHODS = (
    ("bayes", "#111111"),
    ("oracle", "#111111"),
    ("teacher", "#111111"),
    ("dmmse", "#e7298a"),
    ("additive kernel ridge", "#c9853f"),
    ("kernel ridge", "#8c510a"),
    ("least squares", "#d1495b"),
    ("ridge", "#2a9d8f"),
    ("gd++", "#882255"),
    ("gd-β", "#1b4f9c"),
    ("gd-0", "#edae49"),
    ("one-step gd", "#edae49"),
    ("averaging", "#7a8b2e"),
    ("nearest neighbour", "#8d6a9f"),
    ("two-layer net", "#d16ba5"),
    ("prompt mean", "#6f6f6f"),
    ("prompt-free", "#6f6f6f"),
    ("untrained", "#a8a8a8"),
    ("random features", "#a8a8a8"),
    ("random first layer", "#a8a8a8"),
    ("initialization", "#a8a8a8"),
    ("control", "#a8a8a8"),
    ("static", "#3a7d44"),
    ("modified", "#56b4e9"),
    ("lsa", "#e66101"),
    ("ltb", "#1b4f9c"),
    ("transformer", "#1b4f9c"),
    ("pretrained", "#1b4f9c"),
    ("gpt", "#1b4f9c"),
    ("attention", "#1b4f9c"),
)
#: Line styles of the methods that are drawn dashed or dotted wherever they appear (controls, prompt-free).
METHOD_LINESTYLES = {"#6f6f6f": "-.", "#a8a8a8": ":"}
#: The colour map of series that are not a method (several d, several norms, the weights of one model), in order.
SERIES_MAP = "viridis"


Colour = declare(
    str | tuple | np.ndarray,
    matplotlib.colors.is_color_like,
    "a matplotlib colour (a name, '#rrggbb' or an RGB(A) tuple or array)",
)


@checked
def method_color(label: str) -> str | None:
    """The colour of the method that ``label`` names (see :data:`METHODS`), or None when it names none."""
    text = label.lower()
    return next((color for phrase, color in METHODS if phrase in text), None)


@checked
def shade(color: Colour, i: Size, n: Count) -> str:
    """The ``i``-th of ``n`` shades of ``color``, from the colour itself to a mix with 45% white."""
    if i >= n:
        raise ValueError(f"i must be below n = {n} (the {i}th of {n} shades), got {i}")
    rgb = np.asarray(matplotlib.colors.to_rgb(color))
    t = 0.45 * i / max(n - 1, 1)
    return matplotlib.colors.to_hex((1 - t) * rgb + t)


@checked
def series_colors(n: Series | Literal[0]) -> list[str]:
    """``n`` colours of :data:`SERIES_MAP` for series that are not methods, dark to light."""
    stops = np.linspace(0.0, 0.75, n) if n > 1 else np.zeros(n)
    return [matplotlib.colors.to_hex(c) for c in plt.get_cmap(SERIES_MAP)(stops)]


#: The house colours in order, for a plain ``ax.plot`` (not a method, see :data:`METHODS`).
PALETTE = tuple(series_colors(6))


# the labels of one axes' series (a list; one str would be read as its characters)
Labels = declare(
    Sequence | np.ndarray,
    lambda v: not isinstance(v, str) and np.ndim(v) == 1 and len(v) <= config.MAX_SERIES,
    f"a sequence of at most {config.MAX_SERIES} (config.MAX_SERIES) labels, not one str",
)


@checked
def colors_for(labels: Labels) -> list[str]:
    """The colour of each series of one axes, by its label: a method's colour (see :data:`METHODS`; shades of it
    when it recurs, see :func:`recurrences`), and for the other series :func:`series_colors` in order."""
    methods = [method_color(str(label)) for label in labels]
    others = iter(series_colors(methods.count(None)))
    return [
        next(others) if color is None else shade(color, k, methods.count(color))
        for color, k in zip(methods, recurrences(labels))
    ]


#: Line styles of a method's second, third ... series on one axes (a shade alone is hard to tell apart).
RECURRING_STYLES = ("-", "--", ":", "-.")


@checked
def recurrences(labels: Labels) -> list[int]:
    """For each label, how many earlier labels of one axes name the same method (0 for a series that is not one)."""
    methods = [method_color(str(label)) for label in labels]
    return [0 if m is None else methods[:i].count(m) for i, m in enumerate(methods)]


@checked
def method_style(label: str) -> dict:
    """Plot keywords for the series ``label``: its method's colour and line style, or nothing."""
    color = method_color(label)
    if color is None:
        return {}
    return {"color": color, "linestyle": METHOD_LINESTYLES.get(color, "-")}


# ---- what the figures take -----------------------------------------------------------------------------------
def _numbers(value: object) -> np.ndarray | None:
    """``value`` (an array, a tensor, a list of numbers) as a float array, or None when it is none of these."""
    try:
        return checks.real_array("value", value)
    except TypeError:
        return None


def _grid(value: object, low: float | None = None) -> bool:
    """Whether ``value`` is a non-empty 1-D sequence of finite numbers (each ``> low`` if given)."""
    a = _numbers(value)
    return (
        a is not None and a.ndim == 1 and a.size > 0 and bool(np.isfinite(a).all() and (low is None or (a > low).all()))
    )


def _number(value: object, low: float | None = None) -> bool:
    """Whether ``value`` is a finite real number (NumPy's too; each ``> low`` if given), not a bool."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    return ok and (low is None or value > low)


def _limits(value: tuple | list, low: float | None) -> bool:
    """Whether ``value`` is two finite numbers in increasing order (each ``> low`` if given): axis limits."""
    return len(value) == 2 and all(_number(v, low) for v in value) and value[0] < value[1]


def _holds(value: object, *keys: str) -> bool:
    """Whether ``value`` is a mapping with (at least) ``keys``."""
    return isinstance(value, Mapping) and all(k in value for k in keys)


def _pair(value: object, low: float | None = None) -> bool:
    """Whether ``value`` is a tuple of two finite numbers (each ``> low`` if given)."""
    return isinstance(value, tuple) and len(value) == 2 and all(_number(v, low) for v in value)


def _holds_pair(value: object) -> bool:
    """Whether ``value`` is a pair ``(xs, ys)`` of sequences of one length."""
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and all(hasattr(v, "__len__") for v in value)
        and len(value[0]) == len(value[1])
    )


def _three_steps(value: object) -> bool:
    a = _numbers(value)
    ok = a is not None and a.shape == (3,) and not np.isnan(a).any()
    # in order (inf - inf is NaN, not >= 0: a phase that never ends may follow one that never ends)
    return ok and bool(all(a[i + 1] >= a[i] for i in range(2)) and a[0] >= 0)


_ARRAY = Sequence | np.ndarray  # of numbers, or of Axes
# The x values of a figure; on a log axis each > 0 (a 0 or a NaN cannot be placed on it).
Grid = declare(_ARRAY | Tensor, _grid, "a non-empty 1-D sequence of finite numbers")
LogGrid = declare(_ARRAY | Tensor, lambda v: _grid(v, 0), "a non-empty 1-D sequence of finite numbers > 0 (a log axis)")
# A figure of nothing is a mistake, not an empty figure: the curves (panels, runs) must name at least one; and
# each is drawn in turn, with a colour of its own, so at most config.MAX_SERIES
Named = declare(
    Mapping,
    lambda m: 0 < len(m) <= config.MAX_SERIES,
    f"a non-empty mapping of at most {config.MAX_SERIES} (config.MAX_SERIES) entries",
)
Listed = declare(
    Sequence,
    lambda v: 0 < len(v) <= config.MAX_SERIES,
    f"a non-empty sequence of at most {config.MAX_SERIES} (config.MAX_SERIES) items",
)
Levels = mapping_of(_number, "finite numbers", empty=True)
ErrorCurves = mapping_of(
    lambda t: isinstance(t, Float[Tensor, "_ _"]) and len(t) >= 2 and bool(torch.isfinite(t).all()),
    "finite float tensors (B, K) with B >= 2",
)
Trainings = mapping_of(
    lambda h: (
        isinstance(h, TrainHistory)
        and len(h.losses) > 0
        and np.size(h.losses) > 0
        and np.size(h.losses) // len(h.losses) <= config.MAX_SERIES  # a line each
        and bool(np.isfinite(h.losses).all() and (np.asarray(h.losses) > 0).any())
    ),
    "icl_utils.TrainHistory of at least one step and model (at most config.MAX_SERIES models), with finite losses, "
    "some > 0 (a log axis)",
)
Descents = mapping_of(GDHistory, "icl_utils.GDHistory")
# (the tags keep the declarations apart: each has its own words)
_ORDERED = Is[lambda v: v[0] < v[1]]
# matplotlib refuses an image past 2^16 pixels a side: at most 100 inches (the book's figures are under 13)
Size2 = declare(
    tuple | list,
    lambda v: len(v) == 2 and all(_number(w, 0) and w <= 100 for w in v),
    "a pair (width, height) of numbers in (0, 100] (inches)",
)
Limits = declare(tuple | list, lambda v: _limits(v, None), "a pair (bottom < top) of finite numbers")
LogLimits = declare(tuple | list, lambda v: _limits(v, 0), "a pair (bottom < top) of numbers > 0")


def _fits(wanted: tuple, shape: tuple) -> bool:
    """Whether ``shape`` is ``wanted``: a number is that size, a str any size, the same str the same size."""
    named: dict[str, int] = {}
    return len(wanted) == len(shape) and all(
        named.setdefault(w, n) == n if isinstance(w, str) else w == n for w, n in zip(wanted, shape)
    )


def _mean_and_se(name: str, value: object, points: int) -> None:
    """A ValueError or TypeError naming ``name`` unless ``value`` is ``(points, 2)`` means (> 0, a log axis) and
    standard errors (>= 0: error bars)."""
    array = _curve(f"{name} (mean and standard error)", value, (points, 2), log=True)
    if (array[:, 1] < 0).any():
        raise ValueError(f"{name} must hold standard errors >= 0 in its second column, got {array[:, 1].tolist()}")


def _line_style(name: str, style: Mapping) -> None:
    """A TypeError naming ``name`` unless ``style`` is keywords of a line that matplotlib can draw: a line with them
    is drawn on a scratch canvas, since many values (a zorder of "high", a transform that is not one) fail only
    when the figure is drawn, far from the call."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = Figure(figsize=(1, 1))
    FigureCanvasAgg(figure)
    try:
        figure.add_subplot().add_line(Line2D([0, 1], [0, 1], **style))
        figure.canvas.draw()
    except Exception as err:  # a keyword that no line has, or a value that none can draw
        raise TypeError(f"{name} must hold keywords of a line: {type(err).__name__}: {err}") from None


def _curve(name: str, value: object, *shapes: tuple, finite: bool = True, log: bool = False) -> np.ndarray:
    """``value`` as a float array of one of ``shapes`` (sizes; a str names an axis of any size), holding a finite
    value to draw (a value > 0 on a log axis) unless ``finite=False``; else a TypeError or ValueError naming
    ``name``. Drawing code uses the values as given: this only checks them."""
    array = _numbers(value)
    if array is None:
        raise TypeError(f"{name} must be an array of real numbers, got {type(value).__name__}")
    if not any(_fits(s, array.shape) for s in shapes):
        wanted = " or ".join(f"({', '.join(map(str, s))}{',' * (len(s) == 1)})" for s in shapes)
        raise ValueError(f"{name} must have shape {wanted}, got {array.shape}")
    drawn = np.isfinite(array) & (array > 0 if log else True)
    if finite and not drawn.any():
        raise ValueError(f"{name} must hold a finite value{' > 0 (a log axis)' * log} to draw, got none")
    return array


#: The width of the book's text column for a figure, in inches at :data:`DPI`: 672 CSS pixels in
#: sphinx-book-theme at a 1280-pixel window. A figure is shown at the size drawn, so its text at the size drawn,
#: when its saved image (its tight bounding box plus Jupyter's 0.1-inch pad) fits; ``tests/test_browser.py``
#: checks that no figure of the built book is shrunk.
COLUMN_WIDTH = 6.7
#: The width figures are drawn at, leaving room for labels and legends that reach past the axes.
FIGURE_WIDTH = 6.4
#: The smallest text a figure may carry, in points, at its drawn (and shown) size.
MIN_FONT_PT = 9.0
#: The resolution figures are drawn at, in dots per inch: one dot per CSS pixel of the page.
DPI = 100


def use_house_style() -> None:
    """Readable defaults for every figure of the book: drawn at :data:`DPI` (twice that in Jupyter, as a retina
    PNG shown at half its pixel size), text of at least :data:`MIN_FONT_PT` points, the house colours in order."""
    plt.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": DPI,
            "savefig.dpi": 2 * DPI,
            "font.size": 10,
            "axes.titlesize": 10,
            "axes.labelsize": 10,
            "xtick.labelsize": 9,
            "ytick.labelsize": 9,
            "legend.fontsize": 9,
            "legend.title_fontsize": 9,
            "axes.prop_cycle": plt.cycler(color=PALETTE),
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "legend.frameon": False,
            "lines.linewidth": 1.8,
            "figure.hooks": ["icl_utils.plotting:_watch"],
        }
    )
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


def _size(width: float, height: float) -> tuple[float, float]:
    """A figure size that fits the text column: a wider figure is narrowed to :data:`FIGURE_WIDTH`, and its
    height shrinks by at most a quarter so that its panels keep room for their labels."""
    if width <= FIGURE_WIDTH:
        return width, height
    return FIGURE_WIDTH, height * max(FIGURE_WIDTH / width, 0.75)


@checked
def unreadable(fig: Figure) -> list[str]:
    """What makes ``fig`` hard to read on the book's page: a saved image wider than :data:`COLUMN_WIDTH` (the
    page would shrink it, and its text), or visible text smaller than :data:`MIN_FONT_PT` points. Empty when it
    is readable."""
    from matplotlib.text import Text

    out = []
    width = fig.get_tightbbox(fig.canvas.get_renderer()).width + 0.2
    if width > COLUMN_WIDTH:
        out.append(f"{width:.1f} in wide as saved (at most {COLUMN_WIDTH})")
    for text in fig.findobj(Text):
        if text.get_visible() and text.get_text().strip() and text.get_fontsize() < MIN_FONT_PT:
            out.append(f"text {text.get_text()[:30]!r} at {text.get_fontsize():g} pt (at least {MIN_FONT_PT:g})")
    return out


# ---- the house style: legends off the data, log axes labelled, methods in their colours ------------------------
#: Where a legend inside the axes may go, in the order tried.
LEGEND_PLACES = (
    "best",
    "upper right",
    "upper left",
    "lower left",
    "lower right",
    "center right",
    "center left",
    "upper center",
    "lower center",
)


def _data_points(fig: FigureBase, renderer) -> np.ndarray:
    """Screen points (pixels) of what the axes of ``fig`` draw as data: their lines sampled every two pixels,
    markers and scatter points, bars' outlines; only points inside their axes."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer

    points = [np.empty((0, 2))]
    for ax in (a for parent in fig.axes for a in (parent, *parent.child_axes)):  # insets are child axes
        if not ax.get_visible():
            continue
        box = ax.get_window_extent(renderer)
        inside = []
        for line in ax.lines:
            if not line.get_visible():
                continue
            xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
            drawn = line.get_linestyle() not in ("None", "none", "", " ")
            for piece in np.split(xy, np.flatnonzero(~np.isfinite(xy).all(1))):
                piece = piece[np.isfinite(piece).all(1)]
                if drawn and len(piece) > 1:
                    steps = np.ceil(np.linalg.norm(np.diff(piece, axis=0), axis=1) / 2).astype(int).clip(1, 2000)
                    piece = np.concatenate(
                        [
                            a + np.linspace(0, 1, k, endpoint=False)[:, None] * (b - a)
                            for a, b, k in zip(piece[:-1], piece[1:], steps)
                        ]
                        + [piece[-1:]]
                    )
                inside.append(piece)
        for coll in ax.collections:
            if isinstance(coll, PathCollection) and coll.get_visible() and len(coll.get_offsets()):
                inside.append(coll.get_offset_transform().transform(np.asarray(coll.get_offsets(), dtype=float)))
        for bars in (c for c in ax.containers if isinstance(c, BarContainer)):
            for bar in bars.patches:
                e = bar.get_window_extent(renderer)
                inside.append(
                    np.array([[x, y] for x in np.linspace(e.x0, e.x1, 8) for y in np.linspace(e.y0, e.y1, 8)])
                )
        if inside:
            xy = np.concatenate(inside)
            keep = (xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)
            points.append(xy[keep])
    return np.concatenate(points)


def _covered(legend, points: np.ndarray, renderer) -> int:
    """How many of ``points`` the legend's box (less a two-pixel margin) covers."""
    box = legend.get_window_extent(renderer)
    x, y = points[:, 0], points[:, 1]
    return int(((x > box.x0 + 2) & (x < box.x1 - 2) & (y > box.y0 + 2) & (y < box.y1 - 2)).sum())


def _ticks_chosen(axis) -> bool:
    """Whether the code placed ``axis``'s ticks itself (at the values drawn, say)."""
    from matplotlib.ticker import FixedFormatter, FixedLocator

    return isinstance(axis.get_major_locator(), FixedLocator) or isinstance(axis.get_major_formatter(), FixedFormatter)


@checked
def plain_log_ticks(low: Positive, high: Positive) -> list[float]:
    """Ticks for a log axis showing ``[low, high]``, at least three: powers of ten over more than two and a half
    decades, else 1, 2 and 5 times them, else finer steps, else evenly spaced numbers; at most eight."""
    if high < low:
        raise ValueError(f"high must be >= low, got low={low} and high={high}")
    decades = np.arange(np.floor(np.log10(low)), np.ceil(np.log10(high)) + 1)
    for subs in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 8)):
        if subs == (1,) and np.log10(high / low) <= 2.5:
            continue
        ticks = [m * 10**e for e in decades for m in subs if low <= m * 10**e <= high]
        if len(ticks) >= 3:
            break
    else:  # less than a factor of 2.5 in view
        ticks = [t for t in MaxNLocator(4).tick_values(low, high) if low <= t <= high]
    while len(ticks) > 8:
        ticks = ticks[::2]
    return ticks


class PlainLogLocator(Locator):
    """Ticks of :func:`plain_log_ticks` for whatever a log axis shows when it is drawn."""

    def __call__(self):
        return self.tick_values(*self.axis.get_view_interval())

    def tick_values(self, vmin, vmax):
        if not all(isinstance(v, numbers.Real) for v in (vmin, vmax)):
            raise TypeError(f"vmin and vmax must be numbers (the axis limits), got {vmin!r:.20} and {vmax!r:.20}")
        low, high = sorted((vmin, vmax))
        return plain_log_ticks(low, high) if low > 0 and np.isfinite(high) else []


def _log_ticks(axis) -> None:
    """Label a log axis whose ticks the code did not choose at plain numbers, at least three in view."""
    from matplotlib.ticker import NullFormatter

    if axis.get_scale() != "log" or _ticks_chosen(axis):
        return
    axis.set_major_locator(PlainLogLocator())
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _legends(fig: FigureBase) -> list:
    return [leg for leg in [*(ax.get_legend() for ax in fig.axes), *fig.legends] if leg is not None]


@checked
def tidy(fig: FigureBase) -> FigureBase:
    """Finish ``fig`` in the house style: each log axis labelled at plain numbers (at least three labels), and
    each legend of an axes moved off the data: to the first place inside the axes where it covers none
    (:data:`LEGEND_PLACES`), else below the axes. Every figure function calls it last; call it after changing a
    figure it returned. Returns ``fig``."""
    for ax in fig.axes:
        _log_ticks(ax.xaxis)
        _log_ticks(ax.yaxis)
    # No draw needed: a legend's box for a place, and the data's pixels, follow from the layout as it is.
    renderer = fig.canvas.get_renderer()
    points = _data_points(fig, renderer)
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not _covered(legend, points, renderer):
            continue
        for place in LEGEND_PLACES[1:]:
            legend.set_loc(place)
            if not _covered(legend, points, renderer):
                break
        else:
            decorated = ax.get_tightbbox(renderer, bbox_extra_artists=[])
            below = ax.transAxes.inverted().transform((0, decorated.y0))[1]
            texts = [t.get_text() for t in legend.get_texts()]
            wide = ax.get_position().width > 0.6  # a panel of a row keeps one column, or it widens the figure
            columns = (3 if len(texts) > 4 else 2 if len(texts) > 2 else 1) if wide else 1
            ax.legend(
                legend.legend_handles, texts, loc="upper center", bbox_to_anchor=(0.5, below - 0.02), ncols=columns
            )
    return fig


def _shade_of(color, method: str) -> bool:
    """Whether ``color`` is ``method``'s colour mixed with at most 75% white (as :func:`shade` makes)."""
    c, m = np.asarray(matplotlib.colors.to_rgb(color)), np.asarray(matplotlib.colors.to_rgb(method))
    room = 1 - m
    t = (c - m)[room > 0.05] / room[room > 0.05]
    return bool(np.allclose(c[room <= 0.05], m[room <= 0.05], atol=0.02)) and (
        t.size == 0 or (t.min() > -0.03 and t.max() < 0.78 and t.max() - t.min() < 0.06)
    )


def _handle_color(handle):
    for getter in ("get_color", "get_facecolor", "get_edgecolor"):
        value = getattr(handle, getter, lambda: None)()
        if value is None:
            continue
        value = np.atleast_2d(matplotlib.colors.to_rgba_array(value))
        if len(value) and value[0, 3] > 0:
            return value[0, :3]
    return None


@checked
def off_style(fig: FigureBase, *, draw: bool = True) -> list[str]:
    """What breaks the house style in ``fig``: a legend that covers data (a line, a marker, a bar), a legend entry
    naming a method of :data:`METHODS` in another colour than the method's (or a shade of it), a log axis with
    fewer than three labelled ticks in view. Empty when it keeps the style. ``draw=False`` when ``fig`` was just
    drawn."""
    if draw:
        fig._house_tidying = True
        try:
            fig.canvas.draw()
        finally:
            fig._house_tidying = False
    renderer = fig.canvas.get_renderer()
    out = []
    points = _data_points(fig, renderer)
    for legend in _legends(fig):
        texts = [t.get_text() for t in legend.get_texts()]
        if _covered(legend, points, renderer):
            out.append(f"the legend {texts[:2]}... covers {_covered(legend, points, renderer)} points of data")
        for text, handle in zip(texts, legend.legend_handles):
            wanted, color = method_color(text), _handle_color(handle)
            if wanted is not None and color is not None and not _shade_of(color, wanted):
                out.append(f"{text!r} drawn in {matplotlib.colors.to_hex(color)}, not its method's {wanted}")
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log" or not axis.get_visible() or _ticks_chosen(axis):
                continue
            low, high = sorted(axis.get_view_interval())
            labelled = {
                tick.get_loc()
                for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]
                if tick.label1.get_visible() and tick.label1.get_text() and low <= tick.get_loc() <= high
            }
            hidden = not any(tick.label1.get_visible() for tick in axis.get_major_ticks())  # a shared axis
            if len(labelled) < 3 and not hidden:
                out.append(f"a log {axis.axis_name} axis with {len(labelled)} labelled ticks (at least 3)")
    return out


def _watch(fig: FigureBase) -> None:
    """``figure.hooks`` entry of :func:`use_house_style`: each time ``fig`` is drawn for display, warn of what
    :func:`off_style` finds (a warning fails the book's build)."""

    def check(event) -> None:
        if getattr(fig, "_house_tidying", False):
            return
        problems = off_style(fig, draw=False)
        if problems:
            warnings.warn(f"a figure breaks the house style: {'; '.join(problems)}", stacklevel=2)

    fig.canvas.mpl_connect("draw_event", check)


@checked
def plot_error_curves(
    curves: ErrorCurves,
    *,
    ax: Axes | None = None,
    normalize: Positive = 1.0,
    x: Grid | None = None,
    reference: Levels | None = None,
    xlabel: str = "number of in-context examples",
    ylabel: str = "squared error",
    ylim: Limits | None = None,
    logy: bool = False,
) -> Axes:
    """Mean error against the number of in-context examples, one line per method with a 95% band.

    ``curves`` maps a method's name to its squared errors, shape ``(B, K)`` (prompts by prefix length, as returned
    by :func:`icl_utils.risk.prefix_errors`); every error is divided by ``normalize``. ``reference`` draws
    horizontal dashed lines (name to value, already normalized), for a noise floor or a trivial predictor.
    ``logy`` puts the errors on a log scale, where ratios between methods read as distances.
    """
    if logy and ylim is not None and min(ylim) <= 0:
        raise ValueError(f"ylim must be > 0 on a log axis (logy=True), got {ylim}")
    lengths = {name: errors.shape[1] for name, errors in curves.items()}
    if x is not None and set(lengths.values()) != {len(x)}:
        raise ValueError(f"x must have one value per prefix length of every curve, got {len(x)} for {lengths}")
    for name, value in (reference or {}).items() if logy else ():
        if value <= 0:
            raise ValueError(f"reference[{name!r}] must be > 0 on a log axis (logy=True), got {value}")
    raw = {}
    for name, errors in curves.items():
        try:
            raw[name] = [t.numpy() for t in mean_and_band(errors)]
        except ValueError as err:  # mean_and_band's words name its own argument
            raise ValueError(f"curves[{name!r}] must have a finite mean and band: {err}") from None
    with np.errstate(over="ignore"):
        means = {name: [v / normalize for v in pair] for name, pair in raw.items()}
    finite = [np.isfinite(v).all() for pairs in (raw, means) for pair in pairs.values() for v in pair]
    if all(finite[: len(finite) // 2]) and not all(finite[len(finite) // 2 :]):  # finite curves, divided into inf
        raise ValueError(f"normalize = {normalize:g} makes the curves overflow; give a larger one")
    for name, (mean, _) in means.items():  # on a log axis, a curve of zeros would draw nothing
        _curve(f"curves[{name!r}] (mean)", mean, (len(mean),), log=logy)
    ax = ax if ax is not None else plt.gca()
    for (name, (mean, band)), color in zip(means.items(), colors_for(list(curves))):
        xs = np.arange(len(mean)) if x is None else _numbers(x)
        ax.plot(xs, mean, label=name, color=color)
        ax.fill_between(xs, mean - band, mean + band, color=color, alpha=0.2, linewidth=0)
    _reference_lines(ax, reference)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        log_y(ax)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.legend()  # inside the axes: a legend beside them would widen the figure past the text column
    tidy(ax.figure)
    return ax


#: Line styles of successive reference levels on one axes, so that two of them can be told apart.
REFERENCE_STYLES = ("--", ":", "-.")


def _reference_lines(ax: Axes, reference: Mapping[str, float] | None, log: bool = False) -> None:
    """``reference``'s levels as horizontal lines; on a ``log`` axis each must be > 0, which it can show."""
    for name, value in (reference or {}).items():
        if log and value <= 0:
            raise ValueError(f"reference[{name!r}] must be > 0 on a log axis, got {value}")
    for (name, value), style in zip((reference or {}).items(), itertools.cycle(REFERENCE_STYLES)):
        ax.axhline(value, linestyle=style, color=method_color(name) or "0.5", linewidth=1.2, label=name)


@checked
def log_y(ax: Axes) -> None:
    """Log-scaled y axis labelled in plain numbers (0.2, not 2x10^-1), at least three labels whatever the limits
    (:func:`plain_log_ticks`)."""
    ax.set_yscale("log")
    _log_ticks(ax.yaxis)


@checked
def plot_training_loss(
    histories: Trainings,
    *,
    ax: Axes | None = None,
    window: Count = 50,
    reference: Levels | None = None,
    runs: str = "runs",
) -> Axes:
    """Smoothed training loss against step for one or more :class:`~icl_utils.train.TrainHistory`, on a log scale,
    with optional reference levels (name to value, dashed, then dotted), such as the Bayes-optimal loss. A history
    of several models trained together (losses of shape ``(steps, S)``) is drawn as ``S`` shades of one colour,
    dark to light in the models' order, labelled once as ``S`` ``runs`` (say ``"norms"`` when the models differ
    by their task). Histories of one method (two settings of the transformer) share its colour, the second
    dashed."""
    ax = ax if ax is not None else plt.gca()
    names = [str(n) for n in histories]  # keys may be numbers (widths, norms)
    colors = [method_color(n) or c for n, c in zip(names, colors_for(names))]
    styles = [RECURRING_STYLES[k % len(RECURRING_STYLES)] for k in recurrences(names)]
    for name, hist, color, style in zip(names, histories.values(), colors, styles):
        smooth = hist.smoothed(window).reshape(len(hist.losses), -1)
        label = name if smooth.shape[1] == 1 else f"{name} ({smooth.shape[1]} {runs}, dark to light)"
        lines = ax.plot(np.arange(1, len(hist.losses) + 1), smooth, linewidth=1.5, linestyle=style)
        for i, line in enumerate(lines):
            line.set_color(shade(color, i, len(lines)))
        lines[0].set_label(label)
    _reference_lines(ax, reference, log=True)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"training loss ({window}-step average)")
    log_y(ax)
    ax.legend()
    tidy(ax.figure)
    return ax


AxesList = sequence_of(Axes, "matplotlib Axes", base=_ARRAY, empty=True)


@checked
def plot_attention_heatmaps(attn: Listed | np.ndarray, titles: Labels, *, axes: AxesList) -> None:
    """One ``K x K`` heatmap per training time: row ``k`` is the attention a query on ``v_k`` pays to each
    feature (expected over contexts), on a shared 0-1 colour scale with one colour bar."""
    if len(attn) != len(titles) or len(attn) != len(axes) or len(attn) == 0:
        raise ValueError("attn, titles and axes must have the same length, at least one")
    for i, a in enumerate(attn):
        a = _curve(f"attn[{i}]", a, ("K", "K"), finite=False)
        # the colour scale is 0-1: more would be clipped unseen, and NaN drawn as a blank
        if a.size == 0 or not ((a >= 0) & (a <= 1)).all():
            raise ValueError(f"attn[{i}] must hold attention weights in [0, 1], at least one, got shape {a.shape}")
    for a, title, ax in zip(attn, titles, axes):
        image = ax.imshow(a, vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(title)
        ax.grid(False)
        ticks = np.arange(a.shape[0])
        ax.set_xticks(ticks, [str(t + 1) for t in ticks])
        ax.set_yticks(ticks, [str(t + 1) for t in ticks])
    axes[0].set_ylabel("query feature $k$")
    # one label under the row: under each narrow panel the labels would run into one another
    axes[0].figure.supxlabel("feature attended to", fontsize=plt.rcParams["axes.labelsize"])
    axes[0].figure.colorbar(image, ax=list(axes), shrink=0.8, label="attention")


@checked
def plot_lines(
    steps: Grid,
    series: Named,
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
    if logx and not _grid(steps, 0):
        raise ValueError("steps must be > 0 on a log axis (logx=True)")
    # drawn as checked: float arrays (a tensor that requires a gradient too)
    series = {n: _curve(f"series[{n!r}]", v, (len(steps),), (len(steps), "S"), log=logy) for n, v in series.items()}
    steps = _numbers(steps)  # a tensor that requires a gradient, read
    for name, style in (styles or {}).items():
        if name not in series:  # a typo would leave the line in its default style, unnoticed
            raise ValueError(f"styles must be keyed by names of series, got {name!r} (series: {list(series)})")
        if not isinstance(style, Mapping) or "label" in style:
            raise ValueError(f"styles[{name!r}] must be a dict of line keywords other than label (the series' name)")
        _line_style(f"styles[{name!r}]", style)
    if (lines := sum(1 if v.ndim == 1 else v.shape[1] for v in series.values())) > config.MAX_SERIES:
        raise ValueError(f"series must hold at most {config.MAX_SERIES} (config.MAX_SERIES) lines, got {lines}")
    ax = ax if ax is not None else plt.gca()
    for (name, values), color in zip(series.items(), colors_for(list(series))):
        ax.plot(steps, values, label=name, **{"color": color, **(styles or {}).get(name, {})})
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        log_y(ax)
    if logx:
        ax.set_xscale("log", base=2)
    ax.legend()
    tidy(ax.figure)
    return ax


# ---- Chapter 1: the ICL setting ----------------------------------------------
@checked
def plot_error_per_dimension(
    curves: ErrorCurves,
    *,
    dim: Width,
    noise_var: NonNegative,
    ylim: Limits | None = None,
    logy: bool = True,
    ax: Axes | None = None,
) -> FigureBase:
    """Squared error divided by the dimension against the number of in-context examples, on a log scale (linear
    with ``logy=False``): one line per method with its 95% band (``curves`` maps a name to errors of shape
    ``(B, K)``, as for :func:`plot_error_curves`), the noise level ``noise_var / dim`` dashed, and a grey vertical
    line at ``k = dim``, where least squares interpolates. Without ``ylim`` the limits follow the data: the top is
    twice (on a linear axis 1.15 times) the largest error with no example, the prior's scale where every method
    starts, so a higher peak (least squares at ``k = dim`` with noise) is cut off; the bottom is 0 on a linear
    axis, and 0.7 times the smallest positive mean or noise level on a log axis. Draws on ``ax``, or on a new
    figure of the text column's width; returns the figure."""
    if ax is None:
        _, ax = plt.subplots(figsize=(FIGURE_WIDTH, 4.2))
    plot_error_curves(
        curves,
        ax=ax,
        normalize=dim,
        reference={"noise level": noise_var / dim} if noise_var > 0 else None,
        ylabel="squared error / $d$",
        logy=logy,
        ylim=ylim,
    )
    ax.axvline(dim, color="0.7", linewidth=1)
    if ylim is None:
        means = [mean_and_band(errors)[0].numpy() / dim for errors in curves.values()]
        start = max(float(m[0]) for m in means)
        if logy:
            values = np.concatenate([*means, np.array([noise_var / dim])])
            values = values[values > 0]
            if values.size:  # all zero: keep matplotlib's limits
                ax.set_ylim(0.7 * values.min(), 2 * max(start, values.min()))
        elif start > 0:
            ax.set_ylim(0, 1.15 * start)
    return tidy(ax.figure)


# ---- Chapter 2: nonparametric minimax ICL ------------------------------------
Demos = mapping_of(
    lambda t: isinstance(t, NonparametricTasks) and t.dim == 1,
    "one-dimensional NonparametricTasks",
    keys="smoothness levels",
)


#: how many B-splines N_0 .. N_{orders-1} a panel draws: orders up to nonparametric's MAX_ORDER
Orders = checks.describe(
    Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= MAX_ORDER + 1]],
    "an int",
    f"in [1, {MAX_ORDER + 1}] (B-splines of orders up to MAX_ORDER = {MAX_ORDER})",
)


@checked
def plot_bases_and_tasks(
    demos: Demos, *, orders: Orders = 4, n_tasks: Series = 3, n_examples: Size = 32, seed: Seed = 1
) -> Figure:
    """Left, the cardinal B-splines ``N_0 .. N_{orders-1}``; then one panel per smoothness ``s`` of ``demos`` (``s``
    to a one-dimensional :class:`~icl_utils.tasks.nonparametric.NonparametricTasks`): ``n_tasks`` tasks
    ``F = beta^T f`` drawn from its prior (a CPU generator seeded ``seed`` per panel), with the noisy labels of an
    ``n_examples``-example prompt of the first task. Returns the figure."""
    checks.allocation("n_examples + 1 (the points of the prompt drawn)", n_examples + 1)
    if not all(_number(s, 0) for s in demos):  # each panel's title reads its key as a number
        raise ValueError(f"demos must be keyed by smoothness levels, numbers > 0, got {list(demos)}")
    fig, axes = plt.subplots(1, 1 + len(demos), figsize=_size(11, 3.2))
    grid = torch.linspace(-0.5, orders + 0.5, 501, dtype=torch.float64)
    for m, color in zip(range(orders), series_colors(orders)):
        axes[0].plot(grid, cardinal_bspline(grid, m), color=color, label=f"$\\mathcal{{N}}_{m}$")
    axes[0].set(xlabel="$x$", title="cardinal B-splines", xlim=(-0.5, orders + 2.5))  # room for the legend
    axes[0].legend(loc="upper right")
    x = torch.linspace(0, 1, 400)[:, None]
    for ax, (s, task) in zip(axes[1:], demos.items()):
        draw = torch.Generator().manual_seed(seed)
        beta = task.coefficients(n_tasks, draw)
        colors = series_colors(n_tasks)
        for b, color in zip(beta, colors):
            ax.plot(x[:, 0], task.features(x) @ b, color=color)
        p = task.sample(1, n_examples, draw, weights=beta[:1])
        # the prompt's points in the first task's colour: the caption says whose they are, no legend covers them
        ax.scatter(p.x[0, :, 0], p.y[0], s=10, color=colors[0], alpha=0.6)
        ax.set(xlabel="$x$", ylabel="$F(x)$", title=f"{task.basis.capitalize()} tasks, $s = {s:g}$")
    fig.tight_layout()
    return tidy(fig)


@checked
def plot_rate_curves(ns: LogGrid, curves: Named, *, oracle: Mapping, oracle_n: LogGrid) -> Figure:
    """Excess ICL risk against the context length, one panel per smoothness ``s``: ``curves[s]`` (shape
    ``(len(ns),)``, the best linear attention, exact) as a line labelled with its last local slope, ``oracle[s]``
    (shape ``(len(oracle_n), 2)``: mean and standard error) as points with 95% bars labelled with their fitted slope,
    and the rate ``n^(-2s/(2s+1))`` dashed in grey through the line's last point. Returns the figure."""

    if not all(_number(s, 0) for s in curves):  # keys read back from JSON are strings
        raise ValueError(f"curves must be keyed by smoothness levels, numbers > 0, got {list(curves)}")
    if set(curves) != set(oracle):
        raise ValueError("curves and oracle must have the same smoothness levels")
    for name, grid in (("ns", ns), ("oracle_n", oracle_n)):
        if len(set(_numbers(grid).tolist())) < 2:  # a slope is fitted along each
            raise ValueError(f"{name} must hold at least two distinct values (a slope is fitted), got {list(grid)}")
    for s, curve in curves.items():
        _curve(f"curves[{s!r}]", curve, (len(ns),), log=True)
        _mean_and_se(f"oracle[{s!r}]", oracle[s], len(oracle_n))
        # both are fitted (a slope in each label), not only drawn: every value counts
        for name, values in (
            (f"curves[{s!r}]", _numbers(curve)),
            (f"oracle[{s!r}]'s means", _numbers(oracle[s])[:, 0]),
        ):
            if not (np.isfinite(values) & (values > 0)).all():
                raise ValueError(f"{name} must be finite and > 0 at every n (a slope is fitted), got {values.tolist()}")
    fig, axes = plt.subplots(1, len(curves), figsize=_size(11, 3.8), sharey=True, squeeze=False)
    axes = axes[0]
    ns, oracle_n = _numbers(ns), _numbers(oracle_n)
    for ax, (s, curve) in zip(axes, curves.items()):
        rate = 2 * s / (2 * s + 1)
        curve = _numbers(curve)
        ax.plot(
            ns,
            curve,
            marker="o",
            color=method_color("attention"),
            label=f"best linear attention (last slope {local_slopes(ns, curve)[-1]:.2f})",
        )
        mean, se = _numbers(oracle[s]).T
        ax.errorbar(
            oracle_n,
            mean,
            yerr=1.96 * se,
            fmt="s",
            color=method_color("oracle"),
            capsize=3,
            label=f"Bayes oracle (slope {fit_slope(oracle_n, mean):.2f})",
        )
        ax.plot(ns, curve[-1] * (ns / ns[-1]) ** -rate, color="0.5", linestyle="--", label=f"$n^{{-{rate:.2f}}}$")
        ax.set(xscale="log", xlabel="context length $n$", title=f"$s = {s:g}$")
        log_y(ax)
        ax.legend()
    axes[0].set_ylabel("excess ICL risk")
    fig.tight_layout()
    return tidy(fig)


def _seed_curve(
    ax: Axes, ns: np.ndarray, curve: object, name: str, color: str | None = None, linestyle: str | None = None
) -> np.ndarray:
    """Draw ``curve`` against ``ns`` with the label ``name``: a line for shape ``(len(ns),)``, or for runs from
    ``S`` seeds, shape ``(S, len(ns))`` (:func:`_seed_curves` checks it), their median with the range shaded.
    Returns the drawn line's values."""
    curve = np.asarray(curve)
    median = np.median(curve, 0) if curve.ndim == 2 else curve
    style = {} if color is None else method_style(name) | {"color": color}
    if linestyle is not None:
        style["linestyle"] = linestyle
    ax.plot(ns, median, marker="o", label=name, **style)
    if curve.ndim == 2:
        ax.fill_between(ns, curve.min(0), curve.max(0), color=ax.lines[-1].get_color(), alpha=0.2, linewidth=0)
    return median


def _seed_curves(where: str, ns: Sequence, curves: Mapping) -> None:
    """Check the curves that :func:`_seed_curve` draws, ``where`` naming their argument."""
    for name, curve in curves.items():
        _curve(f"{where}[{name!r}]", curve, (len(ns),), ("S", len(ns)), log=True)


def _context_axis(ax: Axes, ns: np.ndarray) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(int(n)) for n in ns])
    ax.set_xlabel("context length $n$")
    log_y(ax)


@checked
def plot_feature_maps(ns: LogGrid, curves: Named, *, rate: Positive) -> Figure:
    """Excess ICL risk against the context length ``ns`` for each feature map of ``curves`` (name to shape
    ``(len(ns),)``, a line, or ``(S, len(ns))``, runs from ``S`` seeds: their median with the range shaded), and
    ``n^(-rate)`` dashed in grey through the first curve's last point. Returns the figure."""
    _seed_curves("curves", ns, curves)
    fig, ax = plt.subplots(figsize=_size(6.5, 3.8))
    ns = _numbers(ns)
    colors = colors_for(list(curves))
    # a method's first series in its own style (a control dotted), its repeats dashed, dotted, ...
    styles = [RECURRING_STYLES[k % len(RECURRING_STYLES)] if k else None for k in recurrences(list(curves))]
    medians = [
        _seed_curve(ax, ns, curve, name, color, style)
        for (name, curve), color, style in zip(curves.items(), colors, styles)
    ]
    ax.plot(ns, medians[0][-1] * (ns / ns[-1]) ** -rate, color="0.5", linestyle="--", label=f"$n^{{-{rate:.2f}}}$")
    ax.set_ylabel("excess ICL risk")
    _context_axis(ax, ns)
    ax.legend()
    return tidy(fig)


PretrainingCurves = mapping_of(
    lambda c: _holds(c, "ratio", "empirical", "gap") and _grid(c["ratio"], 0),
    "mappings of ratio, empirical and gap, the ratios finite numbers > 0 (a log axis)",
    keys="labels",
)


@checked
def plot_pretraining_sets(curves: PretrainingCurves, *, noise_var: NonNegative) -> Figure:
    """The ICL risk of ``Gamma`` fitted on ``T`` pretraining prompts, against ``T / N^2`` (prompts per entry of
    ``Gamma``), one line per setting. ``curves`` maps a label to ``ratio`` (``T / N^2``, shape ``(K,)``),
    ``empirical`` (the risk on the pool, shape ``(K, pools)``) and ``gap`` (the expected risk on new tasks over
    that of ``Gamma*``, minus one, shape ``(K, pools)``). Left, the empirical risk (median, noise variance dashed);
    right, the gap (median and range over the pools, log-log) with the prediction ``N^2 / T`` dashed."""
    for label, c in curves.items():
        for key in ("empirical", "gap"):
            _curve(f"curves[{label!r}][{key!r}]", c[key], (len(c["ratio"]), "pools"), log=key == "gap")
    fig, (left, right) = plt.subplots(1, 2, figsize=_size(6.7, 3.4))
    for (label, c), color in zip(curves.items(), colors_for(list(curves))):
        ratio, emp, gap = (np.asarray(c[k]) for k in ("ratio", "empirical", "gap"))
        left.plot(ratio, np.median(emp, 1), marker="o", color=color, label=label)
        right.plot(ratio, np.median(gap, 1), marker="o", color=color, label=label)
        right.fill_between(ratio, gap.min(1), gap.max(1), color=color, alpha=0.2, linewidth=0)
    left.axhline(noise_var, color="k", linestyle="--", label="noise variance")
    left.set(xscale="log", xlabel="$T / N^2$", ylabel="risk on the pool")
    left.set_ylim(bottom=0)
    grid = np.geomspace(
        min(np.min(c["ratio"]) for c in curves.values()), max(np.max(c["ratio"]) for c in curves.values()), 50
    )
    (line,) = right.plot(grid, 1 / grid, color="k", linestyle="--", label="$N^2 / T$")
    right.set(
        xscale="log",
        yscale="log",
        xlabel="$T / N^2$",
        ylabel="$\\mathcal{R}(\\hat\\Gamma_T) / \\mathcal{R}(\\Gamma^*) - 1$",
    )
    left.legend(loc="lower right")  # the curves rise to the upper right
    right.legend(handles=[line])
    fig.tight_layout()
    return tidy(fig)


LearnerPanels = mapping_of(
    lambda p: isinstance(p, tuple) and len(p) == 2 and all(isinstance(c, Mapping) for c in p) and bool(p[0] or p[1]),
    "pairs (exact, monte_carlo), two mappings from names to curves with at least one curve in all",
    keys="titles",
)


@checked
def plot_learner_comparison(ns: LogGrid, panels: LearnerPanels) -> Figure:
    """Excess ICL risk against the context length ``ns`` (log base 2), one panel per entry of ``panels`` (its title
    to a pair ``(exact, monte_carlo)``), side by side with a shared y axis: lines for the ``exact`` curves (name to
    shape ``(len(ns),)``, or ``(S, len(ns))`` for ``S`` seeds: median and shaded range), and 95% error bars for the
    ``monte_carlo`` ones (name to shape ``(len(ns), 2)``: mean and standard error). One legend, the first panel's
    curves, below the panels. Returns the figure."""
    for title, pair in panels.items():
        _seed_curves(f"panels[{title!r}][0]", ns, pair[0])
        for name, v in pair[1].items():
            _mean_and_se(f"panels[{title!r}][1][{name!r}]", v, len(ns))
    ns = _numbers(ns)
    fig, axes = plt.subplots(1, len(panels), figsize=_size(3.4 * len(panels), 4.2), sharey=True, squeeze=False)
    for ax, (title, (exact, monte_carlo)) in zip(axes[0], panels.items()):
        colors = dict(zip([*exact, *monte_carlo], colors_for([*exact, *monte_carlo])))
        for name, curve in exact.items():
            _seed_curve(ax, ns, curve, name, colors[name])
        for name, v in monte_carlo.items():
            v = np.asarray(v)
            ax.errorbar(
                ns,
                v[:, 0],
                yerr=1.96 * v[:, 1],
                marker="o",
                capsize=3,
                label=name,
                **method_style(name) | {"color": colors[name]},
            )
        ax.set_title(title)
        _context_axis(ax, ns)
    axes[0, 0].set_ylabel("excess ICL risk")
    # Below the panels: inside a narrow panel the legend would cover the curves.
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2)
    fig.tight_layout(rect=(0, 0.7 / fig.get_figheight(), 1, 1))  # about 0.7 in for two rows of legend
    return tidy(fig)


@checked
def plot_task_diversity(
    ms: LogGrid, risks: Named, *, gaussian_best: Positive, bayes: Positive, ylim: LogLimits = (1e-4, 5)
) -> Figure:
    """Excess ICL risk against the number ``M`` of tasks in the pretraining pool (``ms``), one line per entry of
    ``risks`` (name to shape ``(len(ms),)``, in its method's colour; a name containing "attention" with circles, any
    other with squares; "new" solid, else dotted), with the best attention and the Bayes risk under the Gaussian
    prior dashed. Returns the figure."""
    for name, values in risks.items():
        _curve(f"risks[{name!r}]", values, (len(ms),), log=True)
    fig, ax = plt.subplots(figsize=_size(7, 4))
    styles = {
        k: dict(
            marker="o" if "attention" in k else "s",
            linestyle="-" if "new" in k else ":",
            color=method_color(k) or PALETTE[0],
        )
        for k in risks
    }
    plot_lines(
        np.asarray(ms),
        risks,
        ax=ax,
        xlabel="number of pretraining tasks in the pool $M$",
        ylabel="excess ICL risk",
        logx=True,
        logy=True,
        styles=styles,
    )
    ax.axhline(
        gaussian_best,
        color=method_color("attention"),
        linestyle="--",
        linewidth=1,
        label="best attention, Gaussian prior",
    )
    ax.axhline(bayes, color=method_color("Bayes"), linestyle="--", linewidth=1, label="Bayes, Gaussian prior")
    ax.set_ylim(*ylim)
    ax.legend()
    return tidy(fig)


# ---- Chapter 3: mean-field optimization --------------------------------------
def _median_band(ax: Axes, xs: np.ndarray, values: np.ndarray, **style) -> None:
    """A line for ``values`` (``(len(xs),)``), or for several students ``(len(xs), S)`` their median with the
    range over students as a band."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        ax.plot(xs, values, **style)
        return
    ax.plot(xs, np.median(values, axis=1), **style)
    ax.fill_between(xs, values.min(1), values.max(1), color=ax.lines[-1].get_color(), alpha=0.15, linewidth=0)


def _losses(where: str, steps: Sequence, losses: Mapping) -> None:
    for name, values in losses.items():
        _curve(f"{where}[{name!r}]", values, (len(steps),), (len(steps), "S"), log=True)


def _escapes(where: str, escapes: Mapping, size: int | str) -> None:
    for name, values in escapes.items():  # a step, or inf (not within the run); NaN is neither
        steps = _curve(f"{where}[{name!r}]", values, (size,), finite=False)
        if np.isnan(steps).any() or steps.size == 0 or (steps < 0).any():
            raise ValueError(f"{where}[{name!r}] must hold one or more steps >= 0 or inf (never escaped), not NaN")


@checked
def plot_model_losses(
    steps: Grid, losses: Named, *, ax: Axes | None = None, ylabel: str = "loss", title: str | None = None
) -> Axes:
    """The training loss of several mean-field models against gradient step, on a log scale: ``losses`` maps a
    model's name (``"attention"``, ``"static"``, ``"modified"``, or an ablation) to its recorded losses, shape
    ``(len(steps),)`` or ``(len(steps), S)`` for ``S`` students (then the median, and the range as a band); the
    modified model is dashed, since it often runs on top of the static one."""
    _losses("losses", steps, losses)
    steps = _numbers(steps)
    ax = ax if ax is not None else plt.gca()
    for (name, values), color in zip(losses.items(), colors_for(list(losses))):
        _median_band(ax, steps, values, color=color, linestyle="--" if name == "modified" else "-", label=name)
    ax.set(xlabel="gradient step", ylabel=ylabel)
    log_y(ax)
    if title is not None:
        ax.set_title(title)
    ax.legend()
    tidy(ax.figure)
    return ax


Deviations = declare(_ARRAY, lambda v: _grid(v) and np.min(v) >= 0, "a non-empty 1-D sequence of finite numbers >= 0")


@checked
def plot_escape_times(
    noise: Deviations, escapes: Named, *, steps: Count, ax: Axes | None = None, title: str | None = None
) -> Axes:
    """When each variant of the dynamics leaves a saddle (its loss halves) against the size of the start's
    deviation from it: ``noise`` (``(S,)``, positive; a zero is drawn at the left edge as "exactly at the
    saddle"), ``escapes`` maps a variant to its escape steps ``(S,)`` (``inf``: not within the run of ``steps``,
    drawn at the top)."""
    _escapes("escapes", escapes, len(noise))
    ax = ax if ax is not None else plt.gca()
    noise = np.asarray(noise, dtype=float)
    positive = noise[noise > 0]
    exact = positive.min() * 1e-4 if positive.size else 1.0
    xs = np.where(noise > 0, noise, exact)
    for (name, values), color in zip(escapes.items(), colors_for(list(escapes))):
        values = np.minimum(np.asarray(values, dtype=float), steps)
        ax.plot(
            xs, values, marker="o", color=color, label=name, markersize=4, linestyle="--" if name == "modified" else "-"
        )
    ax.axhline(steps, color="0.6", linewidth=1)
    ax.set_xscale("log")
    ax.invert_xaxis()
    if (noise == 0).any():
        ticks = [exact, *positive]
        ax.set_xticks(ticks, ["0", *(f"1e{int(np.round(np.log10(v)))}" for v in positive)])
    ax.set(xlabel="distance from the saddle", ylabel="step where the loss halves")
    if title is not None:
        ax.set_title(title)
    ax.legend()
    tidy(ax.figure)
    return ax


@checked
def plot_escape_by_variant(escapes: Named, *, steps: Count, ax: Axes | None = None, title: str | None = None) -> Axes:
    """The escape steps of several variants of the dynamics from one start, one column of dots per variant (one dot
    per student, ``escapes[name]`` of shape ``(S,)``; ``inf``, not within the run of ``steps``, drawn at the top)
    with the median as a bar."""
    _escapes("escapes", escapes, "S")
    ax = ax if ax is not None else plt.gca()
    for i, (values, color) in enumerate(zip(escapes.values(), colors_for(list(escapes)))):
        values = np.minimum(np.asarray(values, dtype=float), steps)
        jitter = np.linspace(-0.12, 0.12, len(values)) if len(values) > 1 else np.zeros(1)
        ax.plot(i + jitter, values, "o", color=color, markersize=4, alpha=0.8)
        ax.plot([i - 0.25, i + 0.25], [np.median(values)] * 2, color=color, linewidth=2)
    ax.set_xticks(range(len(escapes)), list(escapes), rotation=20, ha="right", rotation_mode="anchor")
    ax.set_xlim(-0.5, len(escapes) - 0.5)
    ax.set_ylabel("step where the loss halves")
    if title is not None:
        ax.set_title(title)
    return ax


@checked
def plot_mean_field_training(
    steps: Grid,
    losses_a: Named,
    losses_b: Named,
    noise: Deviations,
    escapes_by_noise: Named,
    escapes_at_saddle: Named,
    *,
    saddle_steps: Count,
    figsize: Size2 = (12, 8),
) -> Figure:
    """Four panels: (a) the models' losses on a nondegenerate teacher and (b) on a degenerate one
    (:func:`plot_model_losses`, medians over students with their range); the escape from a saddle against the
    start's distance from it (:func:`plot_escape_times`) and, for students started exactly there, by variant of the
    dynamics (:func:`plot_escape_by_variant`)."""
    _losses("losses_a", steps, losses_a)
    _losses("losses_b", steps, losses_b)
    _escapes("escapes_by_noise", escapes_by_noise, len(noise))
    _escapes("escapes_at_saddle", escapes_at_saddle, "S")
    fig, axes = plt.subplots(2, 2, figsize=_size(*figsize))
    plot_model_losses(steps, losses_a, ax=axes[0, 0], title="(a) teacher of rank $k$")
    plot_model_losses(steps, losses_b, ax=axes[0, 1], title="(b) rank $k - 1$, random start")
    plot_escape_times(noise, escapes_by_noise, steps=saddle_steps, ax=axes[1, 0], title="(b) near a saddle")
    plot_escape_by_variant(escapes_at_saddle, steps=saddle_steps, ax=axes[1, 1], title="(b) exactly at the saddle")
    fig.tight_layout()
    return tidy(fig)


@checked
def plot_readout_errors(
    steps: Grid,
    learned: Named,
    random: Mapping,
    teacher: Levels,
    *,
    titles: Mapping[str, str] | None = None,
    columns: Count | None = None,
    figsize: Size2 | None = None,
) -> Figure:
    """One panel per task (the keys of ``learned``, in rows of ``columns`` panels; default one row): the relative
    error of the best readout from the learned features along training (``learned[task]``, ``(len(steps),)`` or
    ``(len(steps), S)`` for ``S`` students, then their median and range), the range over random feature maps
    (``random[task]`` of any length, a grey bar beside the run with its median marked; a log y axis when the values
    span more than a factor of 3) and the teacher's features (``teacher[task]``, dashed)."""
    if set(random) != set(learned) or set(teacher) != set(learned):
        raise ValueError("learned, random and teacher must name the same tasks")
    for name in learned:
        _curve(f"learned[{name!r}]", learned[name], (len(steps),), (len(steps), "S"))
        if not np.isfinite(_curve(f"random[{name!r}]", random[name], ("R",), ("R", "S"))).all():  # its median
            raise ValueError(f"random[{name!r}] must hold finite values (their median and range are drawn)")
    columns = len(learned) if columns is None else columns
    rows = -(-len(learned) // columns)
    size = figsize or (5.5 * min(columns, len(learned)), 3.6 * rows)
    fig, axes = plt.subplots(rows, min(columns, len(learned)), figsize=_size(*size), squeeze=False)
    for ax in axes.flat[len(learned) :]:
        ax.set_visible(False)
    steps = _numbers(steps)
    aside = steps[-1] + 0.06 * (steps[-1] - steps[0])  # the random maps' range, beside the run it is compared with
    for ax, name in zip(axes.flat, learned):
        _median_band(ax, steps, learned[name], color=method_color("static"), label="learned features")
        spread = np.asarray(random[name], dtype=float).ravel()
        middle = np.median(spread)
        ax.errorbar(
            [aside],
            [middle],
            yerr=[[middle - spread.min()], [spread.max() - middle]],
            fmt="o",
            color=method_color("random features"),
            capsize=4,
            label="random features",
        )
        ax.axhline(teacher[name], color=method_color("teacher"), linestyle="--", linewidth=1, label="teacher features")
        ax.set(xlabel="gradient step", ylabel="relative test error", title=f"task {(titles or {}).get(name, name)}")
        drawn = np.concatenate([np.ravel(learned[name]), spread, [teacher[name]]])
        if drawn.min() > 0 and drawn.max() / drawn.min() > 3:
            log_y(ax)
        ax.legend()
    fig.tight_layout()
    return tidy(fig)


# ---- Chapter 4: one-step GD feature learning ---------------------------------
Shares = declare(
    _ARRAY, lambda v: _grid(v) and 0 <= np.min(v) <= np.max(v) <= 1, "a non-empty 1-D sequence of shares in [0, 1]"
)


@checked
def plot_subspace_mass(
    labels: list[str] | tuple[str, ...],
    initial: Shares,
    trained: Shares,
    *,
    ax: Axes | None = None,
    trained_label: str = "after one GD step",
    ylabel: str = r"$\|W U\|_F^2 / \|W\|_F^2$",
) -> FigureBase:
    """Paired bars, one pair per setting (``labels``): the share of the first-layer weights' squared norm that lies
    in the hidden subspace at initialization (grey) and after training (the model's blue). ``initial`` and ``trained``
    hold one share in ``[0, 1]`` per label."""
    if not len(labels) == len(initial) == len(trained) or not len(labels):
        raise ValueError(
            f"labels, initial and trained must have the same non-zero length, got "
            f"{len(labels)}, {len(initial)} and {len(trained)}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=_size(6.5, 3.8))
    xs = np.arange(len(labels))
    ax.bar(xs - 0.18, initial, width=0.36, color=method_color("initialization"), label="initialization")
    ax.bar(xs + 0.18, trained, width=0.36, color=method_color("transformer"), label=trained_label)
    ax.set_xticks(xs, list(labels))
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1)
    ax.legend()
    return tidy(ax.figure)


def _seed_band(ax: Axes, xs: np.ndarray, values: np.ndarray, **style) -> None:
    """The median over seeds of ``values`` ``(seeds, len(xs))`` as a line, their range as a band."""
    values = np.asarray(values, dtype=float)
    _median_band(ax, xs, values.T if values.ndim == 2 else values, **style)


Points = mapping_of(lambda p: _pair(p, 0), "points (x, y) of finite numbers > 0", empty=True)
Widths = declare(_ARRAY | Tensor, lambda v: _grid(v, 0) and len(v) >= 2, "at least two finite numbers > 0 (a log axis)")


@checked
def plot_floor_by_width(
    widths: Widths,
    floors: Named,
    *,
    reference: Levels | None = None,
    points: Points | None = None,
    ax: Axes | None = None,
) -> FigureBase:
    """A model's floor (its risk with an infinitely long prompt) against its width ``m``, on log-log axes: one line
    per way of setting the first layer (``floors[name]`` of shape ``(seeds, len(widths))``; median and range),
    horizontal reference levels (``reference``, e.g. the prompt-free risk) and single models as markers in their
    method's colour (``points[name] = (width, floor)``)."""
    widths = _numbers(widths)
    for name, values in floors.items():
        _curve(f"floors[{name!r}]", values, ("seeds", widths.size), log=True)
    if ax is None:
        _, ax = plt.subplots(figsize=_size(6.4, 3.8))
    for (name, values), color in zip(floors.items(), colors_for(list(floors))):
        values = np.asarray(values, dtype=float)
        _seed_band(ax, widths, values, color=color, label=name)
    _reference_lines(ax, reference, log=True)
    for (name, (width, value)), marker in zip((points or {}).items(), itertools.cycle("D^s")):
        ax.plot([width], [value], marker=marker, color=method_color(name) or "k", linestyle="none", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(widths, [f"{w:g}" for w in widths])
    log_y(ax)
    ax.set_xlabel("width $m$")
    ax.set_ylabel("floor (risk as $n^* \\to \\infty$)")
    ax.legend(loc="lower left")
    return tidy(ax.figure)


@checked
def plot_risk_against_examples(
    ns: LogGrid,
    by_dim: Named,
    by_rank: Named,
    *,
    prompt_free: Levels,
    rank: Count,
    rank_dim: Count,
    baselines: Mapping[str, Mapping] | None = None,
    target: Positive | None = None,
) -> Figure:
    """Test error against the number of in-context examples ``n*`` (log-log), in two panels one above the other.

    Top, subspace dimension ``rank``: ``by_dim`` maps an ambient dimension ``d`` to the pretrained model's risks,
    shape ``(seeds, len(ns))`` (median solid, range over seeds as a band); ``baselines`` maps a prompt-only
    learner's name to ``{d: (its ns, its risks)}``, dashed for the first learner, dotted for the second. Each
    learner has its method's colour (:data:`METHODS`), darkest at the smallest ``d`` and lighter as ``d`` grows;
    ``target`` is a grey dotted level. Bottom, ``d = rank_dim``: ``by_rank`` maps ``r`` to risks as ``by_dim``,
    in shades of the model's colour. ``prompt_free`` maps ``r`` to the risk of the prompt-free predictor
    ``E[y | x]``, drawn as a dash-dotted level (in the shade of each ``r`` at the bottom).
    """
    baselines = baselines or {}
    for name, given, most in (("by_dim", by_dim, 4), ("by_rank", by_rank, 4), ("baselines", baselines, 2)):
        if len(given) > most:  # shades of one colour that can be told apart
            raise ValueError(f"{name} must hold at most {most} entries (told apart by shade), got {len(given)}")
    for name, curves in {"by_dim": by_dim, "by_rank": by_rank}.items():
        for key, v in curves.items():
            _curve(f"{name}[{key!r}] (one risk per n in ns)", v, (len(ns),), ("seeds", len(ns)), log=True)
    missing = ({rank} | set(by_rank)) - set(prompt_free)
    if missing:
        raise ValueError(f"prompt_free must give the prompt-free risk of every rank drawn, missing {sorted(missing)}")
    for name, curves in baselines.items():
        if set(curves) - set(by_dim) or not all(_holds_pair(p) for p in curves.values()):
            raise ValueError(f"baselines[{name!r}] must map dimensions of by_dim to (ns, risks) of one length")
        for d, (b_ns, b_risks) in curves.items():
            if not _grid(b_ns, 0):  # a log x axis, like ns
                raise ValueError(f"baselines[{name!r}][{d!r}] (ns) must be finite numbers > 0 (a log axis)")
            _curve(f"baselines[{name!r}][{d!r}] (risks)", b_risks, (len(b_ns),), log=True)
    # one above the other: the first panel's legend (every dimension and learner) needs the column's width
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 8.2), sharey=True)
    x = _numbers(ns)
    styles = {"pretrained": "-", **dict(zip(baselines, ("--", ":")))}
    model = method_color("pretrained")
    colors = {name: method_color(name) or PALETTE[i] for i, name in enumerate(styles)}
    for j, (d, values) in enumerate(by_dim.items()):
        _seed_band(ax1, x, values, color=shade(model, j, len(by_dim)))
        for name, curves in baselines.items():
            if d in curves:
                ax1.plot(*curves[d], styles[name], color=shade(colors[name], j, len(by_dim)))
    free = method_color("prompt-free")
    ax1.axhline(prompt_free[rank], color=free, linestyle="-.", linewidth=1)
    if target is not None:
        ax1.axhline(target, color="0.5", linestyle=":", linewidth=1)
    # One legend entry per learner (colour and line style) and per d (shade), not one per curve.
    handles = [Line2D([], [], color=colors[name], linestyle=ls, label=name) for name, ls in styles.items()]
    handles += [
        Line2D([], [], color=shade("#444444", j, len(by_dim)), label=f"$d = {d}$") for j, d in enumerate(by_dim)
    ]
    handles.append(Line2D([], [], color=free, linestyle="-.", linewidth=1, label=r"prompt-free $\mathbb{E}[y|x]$"))
    if target is not None:
        handles.append(Line2D([], [], color="0.5", linestyle=":", linewidth=1, label="target"))
    ax1.set_title(f"$r = {rank}$; dark to light: $d = {', '.join(str(d) for d in by_dim)}$")
    for j, (r, values) in enumerate(by_rank.items()):
        color = shade(model, j, len(by_rank))
        _seed_band(ax2, x, values, color=color, label=f"$r = {r}$")
        ax2.axhline(prompt_free[r], color=color, linestyle="-.", linewidth=1)
    ax2.set_title(f"pretrained, $d = {rank_dim}$ (dash-dot: $\\mathbb{{E}}[y|x]$ at each $r$)")
    for ax in (ax1, ax2):
        ax.set(xscale="log", yscale="log", xlabel="in-context examples $n^*$", ylabel="test squared error")
    ax1.legend(handles=handles, ncol=2, loc="lower left")
    ax2.legend()
    fig.tight_layout()
    return tidy(fig)


@checked
def plot_subspace_recovery(
    tasks_by_dim: Named, mass_by_dim: Named, *, exponents: Reals = (2, 3), level: Probability | None = None
) -> Figure:
    """Stage-1 subspace recovery against the number of tasks ``T1``, one panel per scaling ``T1 / d^a`` for ``a``
    in ``exponents``: the scaling under which the curves for different ``d`` fall on one another is the one the
    requirement follows. ``tasks_by_dim`` maps ``d`` to its ``T1`` grid, ``mass_by_dim`` to the mass in ``S`` per
    seed, shape ``(seeds, len(T1 grid))`` (median and range over seeds); ``level`` is a grey dotted line."""
    if set(tasks_by_dim) != set(mass_by_dim):
        raise ValueError("tasks_by_dim and mass_by_dim must name the same, non-empty set of dimensions")
    if any(abs(a) > 100 for a in exponents):  # T1 / d^a: a rate's exponent, not one that overflows
        raise ValueError(f"exponents must be in [-100, 100] (T1 / d^a is drawn), got {list(exponents)}")
    for d, masses in mass_by_dim.items():
        if not _number(d, 0) or not _grid(tasks_by_dim[d], 0):
            raise ValueError(f"tasks_by_dim must map dimensions > 0 to T1 > 0 (a log axis), got {d}: {tasks_by_dim[d]}")
        n = len(tasks_by_dim[d])
        share = _curve(f"mass_by_dim[{d}] (one column per T1 of tasks_by_dim[{d}])", masses, (n,), ("seeds", n))
        if ((share < 0) | (share > 1)).any():  # a share of the mass: the axis is 0-1
            raise ValueError(
                f"mass_by_dim[{d}] must hold shares in [0, 1], got values from {share.min()} to {share.max()}"
            )
    fig, axes = plt.subplots(1, len(exponents), figsize=_size(FIGURE_WIDTH, 3.4), sharey=True, squeeze=False)
    for ax, a in zip(axes[0], exponents):
        for (d, t1), color in zip(tasks_by_dim.items(), series_colors(len(tasks_by_dim))):
            _seed_band(
                ax,
                np.asarray(t1, dtype=float) / d**a,
                mass_by_dim[d],
                color=color,
                marker="o",
                markersize=3,
                label=f"$d = {d}$",
            )
        if level is not None:
            ax.axhline(level, color="0.5", linestyle=":", linewidth=1)
        ax.set(xscale="log", xlabel=f"stage-1 tasks $T_1 / d^{{{a:g}}}$", ylim=(0, 1))
        ax.legend()
    axes[0, 0].set_ylabel("mass of $W$ in $\\mathcal{S}$")
    fig.tight_layout()
    return tidy(fig)


Complexities = mapping_of(
    lambda p: isinstance(p, tuple) and len(p) == 2 and _grid(p[0], 0) and isinstance(p[1], Mapping),
    "panels (xs, {learner: values}), xs finite numbers > 0 (a log axis)",
    keys="titles",
)


@checked
def plot_sample_complexity(
    panels: Complexities, *, slopes: Mapping[str, Mapping] | None = None, ylabel: str = "examples needed $n^*$"
) -> Figure:
    """Sample complexity against a problem size, log-log, one panel per entry of ``panels``: a title to ``(xs,
    {learner: values})`` with values of shape ``(len(xs),)`` or ``(len(xs), 3)`` (estimate, low, high: a
    marker with an error bar). ``slopes`` maps a title to ``{learner: fitted exponent}``, written in the legend."""
    for title, (xs, curves) in panels.items():
        if not curves or len(curves) > config.MAX_SERIES:
            raise ValueError(
                f"panels[{title!r}][1] must map 1 to {config.MAX_SERIES} learners to values, got {len(curves)}"
            )
        drawn = False
        for name, values in curves.items():
            array = _curve(f"panels[{title!r}][1][{name!r}]", values, (len(xs),), (len(xs), 3), finite=False)
            ordered = (array[:, 1] <= array[:, 0]) & (array[:, 0] <= array[:, 2]) if array.ndim == 2 else True
            if not np.all(ordered | ~np.isfinite(array).all(-1)):  # rows that did not reach a level are not drawn
                raise ValueError(f"panels[{title!r}][1][{name!r}] must hold rows (estimate, low, high), low <= high")
            if (np.isfinite(array) & (array <= 0)).any():  # inf is a level never reached, not drawn
                raise ValueError(f"panels[{title!r}][1][{name!r}] must hold values > 0 (a log axis) or inf")
            drawn = drawn or bool(np.isfinite(array).any())
        if not drawn:
            raise ValueError(f"panels[{title!r}] must hold a finite value to draw (every learner's is inf)")
    for title, exponents in (slopes or {}).items():
        if title not in panels:
            raise ValueError(f"slopes must be keyed by titles of panels, got {title!r} (panels: {list(panels)})")
        if not isinstance(exponents, Mapping) or not all(_number(v) for v in exponents.values()):
            raise ValueError(f"slopes[{title!r}] must map learners to exponents (numbers), got {exponents!r:.80}")
        if extra := [name for name in exponents if name not in panels[title][1]]:  # it would be left out unseen
            raise ValueError(f"slopes[{title!r}] must give learners drawn in that panel, got {extra}")
    fig, axes = plt.subplots(1, len(panels), figsize=_size(FIGURE_WIDTH, 3.4), squeeze=False)
    for ax, (title, (xs, curves)) in zip(axes[0], panels.items()):
        xs = _numbers(xs)
        for (name, values), color in zip(curves.items(), colors_for(list(curves))):
            values = np.asarray(values, dtype=float).reshape(len(xs), -1)
            values = np.where(np.isfinite(values), values, np.nan)  # a learner that never reached: no marker
            label = name
            exponent = (slopes or {}).get(title, {}).get(name)
            if exponent is not None:
                label = f"{name} (slope {exponent:.2f})"
            ax.plot(xs, values[:, 0], "-o", color=color, label=label)
            if values.shape[1] == 3:
                ax.errorbar(
                    xs,
                    values[:, 0],
                    yerr=[values[:, 0] - values[:, 1], values[:, 2] - values[:, 0]],
                    fmt="none",
                    ecolor=color,
                    capsize=3,
                )
        ax.set(xscale="log", yscale="log", xlabel=title, ylabel=ylabel)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
        ax.legend(fontsize=9)
    fig.tight_layout()
    return tidy(fig)


ErrorPanels = mapping_of(ErrorCurves, keys="titles")
Marks = mapping_of(_pair, "points (x, y) of finite numbers", empty=True)


@checked
def plot_error_panels(
    panels: ErrorPanels,
    *,
    markers: Marks | None = None,
    ylabel: str = "test squared error",
    logy: bool = True,
    figsize: Size2 = (12, 4.2),
) -> Figure:
    """Error curves with 95% bands (:func:`plot_error_curves`) in side-by-side panels sharing the y axis.

    ``panels`` maps a panel's title to its curves (a name to squared errors of shape ``(B, K)``, prompts by prefix
    length). ``markers`` maps a curve's name to a point ``(x, y)``, drawn as a cross in that curve's colour: a
    reference learner's error at one prompt length.
    """
    markers = dict(markers or {})
    if logy and (low := [name for name, (_, y) in markers.items() if y <= 0]):
        raise ValueError(f"markers must be > 0 on a log axis (logy=True), not those of {low}")
    missing = set(markers) - {name for curves in panels.values() for name in curves}
    if missing:
        raise ValueError(f"markers name curves that no panel draws: {sorted(missing)}")
    fig, axes = plt.subplots(1, len(panels), figsize=_size(*figsize), sharey=True, squeeze=False)
    for ax, (title, curves) in zip(axes[0], panels.items()):
        plot_error_curves(curves, ax=ax, logy=logy, ylabel=ylabel)
        for line in list(ax.lines):
            if line.get_label() in markers:
                mark_x, mark_y = markers[line.get_label()]
                ax.plot([mark_x], [mark_y], "x", color=line.get_color(), markersize=9)
        ax.set_title(title)
    fig.tight_layout()
    return tidy(fig)


# ---- Chapter 5: linear transformer blocks ------------------------------------
#: Trained models as markers, closed-form optima dotted, each in its method's colour.
SIGNAL_STYLES = {
    "LSA": {"marker": "o", "color": method_color("LSA")},
    "LTB": {"marker": "s", "color": method_color("LTB")},
    "best GD-0": {"linestyle": ":", "color": method_color("GD-0")},
    "best GD-β": {"linestyle": ":", "color": method_color("GD-β")},
}


@checked
def plot_risk_against_signal(
    norms: Grid,
    risks: Named,
    *,
    bayes: Real | None = None,
    styles: Mapping[str, dict] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """ICL risk against the norm of the shared signal ``||beta*||``: one line per model (``risks`` maps a name to
    its risks, one per entry of ``norms``), styled by ``styles`` (default :data:`SIGNAL_STYLES`), and the Bayes
    risk, which does not depend on ``beta*``, as a dashed horizontal line."""
    for name, values in risks.items():
        _curve(f"risks[{name!r}] (one risk per norm)", values, (len(norms),))
    series = {name: np.asarray(values, dtype=float) for name, values in risks.items()}
    if ax is None:
        _, ax = plt.subplots(figsize=_size(7.5, 4.2))
    plot_lines(
        np.asarray(norms, dtype=float),
        series,
        ax=ax,
        styles={k: v for k, v in SIGNAL_STYLES.items() if k in series} if styles is None else styles,
        xlabel=r"norm of the shared signal $\|\beta^*\|$",
        ylabel="ICL risk",
    )
    if bayes is not None:
        ax.axhline(bayes, linestyle="--", color=method_color("Bayes"), label="Bayes")
    ax.legend()
    tidy(ax.figure)
    return ax


def _scatter_on_diagonal(ax: Axes, x: Tensor, y: Tensor, lims: Sequence[float], **scatter) -> None:
    """A scatter plot of ``y`` against ``x`` (CPU tensors of one shape) with the dashed line ``y = x`` over
    ``lims``: points on it agree."""
    ax.scatter(x, y, **scatter)
    ax.plot(lims, lims, "--", color="0.4", label="equal")
    ax.legend()


@checked
def plot_gd_beta_reading(
    pred_read: Annotated[Float[Tensor, " B"], checks.Finite, checks.NonEmpty],
    pred_ltb: Annotated[Float[Tensor, " B"], checks.Finite, checks.NonEmpty],
    gamma_star: Annotated[Float[Tensor, "d d"], checks.Finite, checks.NonEmpty],
    gamma_read: Annotated[Float[Tensor, "d d"], checks.Finite, checks.NonEmpty],
    *,
    beta_star: Annotated[Float[Tensor, " d"], checks.Finite] | None = None,
    beta_read: Annotated[Float[Tensor, " d"], checks.Finite] | None = None,
    k: Count = 2000,
) -> Figure:
    """Two panels on the GD-beta model read off a trained LTB. Left, the LTB's predictions ``pred_ltb`` against
    the read model's ``pred_read`` (both shape ``(B,)``, the first ``k`` prompts); right, the read step
    ``gamma_read`` against the optimal ``gamma_star`` entry by entry (both ``(d, d)``), and the read initialization
    ``beta_read`` against ``beta_star`` (both ``(d,)``) when given."""
    if (beta_star is None) != (beta_read is None):
        raise ValueError("give both beta_star and beta_read, or neither")
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=_size(6.4, 8.4))
    pred_read, pred_ltb = pred_read[:k].detach().cpu(), pred_ltb[:k].detach().cpu()
    _scatter_on_diagonal(
        ax1,
        pred_read,
        pred_ltb,
        [pred_ltb.min().item(), pred_ltb.max().item()],
        s=4,
        alpha=0.5,
        color=method_color("LTB"),
    )
    ax1.set(xlabel="GD-β read off the LTB", ylabel="trained LTB")
    true = [gamma_star.detach().cpu().flatten()]
    read = [gamma_read.detach().cpu().flatten()]
    if beta_star is not None:
        true.append(beta_star.detach().cpu().flatten())
        read.append(beta_read.detach().cpu().flatten())
    everything = torch.cat([t.double() for t in true])
    lims = [min(everything.min().item(), 0.0), everything.max().item()]
    # Γ* of an isotropic task has two distinct entries (diagonal, off-diagonal), so many points coincide: the
    # legend counts them, and hollow markers show the spread of the read entries around each.
    gamma_color, beta_color = series_colors(2)
    ax2.scatter(
        true[0], read[0], s=60, facecolors="none", edgecolors=gamma_color, label=f"entries of Γ ({len(true[0])})"
    )
    if beta_star is not None:
        ax2.scatter(true[1], read[1], s=30, marker="s", color=beta_color, label=f"entries of β₀ ({len(true[1])})")
    ax2.plot(lims, lims, "--", color="0.4", label="equal")
    ax2.legend()
    ax2.set(xlabel=r"optimum: $\Gamma^*$ and $\beta^*$ (closed form)", ylabel="read off the LTB")
    fig.tight_layout()
    return tidy(fig)


@checked
def plot_gap_scaling(
    ns: LogGrid,
    trained: Named,
    closed: Mapping,
    *,
    control: Mapping | None = None,
    limit: Positive | None = None,
    label: str = "trained LSA",
    control_label: str = "control: LSA fitted at the first n",
    ax: Axes | None = None,
) -> Axes:
    """The approximation gap scaled as ``n * gap / ||beta*||^2`` against ``n`` (log x): flat where the gap falls like
    ``||beta*||^2 / n``. ``trained[norm]`` holds the gaps of the LSAs called ``label``, shape ``(seeds, len(ns))``
    (median drawn, range as error bars) or ``(len(ns),)``; ``closed[norm]`` a closed-form gap per ``n`` (line);
    ``control[norm]`` the gaps of a control (grey dashed, ``control_label``). The LSAs and their closed forms are shades
    of ``label``'s method colour, dark to light in the order of the norms; ``limit`` a dotted horizontal level (the
    large-``n`` limit)."""
    ns = _numbers(ns)
    for norm, gaps in trained.items():
        if not _number(norm, 0) or norm > config.MAX_SCALE:  # keys read back from JSON are strings
            raise ValueError(
                f"trained must be keyed by norms, numbers in (0, {config.MAX_SCALE:.0e}] (config.MAX_SCALE; the gap "
                f"is divided by one squared), got {norm!r}"
            )
        if closed.get(norm) is None:
            raise ValueError(f"closed must give the closed-form gaps at every norm of trained, missing {norm}")
        _curve(f"trained[{norm}]", gaps, (len(ns),), ("seeds", len(ns)), log=True)
        for name, curves in {"closed": closed, "control": control or {}}.items():
            if curves.get(norm) is not None:
                _curve(f"{name}[{norm}]", curves[norm], (len(ns),), log=True)
    if extra := [norm for norm in control or {} if norm not in trained]:  # it would be left out unseen
        raise ValueError(f"control must give norms of trained only, got {extra}")
    if ax is None:
        _, ax = plt.subplots(figsize=_size(6.4, 4.2))
    for j, (norm, gaps) in enumerate(trained.items()):
        color = shade(method_color(label) or PALETTE[0], j, len(trained))
        gray = shade(method_color("control"), j, len(trained))
        gaps = np.atleast_2d(np.asarray(gaps, dtype=float))
        scaled = gaps * ns / norm**2
        mid = np.median(scaled, axis=0)
        ax.errorbar(
            ns,
            mid,
            yerr=[mid - scaled.min(0), scaled.max(0) - mid],
            fmt="o",
            color=color,
            capsize=3,
            label=rf"{label}, $\|\beta^*\| = {norm:g}$",
        )
        ax.plot(ns, np.asarray(closed[norm]) * ns / norm**2, "-", color=color, alpha=0.7)
        if control is not None and norm in control:
            ax.plot(ns, np.asarray(control[norm]) * ns / norm**2, "--", color=gray)
    ax.plot([], [], "-", color=method_color(label) or PALETTE[0], label="closed form, each norm")
    if control is not None:
        ax.plot([], [], "--", color=method_color("control"), label=control_label)
    if limit is not None:
        ax.axhline(limit, linestyle=":", color="0.4", label=f"limit {limit:g}")
    ax.set_xscale("log")
    ax.set_xticks(ns, [f"{m:g}" for m in ns])
    ax.minorticks_off()
    log_y(ax)  # a control that grows like n would flatten the measured curves on a linear axis
    ax.set(xlabel="number of context examples $n$", ylabel=r"$n \times$ gap $/ \|\beta^*\|^2$")
    ax.legend()
    tidy(ax.figure)
    return ax


@checked
def plot_risk_ratios_against_n(
    ns: LogGrid, ratios: Mapping, *, snrs: Reals, linestyles: Mapping[str, str] | None = None, ax: Axes | None = None
) -> Axes:
    """ICL risk relative to the Bayes risk against the number of context examples, on log-log axes: each method
    in its colour and line style (``linestyles``, name to style; default GD-β solid with markers, GD-0 dotted, GD++
    dashed), dark to light over the signal-to-noise ratios ``snrs``. ``ratios[snr, n][method]`` is the ratio at ``n`` in
    ``ns``."""
    if len(snrs) > 4:
        raise ValueError(f"snrs must hold at most 4 signal-to-noise ratios (told apart by shade), got {len(snrs)}")
    linestyles = {"GD-β": "-", "GD-0": ":", "GD++": "--"} if linestyles is None else linestyles
    if not linestyles:
        raise ValueError("linestyles must name at least one method (a mapping from method to line style)")
    for name, style in linestyles.items():
        try:
            Line2D([], [], linestyle=style)
        except (TypeError, ValueError) as err:
            raise ValueError(f"linestyles[{name!r}] must be a matplotlib line style ('-', ':', '--'): {err}") from None
    missing = [(snr, m) for snr in snrs for m in ns if not _holds(ratios.get((snr, m)), *linestyles)]
    if missing:
        raise ValueError(f"ratios must give every method of {list(linestyles)} at every (snr, n), missing {missing}")
    for key in ((snr, m) for snr in snrs for m in ns):
        for method in linestyles:
            if not _number(ratios[key][method], 0):
                raise ValueError(f"ratios[{key}][{method!r}] must be a finite number > 0, got {ratios[key][method]!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=_size(8, 4.5))
    ns = np.asarray(ns)
    series, styles = {}, {}
    for j, snr in enumerate(snrs):
        for i, (method, style) in enumerate(linestyles.items()):
            label = f"{method}, SNR {snr:g}"
            series[label] = np.array([ratios[snr, m][method] for m in ns])
            color = shade(method_color(method) or PALETTE[i], j, len(snrs))
            styles[label] = {"color": color, "linestyle": style, "marker": "o" if i == 0 else None}
    plot_lines(
        ns,
        series,
        ax=ax,
        styles=styles,
        xlabel="number of context examples $n$",
        ylabel="ICL risk / Bayes risk",
        logy=True,
    )
    ax.set_xscale("log")
    ax.set_xticks(ns, [str(m) for m in ns])
    # Ratios span less than a decade, where a log axis labels at most one tick: label a readable set by hand.
    low, high = ax.get_ylim()
    ticks = [t for t in (1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16) if low <= t <= high]
    if len(ticks) >= 2:  # otherwise the log axis's own labels serve
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.legend(ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    tidy(ax.figure)
    return ax


Keys = sequence_of(str, "record names", base=tuple | list, most=config.MAX_SERIES)


@checked
def plot_gd_records(histories: Descents, *, keys: Keys, logy: bool = True, width: Positive = 5.5) -> Figure:
    """One panel per recorded quantity in ``keys``, one line per run: ``histories`` maps a run's name (its start,
    say) to a :class:`~icl_utils.gd.GDHistory`, whose ``records[key]`` has shape ``(len(steps),)``. ``logy`` puts
    the quantities on a log scale, where linear convergence is a straight line."""
    for name, hist in histories.items():
        missing = [key for key in keys if key not in hist.records]
        if missing:
            raise ValueError(
                f"keys must be recorded by every run, but histories[{name!r}] has no {missing}; it has "
                f"{sorted(hist.records)}"
            )
        for key in keys:
            _curve(f"histories[{name!r}].records[{key!r}]", hist.records[key], (len(hist.steps),), log=logy)
    # constrained layout: a log axis's tick labels would run into the next panel's y label
    fig, axes = plt.subplots(1, len(keys), figsize=_size(width * len(keys), 4), squeeze=False, layout="constrained")
    for ax, key in zip(axes[0], keys):
        for (name, hist), color in zip(histories.items(), colors_for(list(histories))):
            ax.plot(hist.steps, hist.records[key], color=color, label=name)
        ax.set(xlabel="gradient-descent step", ylabel=key)
        if logy:
            log_y(ax)
        ax.legend()
    return tidy(fig)


# ---- Chapter 6: softmax stage-wise convergence -------------------------------
FeatureRuns = mapping_of(
    lambda h: (
        isinstance(h, GDHistory)
        and np.ndim(h.records.get("loss_k")) == 2
        and bool(np.isfinite(h.records["loss_k"]).all() and (np.asarray(h.records["loss_k"]) > 0).all())
    ),
    "icl_utils.GDHistory with records['loss_k'] of shape (T, K), finite and > 0 (a log axis)",
    keys="titles",
)


@checked
def plot_feature_errors(histories: FeatureRuns, *, level: Positive | None = None) -> Figure:
    """Per-feature prediction error ``L_k`` against gradient-descent step, one panel per run (shared log y axis).

    ``histories`` maps a panel title to a :class:`~icl_utils.gd.GDHistory` with ``steps`` of shape ``(T,)`` and
    ``records["loss_k"]`` of shape ``(T, K)``. Feature 1 (the dominant one) is a thick dark line, the others
    shades of orange; ``level`` draws a dashed horizontal line (the error at which a feature counts as learned).
    """
    fig, axes = plt.subplots(1, len(histories), figsize=_size(5.5 * len(histories), 4), sharey=True, squeeze=False)
    for ax, (title, hist) in zip(axes[0], histories.items()):
        loss_k = np.asarray(hist.records["loss_k"])
        n = loss_k.shape[1] if loss_k.ndim == 2 else 0
        if not 1 <= n <= config.MAX_SERIES:  # a line and a colour each
            raise ValueError(
                f"histories[{title!r}] must record 1 to {config.MAX_SERIES} features' losses (loss_k of shape (T, K)), "
                f"got shape {loss_k.shape}"
            )
        series = {f"$L_{{{k + 1}}}$": loss_k[:, k] for k in range(n)}
        styles = {
            name: {"color": PALETTE[0], "linewidth": 2.5}  # the dominant feature
            if k == 0
            else {"color": plt.cm.Oranges(0.35 + 0.6 * k / n), "linewidth": 1.2}
            for k, name in enumerate(series)
        }
        plot_lines(hist.steps, series, ax=ax, ylabel="prediction error $L_k$", logy=True, styles=styles)
        if level is not None:
            ax.axhline(level, linestyle="--", color="0.5", linewidth=1)
        ax.set_title(title)
        ax.legend(ncol=2)
    fig.tight_layout()
    return tidy(fig)


@checked
def plot_attention_snapshots(steps: Grid, attn: Sequence | np.ndarray, *, at: Grid) -> Figure:
    """Heatmaps of the expected attention (see :func:`plot_attention_heatmaps`) at the recorded steps ``at``
    (each rounded up to the next recorded step). ``steps``: shape ``(T,)``; ``attn``: shape ``(T, K, K)``."""
    _curve("attn", attn, (len(steps), "K", "K"), finite=False)
    if len(at) > config.MAX_SERIES:  # a panel each
        raise ValueError(f"at must hold at most {config.MAX_SERIES} steps (a panel each), got {len(at)}")
    steps, attn = _numbers(steps), np.asarray(attn)
    if np.any(np.diff(steps) <= 0):  # the search for each of at's steps needs them in order
        raise ValueError(f"steps must increase, got {steps.tolist()[:8]}")
    picks = [min(int(np.searchsorted(steps, t)), len(steps) - 1) for t in at]
    fig, axes = plt.subplots(
        1, len(picks), figsize=_size(3.5 * len(picks), 3.6), constrained_layout=True, squeeze=False
    )
    plot_attention_heatmaps([attn[i] for i in picks], [f"step {steps[i]:g}" for i in picks], axes=axes[0])
    return tidy(fig)


PhaseEnds = declare(_ARRAY, _three_steps, "three steps >= 0 in order, each a number or inf (never)")


@checked
def plot_phase_weights(
    steps: Grid, w: Sequence | np.ndarray, *, feature: Size, other: Size, boundaries: PhaseEnds
) -> Figure:
    """The bilinear weights of an under-represented feature ``k = feature`` (0-based) against step: ``A_k`` (to
    its own feature), ``B_{k,1}`` (to the dominant feature 0) and ``B_{k,m}`` (to feature ``m = other``), with the four
    phases shaded and labelled I-IV, and ``B_{k,m}`` enlarged in an inset until after it turns negative. ``steps``:
    shape ``(T,)``; ``w``: shape ``(T, K, K)`` with ``w[t, m, k] = v_m^T Q v_k``; ``boundaries``: the three steps that
    end phases I, II and III."""
    K = _curve("w", w, (len(steps), "K", "K")).shape[1]
    if max(feature, other) >= K:
        raise ValueError(f"feature and other must be < K = {K}, got {feature} and {other}")
    if other in (0, feature):  # B_{k,1} is drawn already, and B_{k,k} is A_k
        raise ValueError(f"other must be neither 0 (the dominant feature) nor feature = {feature}, got {other}")
    steps, w = _numbers(steps), np.asarray(w)
    k, m = feature, other
    fig, ax = plt.subplots(figsize=_size(8, 4.2))
    plot_lines(
        steps,
        {f"$A_{{{k + 1}}}$": w[:, k, k], f"$B_{{{k + 1},1}}$": w[:, 0, k], f"$B_{{{k + 1},{m + 1}}}$": w[:, m, k]},
        ax=ax,
        ylabel="weight",
    )
    edges = np.minimum([0, *boundaries, steps[-1]], steps[-1])
    for lo, hi, label, grey in zip(edges[:-1], edges[1:], ["I", "II", "III", "IV"], [0.95, 0.88, 0.95, 0.88]):
        ax.axvspan(lo, hi, color=str(grey), zorder=0)
        ax.text((lo + hi) / 2, ax.get_ylim()[1] * 0.92, label, ha="center")
    ax.set_xlim(0, steps[-1])
    # B_{k,m} first rises a little, then falls: too small to see on the main axes, so enlarged in an inset
    other_line = ax.lines[2]
    b = w[:, m, k]
    peak = int(np.argmax(b))
    after = np.flatnonzero(b[peak:] < 0)
    end = min(len(steps) - 1, int(1.5 * (peak + (after[0] if after.size else len(b) - peak))))
    ax.legend(loc="center right")
    inset = ax.inset_axes((0.28, 0.33, 0.42, 0.28))  # between A_k above and the B's below, left of the legend
    inset.plot(steps[: end + 1], b[: end + 1], color=other_line.get_color())
    inset.axhline(0, color="0.5", linewidth=0.8)
    inset.set_title(f"{other_line.get_label()}, enlarged", fontsize=9)
    inset.tick_params(labelsize=9)
    fig.tight_layout()
    return tidy(fig)


ConvergencePanels = sequence_of(
    lambda p: (
        _holds(p, "x", "xlabel", "times")
        and _grid(p["x"], 0)
        and isinstance(p["times"], Mapping)
        and len(p["times"]) > 0
        and isinstance(p.get("bounds", {}), Mapping)
    ),
    "panels, mappings with x, xlabel and times (at least one), x finite numbers > 0 (a log axis), bounds a mapping",
)


@checked
def plot_convergence_times(panels: ConvergencePanels) -> Figure:
    """Steps to convergence on log-log axes, one panel per mapping of ``panels``: ``x`` (shape ``(P,)``, the
    swept quantity), ``xlabel``, ``times`` (a dict from a label to measured steps of shape ``(P, seeds)``, or to a
    pair ``(x, steps)`` for a series on its own x values: the median is drawn with the range over seeds as an error
    bar), optionally ``bounds`` (a dict from a label to values of shape ``(P,)``, drawn dashed) and ``ylabel``
    (default: steps to convergence)."""
    for i, panel in enumerate(panels):
        for label, b in panel.get("bounds", {}).items():
            _curve(f"panels[{i}]['bounds'][{label!r}]", b, (len(panel["x"]),), log=True)
        for label, t in panel["times"].items():
            if isinstance(t, tuple) and len(t) != 2:
                raise ValueError(
                    f"panels[{i}]['times'][{label!r}] must be steps, or a pair (x, steps), got {len(t)} items"
                )
            xs, t = t if isinstance(t, tuple) else (panel["x"], t)
            if not _grid(xs, 0):
                raise ValueError(f"panels[{i}]['times'][{label!r}][0] must be finite numbers > 0 (a log axis)")
            _curve(f"panels[{i}]['times'][{label!r}] (one row per x value)", t, (len(xs), "seeds"), log=True)
    fig, axes = plt.subplots(1, len(panels), figsize=_size(5.5 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        x = np.asarray(panel["x"], dtype=float)
        for (label, t), color in zip(panel["times"].items(), colors_for(list(panel["times"]))):
            xs, t = (np.asarray(t[0], dtype=float), t[1]) if isinstance(t, tuple) else (x, t)
            t = np.asarray(t, dtype=float)
            med = np.median(t, 1)
            ax.errorbar(xs, med, yerr=[med - t.min(1), t.max(1) - med], fmt="o-", color=color, capsize=3, label=label)
        for j, (label, b) in enumerate(panel.get("bounds", {}).items()):
            ax.plot(x, b, "--", color=str(0.2 + 0.25 * j), label=label)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel=panel["xlabel"],
            ylabel=panel.get("ylabel", "steps to $L_k \\leq \\epsilon$"),
        )
        ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.minorticks_off()
        ax.legend()
    fig.tight_layout()
    return tidy(fig)


# ---- Appendix: performance -------------------------------------
SpeedResults = sequence_of(
    lambda r: (
        _holds(r, "device", "config", "rows", "ensembles")
        and len(r["rows"]) + len(r["ensembles"]) > 0
        and all(_holds(row, "name", "prompts_per_s") and _number(row["prompts_per_s"], 0) for row in r["rows"])
        and all(_holds(e, "name", "models", "time_ratio") and _number(e["time_ratio"], 0) for e in r["ensembles"])
        and all(isinstance(item["name"], str) for item in [*r["rows"], *r["ensembles"]])
    ),
    "results files, mappings with device, config, rows (each with a name, a str, and prompts_per_s > 0) and "
    "ensembles (each with a name and time_ratio > 0)",
    most=config.MAX_SERIES,
)


@checked
def plot_training_speed(results: SpeedResults) -> Figure:
    """The training-speed results files of ``benchmarks/train_speed.py`` side by side, one bar colour per file.

    Top, training prompts per second of each training loop (log scale from the power of ten at or below the
    slowest);
    bottom, the wall time of ``S`` models trained together with ``train_ensemble`` relative to one, per case (a
    dotted line at 1). Each result is a parsed JSON file with ``device``, ``config``, ``rows`` (``name``,
    ``prompts_per_s``) and ``ensembles`` (``name``, ``models``, ``time_ratio``); cases a file did not time are
    left out of its bars."""
    fig, axes = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 6.4))  # one above the other: the labels need the width
    width = 0.8 / max(len(results), 1)
    names = list(dict.fromkeys(row["name"] for r in results for row in r["rows"]))
    cases = list(dict.fromkeys(e["name"] for r in results for e in r["ensembles"]))
    for i, (r, color) in enumerate(zip(results, series_colors(len(results)))):
        values = {row["name"]: row["prompts_per_s"] for row in r["rows"]}
        axes[0].bar(
            np.arange(len(names)) + i * width,
            [values.get(n, np.nan) for n in names],
            width,
            color=color,
            label=f"{r['device']} ({r['config']})",
        )
        ratios = {e["name"]: e["time_ratio"] for e in r["ensembles"]}
        axes[1].bar(
            np.arange(len(cases)) + i * width,
            [ratios.get(c, np.nan) for c in cases],
            width,
            color=color,
            label=f"{r['device']}: {r['ensembles'][0]['models']} models" if ratios else None,
        )
    centre = width * (len(results) - 1) / 2
    lowest = min((row["prompts_per_s"] for r in results for row in r["rows"]), default=1.0)
    axes[0].set_xticks(np.arange(len(names)) + centre, names, rotation=15)
    axes[0].set(
        yscale="log",
        ylim=(10 ** np.floor(np.log10(lowest)), None),
        ylabel="training prompts per second",
        title="one training run",
    )
    highest = max((e["time_ratio"] for r in results for e in r["ensembles"]), default=1.0)
    axes[1].set_xticks(np.arange(len(cases)) + centre, cases, rotation=15)
    axes[1].axhline(1.0, color="k", lw=0.8, ls=":")
    axes[1].set(
        ylim=(0, 1.45 * highest),
        ylabel="wall time relative to one model",  # room for the legend
        title="S models at once (train_ensemble)",
    )
    for ax in axes:
        ax.legend(loc="upper left")
    fig.tight_layout()
    return tidy(fig)
