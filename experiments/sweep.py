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
runs the points not done.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import select
import signal
import socket
import sys
import threading
import time
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
from tpsim.experiments.results import (
    BREAKDOWN,
    DASK_FAILED,
    MEMORY,
    WORKER_DIED,
    infrastructure_error,
    open_results,
)
from tpsim.topologies.io import get_topology
from tqdm import tqdm

log = logging.getLogger(__name__)

Row = dict[str, Any]
Evaluate = Callable[[Point], Row]

MAX_BATCH = 8  # points per task at most: small enough that a kill loses little
MAX_TRIES = 3  # runs of a point whose worker or task is lost, before it is left not done
BACKOFF_S = 0.25  # wait before retry k: BACKOFF_S * 2**(k - 1)
PROBE_S = 3.0  # a scheduler answers a TCP connection at once with its handshake
CONNECT_S = 10.0
WAIT_WORKERS_S = 30.0  # default: give up on a Dask cluster that has had no workers this long
POLL_S = 0.05
#: Exit code of a sweep that ended with points not done (rerun with --resume).
EXIT_INCOMPLETE = 3


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
        "bubble_s": s["breakdown_s"].get("bubble", 0.0),
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


def _worker_init(sweep: int) -> None:
    """Workers leave Ctrl-C to the parent (which stops the pool and keeps the file whole),
    and die with the sweep process (:func:`die_with`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with(sweep)


def die_with(pid: int) -> None:
    """End this process (``os._exit``) as soon as process ``pid`` ends, however it ends.

    A pool worker's parent is the forkserver, not the sweep, and the forkserver outlives the
    sweep while workers hold its pipe, so ``PR_SET_PDEATHSIG`` would not fire: a daemon
    thread waits on a pidfd of the sweep (Linux), or polls it every 0.2 s elsewhere."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or already gone
        fd = -1
    threading.Thread(target=_watch, args=(pid, fd), daemon=True, name="die-with-sweep").start()


def _watch(pid: int, fd: int) -> None:
    if fd >= 0:
        select.select([fd], [], [])  # readable when the process has ended
    else:
        while _alive(pid):
            time.sleep(0.2)
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _batches(points: Sequence[Point], workers: int) -> list[list[Point]]:
    size = max(1, min(MAX_BATCH, math.ceil(len(points) / (4 * workers))))
    return [list(points[i : i + size]) for i in range(0, len(points), size)]


