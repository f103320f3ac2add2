"""The named study ``in_node_vs_cross_node``: TP 8 in one node against TP 16 over two nodes and
TP 8 over two nodes with 4 GPUs each."""

from __future__ import annotations

from pathlib import Path

from tpsim.experiments.studies.base import Row, Study, StudyEntry, good, points, save, table
from tpsim.experiments.sweep.run import run_points

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
    at = {(r["tp"], r["hosts"], r["batch"]): r for r in rows if good(r)}
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
    lines += table(rows, lambda r: f"{_placement(r)} b{r['batch']}")
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


STUDY = StudyEntry(
    "in_node_vs_cross_node",
    2,
    "TP in one 8x H100 node against TP spread over two nodes",
    in_node_vs_cross_node,
)
