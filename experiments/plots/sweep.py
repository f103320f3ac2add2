"""Plots of sweep rows (tpsim.experiments.sweep.results): throughput and per-GPU throughput against
TP,
stacked latency breakdowns (a panel per batch), a regime map (TP x batch) with each cell's
margin, in-node against cross-node curves with their ratio, and series compared on shared
axes.

Rows are the flat dicts of a results file (``tp``, ``batch``, ``hosts``, ``tokens_per_s``,
``compute_s``, ..., ``fits``, ``error``). A pipeline's tokens/s is drawn kept full
(``in_flight_*``: a batch like the row's in every stage, as ``compare`` and ``plan`` count
it; :func:`~tpsim.experiments.plots.figure.rate`), and the figures say so. Each figure is
drawn on a bare ``Figure`` (no pyplot) by a ``draw_*`` function (which tests read through
the artists) and written atomically by the function of the same name without ``draw_``,
byte for byte the same for the same rows.
The regime map lives in sweep_regime_map.py and what every figure shares (font, which rows
are drawn, layout names) in sweep_figure.py; both are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from tpsim.experiments.plots import style
from tpsim.experiments.plots.figure import (
    FONT,
    Layout,
    Row,
    bare_figure,
    compact,
    fewest_hosts,
    layout_name,
    layout_of,
    legend_outside,
    ok,
    pipeline_note,
    rate,
    rate_words,
    rated,
    spread_over,
    suptitle_inside,
)
from tpsim.experiments.plots.regime_map import REGIME_COLOURS, draw_regime_map, regime_map
from tpsim.experiments.plots.save import save_figure
from tpsim.experiments.sweep.rows import kept_full

#: The public names of ``tpsim.experiments.plots.sweep``; what every sweep figure shares
#: lives in sweep_figure.py and the regime map in sweep_regime_map.py, re-exported here, as
#: they were defined here before.
__all__ = [
    "CATEGORY_COLOURS",
    "FONT",
    "HOST_BOUNDARY",
    "LINE_COLOURS",
    "MARKERS",
    "REGIME_COLOURS",
    "Row",
    "breakdown_bars",
    "compact",
    "cross_node_ratios",
    "draw_breakdown_bars",
    "draw_in_node_vs_cross_node",
    "draw_regime_map",
    "draw_series_comparison",
    "draw_throughput_vs_tp",
    "host_boundary",
    "hosts_label",
    "in_node_vs_cross_node",
    "layout_name",
    "layout_of",
    "ok",
    "per_pass",
    "regime_map",
    "series_comparison",
    "throughput_vs_tp",
]

#: One colour per breakdown category: the palette every chart shares (:mod:`.style`).
CATEGORY_COLOURS = {
    k: style.CATEGORY_COLOURS[k]
    for k in ("compute", "memory", "communication", "launch_overhead", "host", "bubble", "idle")
}
LINE_COLOURS = style.LINE_COLOURS
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
#: past the 7 colours, each round of them in its own line style
LINE_STYLES = ["-", "--", ":", "-."]
HOST_BOUNDARY = "host-boundary"  # the gid of the line where a TP group leaves its host


def _tps(rows: Sequence[Row]) -> list[int]:
    """The x positions of the rows: each one's TP group's GPUs (:func:`_group_gpus`)."""
    return sorted({_group_gpus(r) for r in rows})


def _x_label(rows: Sequence[Row]) -> str:
    """The x axis of a plot against TP: its GPUs, times attention DP where a row has it."""
    adp = any((r.get("attention_dp") or 1) > 1 for r in rows)
    return "GPUs of the TP group (TP x attention DP)" if adp else "TP degree (GPUs)"


def _group_gpus(r: Row) -> int:
    """The GPUs a row's model group spans at one stage: its TP degree, times its attention
    data-parallel groups (which share the MoE layers and step together)."""
    return r["tp"] * (r.get("attention_dp") or 1)


def _extra_layout(key: Layout) -> str:
    """The part of a layout beyond its TP degree: ``, PP 2 x DP 2`` (empty for plain TP)."""
    rest = layout_name((1, *key[1:])).removeprefix("TP 1")
    return f", {rest.removeprefix(' x ').strip()}" if rest else ""


def _style(ax: Any, xlabel: str, ylabel: str, tps: list[int] | None = None) -> None:
    ax.set_xlabel(xlabel, fontsize=FONT)
    ax.set_ylabel(ylabel, fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)
    ax.grid(True, which="both", alpha=0.3)
    if tps:
        ax.set_xscale("log", base=2)
        ax.set_xticks(tps, [str(t) for t in tps])
        ax.minorticks_off()


def _plain_log_y(ax: Any) -> None:
    """A log y axis labelled 15k, 20k, not 1.5x10^4. Where fewer than three decade ticks
    are in view (data spanning a decade or two), the 2x and 5x ticks of each decade are
    labelled too, so that a value can be read off the axis."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(compact))
    lo, hi = ax.get_ylim()
    decades = math.floor(math.log10(hi)) - math.ceil(math.log10(lo)) + 1 if lo > 0 else 3
    if decades >= 3:
        ax.yaxis.set_minor_formatter(NullFormatter())
        return
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    ax.yaxis.set_minor_formatter(FuncFormatter(compact))


