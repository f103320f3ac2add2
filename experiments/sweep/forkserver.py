"""Worker processes forked from a server that has imported tpsim once, and quiet when stopped.

Every pool of tpsim (sweep, plan, calibrate) takes its context from :func:`context`. Two races
of a stop printed a traceback past the one line a stopped command says:

- Ctrl-C reaches the terminal's whole process group, the server too; multiprocessing's server
  ignores SIGINT only once it has imported its preloads (about a second for tpsim), so a
  Ctrl-C in that second was a ``KeyboardInterrupt`` traceback of the import. The server is
  started with SIGINT blocked: one arriving meanwhile stays pending, and is discarded when the
  server sets SIGINT to ignored. Its workers inherit the mask (they leave Ctrl-C to the parent
  anyway).
- A worker still starting when its parent stops the pool (or has ended) finds the start's
  semaphore or pipe gone and the server printed that traceback (``sys.excepthook``). The server
  imports :mod:`tpsim.experiments.sweep.quiet_start` first, which makes such a failed start
  exit 1 without a word: the parent, which owns the pool, reports what stopped it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import signal
from collections.abc import Sequence
from multiprocessing.context import ForkServerContext

QUIET_START = "tpsim.experiments.sweep.quiet_start"


def context(preload: Sequence[str]) -> ForkServerContext:
    """The forkserver context, its server started (once per process) with SIGINT blocked,
    importing :data:`QUIET_START` and then ``preload``."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([QUIET_START, *preload])
    # the server's start starts the resource tracker first, which unblocks SIGINT when done
    multiprocessing.resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return ctx
