"""The named study ``tp_batch_sweep``: where more TP stops paying for a 70B model on H100 (the
headline study, what ``tpsim demo`` runs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tpsim.experiments.studies.base import Row, Study, StudyEntry, good, points, save, table
from tpsim.experiments.sweep.run import run_points

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
    at = {(r["tp"], r["batch"]): r for r in rows if good(r)}
    summary: dict[str, Any] = {
        "fits": {tp: [b for b in HEADLINE_BATCHES if (tp, b) in at] for tp in HEADLINE_TPS},
        "best_tp": {},
        "best_tp_per_gpu": {},
        "doubling_gain": {},
        "pays_up_to": {},
        "regime_tp8": {b: at[8, b]["regime"] for b in HEADLINE_BATCHES if (8, b) in at},
    }
    lines = [f"{HEADLINE_MODEL} decode on {HEADLINE_TOPOLOGY}, context {HEADLINE_CONTEXT}"]
    lines += table(rows, lambda r: f"TP {r['tp']:>2} batch {r['batch']:>4}")
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


STUDY = StudyEntry(
    "tp_batch_sweep",
    1,
    "where more TP stops paying for a 70B model on H100 (the headline study, tpsim demo)",
    tp_batch_sweep,
)
