"""The figure of ``tpsim bench`` (tpsim.experiments.bench): how wall time and memory scale."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from tpsim.experiments.plots.save import save_figure


def scaling_plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Wall time and peak memory against layers, TP degree and overlap chunks."""
    fig = Figure(figsize=(13, 4))
    axes = fig.subplots(1, 3)
    titles = {"layers": "Llama-3.1-405B TP 64 (8 nodes), decode: layers",
              "tp": "405B (32 layers) decode: TP degree (8 GPUs per node)",
              "chunks": "Llama-3.1-70B TP 8 prefill: --overlap-chunks"}  # fmt: skip
    for ax, axis in zip(axes, ("layers", "tp", "chunks"), strict=True):
        pts = [r for r in rows if r["axis"] == axis]
        xs = [r["value"] for r in pts]
        ax.plot(xs, [r["wall_s"] for r in pts], "o-", color="#0072B2", label="wall time (s)")
        ax.set_xlabel(axis)
        ax.set_ylabel("wall time (s)", color="#0072B2")
        twin = ax.twinx()
        twin.plot(xs, [r["peak_rss_MB"] for r in pts], "s--", color="#D55E00")
        twin.set_ylabel("peak memory (MB)", color="#D55E00")
        ax.set_title(titles[axis], fontsize=9)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
