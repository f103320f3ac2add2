"""A sweep on a process pool of this machine (``jobs`` workers), as batches of points.

A worker process that dies takes down its pool, which is restarted, and the points it was
running are retried one at a time in a fresh worker (up to :data:`MAX_TRIES` times each, with
backoff); a point still without a row is lost (not done). Workers ignore Ctrl-C (the parent
stops the pool) and end when the sweep process ends (:func:`die_with`).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, InvalidStateError, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from tpsim.experiments.sweep import forkserver, tasks
from tpsim.experiments.sweep.grid import GridPoint
from tpsim.experiments.sweep.results import WORKER_DIED

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


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


def _new_pool(workers: int) -> ProcessPoolExecutor:
    """Workers forked from a clean server process that has imported the simulator once
    (no fork of this possibly multi-threaded process, and cheap worker starts)."""
    ctx = forkserver.context(["tpsim.experiments.sweep.run"])
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(),)
    )


#: Pool manager threads whose InvalidStateError :func:`quiet_cancel_race` drops.
_MANAGERS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_next_hook: Callable[[threading.ExceptHookArgs], object] = threading.excepthook


def quiet_cancel_race(pool: ProcessPoolExecutor) -> None:
    """Keep the pool's manager thread from printing a traceback as it is stopped.

    Cancelling a pool's futures while its workers die races the pool's manager thread:
    seeing the workers gone it sets BrokenProcessPool on every pending future, and on one
    cancelled meanwhile CPython 3.11 raises InvalidStateError in that thread
    (``concurrent.futures.process._ExecutorManagerThread.terminate_broken``), which the
    default hook prints to stderr under the one-line "interrupted" message. The race is
    harmless (the future is done either way): that thread's InvalidStateError is dropped,
    any other thread's exception goes to the hook as before. One hook for the process,
    installed once; the threads are held weakly."""
    global _next_hook
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None:
        _MANAGERS.add(manager)
    if threading.excepthook is not _drop_cancel_race:
        _next_hook, threading.excepthook = threading.excepthook, _drop_cancel_race


def _drop_cancel_race(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is InvalidStateError and args.thread in _MANAGERS:
        return
    _next_hook(args)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: cancel what has not started, end our worker processes by id."""
    processes = list(getattr(pool, "_processes", {}).values())
    quiet_cancel_race(pool)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=5)


def map_in_workers(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    done: Callable[[], None] | None = None,
) -> list[R]:
    """``[fn(x) for x in items]`` on ``workers`` processes that leave Ctrl-C to this one and
    die with it: interrupted (Ctrl-C, SIGTERM), the pool is stopped at once, never waited for
    (a second Ctrl-C would otherwise find this process joining busy workers). ``done`` is
    called as each result arrives, in order (a progress bar)."""
    pool = _new_pool(workers)
    try:
        rows = []
        for row in pool.map(fn, items):
            rows.append(row)
            if done is not None:
                done()
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)
    return rows


def pool_rows(
    points: Sequence[GridPoint], jobs: int, evaluate: tasks.Evaluate
) -> Iterator[list[tasks.Row]]:
    queue = deque(tasks.batches(points, jobs))
    while queue:
        suspects: list[GridPoint] = []
        pool = _new_pool(jobs)
        try:
            inflight: dict[Future[list[tasks.Row]], list[GridPoint]] = {}
            while queue or inflight:
                while queue and len(inflight) < 2 * jobs and not suspects:
                    batch = queue.popleft()
                    try:
                        inflight[pool.submit(tasks.run_batch, evaluate, batch)] = batch
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


def _isolated(points: Sequence[GridPoint], evaluate: tasks.Evaluate) -> Iterator[list[tasks.Row]]:
    """Run each point alone in a one-worker pool, up to :data:`MAX_TRIES` times with backoff
    while its worker dies; a point that still has no row is lost (not done)."""
    pool = _new_pool(1)
    try:
        for p in points:
            rows = tasks.lost_rows([p], f"{WORKER_DIED} ({tasks.MAX_TRIES} tries)")
            for attempt in range(1, tasks.MAX_TRIES + 1):
                try:
                    rows = pool.submit(tasks.run_batch, evaluate, [p]).result()
                    break
                except BrokenProcessPool:
                    _stop(pool)
                    if attempt < tasks.MAX_TRIES:
                        time.sleep(tasks.backoff(attempt))
                    pool = _new_pool(1)
            yield rows
    finally:
        _stop(pool)