def host_boundary(rows: Sequence[Row]) -> tuple[int, int] | None:
    """The largest TP that stays in one host and the next TP drawn, when a larger one spans
    hosts: where a group crosses into a second host."""
    good = [r for r in rows if ok(r)]
    inside = [_group_gpus(r) for r in good if r.get("hosts") == 1]
    beyond = sorted(_group_gpus(r) for r in good if (r.get("hosts") or 1) > 1)
    if not inside or not beyond or beyond[-1] <= max(inside):
        return None
    last = max(inside)
    return last, min(t for t in beyond if t > last)


def _mark_hosts(ax: Any, rows: Sequence[Row]) -> None:
    edge = host_boundary(rows)
    if edge is None:
        return
    x = math.sqrt(edge[0] * edge[1])  # half way on the log2 axis
    ax.axvline(x, color="#444444", linestyle="--", linewidth=1.2, gid=HOST_BOUNDARY)
    # named as the axis counts: TP, or the GPUs of TP x attention DP
    beyond = f"TP > {edge[0]}" if _x_label(rows).startswith("TP") else f"> {edge[0]} GPUs"
    ax.text(
        x,
        0.02,
        f"{beyond}: group over 2+ hosts",
        transform=ax.get_xaxis_transform(),
        rotation=90,
        ha="right",
        va="bottom",
        fontsize=FONT - 3,
        color="#444444",
    )


