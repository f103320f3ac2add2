"""Sweeps: run every point of a grid and stream one row per point to a results file.

    rows = run_sweep(points, "s.csv", jobs=4)        # or scheduler="tcp://host:8786"

Points run in batches on a ``concurrent.futures`` process pool (``jobs`` workers; ``jobs=1``
runs in this process) or on an existing Dask cluster. Rows are written as batches finish, so
the file order follows completion, but each row's text depends on its point only. A point
that raises gives a row with an ``error``; a worker process that dies takes down its pool,
which is restarted, and the points it was running are retried one at a time in a fresh
worker, so only the point that kills a worker gets the error row. ``resume=True`` skips the
points already in the file.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpsim.core.api import simulate
from tpsim.core.errors import INPUT_ERRORS, ConfigError
from tpsim.experiments.grid import Point
from tpsim.experiments.results import BREAKDOWN, MEMORY, open_results
from tpsim.topologies.io import get_topology
from tqdm import tqdm

log = logging.getLogger(__name__)

Row = dict[str, Any]
Evaluate = Callable[[Point], Row]

MAX_BATCH = 8  # points per task at most: small enough that a kill loses little
WORKER_DIED = "worker process died while simulating this point"


def run_point(point: Point) -> Row:
    """Simulate one point and return its row (never raises for a bad point: ``error``)."""
    row: Row = point.params()
    try:
        graph = get_topology(point.topology, point.nodes)
        s = simulate(
            point.model, graph, point.layout(), point.workload(), point.options(), nodes=point.nodes
        ).summary
    except INPUT_ERRORS as exc:
        return row | {"error": str(exc)}
    comm = s["communication"]
    return row | {
        "gpu": s["config"]["gpu"],
        "hosts": len({graph.nodes[n].get("host", 0) for n in s["config"]["gpus"]}),
        "latency_s": s["latency_s"],
        "tokens_per_s": s["tokens_per_s"],
        "tokens_per_s_per_gpu": s["tokens_per_s_per_gpu"],
        "regime": s["regime"],
        **{f"{c}_s": s["breakdown_s"][c] for c in BREAKDOWN},
        "fits": s["memory"]["fits"],
        **{m: s["memory"][m] for m in MEMORY},
        "collectives": comm["collectives"],
        "comm_bytes_per_gpu": comm["bytes_sent_per_gpu"],
    }


def _safe(evaluate: Evaluate, point: Point) -> Row:
    try:
        return evaluate(point)
    except Exception as exc:  # a bug for one point must not end the sweep
        log.debug("point %s raised", point.point_id, exc_info=True)
        return point.params() | {"error": f"{type(exc).__name__}: {exc}"}


def run_batch(evaluate: Evaluate, points: Sequence[Point]) -> list[Row]:
    """One task: the rows of a few points, in order; a point that raises gets an error row."""
    return [_safe(evaluate, p) for p in points]


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops the pool and keeps the file whole."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _batches(points: Sequence[Point], workers: int) -> list[list[Point]]:
    size = max(1, min(MAX_BATCH, math.ceil(len(points) / (4 * workers))))
    return [list(points[i : i + size]) for i in range(0, len(points), size)]


def _new_pool(workers: int) -> ProcessPoolExecutor:
    """Workers forked from a clean server process that has imported the simulator once
    (no fork of this possibly multi-threaded process, and cheap worker starts)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tpsim.experiments.sweep"])
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_ignore_sigint)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: cancel what has not started, end our worker processes by id."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=5)


def _pool_rows(points: Sequence[Point], jobs: int, evaluate: Evaluate) -> Iterator[list[Row]]:
    queue = deque(_batches(points, jobs))
    while queue:
        suspects: list[Point] = []
        pool = _new_pool(jobs)
        try:
            inflight: dict[Future[list[Row]], list[Point]] = {}
            while queue or inflight:
                while queue and len(inflight) < 2 * jobs and not suspects:
                    batch = queue.popleft()
                    try:
                        inflight[pool.submit(run_batch, evaluate, batch)] = batch
                    except BrokenProcessPool:  # a worker died since the last wait
                        suspects += batch
                if suspects:
                    for batch in inflight.values():
                        suspects += batch
                    break
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for f in done:
                    batch = inflight.pop(f)
                    try:
                        rows = f.result()
                    except BrokenProcessPool:
                        suspects += batch
                        continue
                    yield rows
                if suspects:  # the pool is broken: every unfinished batch is a suspect
                    for batch in inflight.values():
                        suspects += batch
                    break
        finally:
            _stop(pool)
        if suspects:
            log.warning("a worker died; retrying %d points one at a time", len(suspects))
            yield from _isolated(suspects, evaluate)


