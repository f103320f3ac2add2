"""Named studies: each a function ``study(out=None, *, jobs=1) -> Study`` and ``tpsim study NAME``.

- ``tp_batch_sweep``: where more TP stops paying for a 70B model on H100 (the headline study,
  what ``tpsim demo`` runs);
- ``in_node_vs_cross_node``: TP 8 in one node against TP 16 over two nodes and TP 8 over two
  nodes with 4 GPUs each;
- ``launch_overhead``: eager against CUDA graphs against torch.compile, across model sizes;
- ``worked_examples``: every worked number of the design
(tpsim.experiments.studies.worked_examples);
- ``engines``: one model on the ideal engine and on vLLM V0 and V1 across TP
  (tpsim.experiments.studies.engines);
- ``tp_vs_pp_vs_dp``: all-TP across nodes against TP x PP and replicas on the same GPUs
  (tpsim.experiments.studies.tp_vs_pp_vs_dp).

A study returns its report lines, a small ``summary`` of facts a reader can check (what the
golden tests assert), its rows (sweep rows, tpsim.experiments.sweep.results) and the plots it wrote.
With ``out``, it writes ``<name>.csv`` (its rows) and its plots there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpsim.experiments.plots.words import row_regime_text
from tpsim.experiments.sweep.grid import Point, expand
from tpsim.experiments.sweep.results import results_text
from tpsim.experiments.sweep.run import run_points
from tpsim.outputs.export import make_folder, write_json, write_text

Row = dict[str, Any]


@dataclass(frozen=True)
class Study:
    name: str
    lines: list[str]
    summary: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)


def points(*grids: dict[str, Any]) -> list[Point]:
    """The points of several grids, in order, without duplicates."""
    return list(dict.fromkeys(p for g in grids for p in expand(g, "study grid")))


def _good(r: Row) -> bool:
    return not r.get("error") and r.get("fits") is True


def _table(rows: Sequence[Row], label: Callable[[Row], str]) -> list[str]:
    lines = [
        f"  {'':<22} {'step (ms)':>10} {'tokens/s':>10} {'per GPU':>9}  regime (share of the path)"
    ]
    for r in rows:
        if r.get("error"):
            lines.append(f"  {label(r):<22} error: {r['error']}")
        elif not r["fits"]:
            lines.append(f"  {label(r):<22} does not fit ({r['total_bytes_per_gpu'] / 1e9:.0f} GB)")
        else:
            lines.append(
                f"  {label(r):<22} {r['latency_s'] * 1e3:>10.2f} {r['tokens_per_s']:>10,.0f} "
                f"{r['tokens_per_s_per_gpu']:>9,.0f}  {row_regime_text(r)}"
            )
    return lines


def save(name: str, out: Path | None, rows: Sequence[Row], summary: dict[str, Any]) -> None:
    """Write ``<name>.csv`` (the rows) and ``<name>.json`` (the summary) under ``out``."""
    if out is None:
        return
    make_folder(out)
    write_text(out / f"{name}.csv", results_text(rows, "csv"))
    write_json(out / f"{name}.json", summary, indent=2)


# --- tp_batch_sweep -----------------------------------------------------------------------

HEADLINE_MODEL, HEADLINE_TOPOLOGY, HEADLINE_CONTEXT = "llama-3.1-70b", "dgx-h100", 2048
HEADLINE_BATCHES = (1, 8, 32, 128)
HEADLINE_TPS = (1, 2, 4, 8, 16)
PAYS = 1.25


def tp_batch_sweep(out: Path | None = None, *, jobs: int = 1) -> Study:
    """Llama-3.1-70B decode on 8x H100 at TP 1, 2, 4, 8 in one node and TP 16 over two nodes.

    A doubling of TP "pays" when it raises the group's tokens/s by at least ``PAYS`` (a
    quarter more tokens for twice the GPUs); ``pays_up_to[batch]`` is the largest TP reached
    by doublings that all paid, starting from the smallest TP that fits.
    """
    base = {
        "model": HEADLINE_MODEL,
        "topology": HEADLINE_TOPOLOGY,
        "batch": list(HEADLINE_BATCHES),
        "context_len": HEADLINE_CONTEXT,
    }
    grids = (base | {"tp": [1, 2, 4, 8]}, base | {"tp": 16, "nodes": 2})
    rows = run_points(points(*grids), jobs=jobs)
    at = {(r["tp"], r["batch"]): r for r in rows if _good(r)}
    summary: dict[str, Any] = {
        "fits": {tp: [b for b in HEADLINE_BATCHES if (tp, b) in at] for tp in HEADLINE_TPS},
        "best_tp": {},
        "best_tp_per_gpu": {},
        "doubling_gain": {},
        "pays_up_to": {},
        "regime_tp8": {b: at[8, b]["regime"] for b in HEADLINE_BATCHES if (8, b) in at},
    }
    lines = [f"{HEADLINE_MODEL} decode on {HEADLINE_TOPOLOGY}, context {HEADLINE_CONTEXT}"]
    lines += _table(rows, lambda r: f"TP {r['tp']:>2} batch {r['batch']:>4}")
    for b in HEADLINE_BATCHES:
        tps = [tp for tp in HEADLINE_TPS if (tp, b) in at]
        gain = {tp: at[tp, b]["tokens_per_s"] / at[tp // 2, b]["tokens_per_s"] for tp in tps[1:]}
        pays = tps[0]
        while 2 * pays in gain and gain[2 * pays] >= PAYS:
            pays *= 2
        summary["best_tp"][b] = max(tps, key=lambda tp: at[tp, b]["tokens_per_s"])
        summary["best_tp_per_gpu"][b] = max(tps, key=lambda tp: at[tp, b]["tokens_per_s_per_gpu"])
        summary["doubling_gain"][b] = gain
        summary["pays_up_to"][b] = pays
        steps = ", ".join(f"{tp // 2}->{tp} {g:.2f}x" for tp, g in gain.items())
        lines.append(
            f"  batch {b:>4}: tokens/s gain per doubling of TP: {steps}; "
            f"more TP pays up to TP {pays}"
        )
    lines.append("  (TP 16 spans two nodes over InfiniBand; a doubling pays at >= 1.25x)")
    save("tp_batch_sweep", out, rows, summary)
    plots = _headline_plots(rows, out) if out is not None else []
    return Study("tp_batch_sweep", lines, summary, rows, plots)


def _headline_plots(rows: Sequence[Row], out: Path) -> list[Path]:
    from tpsim.experiments.plots import sweep as sweep_plots
    from tpsim.experiments.plots.figures import draw_gantt

    head = (
        f"{HEADLINE_MODEL} decode on {HEADLINE_TOPOLOGY} (context {HEADLINE_CONTEXT}; "
        "TP 16 over 2 nodes)"
    )
    paths = [
        out / n
        for n in ("throughput_vs_tp.png", "breakdown.png", "regime_map.png", "gantt_tp8.png")
    ]
    sweep_plots.throughput_vs_tp(rows, paths[0], title=head)
    sweep_plots.breakdown_bars(
        rows,  # every batch, a panel each on its own scale
        paths[1],
        title=f"{head}: where a step's time goes",
    )
    sweep_plots.regime_map(
        rows, paths[2], title=f"{HEADLINE_MODEL} decode on {HEADLINE_TOPOLOGY}: regime and tokens/s"
    )
    draw_gantt(next(r for r in rows if r["tp"] == 8 and r["batch"] == 8), paths[3])
    return paths


# --- in_node_vs_cross_node ----------------------------------------------------------------

PLACEMENT_MODEL, PLACEMENT_BATCHES = "llama-3.1-70b", (1, 32)


def _placement(r: Row) -> str:
    if r["hosts"] == 1:
        return f"TP {r['tp']} in one node"
    return f"TP {r['tp']} over {r['hosts']} nodes x {r['tp'] // r['hosts']}"


def in_node_vs_cross_node(out: Path | None = None, *, jobs: int = 1) -> Study:
    """TP in one 8x H100 node against TP spread over two nodes (NDR InfiniBand, 50 GB/s per GPU)."""
    base = {
        "model": PLACEMENT_MODEL,
        "topology": "dgx-h100",
        "batch": list(PLACEMENT_BATCHES),
        "context_len": 1024,
    }
    grids = [base | {"tp": [4, 8]}] + [
        base | {"tp": tp, "nodes": 2, "gpus_per_node": tp // 2} for tp in (4, 8, 16)
    ]
    rows = run_points(points(*grids), jobs=jobs)
    at = {(r["tp"], r["hosts"], r["batch"]): r for r in rows if _good(r)}
    summary = {
        "tp8_cross_slower_than_tp8_in_node": {
            b: at[8, 2, b]["latency_s"] > at[8, 1, b]["latency_s"] for b in PLACEMENT_BATCHES
        },
        "tp16_cross_slower_than_tp8_in_node": {
            b: at[16, 2, b]["latency_s"] > at[8, 1, b]["latency_s"] for b in PLACEMENT_BATCHES
        },
        "tp16_cross_gain_over_tp8_in_node": {
            b: at[16, 2, b]["tokens_per_s"] / at[8, 1, b]["tokens_per_s"] for b in PLACEMENT_BATCHES
        },
        "comm_ratio_tp8_cross_over_in_node": {
            b: at[8, 2, b]["communication_s"] / at[8, 1, b]["communication_s"]
            for b in PLACEMENT_BATCHES
        },
    }
    lines = [f"{PLACEMENT_MODEL} decode on dgx-h100 (context 1024): one node against two"]
    lines += _table(rows, lambda r: f"{_placement(r)} b{r['batch']}")
    for b in PLACEMENT_BATCHES:
        lines.append(
            f"  batch {b}: TP 8 over two nodes spends "
            f"{summary['comm_ratio_tp8_cross_over_in_node'][b]:.1f}x the communication time of "
            f"TP 8 in one node; TP 16 over two nodes gives "
            f"{summary['tp16_cross_gain_over_tp8_in_node'][b]:.2f}x its tokens/s on twice the GPUs"
        )
    save("in_node_vs_cross_node", out, rows, summary)
    plots: list[Path] = []
    if out is not None:
        from tpsim.experiments.plots import sweep as sweep_plots

        path = out / "in_node_vs_cross_node.png"
        sweep_plots.in_node_vs_cross_node(
            rows, path, title=f"{PLACEMENT_MODEL} decode on dgx-h100: one node vs two"
        )
        plots = [path]
    return Study("in_node_vs_cross_node", lines, summary, rows, plots)


# --- launch_overhead ----------------------------------------------------------------------

LAUNCH_MODELS = ("llama-3.1-8b", "llama-2-13b", "llama-3.1-70b")


def launch_overhead(out: Path | None = None, *, jobs: int = 1) -> Study:
    """Decode batch 1 at TP 8 on dgx-h100 with eager, graph and compiled launches."""
    grid = {
        "model": list(LAUNCH_MODELS),
        "topology": "dgx-h100",
        "tp": 8,
        "context_len": 1024,
        "launch": ["eager", "graph", "compiled"],
    }
    rows = run_points(points(grid), jobs=jobs)
    at = {(r["model"], r["launch"]): r for r in rows}
    ratio = {m: at[m, "eager"]["latency_s"] / at[m, "graph"]["latency_s"] for m in LAUNCH_MODELS}
    summary = {
        "eager_over_graph": ratio,
        "eager_slowest": all(
            at[m, "eager"]["latency_s"]
            > max(at[m, "graph"]["latency_s"], at[m, "compiled"]["latency_s"])
            for m in LAUNCH_MODELS
        ),
        "compiled_fastest": all(
            at[m, "compiled"]["latency_s"] <= at[m, "graph"]["latency_s"] for m in LAUNCH_MODELS
        ),
        "regime": {
            f"{m} {mode}": at[m, mode]["regime"]
            for m in LAUNCH_MODELS
            for mode in ("eager", "graph", "compiled")
        },
    }
    lines = ["decode batch 1, TP 8 on dgx-h100, context 1024: kernel launch modes"]
    lines += _table(rows, lambda r: f"{r['model']} {r['launch']}")
    lines += [f"  {m}: eager / graph step time {ratio[m]:.2f}x" for m in LAUNCH_MODELS]
    save("launch_overhead", out, rows, summary)
    plots: list[Path] = []
    if out is not None:
        plots = [out / "launch_overhead.png"]
        _launch_plot(rows, plots[0])
    return Study("launch_overhead", lines, summary, rows, plots)


def _launch_plot(rows: Sequence[Row], path: Path) -> None:
    from matplotlib.figure import Figure
    from tpsim.experiments.plots.gantt import save_figure
    from tpsim.experiments.plots.sweep import CATEGORY_COLOURS, FONT

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


def _engines(out: Path | None = None, *, jobs: int = 1) -> Study:
    from tpsim.experiments.studies.engines import engines

    return engines(out, jobs=jobs)


def _worked(out: Path | None = None, *, jobs: int = 1) -> Study:
    from tpsim.experiments.studies.worked_examples import worked_examples

    return worked_examples(out, jobs=jobs)


def _tp_vs_pp_vs_dp(out: Path | None = None, *, jobs: int = 1) -> Study:
    from tpsim.experiments.studies.tp_vs_pp_vs_dp import tp_vs_pp_vs_dp

    study: Study = tp_vs_pp_vs_dp(out, jobs=jobs)
    return study


#: Study name -> function; ``tpsim study NAME`` runs one.
STUDIES: dict[str, Callable[..., Study]] = {
    "worked_examples": _worked,
    "tp_batch_sweep": tp_batch_sweep,
    "in_node_vs_cross_node": in_node_vs_cross_node,
    "launch_overhead": launch_overhead,
    "engines": _engines,
    "tp_vs_pp_vs_dp": _tp_vs_pp_vs_dp,
}
