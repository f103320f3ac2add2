"""Plots of a table of simulated points: throughput against TP, latency breakdown bars.

Rows are dicts with at least ``tp``, ``batch``, ``tokens_per_s``, ``tokens_per_s_per_gpu``
and ``breakdown_s``. Files are written atomically and byte-for-byte reproducibly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from experiments.plots import save_figure

#: Okabe-Ito colours, one per breakdown category.
CATEGORY_COLOURS = {
    "compute": "#0072B2",
    "memory": "#56B4E9",
    "communication": "#D55E00",
    "launch_overhead": "#999999",
    "idle": "#F0E442",
}
LINE_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]


def throughput_vs_tp(rows: Sequence[dict[str, Any]], path: str | Path, *, title: str) -> None:
    """Two panels: tokens/s and tokens/s per GPU against TP degree, one line per batch."""
    fig = Figure(figsize=(12, 4.5))
    ax1, ax2 = fig.subplots(1, 2)
    batches = sorted({r["batch"] for r in rows})
    for colour, batch in zip(LINE_COLOURS * 4, batches, strict=False):
        pts = sorted(
            (r["tp"], r["tokens_per_s"], r["tokens_per_s_per_gpu"])
            for r in rows
            if r["batch"] == batch
        )
        if not pts:
            continue
        tps = [p[0] for p in pts]
        ax1.plot(tps, [p[1] for p in pts], "o-", color=colour, label=f"batch {batch}")
        ax2.plot(tps, [p[2] for p in pts], "o-", color=colour, label=f"batch {batch}")
    for ax, label in ((ax1, "tokens/s (whole group)"), (ax2, "tokens/s per GPU")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("TP degree (GPUs)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        tps_all = sorted({r["tp"] for r in rows})
        ax.set_xticks(tps_all, [str(t) for t in tps_all])
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


def breakdown_bars(rows: Sequence[dict[str, Any]], path: str | Path, *, title: str) -> None:
    """Stacked bars of the critical-path breakdown (ms) for each row, labelled by TP/batch."""
    fig = Figure(figsize=(max(6.0, 0.8 * len(rows) + 3), 4.5))
    ax = fig.subplots()
    labels = [f"TP {r['tp']}\nb {r['batch']}" for r in rows]
    bottoms = [0.0] * len(rows)
    for cat, colour in CATEGORY_COLOURS.items():
        values = [r["breakdown_s"].get(cat, 0.0) * 1e3 for r in rows]
        if not any(values):
            continue
        ax.bar(labels, values, bottom=bottoms, color=colour, label=cat.replace("_", " "))
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.set_ylabel("time on the critical path (ms)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
