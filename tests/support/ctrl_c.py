"""Ctrl-C reaches a child process whatever this pytest was started with.

A shell starts a background job (``pytest &``, ``nohup pytest``, a runner's background step)
with SIGINT ignored, and an ignored signal stays ignored across fork and exec; Python then
installs no KeyboardInterrupt handler, so a ``tpsim`` started by a test never sees the test's
SIGINT and runs to the end (exit 0). ``preexec_fn=sigint_default`` gives the child the
default disposition, as under a terminal, and Python its handler.
"""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """In the child, between fork and exec: SIGINT back to its default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
