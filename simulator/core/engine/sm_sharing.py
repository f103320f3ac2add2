"""SM sharing: compute kernels slow down while a communication kernel holds some SMs.

While a rank has a collective (or a point-to-point transfer) in flight, the communication
kernel holds ``comm_sms`` of its ``sm_count`` SMs, and a compute kernel on that rank
progresses ``sm_count / (sm_count - comm_sms)`` times slower; when the communication ends it
speeds up again. A kernel is a :class:`~tpsim.core.engine.rated.Rated` amount of full-speed seconds.
"""

from __future__ import annotations

import simpy
from tpsim.core.engine.rated import Rated


class _Kernel(Rated):
    """A compute kernel in flight: full-speed seconds left, on ``rank``."""

    __slots__ = ("rank",)

    def __init__(self, seconds: float, done: simpy.Event, now: float, rate: float, rank: int):
        Rated.__init__(self, seconds, done, now, rate)
        self.rank = rank


class SMSharing:
    """Per rank: communication kernels in flight and the compute kernel running."""

    __slots__ = ("_on_finish", "busy", "env", "running", "slowdown")

    def __init__(self, env: simpy.Environment, ranks: int, comm_sms: int, sm_count: int) -> None:
        self.env = env
        # compute progress divisor while communication runs (1: no sharing)
        self.slowdown = sm_count / (sm_count - comm_sms) if 0 < comm_sms < sm_count else 1.0
        self.busy = [0] * ranks  # communication kernels in flight per rank
        self.running: list[_Kernel | None] = [None] * ranks
        self._on_finish = self._finish  # bound once: timers outlive many calls (fewer GC passes)

    def kernel(self, rank: int, seconds: float) -> simpy.Event:
        """The completion of a compute kernel of ``seconds`` at full speed starting now."""
        env = self.env
        if self.slowdown == 1.0:
            return env.timeout(seconds)
        rate = 1.0 / self.slowdown if self.busy[rank] else 1.0
        k = self.running[rank] = _Kernel(seconds, env.event(), env.now, rate, rank)
        k.arm(env, self._on_finish)
        return k.done

    def _finish(self, k: _Kernel) -> None:
        if self.running[k.rank] is k:
            self.running[k.rank] = None
            k.done.succeed()

    def comm(self, rank: int, delta: int) -> None:
        """A communication kernel starts (+1) or ends (-1) on ``rank``; re-time its kernel."""
        self.busy[rank] += delta
        k = self.running[rank]
        if k is None or self.slowdown == 1.0:
            return
        k.settle(self.env.now)
        k.rate = 1.0 / self.slowdown if self.busy[rank] else 1.0
        k.arm(self.env, self._on_finish)


__all__ = ["SMSharing"]
