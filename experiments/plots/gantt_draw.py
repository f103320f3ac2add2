"""The per-GPU Gantt chart drawn from the record list (CPU launch, compute and comm rows per
rank): its layout measured from its text, the bars in the shared palette, the critical-path
rail, the collapsed gap, the ticks and the legend.

Figures are drawn on a bare ``matplotlib.figure.Figure``: no pyplot, no global backend
switch, no figure registry to leak into. Saving is :mod:`.gantt`'s (and :mod:`.save`'s).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch
from tpsim.core.records import Record
from tpsim.core.schedule import NET_STEP
from tpsim.experiments.plots.gantt_axis import GanttTimeAxis, round_ticks, tick_text, time_unit
from tpsim.experiments.plots.gantt_text import DPI, bar_names, layer_labels, text_px, wrap
from tpsim.experiments.plots.gantt_view import GanttView, Layers, gantt_view
from tpsim.experiments.plots.style import (
    CRITICAL_COLOUR,
    KIND_COLOURS,
    LABEL_PT,
    MIN_FONT_PT,
    OTHER_COLOUR,
    TICK_PT,
    TITLE_PT,
)
from tpsim.outputs.export import shown_stream

#: Bar colour per record kind: the palette every chart shares (:mod:`.style`).
KIND_COLORS: dict[str, str] = KIND_COLOURS
NET_KIND = "collective (network)"  # collective steps over the network get their own colour
A2A_KIND = "all-to-all"  # MoE dispatch and combine inside a host: their own colour too
OTHER_COLOR = OTHER_COLOUR


def bar_kind(r: Record) -> str:
    """The kind a record's bar is coloured and named by (the legend's), in the PNG and the
    report alike: its kind, a collective's step over the network or a MoE all-to-all's
    step inside a host apart."""
    if r.kind == "collective" and r.detail.endswith(NET_STEP):
        return NET_KIND
    if r.kind == "collective" and "all_to_all" in r.name:
        return A2A_KIND
    return r.kind


#: Rows of one rank, top to bottom, with their y-axis labels.
ROWS: tuple[tuple[str, str], ...] = (("cpu", "CPU"), ("compute", "compute"), ("comm", "comm"))
#: A pipeline's point-to-point sends and receives: a row of their own under comm when the
#: window holds any (on the comm row, a collective running beside a send hid it). A
#: receive runs on the comm stream but is drawn here (:func:`tpsim.outputs.export.shown_stream`).
P2P_ROW = ("p2p", "p2p")

#: The narrowest a bar is drawn, in pixels (its time is kept in the trace and the hover).
MIN_BAR_PX = 2.0
DENSE_BARS_PER_ROW = 300  # above this many bars per row (on average), drop the bar edges
RAIL = 0.15  # height of the critical-path rail under a bar (a row is 1)
#: The figure: 12 inches wide at 150 dpi (1800 px, :data:`.gantt_text.DPI`), for a 16:9
#: slide; a row 0.42 inches.
WIDTH_IN, ROW_IN = 12.0, 0.42
GAP_PAD_PX = 28  # room either side of the collapsed gap's words


@dataclass(frozen=True)
class GanttChart:
    """A drawn Gantt: the figure, its axes, and each bar drawn (record, row, (x, width))."""

    fig: Figure
    ax: Any
    bars: tuple[tuple[Record, int, tuple[float, float]], ...]
    height: float
    view: GanttView | None = None


def gantt_figure(
    records: Sequence[Record],
    *,
    title: str = "",
    ranks: Sequence[int] | None = None,
    layers: Layers = None,
    critical: Collection[int] = (),
    rank_labels: Mapping[int, str] | None = None,
    lane_titles: Mapping[int, str] | None = None,
    view: GanttView | None = None,
    runs: Mapping[int, int] | None = None,
) -> GanttChart:
    """The Gantt chart of :func:`gantt`, drawn but not saved. ``lane_titles`` replaces the
    "GPU r (label)" name of a rank's rows (a comparison names its configurations); ``view``,
    where given, is what to show (:func:`.gantt_lanes.align_lanes`'s), else
    :func:`.gantt_view.gantt_view` chooses it from ``ranks`` and ``layers``. ``runs`` gives
    the run of each rank (a comparison's lanes; default: one run): the ranks of a run whose
    window holds point-to-point records get a p2p row, the others none."""

    view = view or gantt_view(records, ranks=ranks, layers=layers, critical=critical)
    labels = rank_labels or {}
    crit = frozenset(critical)
    t0, t1 = view.t0_s, view.t1_s
    gap = view.gap_s
    visible = max((t1 - t0) - (gap[1] - gap[0] if gap else 0.0), 1e-12)
    scale, unit = time_unit(visible)

    # y position of each (rank, stream) row; a blank row separates rank groups. A run's
    # ranks get a p2p row when its window holds a send or receive (a comparison's plain TP
    # configuration none beside a pipeline's).
    run_of = {rank: (runs or {}).get(rank, 0) for rank in view.ranks}
    sending = {
        run_of[r.rank]
        for r in records
        if shown_stream(r) == "p2p" and r.rank in run_of and r.end_s >= t0 and r.start_s <= t1
    }
    rank_rows = {rank: (*ROWS, P2P_ROW) if run_of[rank] in sending else ROWS for rank in run_of}
    row_y: dict[tuple[int, str], int] = {}
    tops: list[int] = []  # each rank group's first row
    for rank in view.ranks:
        tops.append(len(row_y) + len(tops))
        row_y.update({(rank, s): tops[-1] + j for j, (s, _) in enumerate(rank_rows[rank])})
    n_rows = len(row_y) + len(tops) - 1
    lane_names = {
        rank: (lane_titles or {}).get(
            rank, f"GPU {rank}{f' ({labels[rank]})' if rank in labels else ''}"
        )
        for rank in view.ranks
    }
    lane_labels = {
        y: f"{lane_names[rank]} · {dict(rank_rows[rank])[stream]}"
        for (rank, stream), y in row_y.items()
    }

    # Layout in inches, from measured text: lane names on the left, the title and the layer
    # labels above, the time axis and a legend row below.
    left_in = max(text_px(t, LABEL_PT) for t in lane_labels.values()) / DPI + 0.3
    right_in = 0.3
    # the title is centred over the axes, so it has the axes' width and twice the right
    # margin (the narrower side) to itself, not the figure's
    title_px = (WIDTH_IN - left_in + right_in) * DPI - 40
    full_title = "; ".join(s for s in (title, view.note) if s)
    full_title = wrap(full_title, TITLE_PT, title_px) if full_title else ""
    title_lines = full_title.count("\n") + 1 if full_title else 0
    top_in = 0.2 + LABEL_PT * 1.9 / 72 + title_lines * TITLE_PT * 1.35 / 72
    legend_rows = 1
    bottom_in = 0.25 + (TICK_PT + LABEL_PT) * 1.6 / 72
    rows_in = ROW_IN * (n_rows + 0.6)
    axes_px = (WIDTH_IN - left_in - right_in) * DPI

    gap_words = ""
    lane_words: dict[int, str] = {}
    gap_w = 0.0
    if gap is not None and view.gap_layers is not None:
        a, b = view.gap_layers
        gap_scale, gap_unit = time_unit(gap[1] - gap[0])
        span = float(f"{(gap[1] - gap[0]) * gap_scale:.4g}")
        gap_words = f"… layers {a}–{b} …\n{tick_text(span)} {gap_unit} collapsed"
        lane_words = {r: f"… layers {x}–{y} …" for r, x, y in view.gap_layers_by_rank}
        if lane_words:  # runs of different speeds: each lane hides its own layers
            gap_words = f"{tick_text(span)} {gap_unit} collapsed"
        if view.hidden_s_by_rank:  # lanes moved to hide the same layers, each its own time
            lane_words = {
                r: f"… layers {a}–{b}: {tick_text(float(f'{h * gap_scale:.4g}'))} {gap_unit} …"
                for r, h in view.hidden_s_by_rank
            }
            gap_words = "each configuration's own time"
        lines = [*gap_words.split("\n"), *lane_words.values()]
        words_px = max(text_px(w, LABEL_PT) for w in lines) + 2 * GAP_PAD_PX
        gap_w = visible * scale * words_px / (axes_px - words_px)
    axis = GanttTimeAxis(t0, scale, gap, gap_w)

    bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    outlines: dict[int, list[tuple[float, float]]] = defaultdict(list)
    kinds_seen: set[str] = set()
    shown: list[tuple[Record, int, tuple[float, float]]] = []
    for r in records:
        row = row_y.get((r.rank, shown_stream(r)))
        if row is None or r.end_s < t0 or r.start_s > t1:
            continue
        kind = bar_kind(r)
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
    # a bar narrower than MIN_BAR_PX (a 15 us send in a 20 ms step) is drawn that wide, or
    # it vanishes, or its white edge paints it out: a row that holds work never looks empty.
    # It widens only into the free time after it: widened over the bar that follows, a run
    # of tiny bars (eager dispatch gaps, a collective's steps) painted its row their colour.
    least = MIN_BAR_PX * 1.02 * axis.x(t1) / ((WIDTH_IN - left_in - right_in) * DPI)
    starts: dict[int, list[float]] = defaultdict(list)
    for (y, _), xs in bars.items():
        starts[y].extend(x for x, _ in xs)
    for row_starts in starts.values():
        row_starts.sort()
    for (y, color), xs in sorted(bars.items()):
        xs = [(x, widened(x, w, least, starts[y])) for x, w in xs]
        ax.broken_barh(xs, (y - height / 2, height), facecolors=color, **edge)
    # The critical path is a black rail along the foot of its bars: outlines would paint
    # narrow or back-to-back bars (a full pass, PCIe collectives) solid black.
    for y, xs in sorted(outlines.items()):
        ax.broken_barh(xs, (y + height / 2 - RAIL, RAIL), facecolors=CRITICAL_COLOUR, linewidth=0)

    ticks = sorted(lane_labels.items())
    ax.set_yticks([y for y, _ in ticks])
    ax.set_yticklabels([t for _, t in ticks], fontsize=LABEL_PT)
    for top in tops[1:]:
        ax.axhline(top - 1, color="#cccccc", linewidth=0.8)
    ax.set_ylim(n_rows - 0.4, -0.6)  # GPU 0 on top
    x_end = axis.x(t1)
    pad = 0.01 * x_end
    x_lo, x_hi = -pad, x_end + pad
    ax.set_xlim(x_lo, x_hi)
    note = f"; {view.axis_note}" if view.axis_note else ""
    ax.set_xlabel(f"time ({unit}){note}", fontsize=LABEL_PT)
    # round times as ticks, in each visible stretch; the gap keeps none
    segments = (
        [(t0 * scale, gap[0] * scale), (gap[1] * scale, t1 * scale)]
        if gap is not None
        else [(t0 * scale, t1 * scale)]
    )
    if gap is not None and view.hidden_s_by_rank:  # lanes moved: after the gap, from its end
        after = gap[1] * scale
        xticks = [(v, tick_text(v)) for v in round_ticks([segments[0]], visible * scale)]
        tail = round_ticks([(0.0, t1 * scale - after)], visible * scale)
        xticks += [(after + v, f"+{tick_text(v)}") for v in tail]
    else:
        xticks = [(v, tick_text(v)) for v in round_ticks(segments, visible * scale)]
    ax.set_xticks([axis.x(v / scale) for v, _ in xticks])
    ax.set_xticklabels([text for _, text in xticks], fontsize=TICK_PT)
    ax.tick_params(axis="y", labelsize=LABEL_PT)
    ax.grid(axis="x", color="#eeeeee", linewidth=0.6)
    ax.set_axisbelow(True)

    per_px = (x_hi - x_lo) / axes_px  # axis units per pixel
    if gap is not None:
        gx0, gx1 = axis.x(gap[0]), axis.x(gap[1])
        ax.axvspan(gx0, gx1, facecolor="#f2f2f2", edgecolor="none", zorder=0)
        for gx in (gx0, gx1):
            ax.axvline(gx, color="#777777", linewidth=1.0, linestyle=(0, (4, 3)), zorder=1)
        middle = {  # each rank group's middle row
            rank: top + (len(rank_rows[rank]) - 1) / 2
            for rank, top in zip(view.ranks, tops, strict=True)
        }
        words: list[tuple[str, float]] = [(gap_words, middle[view.ranks[0]])]  # first rank
        if lane_words:  # each lane's own layers beside its rows, the span below the first
            words = [(w, middle[r] - 0.5) for r, w in lane_words.items()]
            words.append((gap_words, middle[view.ranks[0]] + 0.5))
        for text, text_y in words:
            ax.text(
                (gx0 + gx1) / 2,
                text_y,
                text,
                fontsize=LABEL_PT,
                color="#333333",
                ha="center",
                va="center",
                linespacing=1.4,
            )
    bar_names(ax, shown, per_px, height, (x_lo, x_hi))
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

    layer_labels(ax, records, view, axis, per_px, comparison=bool(lane_titles))

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


def widened(x: float, w: float, least: float, row_starts: Sequence[float]) -> float:
    """The width a bar at ``x`` of width ``w`` is drawn: at least ``least`` where the bar
    after it on its row (``row_starts``, sorted) leaves the room, else up to that bar."""
    if w >= least:
        return w
    i = bisect_right(row_starts, x)
    room = row_starts[i] - x if i < len(row_starts) else math.inf
    return max(w, min(least, room))
