"""Plots computed from the record list: the per-GPU Gantt chart.

Figures are drawn on a bare ``matplotlib.figure.Figure``: no pyplot, no global backend
switch, no figure registry to leak into; ``savefig`` renders PNG with Agg and SVG with the
SVG backend. Files are written atomically; the same records give the same PNG/SVG bytes.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from matplotlib import rc_context
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import blended_transform_factory
from tpsim.core.records import Record
from tpsim.core.schedule import NET_STEP
from tpsim.experiments.plots.gantt_view import (
    GanttView,
    Layers,
    gantt_view,
)
from tpsim.experiments.plots.style import (
    BAR_NAME_PT,
    CRITICAL_COLOUR,
    DARK_KINDS,
    KIND_COLOURS,
    LABEL_PT,
    MIN_FONT_PT,
    OTHER_COLOUR,
    TICK_PT,
    TITLE_PT,
)
from tpsim.outputs.export import atomic_output, write_text

#: Bar colour per record kind: the palette every chart shares (:mod:`.style`).
KIND_COLORS: dict[str, str] = KIND_COLOURS
NET_KIND = "collective (network)"  # collective steps over the network get their own colour
A2A_KIND = "all-to-all"  # MoE dispatch and combine inside a host: their own colour too
OTHER_COLOR = OTHER_COLOUR

#: Rows of one rank, top to bottom, with their y-axis labels.
ROWS: tuple[tuple[str, str], ...] = (("cpu", "CPU"), ("compute", "compute"), ("comm", "comm"))

MAX_LAYER_LINES = 40  # draw layer boundaries only when fewer layers are visible
DENSE_BARS_PER_ROW = 300  # above this many bars per row (on average), drop the bar edges
RAIL = 0.15  # height of the critical-path rail under a bar (a row is 1)
LABEL_GAP_PX = 22  # layer labels closer than this to the previous one are left out
MAX_BAR_NAMES = 600  # op names written on bars at most (the rest: zoom in, or the SVG's tooltips)
MAX_SVG_TOOLTIPS = 20_000  # bars given a hover tooltip in an SVG at most
FORMATS = {".png": "png", ".svg": "svg"}
#: The figure: 12 inches wide at 150 dpi (1800 px), for a 16:9 slide; a row 0.42 inches.
WIDTH_IN, DPI, ROW_IN = 12.0, 150, 0.42
GAP_PAD_PX = 28  # room either side of the collapsed gap's words


def _time_unit(span_s: float) -> tuple[float, str]:
    return (1e6, "µs") if span_s < 2e-3 else (1e3, "ms")


def _layer_starts(records: Sequence[Record], rank: int, t0: float, t1: float) -> dict[int, float]:
    """Earliest start of each layer's compute records on ``rank`` inside [t0, t1]."""
    starts: dict[int, float] = {}
    for r in records:
        if r.rank == rank and r.stream == "compute" and r.start_s < starts.get(r.layer, 1e300):
            starts[r.layer] = r.start_s
    return {layer: t for layer, t in sorted(starts.items()) if t0 <= t <= t1}


@lru_cache(maxsize=4096)
def text_px(text: str, size_pt: float, dpi: float = DPI) -> float:
    """Width in pixels of ``text`` at ``size_pt`` as Agg draws it (deterministic)."""
    renderer = RendererAgg(1, 1, dpi)
    width, _, _ = renderer.get_text_width_height_descent(
        text, FontProperties(size=size_pt), ismath=False
    )
    return float(width)


@dataclass(frozen=True)
class _Axis:
    """Time (seconds) to the x axis: scaled to the unit, the collapsed stretch squeezed into
    a gap of ``gap_w`` axis units."""

    t0: float
    scale: float
    gap: tuple[float, float] | None
    gap_w: float

    def x(self, t: float) -> float:
        if self.gap is None or t <= self.gap[0]:
            return (t - self.t0) * self.scale
        g0, g1 = self.gap
        if t >= g1:
            return (g0 - self.t0) * self.scale + self.gap_w + (t - g1) * self.scale
        return (g0 - self.t0) * self.scale + self.gap_w * (t - g0) / (g1 - g0)

    def pieces(self, s: float, e: float) -> list[tuple[float, float]]:
        """The visible parts of [s, e] as (x, width): none inside the gap."""
        if self.gap is None:
            return [(self.x(s), max(e - s, 0.0) * self.scale)]
        g0, g1 = self.gap
        out = []
        if s < g0 or (s == e == g0):
            out.append((self.x(s), (min(e, g0) - s) * self.scale))
        if e > g1:
            lo = max(s, g1)
            out.append((self.x(lo), (e - lo) * self.scale))
        return out


