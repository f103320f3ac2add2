"""``tpsim demo``: does more TP pay for a 70B model on one 8x H100 node?

Simulates Llama-3.1-70B decode steps at TP 1, 2, 4, 8 and several batch sizes on
dgx-h100, then writes three plots: throughput against TP, the critical-path breakdown and
a Gantt chart of two layers at TP 8.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from experiments.plots import gantt
from experiments.sweep_plots import breakdown_bars, throughput_vs_tp
from simulator import ConfigError, Workload, simulate
from simulator.report import title as run_title

MODEL, TOPOLOGY, CONTEXT = "llama-3.1-70b", "dgx-h100", 2048
TPS, BATCHES = (1, 2, 4, 8), (1, 8, 32, 128)


def run_demo(out: Path) -> Iterator[str]:
    """Run the study, write its plots under ``out`` and yield report lines."""
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    yield f"{MODEL} decode on {TOPOLOGY}, context {CONTEXT}:"
    yield f"  {'TP':>3} {'batch':>6} {'step (ms)':>10} {'tokens/s':>10} {'per GPU':>9}  regime"
    for tp in TPS:
        for batch in BATCHES:
            try:
                r = simulate(MODEL, TOPOLOGY, tp, Workload(batch, "decode", context_len=CONTEXT))
            except ConfigError as exc:
                yield f"  {tp:>3} {batch:>6}  skipped: {str(exc).split(':')[1].strip()}"
                continue
            s = r.summary
            rows.append(
                {
                    "tp": tp,
                    "batch": batch,
                    **{
                        k: s[k]
                        for k in (
                            "latency_s",
                            "tokens_per_s",
                            "tokens_per_s_per_gpu",
                            "regime",
                            "breakdown_s",
                        )
                    },
                }
            )
            yield (
                f"  {tp:>3} {batch:>6} {s['latency_s'] * 1e3:>10.2f} "
                f"{s['tokens_per_s']:>10.0f} {s['tokens_per_s_per_gpu']:>9.0f}  {s['regime']}"
            )
    head = f"{MODEL} decode on {TOPOLOGY} (context {CONTEXT})"
    throughput_vs_tp(rows, out / "throughput_vs_tp.png", title=head)
    breakdown_bars(
        [r for r in rows if r["batch"] in (8, 128)],
        out / "breakdown.png",
        title=f"{head}: where a step's time goes",
    )
    g = simulate(MODEL, TOPOLOGY, 8, Workload(8, "decode", context_len=CONTEXT))
    gantt(
        g.records,
        out / "gantt_tp8.png",
        title=run_title(g.summary) + " (layers 0-1)",
        layers=(0, 1),
        critical=g.critical_path,
        rank_labels=g.rank_labels,
    )
    for name in ("throughput_vs_tp.png", "breakdown.png", "gantt_tp8.png"):
        yield f"wrote {out / name}"
