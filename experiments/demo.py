"""``tpsim demo``: the headline study. Does more TP pay for a 70B model on 8x H100?

Runs :func:`tpsim.experiments.studies.tp_batch_sweep.tp_batch_sweep` (Llama-3.1-70B decode
at TP 1, 2, 4, 8 in one node and TP 16 over two, four batch sizes) on a process pool, prints
its table and writes its plots: throughput against TP, the critical-path breakdown, the
regime map and a Gantt chart of two layers at TP 8.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tpsim.experiments.studies.tp_batch_sweep import tp_batch_sweep
from tpsim.experiments.sweep.run import default_jobs


def run_demo(out: Path, *, jobs: int | None = None) -> Iterator[str]:
    """Run the study, write its rows and plots under ``out`` and yield report lines."""
    study = tp_batch_sweep(out, jobs=jobs or default_jobs())
    yield from study.lines
    yield f"wrote {out / 'tp_batch_sweep.csv'} (one row per point)"
    for path in study.plots:
        yield f"wrote {path}"