def draw_throughput_vs_tp(rows: Sequence[Row], *, title: str) -> Figure:
    good = [r for r in rows if rated(r)]
    fig = bare_figure(13, 5)
    ax1, ax2 = fig.subplots(1, 2)
    batches = sorted({r["batch"] for r in good})
    # one line per batch and per layout beyond TP (stages, replicas), against the TP degree;
    # a layout also placed over more hosts than its fewest (--gpus-per-node) a line apart
    fewest = fewest_hosts(good)
    series = sorted({(r["batch"], layout_of(r)[1:], spread_over(r, fewest)) for r in good})
    for i, (batch, rest, spread) in enumerate(series):
        pts = sorted(
            {
                _group_gpus(r): (_group_gpus(r), *rate(r))
                for r in good
                if r["batch"] == batch
                and layout_of(r)[1:] == rest
                and spread_over(r, fewest) == spread
            }.values()
        )
        split = f", split over {spread} hosts" if spread else ""
        full = [r["in_flight_batches"] for r in good if kept_full(r) and layout_of(r)[1:] == rest]
        each = f", {full[0]} batches in flight" if full else ""
        label = f"batch {batch}{_extra_layout((0, *rest))}{each}{split}"
        style = {"color": LINE_COLOURS[i % 7], "marker": MARKERS[i % 7], "label": label,
                 "linestyle": LINE_STYLES[i // 7 % len(LINE_STYLES)]}  # fmt: skip
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], **style)
        ax2.plot([p[0] for p in pts], [p[2] for p in pts], **style)
    # attention DP: a point at its MoE group's GPUs (TP x attention DP), not at its TP
    words = rate_words(good)
    beyond_tp = any(layout_of(r)[1] * layout_of(r)[2] * layout_of(r)[5] > 1 for r in good)
    whole = "whole layout" if words or beyond_tp else "whole TP group"  # stages, replicas
    for ax, label in ((ax1, f"tokens/s ({whole}{words})"), (ax2, f"tokens/s per GPU{words}")):
        _style(ax, _x_label(good), label, _tps(good))
        _plain_log_y(ax)
        _mark_hosts(ax, good)
    if batches:
        legend_outside(ax2, fontsize=FONT - 2)
    # points of which no row is drawn: a layout that failed where the grid placed it on
    # too few hosts (--nodes 1,2 --tp 16) is drawn from its placement that ran
    drawn = {(layout_of(r), r["batch"]) for r in good}
    skipped = len({(layout_of(r), r["batch"]) for r in rows} - drawn)
    points = "point" if skipped == 1 else "points"
    note = f" ({skipped} {points} not fitting or failed: not drawn)" if skipped else ""
    suptitle_inside(fig, title + note + pipeline_note(rows), fontsize=FONT + 1)
    fig.tight_layout()
    return fig


def throughput_vs_tp(rows: Sequence[Row], path: str | Path, *, title: str) -> None:
    """Two panels: tokens/s and tokens/s per GPU against TP degree, one line per batch, the
    host boundary marked. Rows that do not fit or failed are left out (the map shows them)."""
    save_figure(draw_throughput_vs_tp(rows, title=title), path)


def per_pass(rows: Sequence[Row]) -> str:
    """``ms per step`` (decode), ``ms per pass`` (prefill), or both named."""
    phases = {r.get("phase") for r in rows}
    if phases == {"prefill"}:
        return "ms per pass (prefill)"
    if phases == {"decode"}:
        return "ms per step (decode)"
    return "ms per step (decode) or per pass (prefill)"


def _grid(n: int, cols: int = 4) -> tuple[int, int]:
    cols = max(1, min(cols, n))
    return math.ceil(max(1, n) / cols), cols


def draw_breakdown_bars(rows: Sequence[Row], *, title: str) -> Figure:
    good = sorted((r for r in rows if ok(r)), key=lambda r: (r["batch"], r["tp"]))
    batches = sorted({r["batch"] for r in good})
    nrows, ncols = _grid(len(batches))
    widest = max((len(layout_name(layout_of(r))) for r in good), default=4)
    per_panel = max(
        3.6,
        0.12 * widest * max(len([r for r in good if r["batch"] == b]) for b in batches)
        if batches
        else 3.6,
    )
    fig = bare_figure(max(7.0, per_panel * ncols + 2.2), 3.4 * nrows + 1.0)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    used: dict[str, str] = {}
    fewest = fewest_hosts(good)
    for ax, batch in zip(axes, batches, strict=False):
        at = sorted(
            (r for r in good if r["batch"] == batch),
            key=lambda r: (layout_of(r), spread_over(r, fewest)),
        )
        spreads = [spread_over(r, fewest) for r in at]
        labels = [
            layout_name(layout_of(r)) + (f" ({h} hosts)" if h else "")
            for r, h in zip(at, spreads, strict=True)
        ]
        bottoms = [0.0] * len(at)
        for cat, colour in CATEGORY_COLOURS.items():
            values = [(r.get(f"{cat}_s") or 0.0) * 1e3 for r in at]
            if not any(values):
                continue
            ax.bar(labels, values, bottom=bottoms, color=colour)
            used[cat] = colour
            bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
        ax.set_title(f"batch {batch}", fontsize=FONT)
        ax.set_ylabel(per_pass(at), fontsize=FONT - 1)
        ax.tick_params(labelsize=FONT - 2)
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[len(batches) :]:
        ax.set_visible(False)
    handles = [Patch(facecolor=c, label=k.replace("_", " ")) for k, c in used.items()]
    if handles:
        fig.legend(handles=handles, loc="center right", fontsize=FONT - 2)
    right = 1 - 1.9 / fig.get_figwidth()  # the legend's strip
    piped = any(kept_full(r) for r in good)
    fill = "; a pipeline: one batch's step (kept full, the others fill its bubble)" if piped else ""
    suptitle_inside(
        fig,
        f"{title}\ncritical path by part; each batch on its own scale{fill}",
        fontsize=FONT,
        x=right / 2,
    )
    fig.tight_layout(rect=(0, 0, right, 1))
    return fig


