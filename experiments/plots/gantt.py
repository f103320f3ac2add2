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
from pathlib import Path
from typing import Any

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.transforms import blended_transform_factory
from tpsim.core.records import Record
from tpsim.core.schedule import NET_STEP
from tpsim.outputs.export import atomic_output, write_text

#: Bar colour per record kind (Okabe–Ito palette, colour-blind friendly).
KIND_COLORS: dict[str, str] = {
    "launch": "#999999",  # grey
    "host": "#8C6D31",  # brown: engine host work (schedule, sample, Python per layer)
    "dispatch": "#CCCCCC",  # light grey: the GPU's gap before an eagerly launched kernel
    "gemm": "#0072B2",  # blue
    "attention": "#CC79A7",  # reddish purple
    "elementwise": "#009E73",  # bluish green
    "collective": "#E69F00",  # orange
    "collective (network)": "#A6361F",  # brick red: a step whose sends cross hosts
    "p2p": "#56B4E9",  # sky blue
}
NET_KIND = "collective (network)"  # collective steps over the network get their own colour
OTHER_COLOR = "#D55E00"  # vermillion, for a kind not listed above

#: Rows of one rank, top to bottom, with their y-axis labels.
ROWS: tuple[tuple[str, str], ...] = (("cpu", "CPU"), ("compute", "compute"), ("comm", "comm"))

MAX_DEFAULT_RANKS = 8  # draw every rank up to this many, else ranks 0, 1 and the last
MAX_LAYER_LINES = 40  # draw layer boundaries only when fewer layers are visible
DENSE_BARS_PER_ROW = 300  # above this many bars per row (on average), drop the bar edges
RAIL = 0.15  # height of the critical-path rail under a bar (a row is 1)
AXES_WIDTH = 0.78  # the plot area's share of the figure width (room for labels and legend)
LABEL_GAP_PX = 22  # layer labels closer than this to the previous one are left out
LABEL_PX_PER_CHAR = 8  # width of a layer label's character (7 pt at 150 dpi), with margin
NAME_PX_PER_CHAR = 4.2  # an op name fits in a bar at about this many pixels per character
MAX_BAR_NAMES = 600  # op names written on bars at most (the rest: zoom in, or the SVG's tooltips)
MAX_SVG_TOOLTIPS = 20_000  # bars given a hover tooltip in an SVG at most
DARK_KINDS = frozenset({"gemm", "host", "attention"})  # bars dark enough for white text
FORMATS = {".png": "png", ".svg": "svg"}


@dataclass(frozen=True)
class GanttView:
    """What a Gantt chart shows: which ranks, which time window (seconds), a title note."""

    ranks: tuple[int, ...]
    t0_s: float
    t1_s: float
    note: str  # "" or e.g. "showing 3 of 64 GPUs"


def gantt_view(
    records: Sequence[Record],
    *,
    ranks: Sequence[int] | None = None,
    layers: tuple[int, int] | None = None,
) -> GanttView:
    """Choose ranks and time window as :func:`gantt` does (pure; raises ValueError)."""
    all_ranks = sorted({r.rank for r in records})
    if not all_ranks:
        raise ValueError("gantt: no records to plot")
    identical = ranks is None and len(all_ranks) > 1 and _identical_ranks(records)
    if identical:
        shown = [all_ranks[0]]  # every rank runs the same timeline: one row group says it all
    elif ranks is None:
        shown = (
            all_ranks if len(all_ranks) <= MAX_DEFAULT_RANKS else [*all_ranks[:2], all_ranks[-1]]
        )
    else:
        missing = sorted(set(ranks) - set(all_ranks))
        if missing:
            raise ValueError(f"gantt: ranks={list(ranks)} includes {missing}, not in the records")
        shown = sorted(set(ranks))
    if not shown:
        raise ValueError("gantt: ranks=[] selects nothing")
    shown_set = set(shown)
    window = [r for r in records if r.rank in shown_set]
    if layers is not None:
        lo, hi = layers
        window = [r for r in window if lo <= r.layer <= hi]
        if not window:
            raise ValueError(f"gantt: layers={layers} selects no records on ranks {shown}")
        # The CPU may launch far ahead of the GPU; frame the layers' kernels, not launches.
        window = [r for r in window if r.stream != "cpu"] or window
    t0 = min(r.start_s for r in window)
    t1 = max(r.end_s for r in window)
    note = f"showing {len(shown)} of {len(all_ranks)} GPUs" if len(shown) < len(all_ranks) else ""
    if identical:
        note = f"all {len(all_ranks)} GPUs run this same timeline"
    return GanttView(ranks=tuple(shown), t0_s=t0, t1_s=t1, note=note)


