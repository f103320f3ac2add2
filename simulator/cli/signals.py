"""SIGTERM and SIGHUP handled as Ctrl-C: what ``timeout``, batch schedulers, containers and a
closed terminal send ends a command as cleanly as Ctrl-C does (its outputs removed, a sweep's
file left whole for ``--resume``), with the shell's exit status for that signal (128 + its
number: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: The signals turned into :class:`Terminated`, beside SIGINT's own KeyboardInterrupt.
HANDLED = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """A SIGTERM or SIGHUP, raised where the program was, so every ``KeyboardInterrupt``
    clean-up runs for it too."""

    def __init__(self, signum: int) -> None:
        super().__init__(int(signum))  # the args rebuild it, as copies of exceptions do
        self.signum = int(signum)


def exit_code(exc: KeyboardInterrupt) -> int:
    """128 + the signal's number, as a shell reports a process ended by it."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def described(exc: KeyboardInterrupt) -> str:
    """``interrupted`` (Ctrl-C) or ``terminated (SIGTERM)``."""
    signum = getattr(exc, "signum", None)
    return "interrupted" if signum is None else f"terminated ({signal.Signals(signum).name})"


def _raise(signum: int, frame: FrameType | None) -> None:
    for s in HANDLED:  # a second signal during the clean-up does not cut it short
        signal.signal(s, signal.SIG_IGN)
    raise Terminated(signum)


def ignore_more() -> None:
    """After the first interrupt: the signals ignored while the command exits (main thread
    only), so a second Ctrl-C, which the terminal sends the whole process group while the
    workers are stopped, does not end the exit by SIGINT (status -2, not 130): the
    interpreter's own exit (joining its pools' threads) comes after :func:`main` returned."""
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, *HANDLED):
            signal.signal(s, signal.SIG_IGN)


@contextmanager
def as_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` (main thread only, as
    Python delivers signals there; the previous handlers come back after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in HANDLED}
    for s in HANDLED:
        signal.signal(s, _raise)
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