def breakdown_bars(rows: Sequence[Row], path: str | Path, *, title: str) -> None:
    """Stacked bars of the critical-path breakdown (ms per step or pass) against TP, one
    panel per batch, each on its own linear scale (so 1 ms bars are not flattened by 25 s
    ones)."""
    save_figure(draw_breakdown_bars(rows, title=title), path)


def hosts_label(hosts: int) -> str:
    return "group in one host" if hosts == 1 else f"group over {hosts} hosts"


def cross_node_ratios(rows: Sequence[Row], batch: int) -> list[tuple[int, int, float, str]]:
    """``(gpus, hosts, ratio, against)`` for each point of ``batch`` whose group spans
    hosts: its tokens/s over those of the one-host group of as many GPUs, or else of the
    largest one-host group, named by its layout (``TP 8``, ``TP 1 x ADP 8 EP 8``)."""
    good = [r for r in rows if ok(r) and r["batch"] == batch]
    inside = {_group_gpus(r): r for r in good if r["hosts"] == 1}
    out = []
    for r in sorted(good, key=lambda r: (r["hosts"], _group_gpus(r))):
        if r["hosts"] == 1 or not inside:
            continue
        x = _group_gpus(r)
        base = inside.get(x) or inside[max(inside)]
        ratio = r["tokens_per_s"] / base["tokens_per_s"]
        out.append((x, r["hosts"], ratio, layout_name(layout_of(base))))
    return out


def _tp_line(ax: Any, i: int, label: str, rows: Sequence[Row]) -> None:
    """tokens/s of ``rows`` against TP as line ``i`` of a panel (its colour and marker),
    pipelines kept full."""
    pts = sorted((_group_gpus(r), rate(r)[0]) for r in rows if rated(r))
    if pts:
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            linestyle=LINE_STYLES[i // 7 % len(LINE_STYLES)],
            color=LINE_COLOURS[i % 7],
            marker=MARKERS[i % 7],
            label=label,
        )


