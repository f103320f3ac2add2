"""The named studies' own figures (tpsim.experiments.studies): launch modes, engines across
TP, and layouts against all-TP. Each study passes its rows or numbers and its labels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from tpsim.experiments.plots.save import save_figure
from tpsim.experiments.plots.sweep import CATEGORY_COLOURS, FONT

Row = dict[str, Any]


def launch_overhead_bars(rows: Sequence[Row], path: Path) -> None:
    """The critical path of each model and launch mode, stacked by category."""
    fig = Figure(figsize=(11, 5))
    ax = fig.subplots()
    labels = [f"{r['model']}\n{r['launch']}" for r in rows]
    bottom = [0.0] * len(rows)
    for cat, colour in CATEGORY_COLOURS.items():
        values = [(r[f"{cat}_s"] or 0.0) * 1e3 for r in rows]
        if any(values):
            ax.bar(labels, values, bottom=bottom, color=colour, label=cat.replace("_", " "))
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("decode step, critical path (ms)", fontsize=FONT)
    ax.set_xlabel("model and launch mode", fontsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT - 2)
    ax.set_title("decode batch 1, TP 8 on dgx-h100: eager vs CUDA graph vs compiled", fontsize=FONT)
    ax.legend(fontsize=FONT - 2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)


def engines_lines(
    rows: Sequence[Row],
    path: Path,
    models: Sequence[str],
    engines: Sequence[str],
    tp_degrees: Sequence[int],
    batch: int,
    context: int,
) -> None:
    """Per model, each engine's decode step (and its host work on the path) against TP."""
    colours = {"ideal": "#0072B2", "vllm-v0": "#D55E00", "vllm": "#009E73"}
    fig = Figure(figsize=(12, 4.8))
    axes = fig.subplots(1, len(models))
    for ax, model in zip(axes, models, strict=True):
        for engine in engines:
            mine = sorted(
                (r for r in rows if r["model"] == model and r["engine"] == engine
                 and r.get("fits") is True),
                key=lambda r: r["tp"],
            )  # fmt: skip
            tps = [r["tp"] for r in mine]
            step = [r["latency_s"] * 1e3 for r in mine]
            host = [r["host_s"] * 1e3 for r in mine]
            ax.plot(tps, step, "o-", color=colours[engine], label=f"{engine}: step")
            if any(host):
                ax.plot(tps, host, "s:", color=colours[engine], alpha=0.7,
                        label=f"{engine}: host work on the path")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(tp_degrees), [str(t) for t in tp_degrees])
        ax.set_xlabel("TP degree (GPUs)", fontsize=FONT)
        ax.set_ylabel("decode step (ms)", fontsize=FONT)
        ax.set_title(f"{model}, batch {batch}, context {context}", fontsize=FONT)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=FONT - 3)
    fig.suptitle("dgx-h100 decode: where the engine, not the GPU, sets the limit", fontsize=FONT)
    fig.tight_layout()
    save_figure(fig, path)


def layout_speed_bars(
    panels: Sequence[tuple[str, Sequence[str], Mapping[str, Mapping[str, float | None]]]],
    names: Sequence[str],
    path: Path,
    heading: str = "tokens/s (decode) or 1/TTFT (prefill) relative to all-TP: above 1 beats it",
) -> Path:
    """A panel per case (its title, its layouts' labels, the first all-TP, and each workload's
    speed per layout, None where it does not fit): bars of speed relative to all-TP. A
    workload name's spaces break its tick label into lines."""
    colours = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00")
    fig = Figure(figsize=(6.0 * min(2, len(panels)), 4.2 * ((len(panels) + 1) // 2)), dpi=100)
    axes = fig.subplots((len(panels) + 1) // 2, min(2, len(panels)), squeeze=False).flat
    for ax, (title, labels, speed) in zip(axes, panels, strict=False):
        n = len(labels)
        width = 0.8 / n
        for i, lay in enumerate(labels):
            vals = [speed[w][lay] for w in names]
            xs = [k + (i - (n - 1) / 2) * width for k in range(len(names))]
            ax.bar(
                [x for x, v in zip(xs, vals, strict=True) if v is not None],
                [v for v in vals if v is not None],
                width,
                color=colours[i % len(colours)],
                label=lay,
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(names)), [w.replace(" ", "\n") for w in names], fontsize=9)
        ax.set_ylabel(f"speed vs {labels[0]}", fontsize=9)
        ax.set_title(title, fontsize=10)
        top = max((v for w in names for v in speed[w].values() if v), default=1.0)
        ax.set_ylim(0, max(1.0, top) * 1.4)  # room above the bars for the legend
        ax.legend(fontsize=8, loc="upper center", ncols=3)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in list(axes):
        ax.set_visible(False)
    fig.suptitle(heading, fontsize=11)
    fig.tight_layout()
    save_figure(fig, path)
    return path