def _ticks(segments: Sequence[tuple[float, float]], total: float) -> list[float]:
    """Tick positions (axis units) at round times inside each visible segment (unit times)."""
    out: list[float] = []
    for lo, hi in segments:
        n = max(2, round(8 * (hi - lo) / total))
        for v in MaxNLocator(nbins=n, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi):
            if lo - 1e-9 * abs(hi) <= v <= hi + 1e-9 * abs(hi):
                out.append(float(v))
    return out


def _fmt(v: float) -> str:
    return f"{round(v, 6):g}"


def gantt(
    records: Sequence[Record],
    path: str | Path,
    *,
    title: str = "",
    ranks: Sequence[int] | None = None,
    layers: Layers = None,
    critical: Collection[int] = (),
    rank_labels: Mapping[int, str] | None = None,
) -> None:
    """Draw a per-GPU Gantt chart (CPU launch, compute and comm rows per rank) to PNG or SVG.

    By default the step is shown with the layers between the first and the last collapsed
    into one marked gap (the embedding, the first layer, "… layers 1–78 …", the last layer
    and the head); ``layers="all"`` draws the whole step; ``layers=(a, b)`` zooms the time
    axis to the compute/comm records of layers a..b inclusive (their launches only when the
    layers have no GPU records);
    ``ranks`` picks the ranks drawn (default: all up to 8, else 0, 1 and the last);
    records whose id is in ``critical`` are underlined by a black rail; op names are
    written on bars wide enough to hold them, and an SVG gives every bar a hover tooltip
    (name, detail, bytes, start, duration). The figure is sized for a slide (12 inches wide,
    no text under 9 pt). The file is written atomically; the same input gives the same bytes.
    """
    _format(path)  # refuse a bad suffix before drawing
    chart = gantt_figure(
        records, title=title, ranks=ranks, layers=layers, critical=critical, rank_labels=rank_labels
    )
    if _format(path) == "svg":
        _save_svg_with_tooltips(chart, path)
    else:
        save_figure(chart.fig, path)


@dataclass(frozen=True)
class GanttChart:
    """A drawn Gantt: the figure, its axes, and each bar drawn (record, row, (x, width))."""

    fig: Figure
    ax: Any
    bars: tuple[tuple[Record, int, tuple[float, float]], ...]
    height: float
    view: GanttView | None = None


def _wrap(text: str, size_pt: float, width_px: float) -> str:
    """``text``'s lines wrapped at word boundaries to fit ``width_px``."""
    out = []
    for line in text.split("\n"):
        words, cur = line.split(" "), ""
        for w in words:
            cand = f"{cur} {w}" if cur else w
            if cur and text_px(cand, size_pt) > width_px:
                out.append(cur)
                cur = w
            else:
                cur = cand
        out.append(cur)
    return "\n".join(out)