def _new_pool(workers: int) -> ProcessPoolExecutor:
    """Workers forked from a clean server process that has imported the simulator once
    (no fork of this possibly multi-threaded process, and cheap worker starts)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tpsim.experiments.sweep"])
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(),)
    )


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: cancel what has not started, end our worker processes by id."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=5)


def _lost(points: Sequence[Point], why: str) -> list[Row]:
    """Rows for points the machinery lost: not done, never written (see results.py)."""
    return [p.params() | {"error": why} for p in points]


def _backoff(attempt: int) -> float:
    return float(BACKOFF_S * 2 ** (attempt - 1))


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
    """Run each point alone in a one-worker pool, up to :data:`MAX_TRIES` times with backoff
    while its worker dies; a point that still has no row is lost (not done)."""
    pool = _new_pool(1)
    try:
        for p in points:
            rows = _lost([p], f"{WORKER_DIED} ({MAX_TRIES} tries)")
            for attempt in range(1, MAX_TRIES + 1):
                try:
                    rows = pool.submit(run_batch, evaluate, [p]).result()
                    break
                except BrokenProcessPool:
                    _stop(pool)
                    if attempt < MAX_TRIES:
                        time.sleep(_backoff(attempt))
                    pool = _new_pool(1)
            yield rows
    finally:
        _stop(pool)


def _address(address: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a scheduler address (ConfigError if it is not one)."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    host, colon, port = rest.rpartition(":")
    if scheme not in ("tcp", "tls") or not colon or not host or not port.isdigit():
        raise ConfigError(f"--scheduler={address}: must be tcp://HOST:PORT (or tls://)")
    if not 0 < int(port) < 65536:
        raise ConfigError(f"--scheduler={address}: port {port} is not in 1..65535")
    return scheme, host.strip("[]"), int(port)


def _probe(address: str) -> None:
    """Refuse within seconds an address where nothing listens, or where something that is
    not a Dask scheduler does (a Dask scheduler speaks first: its handshake frames)."""
    if address.startswith("inproc://"):  # a scheduler in this process (tests)
        return
    scheme, host, port = _address(address)
    try:
        with socket.create_connection((host, port), timeout=PROBE_S) as sock:
            if scheme != "tcp":
                return
            sock.settimeout(PROBE_S)
            try:
                head = sock.recv(8)
            except TimeoutError:
                head = b""
    except OSError as exc:
        raise ConfigError(f"--scheduler={address}: cannot connect ({exc})") from None
    if len(head) < 8 or int.from_bytes(head, "little") >= 2**32:  # frames, not text
        raise ConfigError(
            f"--scheduler={address}: not a Dask scheduler (no Dask handshake in {PROBE_S:g} s)"
        )


def quiet_dask() -> None:
    """Silence Dask's own loggers (which set their levels when ``distributed`` is imported):
    a lost scheduler or worker is reported by the sweep in one line, not as tracebacks."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return
    for name in list(logging.root.manager.loggerDict):
        if name == "distributed" or name.startswith("distributed."):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def connect(address: str) -> Any:
    """A Dask client of the scheduler at ``address`` (ConfigError within seconds if Dask is
    missing, the address is not a scheduler's or it does not answer)."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError(
            f"--scheduler={address}: needs Dask; install tpsim[dask] (dask[distributed])"
        ) from None
    _probe(address)
    try:
        return Client(address, timeout=CONNECT_S, set_as_default=False)
    except Exception as exc:  # OSError, TimeoutError, or a protocol error of the peer
        raise ConfigError(f"--scheduler={address}: cannot connect ({exc!r})") from None


def _n_workers(client: Any) -> int | None:
    """Workers the scheduler had at its last report (the client refreshes it every 2 s)."""
    identity = getattr(client, "_scheduler_identity", None) or {}
    n = identity.get("n_workers", len(identity.get("workers", {})))
    return n if isinstance(n, int) else None


def _dask_rows(
    points: Sequence[Point], scheduler: Any, evaluate: Evaluate, wait_workers_s: float
) -> Iterator[list[Row]]:
    """Batches as Dask tasks; ``scheduler`` is an address (connected and closed here) or a
    client (left open). A task that fails (after Dask's own retries) or is cancelled is
    submitted again, up to :data:`MAX_TRIES` times with backoff. When the scheduler is lost,
    or the cluster has had no workers for ``wait_workers_s``, nothing more is submitted and
    every unfinished point is lost (not done)."""
    client = connect(scheduler) if isinstance(scheduler, str) else scheduler
    try:
        workers = max(1, sum(client.nthreads().values()))
        pending: dict[Any, tuple[list[Point], int]] = {}
        later: list[tuple[float, list[Point], int]] = []  # (when, batch, attempt)

        def submit(batch: list[Point], attempt: int) -> None:
            f = client.submit(run_batch, evaluate, batch, pure=False)
            pending[f] = (batch, attempt)

        for b in _batches(points, workers):
            submit(b, 1)
        why = ""
        idle_since: float | None = None
        while (pending or later) and not why:
            now = time.monotonic()
            if client.status != "running":
                why = f"{DASK_FAILED}: lost the connection to the scheduler"
                break
            n = _n_workers(client)
            idle_since = (idle_since or now) if n == 0 else None
            if idle_since is not None and now - idle_since >= wait_workers_s:
                why = f"{DASK_FAILED}: no workers for {wait_workers_s:g} s"
                break
            for when, batch, attempt in [x for x in later if x[0] <= now]:
                later.remove((when, batch, attempt))
                submit(batch, attempt)
            finished = [f for f in pending if f.status != "pending"]
            for f in finished:
                batch, attempt = pending.pop(f)
                if f.status == "finished":
                    try:
                        rows = f.result()
                    except Exception as exc:  # lost between the status and the result
                        rows = _lost(batch, f"{DASK_FAILED}: {exc!r}")
                else:
                    rows = _lost(batch, f"{DASK_FAILED}: {f.status}")
                f.release()
                if not rows or not infrastructure_error(rows[0]):
                    yield rows
                elif attempt < MAX_TRIES:
                    log.warning("dask task %s; retrying %d points", rows[0]["error"], len(batch))
                    later.append((now + _backoff(attempt), batch, attempt + 1))
                else:
                    yield rows
            if not finished:
                time.sleep(POLL_S)
        if why:
            left = [p for batch, _ in pending.values() for p in batch]
            left += [p for _, batch, _ in later for p in batch]
            client.cancel(list(pending), force=True)
            yield _lost(left, why)
    finally:
        if client is not scheduler:
            client.close(timeout=CONNECT_S)


def iter_rows(
    points: Sequence[Point],
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
        yield from _dask_rows(points, scheduler, evaluate, wait_workers_s)
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
    points: Sequence[Point],
    out: str | Path,
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    evaluate: Evaluate = run_point,
    wait_workers_s: float = WAIT_WORKERS_S,
) -> SweepReport:
    """Run the points not yet done in ``out`` and append their rows as they finish."""
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
    why = ""
    bar = tqdm(
        total=len(points),
        initial=len(points) - len(todo),
        unit="point",
        file=sys.stderr,
        disable=not progress,
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
                    writer.write(row)
                    ran += 1
                    errors += bool(row.get("error"))
                    not_fitting += row.get("fits") is False
                bar.update(len(rows))
        finally:
            batches.close()  # stops the workers now, also on Ctrl-C
            if client is not None:
                client.close(timeout=CONNECT_S)
    skipped = len(points) - len(todo)
    return SweepReport(Path(out), len(points), skipped, ran, errors, not_fitting, remaining, why)


def run_points(
    points: Sequence[Point], *, jobs: int = 1, scheduler: str | None = None
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
