"""Pipeline-parallel serving (``--pp P``), as vLLM's virtual engines run it: P engine
instances, each with its own queue, batch and 1/P of every stage's KV cache, whose batches
are in flight through the same P stages at once. An engine that splits each batch into
micro-batches itself (FasterTransformer, ``pipeline_split_tokens``) is one instance instead,
each of its steps the micro-batches in turn through the stages (:class:`SplitPass`).

A batch crosses the stages in order, each taking its share of the batch's pass (the whole
model at this TP degree, :class:`~tpsim.core.step_timer.IterationTimer`, over P balanced
stages) and a send to the next (:class:`~tpsim.core.stage_sends.StageSends`);
a stage works on one batch at a time, in the order the batches reached it
(:class:`Stages`). So P equal batches keep every stage busy and each comes round once per
pass; a batch alone waits for its whole pass; a long one (a prefill chunk) holds up the
batches behind it at every stage it occupies, and they it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tpsim.calibration.model import Engine
from tpsim.core.lowering.mixed import MixedStep
from tpsim.experiments.serve.engine import EngineInstance


class Stages:
    """When each of a pipeline's stages is free, and a batch's way through them."""

    def __init__(self, stages: int) -> None:
        self.free_s = [0.0] * stages

    def cross(self, now: float, stage_s: float, sends_s: Sequence[float]) -> float:
        """A batch that enters at ``now``, ``stage_s`` at each stage and ``sends_s[b]``
        from stage b to b + 1: each stage taken when the batch reaches it and it is free;
        the seconds until the batch leaves the last."""
        t = now
        for s in range(len(self.free_s)):
            if s:
                t += sends_s[s - 1]
            t = max(t, self.free_s[s]) + stage_s
            self.free_s[s] = t
        return t - now


class VirtualEngine:
    """One of the pipeline's engine instances as a server of the serving loop: its batch
    timed through the shared :class:`Stages` from the time it starts."""

    def __init__(
        self,
        stages: Stages,
        make: Callable[[Callable[[MixedStep], float]], EngineInstance],
        pass_s: Callable[[MixedStep], tuple[float, Sequence[float]]],
    ) -> None:
        self.stages, self.pass_s = stages, pass_s
        self._now = 0.0
        self.engine = make(self._time)

    def _time(self, step: MixedStep) -> float:
        whole, sends = self.pass_s(step)
        return self.stages.cross(self._now, whole / len(self.stages.free_s), sends)

    @property
    def in_system(self) -> int:
        return self.engine.in_system

    def admit(self, request: int, now: float) -> None:
        self.engine.admit(request, now)

    def step(self, now: float) -> float | None:
        self._now = now
        return self.engine.step(now)

    def finish(self, now: float) -> Sequence[int]:
        return self.engine.finish(now)


def split_step(step: MixedStep, parts: int) -> list[MixedStep]:
    """``step``'s sequences (its decodes, then its prefill chunks) in ``parts`` micro-batches
    of consecutive sequences, as even as whole sequences allow."""
    seqs: list[int | tuple[int, int]] = [*step.decodes, *step.chunks]  # context, or a chunk
    out = []
    for k in range(parts):
        part = seqs[k * len(seqs) // parts : (k + 1) * len(seqs) // parts]
        out.append(MixedStep.of(tuple(s for s in part if isinstance(s, int)),
                                tuple(s for s in part if not isinstance(s, int))))  # fmt: skip
    return out


class SplitPass:
    """A step of an engine that splits each batch itself (FasterTransformer): the engine's
    micro-batches (:meth:`~tpsim.calibration.model.Engine.pipeline_micro_batches`, a prefill
    by its longest chunk, a decode by one token) enter the ``stages`` in turn, each stage
    working on one at a time; the step ends when the last leaves the last stage."""

    def __init__(
        self,
        stages: int,
        engine: Engine,
        pass_s: Callable[[MixedStep], tuple[float, Sequence[float]]],
    ) -> None:
        self.stages, self.engine, self.pass_s = stages, engine, pass_s

    def __call__(self, step: MixedStep) -> float:
        per_seq = max((n for n, _ in step.chunks), default=1)
        parts = self.engine.pipeline_micro_batches(step.batch, per_seq, self.stages)
        stages, end = Stages(self.stages), 0.0
        for part in split_step(step, parts):
            whole, sends = self.pass_s(part)
            end = max(end, stages.cross(0.0, whole / self.stages, sends))
        return end


__all__ = ["SplitPass", "Stages", "VirtualEngine", "split_step"]