def gantt_figure(
    records: Sequence[Record],
    *,
    title: str = "",
    ranks: Sequence[int] | None = None,
    layers: Layers = None,
    critical: Collection[int] = (),
    rank_labels: Mapping[int, str] | None = None,
    lane_titles: Mapping[int, str] | None = None,
) -> GanttChart:
    """The Gantt chart of :func:`gantt`, drawn but not saved. ``lane_titles`` replaces the
    "GPU r (label)" name of a rank's rows (a comparison names its configurations)."""

    view = gantt_view(records, ranks=ranks, layers=layers)
    labels = rank_labels or {}
    crit = frozenset(critical)
    t0, t1 = view.t0_s, view.t1_s
    gap = view.gap_s
    visible = max((t1 - t0) - (gap[1] - gap[0] if gap else 0.0), 1e-12)
    scale, unit = _time_unit(visible)

    # y position of each (rank, stream) row; a blank row separates rank groups.
    group = len(ROWS) + 1
    row_y = {
        (rank, stream): g * group + j
        for g, rank in enumerate(view.ranks)
        for j, (stream, _) in enumerate(ROWS)
    }
    n_rows = len(view.ranks) * group - 1
    lane_names = {
        rank: (lane_titles or {}).get(
            rank, f"GPU {rank}{f' ({labels[rank]})' if rank in labels else ''}"
        )
        for rank in view.ranks
    }
    lane_labels = {
        y: f"{lane_names[rank]} · {dict(ROWS)[stream]}" for (rank, stream), y in row_y.items()
    }

    # Layout in inches, from measured text: lane names on the left, the title and the layer
    # labels above, the time axis and a legend row below.
    left_in = max(text_px(t, LABEL_PT) for t in lane_labels.values()) / DPI + 0.3
    right_in = 0.3
    # the title is centred over the axes, so it has the axes' width and twice the right
    # margin (the narrower side) to itself, not the figure's
    title_px = (WIDTH_IN - left_in + right_in) * DPI - 40
    full_title = "; ".join(s for s in (title, view.note) if s)
    full_title = _wrap(full_title, TITLE_PT, title_px) if full_title else ""
    title_lines = full_title.count("\n") + 1 if full_title else 0
    top_in = 0.2 + LABEL_PT * 1.9 / 72 + title_lines * TITLE_PT * 1.35 / 72
    legend_rows = 1
    bottom_in = 0.25 + (TICK_PT + LABEL_PT) * 1.6 / 72
    rows_in = ROW_IN * (n_rows + 0.6)
    axes_px = (WIDTH_IN - left_in - right_in) * DPI

    gap_words = ""
    gap_w = 0.0
    if gap is not None and view.gap_layers is not None:
        a, b = view.gap_layers
        gap_scale, gap_unit = _time_unit(gap[1] - gap[0])
        span = float(f"{(gap[1] - gap[0]) * gap_scale:.4g}")
        gap_words = f"… layers {a}–{b} …\n{_fmt(span)} {gap_unit} collapsed"
        words_px = max(text_px(w, LABEL_PT) for w in gap_words.split("\n")) + 2 * GAP_PAD_PX
        gap_w = visible * scale * words_px / (axes_px - words_px)
    axis = _Axis(t0, scale, gap, gap_w)

    bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    outlines: dict[int, list[tuple[float, float]]] = defaultdict(list)
    kinds_seen: set[str] = set()
    shown: list[tuple[Record, int, tuple[float, float]]] = []
    for r in records:
        row = row_y.get((r.rank, "comm" if r.stream == "p2p" else r.stream))  # sends: comm row
        if row is None or r.end_s < t0 or r.start_s > t1:
            continue
        kind = r.kind
        if kind == "collective" and r.detail.endswith(NET_STEP):
            kind = NET_KIND
        elif kind == "collective" and "all_to_all" in r.name:
            kind = A2A_KIND
        for xy in axis.pieces(r.start_s, r.end_s):
            bars[(row, KIND_COLORS.get(kind, OTHER_COLOR))].append(xy)
            kinds_seen.add(kind)
            shown.append((r, row, xy))
            if r.id in crit:
                outlines[row].append(xy)

    # legend entries, and whether they need a second row
    entries = [(kind, color) for kind, color in KIND_COLORS.items() if kind in kinds_seen]
    if kinds_seen - KIND_COLORS.keys():
        entries.append(("other", OTHER_COLOR))
    if outlines:
        entries.append(("critical path", CRITICAL_COLOUR))
    legend_px = sum(text_px(k, LABEL_PT) + 2.6 * LABEL_PT * DPI / 72 for k, _ in entries)
    if legend_px > WIDTH_IN * DPI - 40:
        legend_rows = 2
    bottom_in += legend_rows * LABEL_PT * 1.7 / 72 + 0.1
    height_in = top_in + rows_in + bottom_in

    fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)
    ax = fig.add_axes(
        (
            left_in / WIDTH_IN,
            bottom_in / height_in,
            (WIDTH_IN - left_in - right_in) / WIDTH_IN,
            rows_in / height_in,
        )
    )
    height = 0.8
    # Thin white edges keep back-to-back bars of one colour apart, unless bars are so
    # dense that the edges would wash them out.
    dense = sum(map(len, bars.values())) > DENSE_BARS_PER_ROW * len(row_y)
    edge = {"linewidth": 0} if dense else {"edgecolors": "white", "linewidth": 0.5}
    for (y, color), xs in sorted(bars.items()):
        ax.broken_barh(xs, (y - height / 2, height), facecolors=color, **edge)
    # The critical path is a black rail along the foot of its bars: outlines would paint
    # narrow or back-to-back bars (a full pass, PCIe collectives) solid black.
    for y, xs in sorted(outlines.items()):
        ax.broken_barh(xs, (y + height / 2 - RAIL, RAIL), facecolors=CRITICAL_COLOUR, linewidth=0)

    ticks = sorted(lane_labels.items())
    ax.set_yticks([y for y, _ in ticks])
    ax.set_yticklabels([t for _, t in ticks], fontsize=LABEL_PT)
    for g in range(1, len(view.ranks)):
        ax.axhline(g * group - 1, color="#cccccc", linewidth=0.8)
    ax.set_ylim(n_rows - 0.4, -0.6)  # GPU 0 on top
    x_end = axis.x(t1)
    pad = 0.01 * x_end
    x_lo, x_hi = -pad, x_end + pad
    ax.set_xlim(x_lo, x_hi)
    ax.set_xlabel(f"time ({unit})", fontsize=LABEL_PT)
    # round times as ticks, in each visible stretch; the gap keeps none
    segments = (
        [(t0 * scale, gap[0] * scale), (gap[1] * scale, t1 * scale)]
        if gap is not None
        else [(t0 * scale, t1 * scale)]
    )
    values = _ticks(segments, visible * scale)
    ax.set_xticks([axis.x(v / scale) for v in values])
    ax.set_xticklabels([_fmt(v) for v in values], fontsize=TICK_PT)
    ax.tick_params(axis="y", labelsize=LABEL_PT)
    ax.grid(axis="x", color="#eeeeee", linewidth=0.6)
    ax.set_axisbelow(True)

    per_px = (x_hi - x_lo) / axes_px  # axis units per pixel
    if gap is not None:
        gx0, gx1 = axis.x(gap[0]), axis.x(gap[1])
        ax.axvspan(gx0, gx1, facecolor="#f2f2f2", edgecolor="none", zorder=0)
        for gx in (gx0, gx1):
            ax.axvline(gx, color="#777777", linewidth=1.0, linestyle=(0, (4, 3)), zorder=1)
        ax.text(
            (gx0 + gx1) / 2,
            (len(ROWS) - 1) / 2,  # beside the first rank's rows, clear of the separators
            gap_words,
            fontsize=LABEL_PT,
            color="#333333",
            ha="center",
            va="center",
            linespacing=1.4,
        )
    _bar_names(ax, shown, per_px, height)
    for rank in view.ranks:  # a CPU row with nothing in the window says why
        y = row_y[(rank, "cpu")]
        if not any(row == y for _, row, _ in shown):
            ax.text(
                x_lo + 4 * per_px,
                y,
                "no host work in this window (the CPU ran ahead: launches or a CUDA graph "
                "replay happen before it)",
                fontsize=MIN_FONT_PT,
                color="#666666",
                va="center",
                clip_on=True,
            )

    boundaries = _layer_starts(records, 0 if 0 in view.ranks else view.ranks[0], t0, t1)
    if gap is not None:
        boundaries = {k: t for k, t in boundaries.items() if not gap[0] <= t < gap[1]}
    if lane_titles:  # a comparison: each run has its own layer times, mark none
        boundaries = {}
    heads = {r.layer for r in records if r.name == "lm_head"}
    if 0 < len(boundaries) < MAX_LAYER_LINES:
        top = blended_transform_factory(ax.transData, ax.transAxes)
        # Right to left, so a layer's label wins over the embedding's just before it.
        next_label = math.inf
        for layer, t in sorted(boundaries.items(), reverse=True):
            x = axis.x(t)
            ax.axvline(x, color="#888888", linewidth=0.6, linestyle=":", zorder=0)
            text = "emb" if layer < 0 else "head" if layer in heads else f"L{layer}"
            width = max(LABEL_GAP_PX, text_px(text, LABEL_PT) + 8)
            if (next_label - x) / per_px < width:
                continue  # it would touch the label after it: the line alone marks it
            next_label = x
            ax.text(
                x,
                1.01,
                text,
                transform=top,
                fontsize=LABEL_PT,
                color="#555555",
                ha="left",
                va="bottom",
            )

    handles = [Patch(facecolor=color, label=kind) for kind, color in entries]
    ax.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.0),
        bbox_transform=fig.transFigure,
        ncol=math.ceil(len(handles) / legend_rows),
        fontsize=LABEL_PT,
        frameon=False,
        handlelength=1.4,
        columnspacing=1.2,
    )
    if full_title:
        ax.set_title(full_title, fontsize=TITLE_PT, pad=LABEL_PT * 1.9, linespacing=1.3)

    return GanttChart(fig, ax, tuple(shown), height, view)


