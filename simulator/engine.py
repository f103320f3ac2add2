"""The SimPy engine: runs one program on every rank of a group and records what happened.

Per rank there is a CPU launch thread, a compute stream and a communication stream. An op
starts when it has been launched, its dependencies have finished and its stream is free;
overlap and launch starvation follow from that. Collectives run as point-to-point steps
whose timing the caller supplies (:class:`StepSchedule`); the engine knows nothing of
transformers, topologies or algorithms.

Every record names its ``cause``: the record whose end released its start. Walking the
causes back from the last record gives the critical path (:mod:`simulator.metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import simpy

from simulator.program import CollectiveCall, Op, Program
from simulator.records import Record


@dataclass(frozen=True)
class StepSchedule:
    """A collective as a sequence of steps; in step ``s`` rank ``r`` sends
    ``send_bytes[r][s]`` to ``send_to[r]`` (taking ``send_s[r][s]`` from the start of the
    step until it has fully arrived) and receives from ``recv_from[r]``."""

    algorithm: str
    protocol: str
    base_s: float  # fixed cost before the first step (collective launch and sync)
    send_to: tuple[int, ...]
    recv_from: tuple[int, ...]
    send_bytes: tuple[tuple[int, ...], ...]
    send_s: tuple[tuple[float, ...], ...]

    @property
    def steps(self) -> int:
        return len(self.send_bytes[0])


#: Called once per distinct collective call; returns its schedule over the group.
Planner = Callable[[CollectiveCall], StepSchedule]

_NO_CAUSE = (-1, 0.0)


class _Run:
    def __init__(self, program: Program, ranks: int, planner: Planner) -> None:
        self.env = simpy.Environment()
        self.program = program
        self.ranks = ranks
        self.records: list[Record] = []
        n = len(program.ops)
        self.launched = [[self.env.event() for _ in range(n)] for _ in range(ranks)]
        self.done = [[self.env.event() for _ in range(n)] for _ in range(ranks)]
        # (record id, end time) of the record that finished op i on rank r / launched it
        self.finished: list[list[tuple[int, float]]] = [[_NO_CAUSE] * n for _ in range(ranks)]
        self.launch_rec: list[list[tuple[int, float]]] = [[_NO_CAUSE] * n for _ in range(ranks)]
        self.inbox: dict[tuple[int, int, int], simpy.Event] = {}
        self.schedules: dict[CollectiveCall, StepSchedule] = {}
        self.planner = planner

    # ------------------------------------------------------------------ records
    def record(self, rank: int, stream: str, op_index: int, op: Op | None, **kw: Any) -> int:
        rid = len(self.records)
        if op is not None:
            base = dict(
                name=op.name,
                kind=op.kind,
                category=op.category,
                layer=op.layer,
                site=op.site,
                flops=op.flops,
                bytes=op.bytes,
                detail=op.detail,
            )
            base.update(kw)
            kw = base
        self.records.append(Record(id=rid, rank=rank, stream=stream, op=op_index, **kw))
        return rid

    # ------------------------------------------------------------------ processes
    def cpu(self, rank: int) -> Generator[simpy.Event, Any, None]:
        env, prev = self.env, _NO_CAUSE
        if self.program.replay_s > 0:
            start = env.now
            yield env.timeout(self.program.replay_s)
            rid = self.record(
                rank,
                "cpu",
                -1,
                None,
                name="graph_replay",
                kind="launch",
                category="launch_overhead",
                layer=-1,
                site="",
                flops=0.0,
                bytes=0,
                start_s=start,
                end_s=env.now,
                cause=-1,
                detail="CUDA graph launch",
            )
            prev = (rid, env.now)
        for i, op in enumerate(self.program.ops):
            if op.launch_s > 0:
                start = env.now
                yield env.timeout(op.launch_s)
                rid = self.record(
                    rank,
                    "cpu",
                    i,
                    None,
                    name=f"launch {op.name}",
                    kind="launch",
                    category="launch_overhead",
                    layer=op.layer,
                    site=op.site,
                    flops=0.0,
                    bytes=0,
                    start_s=start,
                    end_s=env.now,
                    cause=prev[0],
                    detail=f"host launch of {op.name}",
                )
                prev = (rid, env.now)
            self.launch_rec[rank][i] = prev
            self.launched[rank][i].succeed()

    def stream(self, rank: int, name: str) -> Generator[simpy.Event, Any, None]:
        env, prev = self.env, _NO_CAUSE
        for i, op in enumerate(self.program.ops):
            if op.stream != name:
                continue
            yield self.launched[rank][i]
            for d in op.deps:
                yield self.done[rank][d]
            # what released this op: a dependency, else the stream, else its launch
            cause = max(
                [self.finished[rank][d] for d in op.deps] + [prev, self.launch_rec[rank][i]],
                key=lambda c: c[1],
            )
            if op.collective is None:
                start = env.now
                yield env.timeout(op.seconds)
                rid = self.record(rank, name, i, op, start_s=start, end_s=env.now, cause=cause[0])
                prev = (rid, env.now)
            else:
                prev = yield from self.collective(rank, i, op, cause)
            self.finished[rank][i] = prev
            self.done[rank][i].succeed()

    def collective(
        self, rank: int, i: int, op: Op, cause: tuple[int, float]
    ) -> Generator[simpy.Event, Any, tuple[int, float]]:
        env = self.env
        call = op.collective
        assert call is not None
        sched = self.schedules.get(call)
        if sched is None:
            sched = self.schedules[call] = self.planner(call)
        label = f"{sched.algorithm}/{sched.protocol}"
        if sched.base_s > 0:
            start = env.now
            yield env.timeout(sched.base_s)
            rid = self.record(
                rank,
                "comm",
                i,
                op,
                name=f"{op.name}.base",
                bytes=0,
                start_s=start,
                end_s=env.now,
                cause=cause[0],
                detail=f"{op.detail}; {label} fixed latency",
            )
            cause = (rid, env.now)
        dst, src = sched.send_to[rank], sched.recv_from[rank]
        for s in range(sched.steps):
            ready = env.now
            sent = env.timeout(sched.send_s[rank][s])
            box = self._box(i, dst, s)
            sent.callbacks.append(lambda _e, box=box, msg=(ready, cause): box.succeed(msg))
            yield sent
            peer_start, peer_cause = yield self._box(i, rank, s)
            start = max(ready, peer_start)
            by = cause if ready >= peer_start else peer_cause
            rid = self.record(
                rank,
                "comm",
                i,
                op,
                name=f"{op.name}[{s}]",
                bytes=sched.send_bytes[rank][s],
                start_s=start,
                end_s=env.now,
                cause=by[0],
                detail=f"{op.detail}; {label} step {s} to {dst}, from {src}",
            )
            cause = (rid, env.now)
        return cause

    def _box(self, op_index: int, rank: int, step: int) -> simpy.Event:
        key = (op_index, rank, step)
        ev = self.inbox.get(key)
        if ev is None:
            ev = self.inbox[key] = self.env.event()
        return ev


def run(program: Program, ranks: int, planner: Planner) -> tuple[list[Record], int]:
    """Simulate ``program`` on ``ranks`` ranks; returns the records (in completion order)
    and the number of SimPy events processed."""
    r = _Run(program, ranks, planner)
    for rank in range(ranks):
        r.env.process(r.cpu(rank))
        r.env.process(r.stream(rank, "compute"))
        r.env.process(r.stream(rank, "comm"))
    events = 0
    env = r.env
    while True:
        try:
            env.step()
        except simpy.core.EmptySchedule:
            break
        events += 1
    unfinished = [
        (k, i) for k in range(ranks) for i, ev in enumerate(r.done[k]) if not ev.triggered
    ]
    if unfinished:
        raise RuntimeError(
            f"deadlock: ops never finished, e.g. rank {unfinished[0][0]} op "
            f"{unfinished[0][1]} ({program.ops[unfinished[0][1]].name})"
        )
    return r.records, events


__all__ = ["Planner", "StepSchedule", "run"]