def draw_in_node_vs_cross_node(rows: Sequence[Row], *, title: str) -> Figure:
    # TP groups alone: a pipeline's or a replica's point would sit on its TP group's line
    # beside the plain group of that TP (throughput_vs_tp draws them apart)
    good = [r for r in rows if ok(r) and (r.get("pp") or 1) == 1 and (r.get("dp") or 1) == 1]
    if len(good) < sum(1 for r in rows if ok(r)):
        title += "\nTP groups alone (pipeline and replica layouts: throughput_vs_tp)"
    batches = sorted({r["batch"] for r in good})
    nrows, ncols = _grid(len(batches))
    fig = bare_figure(4.4 * ncols + 2.4, 4.0 * nrows + 1.0)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    hosts = sorted({r["hosts"] for r in good})
    for ax, batch in zip(axes, batches, strict=False):
        for i, h in enumerate(hosts):
            _tp_line(
                ax, i, hosts_label(h), [r for r in good if r["batch"] == batch and r["hosts"] == h]
            )
        level = {(_group_gpus(r), r["hosts"]): r["tokens_per_s"] for r in good
                 if r["batch"] == batch}  # fmt: skip
        xs = _tps(good)
        for tp, h, ratio, base in cross_node_ratios(good, batch):
            # inside the axes: a label centred on the first TP ran over the y tick labels
            ha = "left" if tp == xs[0] < xs[-1] else "right" if tp == xs[-1] > xs[0] else "center"
            ax.annotate(
                f"{ratio:.2f}x {base}\nin one host",
                (tp, level[tp, h]),
                xytext=(0, -10),
                textcoords="offset points",
                ha=ha,
                va="top",
                fontsize=FONT - 3,
                gid="ratio",
            )
        _style(ax, _x_label(good), "tokens/s (whole TP group)", _tps(good))
        ax.yaxis.set_major_formatter(FuncFormatter(compact))
        ax.set_ylim(bottom=0, top=1.15 * max(level.values(), default=1.0))
        _mark_hosts(ax, good)
        ax.set_title(f"batch {batch}", fontsize=FONT)
    for ax in axes[len(batches) :]:
        ax.set_visible(False)
    if batches:
        handles, labels = axes[0].get_legend_handles_labels()
        right = 1 - 2.2 / fig.get_figwidth()  # the legend's strip, beside the panels
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(right, 0.5),
                   fontsize=FONT - 2)  # fmt: skip
    suptitle_inside(fig, title, fontsize=FONT + 1)
    fig.tight_layout(rect=(0, 0, 1 - 2.2 / fig.get_figwidth(), 1))
    return fig


def in_node_vs_cross_node(rows: Sequence[Row], path: str | Path, *, title: str) -> None:
    """tokens/s (from zero) against TP, one line per number of hosts the group spans, a
    panel per batch (all of them), each cross-host point labelled with its ratio to the
    one-host group."""
    save_figure(draw_in_node_vs_cross_node(rows, title=title), path)


def draw_series_comparison(series: Mapping[str, Sequence[Row]], *, title: str) -> Figure:
    names = list(series)
    batches = sorted({r["batch"] for rs in series.values() for r in rs if rated(r)})
    nrows, ncols = _grid(len(batches))
    fig = bare_figure(4.4 * ncols + 3.6, 3.8 * nrows + 1.0)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True).ravel()
    every = [r for rs in series.values() for r in rs if rated(r)]
    full = rate_words(every)
    ylabel = f"tokens/s (whole layout{full})" if full else "tokens/s (whole TP group)"
    # a line per series and layout beyond TP (stages, replicas): a series holding PP 1 and
    # PP 2 points of one batch had zigzagged between them on one line
    lines = sorted(
        {(n, layout_of(r)[1:]) for n in names for r in series[n] if rated(r)},
        key=lambda k: (names.index(k[0]), k[1]),
    )
    for ax, batch in zip(axes, batches, strict=False):
        for i, (name, rest) in enumerate(lines):
            pts = [
                r
                for r in series[name]
                if rated(r) and r["batch"] == batch and layout_of(r)[1:] == rest
            ]
            _tp_line(ax, i, name + _extra_layout((0, *rest)), pts)
        _style(ax, _x_label(every), ylabel, _tps(every))
        _plain_log_y(ax)
        ax.set_title(f"batch {batch}", fontsize=FONT)
    for ax in axes[len(batches) :]:
        ax.set_visible(False)
    handles = {
        label: h for ax in axes for h, label in zip(*ax.get_legend_handles_labels(), strict=True)
    }
    right = 1 - 3.4 / fig.get_figwidth()  # the legend's strip, beside the panels
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="center left",
                   bbox_to_anchor=(right, 0.5), fontsize=FONT - 3)  # fmt: skip
    suptitle_inside(fig, f"{title}\nseries on shared axes{pipeline_note(every)}", fontsize=FONT)
    fig.tight_layout(rect=(0, 0, right, 1))
    return fig


def series_comparison(series: Mapping[str, Sequence[Row]], path: str | Path, *, title: str) -> None:
    """tokens/s against TP of several series (named by what tells them apart) on shared
    axes, a panel per batch: H100 against L40S at a glance."""
    save_figure(draw_series_comparison(series, title=title), path)
