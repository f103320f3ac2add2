"""Plots of layouts: the Pareto front of ``tpsim plan`` (tokens/s per GPU against TPOT).

Drawn on a bare ``matplotlib.figure.Figure`` as ``plots.py`` does and written atomically
by its :func:`~tpsim.experiments.plots.save.save_figure`. Labels are placed greedily so that
none overlaps another label or a point, each nearer its own point than any other where it
can be; a leader line joins a label set further away, or nearer another point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox
from tpsim.experiments.plots.save import save_figure

FONT = 10
FRONT_COLOUR = "#0072B2"  # blue (Okabe-Ito)
OTHER_COLOUR = "#999999"  # grey
BEST_COLOUR = "#D55E00"  # vermillion
LOG_SPAN = 4.0  # an axis whose values span more than this factor is drawn logarithmic
LEADER_PX = 20  # a label further from its point than this is joined to it by a line
CLEAR_PX = 6  # ... as is one not this much nearer its point than any other point


@dataclass(frozen=True)
class ParetoPoint:
    """One point of the plot: x (seconds), y (tokens/s per GPU), its label."""

    x: float
    y: float
    label: str
    best: bool = False


def pareto_front(points: Sequence[ParetoPoint]) -> list[ParetoPoint]:
    """The points no other beats on both axes (lower x, higher y), by increasing x."""
    front: list[ParetoPoint] = []
    for p in sorted(points, key=lambda p: (p.x, -p.y, p.label)):
        if not front or p.y > front[-1].y:
            front.append(p)
    return front


def _overlaps(box: Bbox, taken: Sequence[Bbox]) -> bool:
    return any(box.overlaps(t) for t in taken)


def _gap(box: Bbox, x: float, y: float) -> float:
    """Pixels from (x, y) to the nearest point of ``box`` (0 inside it)."""
    return math.hypot(min(max(x, box.x0), box.x1) - x, min(max(y, box.y0), box.y1) - y)


def _own(box: Bbox, i: int, centres: Sequence[tuple[float, float]]) -> bool:
    """Whether the label ``box`` of point ``i`` is plainly nearer that point than any other
    (by :data:`CLEAR_PX`), so that a reader pairs them without a line."""
    mine = _gap(box, *centres[i])
    return all(mine + CLEAR_PX <= _gap(box, *c) for j, c in enumerate(centres) if j != i)


def place_labels(fig: Figure, ax: object, points: Sequence[ParetoPoint]) -> list[Bbox]:
    """Write each point's label where it overlaps no label, no point and stays inside the
    axes: candidate offsets around the point, nearer first; returns the labels' boxes."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # the legend and the axes at their final places
    renderer = canvas.get_renderer()
    axes_box = ax.get_window_extent(renderer)  # type: ignore[attr-defined]
    to_px = ax.transData  # type: ignore[attr-defined]
    marks = []
    centres = [tuple(to_px.transform((p.x, p.y))) for p in points]
    for p, (cx, cy) in zip(points, centres, strict=True):
        r = 12 if p.best else 5  # the ring around the recommended one is larger
        marks.append(Bbox.from_extents(cx - r, cy - r, cx + r, cy + r))
    taken: list[Bbox] = list(marks)
    legend = ax.get_legend()  # type: ignore[attr-defined]
    if legend is not None:
        taken.append(legend.get_window_extent(renderer))
    order = sorted(range(len(points)), key=lambda i: (not points[i].best, points[i].x))
    for i in order:
        p = points[i]
        cx, cy = to_px.transform((p.x, p.y))
        text = ax.annotate(  # type: ignore[attr-defined]
            p.label, (p.x, p.y), xytext=(0, 0), textcoords="offset pixels",
            fontsize=FONT - 1, fontweight="bold" if p.best else "normal",
            color=BEST_COLOUR if p.best else "black",
        )  # fmt: skip
        box = text.get_window_extent(renderer)
        w, h = box.width, box.height
        free: list[Bbox] = []  # places that overlap nothing, nearer first
        for dist in (8, 16, 28, 44, 64, 90, 120, 160):
            for ang in range(0, 360, 30):
                dx = dist * math.cos(math.radians(ang))
                dy = dist * math.sin(math.radians(ang))
                # the label's near corner at the offset (centred straight above or below)
                x0 = cx - w / 2 if abs(dx) < 1e-6 else cx + dx - (w if dx < 0 else 0)
                y0 = cy + dy - (h if dy < -1e-6 else 0)
                cand = Bbox.from_bounds(x0, y0, w, h)
                inside = axes_box.containsx(x0) and axes_box.containsx(x0 + w)
                inside = inside and axes_box.containsy(y0) and axes_box.containsy(y0 + h)
                if inside and not _overlaps(cand, taken):
                    free.append(cand)
        # the nearest free place beside the point that reads as its own, else the nearest
        # (joined by a line)
        owned = [c for c in free if _gap(c, cx, cy) <= LEADER_PX and _own(c, i, centres)]
        chosen = owned[0] if owned else free[0] if free else None
        if chosen is None:  # no room anywhere near: the first ring, above the point
            chosen = Bbox.from_bounds(cx + 8, cy + 8, w, h)
        text.xyann = (chosen.x0 - cx, chosen.y0 - cy)
        text.set_horizontalalignment("left")
        text.set_verticalalignment("bottom")
        nx_ = min(max(cx, chosen.x0), chosen.x1)  # the label's nearest point to the mark
        ny_ = min(max(cy, chosen.y0), chosen.y1)
        far = math.hypot(nx_ - cx, ny_ - cy) > LEADER_PX
        if far or not _own(chosen, i, centres):  # a leader line to the label
            end = to_px.inverted().transform((nx_, ny_))
            ax.plot(  # type: ignore[attr-defined]
                [p.x, end[0]], [p.y, end[1]], color="#BBBBBB", linewidth=0.6, zorder=1
            )
        taken.append(chosen)
    return taken[len(marks) + (legend is not None) :]


