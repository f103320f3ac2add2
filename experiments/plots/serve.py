"""The charts of a serving run (``tpsim serve --plots DIR``): the engine over time (requests
waiting, the running batch, KV cache in use) and the CDFs of TTFT and TPOT."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from tpsim.experiments.plots.save import save_figure
from tpsim.experiments.plots.style import LABEL_PT, LINE_COLOURS, TICK_PT, TITLE_PT
from tpsim.experiments.serve.metrics import per_request

if TYPE_CHECKING:
    from tpsim.experiments.serve.run import ServeResult


def _style(ax, xlabel: str, ylabel: str) -> None:  # type: ignore[no-untyped-def]
    ax.set_xlabel(xlabel, fontsize=LABEL_PT)
    ax.set_ylabel(ylabel, fontsize=LABEL_PT)
    ax.tick_params(labelsize=TICK_PT)
    ax.grid(True, alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)


def timeline(result: ServeResult, path: Path, title: str) -> Path:
    """Requests waiting and running, and the KV cache in use, over time, per instance
    (replica, attention group or virtual engine: ``result.instance``)."""
    out = path / "timeline.png"
    save_figure(draw_timeline(result, title), out)
    return out


def draw_timeline(result: ServeResult, title: str) -> Figure:
    """:func:`timeline`'s figure, not saved: the counts on whole-number ticks."""
    fig = Figure(figsize=(12, 8), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    for k, steps in enumerate(result.steps):
        if not steps:
            continue
        colour = LINE_COLOURS[k % len(LINE_COLOURS)]
        t = np.array([s.start_s for s in steps])
        names = result.instance_names
        label = names[k] if names else f"{result.instance} {k}"
        axes[0].step(t, [s.waiting for s in steps], where="post", color=colour,
                     label=label if len(result.steps) > 1 else None)  # fmt: skip
        axes[1].step(t, [s.running for s in steps], where="post", color=colour)
        # of its own cache: a disaggregated run's prefill pool holds fewer blocks (TP 1
        # against the decode pool's TP 2), and was counted against the decode pool's
        blocks = result.instance_blocks[k] if result.instance_blocks else result.kv.blocks
        used = np.array([s.blocks_used for s in steps]) / blocks * 100
        axes[2].step(t, used, where="post", color=colour)
    _style(axes[0], "", "requests waiting")
    _style(axes[1], "", "running batch (sequences)")
    _style(axes[2], "time (s)", "KV cache in use (%)")
    # requests and sequences, from none: no half of one (ticks at 0.5 had read so), and a
    # batch steady at 2 not drawn on an axis of 1.9 to 2.1
    for ax, field in ((axes[0], "waiting"), (axes[1], "running")):
        most = max((getattr(s, field) for steps in result.steps for s in steps), default=0)
        ax.set_ylim(0, max(1, most) * 1.05)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[2].set_ylim(0, 105)
    if len(result.steps) > 1:  # beside the panels: over them it hid the spikes of waiting
        axes[0].legend(fontsize=LABEL_PT, frameon=False, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0))  # fmt: skip
    note = f"{result.preemptions} preemptions" if result.preemptions else "no preemptions"
    fig.suptitle(f"{title}\n{note}", fontsize=TITLE_PT)
    return fig


def cdfs(result: ServeResult, path: Path, title: str) -> Path:
    """The CDFs of TTFT and TPOT over the requests, medians and p99 marked."""
    values = per_request(result.requests)
    fig = Figure(figsize=(12, 5), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, name, label in ((axes[0], "ttft", "TTFT (ms)"), (axes[1], "tpot", "TPOT (ms)")):
        v = np.sort(values[name]) * 1e3
        if len(v):
            y = np.arange(1, len(v) + 1) / len(v)
            ax.step(v, y, where="post", color=LINE_COLOURS[0])
            for q, style in ((50, "--"), (99, ":")):
                x = float(np.percentile(v, q))
                ax.axvline(x, color=LINE_COLOURS[1], linestyle=style, linewidth=1)
                ax.annotate(f"p{q} {x:.1f}", (x, 0.05 if q == 50 else 0.15),
                            xytext=(4, 0), textcoords="offset points",
                            fontsize=TICK_PT, color=LINE_COLOURS[1])  # fmt: skip
        ax.set_ylim(0, 1.02)
        _style(ax, label, "fraction of requests")
    fig.suptitle(title, fontsize=TITLE_PT)
    out = path / "latency_cdf.png"
    save_figure(fig, out)
    return out


def serve_plots(result: ServeResult, folder: Path, title: str) -> list[Path]:
    """Every chart of the run, written into ``folder``."""
    return [timeline(result, folder, title), cdfs(result, folder, title)]


__all__ = ["cdfs", "draw_timeline", "serve_plots", "timeline"]
