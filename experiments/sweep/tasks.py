"""What one task of a sweep is: the row of a point, a batch of points, and what becomes of
points the machinery loses (retried after a backoff, else a row that is never written).

A point that raises gets an ``error`` row of its own (a bug for one point must not end the
sweep); a point whose worker or task is lost is run again up to :data:`MAX_TRIES` times by the
executors (sweep_pool.py, sweep_dask.py) and otherwise left not done (see results.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from tpsim.core.api import simulate
from tpsim.core.errors import INPUT_ERRORS
from tpsim.experiments.sweep.grid import GridPoint
from tpsim.experiments.sweep.rows import BREAKDOWN, IN_FLIGHT, MEMORY
from tpsim.topologies.io import get_topology

log = logging.getLogger(__name__)

Row = dict[str, Any]
Evaluate = Callable[[GridPoint], Row]

MAX_BATCH = 8  # points per task at most: small enough that a kill loses little
MAX_TRIES = 3  # runs of a point whose worker or task is lost, before it is left not done
BACKOFF_S = 0.25  # wait before retry k: BACKOFF_S * 2**(k - 1)


def run_point(point: GridPoint) -> Row:
    """Simulate one point and return its row (never raises for a bad point: ``error``)."""
    row: Row = point.params()
    try:
        graph = get_topology(point.topology, point.nodes)
        s = simulate(
            point.model, graph, point.layout(), point.workload(), point.options(), nodes=point.nodes
        ).typed
    except INPUT_ERRORS as exc:
        return row | {"error": str(exc)}
    comm, parts, mem, flight = s.communication, s.breakdown, s.memory, s.in_flight
    # a pipeline's decode kept full, as run --json's in_flight (no columns for other points)
    if flight is not None:
        row |= {f"in_flight_{k}": getattr(flight, k) for k in IN_FLIGHT}
    return row | {
        "gpu": s.config.gpu,
        "hosts": len({graph.nodes[n].get("host", 0) for n in _tp_group(s.config)}),
        "latency_s": s.latency_s,
        "tokens_per_s": s.tokens_per_s,
        "tokens_per_s_per_gpu": s.tokens_per_s_per_gpu,
        "regime": s.regime,
        **{f"{c}_s": getattr(parts, c) for c in BREAKDOWN},
        "bubble_s": 0.0 if parts.bubble is None else parts.bubble,
        "fits": mem.fits,
        **{m: getattr(mem, m) for m in MEMORY},
        "collectives": comm.collectives,
        "comm_bytes_per_gpu": comm.bytes_sent_per_gpu,
    }


def _tp_group(config: Any) -> tuple[str, ...]:
    """The GPUs of the first TP group (its attention-DP groups with it: the MoE group) of a
    run's layout; every GPU for a run of one group."""
    if config.placement is None:
        return tuple(config.gpus)
    return tuple(p.gpu for p in config.placement if p.dp == 0 and p.pp == 0)


def _safe(evaluate: Evaluate, point: GridPoint) -> Row:
    try:
        return evaluate(point)
    except Exception as exc:  # a bug for one point must not end the sweep
        log.debug("point %s raised", point.point_id, exc_info=True)
        return point.params() | {"error": f"{type(exc).__name__}: {exc}"}


def run_batch(evaluate: Evaluate, points: Sequence[GridPoint]) -> list[Row]:
    """One task: the rows of a few points, in order; a point that raises gets an error row."""
    return [_safe(evaluate, p) for p in points]


def batches(points: Sequence[GridPoint], workers: int) -> list[list[GridPoint]]:
    """The points in order, in tasks of at most :data:`MAX_BATCH` (about four per worker)."""
    size = max(1, min(MAX_BATCH, math.ceil(len(points) / (4 * workers))))
    return [list(points[i : i + size]) for i in range(0, len(points), size)]


def lost_rows(points: Sequence[GridPoint], why: str) -> list[Row]:
    """Rows for points the machinery lost: not done, never written (see results.py)."""
    return [p.params() | {"error": why} for p in points]


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...) of a lost point."""
    return float(BACKOFF_S * 2 ** (attempt - 1))
