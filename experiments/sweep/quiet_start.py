"""Imported by the forkserver of tpsim's pools alone (:mod:`tpsim.experiments.sweep.forkserver`),
never by a tpsim command: a worker that fails while it starts, before any of its work, exits 1
and prints nothing.

multiprocessing's server hands such a failure to ``sys.excepthook`` (a started worker reports
its own errors to the pool), and it happens when the parent stopped the pool or ended while
the worker was starting; the parent says what stopped it, in one line.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType


def _quiet(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    os._exit(1)


sys.excepthook = _quiet