def pareto_plot(
    points: Sequence[ParetoPoint],
    path: str | Path,
    *,
    title: str,
    xlabel: str = "TPOT, decode step (ms)",
    ylabel: str = "tokens/s per GPU",
    slo_x: float | None = None,
) -> Path:
    """Every layout a point (x in seconds, drawn in ms), the Pareto front joined, the
    recommended one marked; axes logarithmic where the values span more than LOG_SPAN."""
    fig = draw_pareto(points, title=title, xlabel=xlabel, ylabel=ylabel, slo_x=slo_x)
    out = Path(path)
    save_figure(fig, out)
    return out


def draw_pareto(
    points: Sequence[ParetoPoint],
    *,
    title: str,
    xlabel: str = "TPOT, decode step (ms)",
    ylabel: str = "tokens/s per GPU",
    slo_x: float | None = None,
) -> Figure:
    """:func:`pareto_plot`'s figure, not saved."""
    fig = Figure(figsize=(10, 6.5), dpi=110)
    ax = fig.subplots()
    front = pareto_front(points)
    on_front = {id(p) for p in front}
    scaled = [ParetoPoint(p.x * 1e3, p.y, p.label, p.best) for p in points]
    xs = [p.x for p in scaled] + ([slo_x * 1e3] if slo_x is not None else [])
    ys = [p.y for p in scaled]
    if min(xs) > 0 and max(xs) / min(xs) > LOG_SPAN:
        ax.set_xscale("log")
    if min(ys) > 0 and max(ys) / min(ys) > LOG_SPAN:
        ax.set_yscale("log")
    ax.plot(
        [p.x * 1e3 for p in front], [p.y for p in front], "-", color=FRONT_COLOUR,
        linewidth=1.5, label="Pareto front (no layout is faster and cheaper)", zorder=2,
    )  # fmt: skip
    others = [s for s, p in zip(scaled, points, strict=True) if id(p) not in on_front]
    ax.scatter([p.x for p in others], [p.y for p in others], color=OTHER_COLOUR, s=28,
               label="dominated layout", zorder=3)  # fmt: skip
    ax.scatter([p.x * 1e3 for p in front], [p.y for p in front], color=FRONT_COLOUR, s=36,
               label="layout on the front", zorder=3)  # fmt: skip
    if slo_x is not None:
        ax.axvline(slo_x * 1e3, color=BEST_COLOUR, linestyle="--", linewidth=1,
                   label=f"TPOT SLO {slo_x * 1e3:g} ms", zorder=1)  # fmt: skip
    best = [p for p in scaled if p.best]
    if best:
        ax.scatter([p.x for p in best], [p.y for p in best], s=220, facecolors="none",
                   edgecolors=BEST_COLOUR, linewidths=2, label="recommended", zorder=4)  # fmt: skip
    # room for the labels: pad the data range by a share of its (log) span
    for axis, vals in (("x", xs), ("y", ys)):
        lo, hi = min(vals), max(vals)
        log = (ax.get_xscale() if axis == "x" else ax.get_yscale()) == "log"
        if log:
            f = (hi / lo) ** 0.12 if hi > lo else 1.5
            lim = (lo / f, hi * f * (1.6 if axis == "x" else 1.3))
        else:
            pad = (hi - lo) * 0.15 or abs(hi) * 0.2 or 1.0
            lim = (
                max(0.0, lo - pad) if lo >= 0 else lo - pad,
                hi + pad * (2 if axis == "x" else 1.4),
            )
        (ax.set_xlim if axis == "x" else ax.set_ylim)(*lim)
    ax.set_xlabel(xlabel, fontsize=FONT + 1)
    ax.set_ylabel(ylabel, fontsize=FONT + 1)
    ax.set_title(title, fontsize=FONT + 1)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=FONT - 1, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=4)
    fig.tight_layout()
    place_labels(fig, ax, scaled)
    return fig


__all__ = ["ParetoPoint", "draw_pareto", "pareto_front", "pareto_plot", "place_labels"]
