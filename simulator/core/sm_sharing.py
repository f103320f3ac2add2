"""SM sharing: compute kernels slow down while a communication kernel holds some SMs.

While a rank has a collective (or a point-to-point transfer) in flight, the communication
kernel holds ``comm_sms`` of its ``sm_count`` SMs, and a compute kernel on that rank
progresses ``sm_count / (sm_count - comm_sms)`` times slower; when the communication ends it
speeds up again. A kernel is a :class:`~tpsim.core.rated.Rated` amount of full-speed seconds.
"""

from __future__ import annotations

import simpy
from tpsim.core.rated import Rated


class SMSharing:
    """Per rank: communication kernels in flight and the compute kernel running."""

    __slots__ = ("busy", "env", "running", "slowdown")

    def __init__(self, env: simpy.Environment, ranks: int, comm_sms: int, sm_count: int) -> None:
        self.env = env
        # compute progress divisor while communication runs (1: no sharing)
        self.slowdown = sm_count / (sm_count - comm_sms) if 0 < comm_sms < sm_count else 1.0
        self.busy = [0] * ranks  # communication kernels in flight per rank
        self.running: list[Rated | None] = [None] * ranks

    def kernel(self, rank: int, seconds: float) -> simpy.Event:
        """The completion of a compute kernel of ``seconds`` at full speed starting now."""
        env = self.env
        if self.slowdown == 1.0:
            return env.timeout(seconds)
        rate = 1.0 / self.slowdown if self.busy[rank] else 1.0
        k = self.running[rank] = Rated(seconds, env.event(), env.now, rate)
        k.arm(env, lambda k: self._finish(rank, k))
        return k.done

    def _finish(self, rank: int, k: Rated) -> None:
        if self.running[rank] is k:
            self.running[rank] = None
            k.done.succeed()

    def comm(self, rank: int, delta: int) -> None:
        """A communication kernel starts (+1) or ends (-1) on ``rank``; re-time its kernel."""
        self.busy[rank] += delta
        k = self.running[rank]
        if k is None or self.slowdown == 1.0:
            return
        k.settle(self.env.now)
        k.rate = 1.0 / self.slowdown if self.busy[rank] else 1.0
        k.arm(self.env, lambda k: self._finish(rank, k))


__all__ = ["SMSharing"]