def _isolated(points: Sequence[Point], evaluate: Evaluate) -> Iterator[list[Row]]:
    """Run each point alone in a one-worker pool, so a death names the point that caused it."""
    pool = _new_pool(1)
    try:
        for p in points:
            try:
                yield pool.submit(run_batch, evaluate, [p]).result()
            except BrokenProcessPool:
                yield [p.params() | {"error": WORKER_DIED}]
                _stop(pool)
                pool = _new_pool(1)
    finally:
        _stop(pool)


def connect(address: str) -> Any:
    """A Dask client of the scheduler at ``address`` (ConfigError if Dask or it is missing)."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError(
            f"--scheduler={address}: needs Dask; install tpsim[dask] (dask[distributed])"
        ) from None
    try:
        return Client(address, timeout=20, set_as_default=False)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"--scheduler={address}: cannot connect ({exc})") from None


def _dask_rows(points: Sequence[Point], scheduler: Any, evaluate: Evaluate) -> Iterator[list[Row]]:
    """Batches as Dask tasks; ``scheduler`` is an address (connected and closed here) or a
    client (left open)."""
    from distributed import as_completed

    client = connect(scheduler) if isinstance(scheduler, str) else scheduler
    try:
        workers = max(1, sum(client.nthreads().values()))
        batches = _batches(points, workers)
        futures = {client.submit(run_batch, evaluate, b, pure=False): b for b in batches}
        for f in as_completed(list(futures), loop=client.loop):
            try:
                rows = f.result()
            except Exception as exc:  # KilledWorker after Dask's own retries, or a lost task
                rows = [p.params() | {"error": f"dask task failed: {exc!r}"} for p in futures[f]]
            yield rows
            f.release()
    finally:
        if client is not scheduler:
            client.close()


def iter_rows(
    points: Sequence[Point],
    *,
    jobs: int = 1,
    scheduler: Any = None,
    evaluate: Evaluate = run_point,
) -> Generator[list[Row], None, None]:
    """Rows of ``points`` in batches, as they finish (completion order). ``scheduler``: a
    Dask scheduler address or client; else a process pool of ``jobs`` (1: this process)."""
    if not points:
        return
    if scheduler:
        yield from _dask_rows(points, scheduler, evaluate)
    elif jobs <= 1:
        for p in points:
            yield run_batch(evaluate, [p])
    else:
        yield from _pool_rows(points, jobs, evaluate)


@dataclass(frozen=True)
class SweepReport:
    path: Path
    points: int  # in the grid
    skipped: int  # already in the file (resume)
    ran: int
    errors: int
    not_fitting: int


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def run_sweep(
    points: Sequence[Point],
    out: str | Path,
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    evaluate: Evaluate = run_point,
) -> SweepReport:
    """Run the points not yet in ``out`` and append their rows as they finish."""
    if jobs is not None and not 1 <= jobs <= 1024:
        raise ConfigError(f"--jobs={jobs}: must be between 1 and 1024")
    client = connect(scheduler) if scheduler else None  # before any file is created
    try:
        writer, done = open_results(out, resume=resume, overwrite=overwrite)
    except BaseException:
        if client is not None:
            client.close()
        raise
    todo = [p for p in points if p.point_id not in done]
    errors = not_fitting = 0
    bar = tqdm(
        total=len(points),
        initial=len(points) - len(todo),
        unit="point",
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
    )
    batches = iter_rows(todo, jobs=jobs or default_jobs(), scheduler=client, evaluate=evaluate)
    with writer, bar:
        try:
            for rows in batches:
                for row in rows:
                    writer.write(row)
                    errors += bool(row.get("error"))
                    not_fitting += row.get("fits") is False
                bar.update(len(rows))
        finally:
            batches.close()  # stops the workers now, also on Ctrl-C
            if client is not None:
                client.close()
    return SweepReport(
        Path(out), len(points), len(points) - len(todo), len(todo), errors, not_fitting
    )


def run_points(
    points: Sequence[Point], *, jobs: int = 1, scheduler: str | None = None
) -> list[Row]:
    """Rows of ``points`` in the points' order (for studies: no file, no progress bar)."""
    by_id: dict[str, Row] = {}
    for rows in iter_rows(points, jobs=jobs, scheduler=scheduler):
        by_id.update((r["point_id"], r) for r in rows)
    return [by_id[p.point_id] for p in points]