def _bar_names(
    ax: Any, shown: Sequence[tuple[Record, int, tuple[float, float]]], per_px: float, height: float
) -> None:
    """Write each op's name inside its bar where the bar holds it, as Agg measures it."""
    written = 0
    for r, y, (x, w) in shown:
        if r.kind in ("launch", "dispatch") or w / per_px < text_px(r.name, BAR_NAME_PT) + 4:
            continue
        ax.text(
            x + w / 2,
            y,
            r.name,
            fontsize=BAR_NAME_PT,
            color="white" if r.kind in DARK_KINDS else "black",
            ha="center",
            va="center",
            clip_on=True,
        )
        written += 1
        if written >= MAX_BAR_NAMES:
            break


def _save_svg_with_tooltips(chart: GanttChart, path: str | Path) -> None:
    """SVG with a hover tooltip (``<title>``) on every bar: name, detail, bytes, start and
    duration. Transparent hit boxes carry the ids; their titles are added to the SVG text."""
    fig, ax, height = chart.fig, chart.ax, chart.height
    tips = {}
    for r, y, (x, w) in chart.bars[:MAX_SVG_TOOLTIPS]:
        gid = f"tpsim-rec-{r.id}"
        box = Rectangle((x, y - height / 2), w, height, facecolor="black", alpha=0.0, linewidth=0)
        box.set_gid(gid)
        ax.add_patch(box)
        tips[gid] = (
            f"{r.name}: {r.detail or r.kind}; {r.bytes:,} B; start {r.start_s * 1e6:,.2f} us; "
            f"duration {(r.end_s - r.start_s) * 1e6:,.2f} us"
        )
    buf = io.StringIO()
    with rc_context({"svg.hashsalt": "tpsim", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    fig.clear()
    text = re.sub(
        r'<g id="(tpsim-rec-\d+)">',
        lambda m: f'<g id="{m.group(1)}"><title>{html.escape(tips[m.group(1)])}</title>',
        buf.getvalue(),
    )
    write_text(path, text)


def _format(path: str | Path) -> str:
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise ValueError(f"plot path {str(path)!r}: must end in .png or .svg")
    return fmt


def save_figure(fig: Figure, path: str | Path) -> None:
    """Write ``fig`` to ``path`` (.png or .svg) atomically, without volatile metadata, so
    the same figure gives the same bytes; then clear it."""
    fmt = _format(path)
    with rc_context({"svg.hashsalt": "tpsim"}), atomic_output(path) as tmp:
        metadata = {"Software": None} if fmt == "png" else {"Date": None}
        fig.savefig(tmp, format=fmt, metadata=metadata)
    fig.clear()


def gantt_compare(
    runs: Sequence[tuple[str, Sequence[Record], Collection[int]]],
    path: str | Path,
    *,
    title: str = "",
    layers: Layers = None,
) -> None:
    """Several runs' GPU 0 timelines one above the other on one time axis (``compare
    --gantt``): each run is (label, records, critical path ids)."""
    _format(path)
    merged: list[Record] = []
    critical: set[int] = set()
    stride = 1 + max((r.id for _, recs, _ in runs for r in recs), default=0)
    for i, (_, recs, crit) in enumerate(runs):
        first = min(r.rank for r in recs)
        for r in recs:
            if r.rank == first:
                cause = r.cause + i * stride if r.cause >= 0 else -1
                merged.append(r._replace(id=r.id + i * stride, rank=i, cause=cause))
        critical.update(c + i * stride for c in crit)
    chart = gantt_figure(
        merged,
        title=title,
        ranks=list(range(len(runs))),
        layers=layers,
        critical=critical,
        lane_titles={i: label for i, (label, _, _) in enumerate(runs)},
    )
    if _format(path) == "svg":
        _save_svg_with_tooltips(chart, path)
    else:
        save_figure(chart.fig, path)