def _identical_ranks(records: Sequence[Record]) -> bool:
    """Whether every rank has the same records at the same times (a symmetric run)."""
    by_rank: dict[int, list[tuple[str, str, float, float]]] = defaultdict(list)
    for r in records:
        by_rank[r.rank].append((r.stream, r.name, r.start_s, r.end_s))
    first, *rest = (sorted(v) for v in by_rank.values())
    return all(
        len(v) == len(first)
        and all(
            a[:2] == b[:2]
            and math.isclose(a[2], b[2], rel_tol=1e-9, abs_tol=1e-12)
            and math.isclose(a[3], b[3], rel_tol=1e-9, abs_tol=1e-12)
            for a, b in zip(first, v, strict=True)
        )
        for v in rest
    )


def _time_unit(span_s: float) -> tuple[float, str]:
    return (1e6, "µs") if span_s < 2e-3 else (1e3, "ms")


def _layer_starts(records: Sequence[Record], rank: int, t0: float, t1: float) -> dict[int, float]:
    """Earliest start of each layer's compute records on ``rank`` inside [t0, t1]."""
    starts: dict[int, float] = {}
    for r in records:
        if r.rank == rank and r.stream == "compute" and r.start_s < starts.get(r.layer, 1e300):
            starts[r.layer] = r.start_s
    return {layer: t for layer, t in sorted(starts.items()) if t0 <= t <= t1}


