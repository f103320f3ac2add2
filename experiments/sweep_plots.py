"""Plots of sweep rows (tpsim.experiments.results): throughput and per-GPU throughput against TP,
stacked latency breakdowns, a regime map (TP x batch) and in-node against cross-node curves.

Rows are the flat dicts of a results file (``tp``, ``batch``, ``hosts``, ``tokens_per_s``,
``compute_s``, ..., ``fits``, ``error``). Figures are drawn on a bare ``Figure`` (no pyplot)
and written atomically, byte for byte the same for the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from tpsim.experiments.plots import save_figure

Row = dict[str, Any]

#: Okabe-Ito colours, one per breakdown category.
CATEGORY_COLOURS = {
    "compute": "#0072B2",
    "memory": "#56B4E9",
    "communication": "#D55E00",
    "launch_overhead": "#999999",
    "host": "#8C6D31",  # brown: engine host work
    "idle": "#F0E442",
}
REGIME_COLOURS = {
    "compute-bound": "#0072B2",
    "memory-bound": "#56B4E9",
    "communication-bound": "#D55E00",
    "overhead-bound": "#999999",
}
LINE_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
FONT = 11  # readable on a slide


def ok(row: Row) -> bool:
    """A row with a simulated result that fits in memory."""
    return not row.get("error") and row.get("fits") is True and bool(row.get("latency_s"))


def _tps(rows: Sequence[Row]) -> list[int]:
    return sorted({r["tp"] for r in rows})


def _style(ax: Any, xlabel: str, ylabel: str, tps: list[int] | None = None) -> None:
    ax.set_xlabel(xlabel, fontsize=FONT)
    ax.set_ylabel(ylabel, fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)
    ax.grid(True, which="both", alpha=0.3)
    if tps:
        ax.set_xscale("log", base=2)
        ax.set_xticks(tps, [str(t) for t in tps])
        ax.minorticks_off()


def throughput_vs_tp(rows: Sequence[Row], path: str | Path, *, title: str) -> None:
    """Two panels: tokens/s and tokens/s per GPU against TP degree, one line per batch.

    Rows that do not fit or failed are left out (the regime map shows them).
    """
    good = [r for r in rows if ok(r)]
    fig = Figure(figsize=(12, 5))
    ax1, ax2 = fig.subplots(1, 2)
    batches = sorted({r["batch"] for r in good})
    for i, batch in enumerate(batches):
        pts = sorted(
            (r["tp"], r["tokens_per_s"], r["tokens_per_s_per_gpu"])
            for r in good
            if r["batch"] == batch
        )
        style = {"color": LINE_COLOURS[i % 7], "marker": MARKERS[i % 7], "label": f"batch {batch}"}
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], "-", **style)
        ax2.plot([p[0] for p in pts], [p[2] for p in pts], "-", **style)
    for ax, label in ((ax1, "tokens/s (whole TP group)"), (ax2, "tokens/s per GPU")):
        _style(ax, "TP degree (GPUs)", label, _tps(good))
        ax.set_yscale("log")
        if batches:
            ax.legend(fontsize=FONT - 2)
    skipped = len(rows) - len(good)
    note = f" ({skipped} points not fitting or failed: not drawn)" if skipped else ""
    fig.suptitle(title + note, fontsize=FONT + 1)
    fig.tight_layout()
    save_figure(fig, path)


def breakdown_bars(rows: Sequence[Row], path: str | Path, *, title: str) -> None:
    """Stacked bars of the critical-path breakdown (ms) of each row, labelled TP / batch."""
    good = sorted((r for r in rows if ok(r)), key=lambda r: (r["batch"], r["tp"]))
    fig = Figure(figsize=(max(7.0, 0.75 * len(good) + 3), 5))
    ax = fig.subplots()
    labels = [f"TP {r['tp']}\nb {r['batch']}" for r in good]
    bottoms = [0.0] * len(good)
    for cat, colour in CATEGORY_COLOURS.items():
        values = [(r.get(f"{cat}_s") or 0.0) * 1e3 for r in good]
        if not any(values):
            continue
        ax.bar(labels, values, bottom=bottoms, color=colour, label=cat.replace("_", " "))
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.set_ylabel("time on the critical path (ms per step)", fontsize=FONT)
    ax.set_xlabel("TP degree and batch", fontsize=FONT)
    ax.tick_params(labelsize=FONT - 2)
    ax.set_title(title, fontsize=FONT)
    if good:
        ax.legend(fontsize=FONT - 2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)


def _compact(x: float) -> str:
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def regime_map(rows: Sequence[Row], path: str | Path, *, title: str) -> None:
    """TP (x) by batch (y), each cell coloured by its regime and labelled with tokens/s;
    layouts that do not fit are hatched, failed points grey."""
    tps = _tps(rows)
    batches = sorted({r["batch"] for r in rows})
    regimes = list(REGIME_COLOURS)
    cmap = ListedColormap([*REGIME_COLOURS.values(), "#DDDDDD", "#FFFFFF"])
    empty, failed = len(regimes) + 1, len(regimes)
    grid = [[empty] * len(tps) for _ in batches]
    cells = {(r["batch"], r["tp"]): r for r in rows}
    fig = Figure(figsize=(1.3 * len(tps) + 4.5, 0.55 * len(batches) + 2.5))
    ax = fig.subplots()
    for (batch, tp), r in cells.items():
        y, x = batches.index(batch), tps.index(tp)
        regime = r.get("regime")
        grid[y][x] = regimes.index(regime) if regime in regimes else failed
    ax.imshow(grid, cmap=cmap, vmin=0, vmax=len(regimes) + 1, aspect="auto", origin="lower")
    for (batch, tp), r in cells.items():
        y, x = batches.index(batch), tps.index(tp)
        if r.get("error"):
            text = "error"
        else:
            text = f"{_compact(r['tokens_per_s'])} tok/s"
            if r.get("fits") is False:
                ax.add_patch(
                    Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="///", linewidth=0)
                )
                text += "\nno fit"
        dark = r.get("regime") in ("compute-bound", "communication-bound")
        box = {"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1.5}
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=FONT - 2,
            color="white" if dark and r.get("fits") else "black",
            bbox=box if r.get("fits") is False else None,
        )
    ax.set_xticks(range(len(tps)), [str(t) for t in tps])
    ax.set_yticks(range(len(batches)), [str(b) for b in batches])
    ax.set_xlabel("TP degree (GPUs)", fontsize=FONT)
    ax.set_ylabel("batch (sequences)", fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)
    handles = [Patch(facecolor=c, label=k) for k, c in REGIME_COLOURS.items()]
    handles += [
        Patch(facecolor="white", edgecolor="#444444", hatch="///", label="does not fit"),
        Patch(facecolor="#DDDDDD", label="error"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=FONT - 2)
    ax.set_title(title, fontsize=FONT)
    fig.tight_layout()
    save_figure(fig, path)


def hosts_label(hosts: int) -> str:
    return "group in one host" if hosts == 1 else f"group over {hosts} hosts"


def in_node_vs_cross_node(rows: Sequence[Row], path: str | Path, *, title: str) -> None:
    """tokens/s against TP, one line per number of hosts the group spans; one panel per
    batch (at most four: the smallest, the largest and two between)."""
    good = [r for r in rows if ok(r)]
    batches = sorted({r["batch"] for r in good})
    if len(batches) > 4:
        batches = [batches[round(i * (len(batches) - 1) / 3)] for i in range(4)]
    fig = Figure(figsize=(5.2 * max(1, len(batches)), 5))
    axes = fig.subplots(1, max(1, len(batches)), squeeze=False)[0]
    hosts = sorted({r["hosts"] for r in good})
    for ax, batch in zip(axes, batches, strict=False):
        for i, h in enumerate(hosts):
            pts = sorted(
                (r["tp"], r["tokens_per_s"])
                for r in good
                if r["batch"] == batch and r["hosts"] == h
            )
            if pts:
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    "-",
                    color=LINE_COLOURS[i % 7],
                    marker=MARKERS[i % 7],
                    label=hosts_label(h),
                )
        _style(ax, "TP degree (GPUs)", "tokens/s (whole TP group)", _tps(good))
        ax.set_title(f"batch {batch}", fontsize=FONT)
        ax.legend(fontsize=FONT - 2)
    fig.suptitle(title, fontsize=FONT + 1)
    fig.tight_layout()
    save_figure(fig, path)
