"""Engine instances that step together: the attention groups of one MoE group.

Attention data parallelism (``--attention-dp D``), as DeepSeek-style deployments serve
(SGLang's ``--enable-dp-attention``, vLLM's data parallelism with expert parallelism,
TensorRT-LLM's attention DP): each attention group is an engine instance with its own queue,
KV cache and batch; a request goes to the one with the fewest requests (as the engines' load
balancers pick); every MoE layer's dispatch and combine join all the groups, so they step in
lockstep, a group with nothing to run joining with an empty batch. An iteration lasts as
long as the slowest group's, its experts computing every group's tokens
(:meth:`tpsim.core.step_timer.IterationTimer.group_seconds`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tpsim.core.lowering.mixed import MixedStep
from tpsim.experiments.serve.engine import EngineInstance


class LockstepGroup:
    """Engine instances stepping together as one server of the serving loop: ``ranks`` (the
    attention groups), each scheduling its own batch (built by ``make`` with the timer it
    must call), priced together by ``price`` (the steps of those with work)."""

    def __init__(
        self,
        groups: int,
        make: Callable[[Callable[[MixedStep], float]], EngineInstance],
        price: Callable[[Sequence[MixedStep]], float],
    ) -> None:
        self._planned: dict[int, MixedStep] = {}  # this iteration's step of each rank with work
        self.ranks = [make(self._recorder(k)) for k in range(groups)]
        self.price = price
        self._stepped: list[int] = []
        self.step_count = 0

    def _recorder(self, k: int) -> Callable[[MixedStep], float]:
        def record(step: MixedStep) -> float:
            self._planned[k] = step
            return 0.0  # priced with the others' steps (step)

        return record

    @property
    def in_system(self) -> int:
        return sum(r.in_system for r in self.ranks)

    def admit(self, request: int, now: float) -> None:
        """``request`` joins the instance with the fewest requests (the first of those that
        tie)."""
        k = min(range(len(self.ranks)), key=lambda i: (self.ranks[i].in_system, i))
        self.ranks[k].admit(request, now)

    def step(self, now: float) -> float | None:
        """Every instance plans its iteration; those with work run together."""
        self._planned.clear()
        self._stepped = [k for k, r in enumerate(self.ranks) if r.step(now) is not None]
        if not self._stepped:
            return None
        seconds = self.price([self._planned[k] for k in self._stepped])
        self.step_count += 1
        for k in self._stepped:  # the iteration's length in each instance's record of it
            rank = self.ranks[k]
            if rank.record_steps and rank.steps:
                rank.steps[-1] = replace(rank.steps[-1], seconds=seconds)
        return seconds

    def finish(self, now: float) -> list[int]:
        done: list[int] = []
        for k in self._stepped:
            done.extend(self.ranks[k].finish(now))
        self._stepped = []
        return done


__all__ = ["LockstepGroup"]
