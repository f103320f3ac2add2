"""Sweeps: run every point of a grid and stream one row per point to a results file.

    rows = run_sweep(points, "s.csv", jobs=4)        # or scheduler="tcp://host:8786"

Points run in batches on a ``concurrent.futures`` process pool (``jobs`` workers; ``jobs=1``
runs in this process) or on an existing Dask cluster. Rows are written as batches finish, so
the file order follows completion, but each row's text depends on its point only.

The file is a ledger (see results.py): a row is written only when the point is done, with
a result or an ``error`` of the point itself (a point that raises). A failure of the
machinery is retried, and never written: a worker process that dies takes down its pool,
which is restarted, and the points it was running are retried one at a time in a fresh
worker (up to :data:`MAX_TRIES` times each, with backoff); a Dask task that fails or is
cancelled is submitted again the same way. A point still without a row is left out, the
report counts it as ``remaining`` and the CLI exits :data:`EXIT_INCOMPLETE`; ``resume=True``
runs the points not done. A results file that stops taking rows (a full disk, a file size
limit) stops the sweep: the rows written stay whole, and every point without a row, from the
batch in hand on, is ``remaining``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpsim.core.errors import ConfigError
from tpsim.experiments.sweep.cluster import (
    CONNECT_S,
    POLL_S,
    PROBE_S,
    WAIT_WORKERS_S,
    connect,
    dask_rows,
    quiet_dask,
)
from tpsim.experiments.sweep.grid import GridPoint
from tpsim.experiments.sweep.pool import die_with, pool_rows
from tpsim.experiments.sweep.results import RowNotWritten, infrastructure_error, open_results
from tpsim.experiments.sweep.tasks import (
    BACKOFF_S,
    MAX_BATCH,
    MAX_TRIES,
    Evaluate,
    Row,
    run_batch,
    run_point,
)
from tqdm import tqdm

#: The public names of ``tpsim.experiments.sweep.run``; the tasks and the two executors live in
#: sweep_tasks.py, sweep_pool.py and sweep_dask.py and are re-exported here, as they were
#: defined here before.
__all__ = [
    "BACKOFF_S",
    "CONNECT_S",
    "EXIT_INCOMPLETE",
    "MAX_BATCH",
    "MAX_TRIES",
    "POLL_S",
    "PROBE_S",
    "WAIT_WORKERS_S",
    "Evaluate",
    "Row",
    "SweepIncomplete",
    "SweepReport",
    "connect",
    "default_jobs",
    "die_with",
    "iter_rows",
    "quiet_dask",
    "run_batch",
    "run_point",
    "run_points",
    "run_sweep",
]

#: Exit code of a sweep that ended with points not done (rerun with --resume).
EXIT_INCOMPLETE = 3


def iter_rows(
    points: Sequence[GridPoint],
    *,
    jobs: int = 1,
    scheduler: Any = None,
    evaluate: Evaluate = run_point,
    wait_workers_s: float = WAIT_WORKERS_S,
) -> Generator[list[Row], None, None]:
    """Rows of ``points`` in batches, as they finish (completion order). ``scheduler``: a
    Dask scheduler address or client; else a process pool of ``jobs`` (1: this process).
    A point the machinery lost has a row whose error is an ``infrastructure_error``."""
    if not points:
        return
    if scheduler:
        yield from dask_rows(points, scheduler, evaluate, wait_workers_s)
    elif jobs <= 1:
        for p in points:
            yield run_batch(evaluate, [p])
    else:
        yield from pool_rows(points, jobs, evaluate)


@dataclass(frozen=True)
class SweepReport:
    path: Path
    points: int  # in the grid
    skipped: int  # already in the file (resume)
    ran: int  # done in this run (written)
    errors: int
    not_fitting: int
    remaining: int = 0  # lost by the machinery: not written, --resume runs them
    why: str = ""  # what lost them (the last such failure)


class SweepIncomplete(RuntimeError):
    """Points the machinery lost after its retries (a study cannot go on without them)."""


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def run_sweep(
    points: Sequence[GridPoint],
    out: str | Path,
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool | None = None,
    evaluate: Evaluate = run_point,
    wait_workers_s: float = WAIT_WORKERS_S,
) -> SweepReport:
    """Run the points not yet done in ``out`` and append their rows as they finish;
    ``progress``: a bar on stderr (None: when stderr is a terminal, as a library call
    should: nothing printed into a notebook's or a service's logs unasked)."""
    if jobs is not None and not 1 <= jobs <= 1024:
        raise ConfigError(f"--jobs={jobs}: must be between 1 and 1024")
    if not 0 < wait_workers_s <= 86_400:
        raise ConfigError(f"--wait-workers={wait_workers_s:g}: must be in (0, 86400] seconds")
    client = connect(scheduler) if scheduler else None  # before any file is created
    try:
        writer, done = open_results(out, resume=resume, overwrite=overwrite)
    except BaseException:
        if client is not None:
            client.close()
        raise
    todo = [p for p in points if p.point_id not in done]
    ran = errors = not_fitting = remaining = 0
    why = stopped = ""
    bar = tqdm(
        total=len(points),
        initial=len(points) - len(todo),
        unit="point",
        file=sys.stderr,
        disable=None if progress is None else not progress,
        dynamic_ncols=True,
    )
    batches = iter_rows(
        todo,
        jobs=jobs or default_jobs(),
        scheduler=client,
        evaluate=evaluate,
        wait_workers_s=wait_workers_s,
    )
    with writer, bar:
        try:
            for rows in batches:
                for row in rows:
                    if infrastructure_error(row):
                        remaining += 1
                        why = row["error"]
                        continue
                    try:
                        writer.write(row)
                    except RowNotWritten as exc:  # a full disk: stop, say what is not done
                        stopped = str(exc)
                        break
                    ran += 1
                    errors += bool(row.get("error"))
                    not_fitting += row.get("fits") is False
                bar.update(len(rows))
                if stopped:
                    break
        finally:
            batches.close()  # stops the workers now, also on Ctrl-C
            if client is not None:
                client.close(timeout=CONNECT_S)
    if stopped:  # every point of this run without a row, from the batch in hand on
        remaining, why = len(todo) - ran, stopped
    skipped = len(points) - len(todo)
    return SweepReport(Path(out), len(points), skipped, ran, errors, not_fitting, remaining, why)


def run_points(
    points: Sequence[GridPoint], *, jobs: int = 1, scheduler: str | None = None
) -> list[Row]:
    """Rows of ``points`` in the points' order (for studies: no file, no progress bar).
    Raises :class:`SweepIncomplete` if the machinery lost points after its retries."""
    by_id: dict[str, Row] = {}
    for rows in iter_rows(points, jobs=jobs, scheduler=scheduler):
        by_id.update((r["point_id"], r) for r in rows)
    lost = [r for r in by_id.values() if infrastructure_error(r)]
    if lost:
        raise SweepIncomplete(f"{len(lost)} points not simulated: {lost[0]['error']}")
    return [by_id[p.point_id] for p in points]