def gantt(
    records: Sequence[Record],
    path: str | Path,
    *,
    title: str = "",
    ranks: Sequence[int] | None = None,
    layers: tuple[int, int] | None = None,
    critical: Collection[int] = (),
    rank_labels: Mapping[int, str] | None = None,
) -> None:
    """Draw a per-GPU Gantt chart (CPU launch, compute and comm rows per rank) to PNG or SVG.

    ``layers=(a, b)`` zooms the time axis to the compute/comm records of layers a..b
    inclusive (their launches only when the layers have no GPU records);
    ``ranks`` picks the ranks drawn (default: all up to 8, else 0, 1 and the last);
    records whose id is in ``critical`` are underlined by a black rail; op names are
    written on bars wide enough to hold them, and an SVG gives every bar a hover tooltip
    (name, detail, bytes, start, duration). The file is written atomically; the same input
    gives the same bytes.
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


def gantt_figure(
    records: Sequence[Record],
    *,
    title: str = "",
    ranks: Sequence[int] | None = None,
    layers: tuple[int, int] | None = None,
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
    span = max(t1 - t0, 1e-12)
    scale, unit = _time_unit(span)

    # y position of each (rank, stream) row; a blank row separates rank groups.
    group = len(ROWS) + 1
    row_y = {
        (rank, stream): g * group + j
        for g, rank in enumerate(view.ranks)
        for j, (stream, _) in enumerate(ROWS)
    }
    bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    outlines: dict[int, list[tuple[float, float]]] = defaultdict(list)
    kinds_seen: set[str] = set()
    shown: list[tuple[Record, int, tuple[float, float]]] = []
    for r in records:
        row = row_y.get((r.rank, "comm" if r.stream == "p2p" else r.stream))  # sends: comm row
        if row is None or r.end_s < t0 or r.start_s > t1:
            continue
        xy = (r.start_s * scale, max(r.end_s - r.start_s, 0.0) * scale)
        kind = NET_KIND if r.kind == "collective" and r.detail.endswith(NET_STEP) else r.kind
        bars[(row, KIND_COLORS.get(kind, OTHER_COLOR))].append(xy)
        kinds_seen.add(kind)
        shown.append((r, row, xy))
        if r.id in crit:
            outlines[row].append(xy)

    n_rows = len(view.ranks) * group - 1
    fig = Figure(figsize=(14, 1.6 + 0.28 * n_rows), dpi=150)
    ax = fig.add_subplot()
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
        ax.broken_barh(xs, (y + height / 2 - RAIL, RAIL), facecolors="black", linewidth=0)

    lane_names = {
        rank: (lane_titles or {}).get(
            rank, f"GPU {rank}{f' ({labels[rank]})' if rank in labels else ''}"
        )
        for rank in view.ranks
    }
    ticks = sorted(row_y.items(), key=lambda kv: kv[1])
    ax.set_yticks([y for _, y in ticks])
    ax.set_yticklabels(
        [f"{lane_names[rank]} · {dict(ROWS)[stream]}" for (rank, stream), _ in ticks],
        fontsize=8,
    )
    for g in range(1, len(view.ranks)):
        ax.axhline(g * group - 1, color="#cccccc", linewidth=0.8)
    ax.set_ylim(n_rows - 0.4, -0.6)  # GPU 0 on top
    pad = 0.01 * span * scale
    ax.set_xlim(t0 * scale - pad, t1 * scale + pad)  # x_lo, x_hi below
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", color="#eeeeee", linewidth=0.6)
    ax.set_axisbelow(True)

    x_lo, x_hi = t0 * scale - pad, t1 * scale + pad
    per_px = (x_hi - x_lo) / (fig.get_figwidth() * fig.dpi * AXES_WIDTH)  # data units per pixel
    _bar_names(ax, shown, per_px, height)
    for rank in view.ranks:  # a CPU row with nothing in the window says why
        y = row_y[(rank, "cpu")]
        if not any(row == y for _, row, _ in shown):
            ax.text(
                x_lo + 4 * per_px,
                y,
                "no host work in this window (the CPU ran ahead: launches or a CUDA graph "
                "replay happen before it)",
                fontsize=7,
                color="#666666",
                va="center",
            )

    boundaries = _layer_starts(records, 0 if 0 in view.ranks else view.ranks[0], t0, t1)
    if lane_titles:  # a comparison: each run has its own layer times, mark none
        boundaries = {}
    if 0 < len(boundaries) < MAX_LAYER_LINES:
        top = blended_transform_factory(ax.transData, ax.transAxes)
        last_label, last_width = -math.inf, 0.0
        for layer, t in boundaries.items():
            ax.axvline(t * scale, color="#888888", linewidth=0.6, linestyle=":", zorder=0)
            text = "emb" if layer < 0 else f"L{layer}"
            if (t * scale - last_label) / per_px < max(LABEL_GAP_PX, last_width):
                continue  # it would touch the label before it: the line alone marks it
            last_label, last_width = t * scale, LABEL_PX_PER_CHAR * len(text) + 4
            ax.text(
                t * scale,
                1.005,
                text,
                transform=top,
                fontsize=7,
                color="#555555",
                ha="left",
                va="bottom",
            )

    handles = [
        Patch(facecolor=color, label=kind)
        for kind, color in KIND_COLORS.items()
        if kind in kinds_seen
    ]
    if kinds_seen - KIND_COLORS.keys():
        handles.append(Patch(facecolor=OTHER_COLOR, label="other"))
    if outlines:
        handles.append(Patch(facecolor="black", edgecolor="black", label="critical path"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8)
    full_title = "; ".join(s for s in (title, view.note) if s)
    if full_title:
        ax.set_title(full_title, fontsize=10, pad=12)
    fig.tight_layout()

    return GanttChart(fig, ax, tuple(shown), height)


def _bar_names(
    ax: Any, shown: Sequence[tuple[Record, int, tuple[float, float]]], per_px: float, height: float
) -> None:
    """Write each op's name inside its bar where the bar is wide enough to hold it."""
    written = 0
    for r, y, (x, w) in shown:
        if w / per_px < NAME_PX_PER_CHAR * len(r.name) + 4 or r.kind in ("launch", "dispatch"):
            continue
        ax.text(
            x + w / 2,
            y - height / 2 + 0.08,
            r.name,
            fontsize=5.5,
            color="white" if r.kind in DARK_KINDS else "black",
            ha="center",
            va="top",
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
    layers: tuple[int, int] | None = None,
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
