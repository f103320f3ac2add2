"""The SimPy engine: runs one program on every rank of a group and records what happened.

Per rank there is a CPU launch thread, a compute stream and a communication stream. An op
starts when it has been launched, its dependencies have finished and its stream is free;
overlap and launch starvation follow from that. A collective runs as a sequence of steps
(:class:`Schedule`); in each step a rank starts its sends, which cross the shared links of
a :class:`~tpsim.core.network.Network`, and waits for the arrivals it expects. The engine
knows nothing of transformers, topologies or collective algorithms.

Every record names its ``cause``: the record whose end released its start. Walking the
causes back from the last record gives the critical path (:mod:`tpsim.core.metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import simpy
from tpsim.core.network import Network
from tpsim.core.program import CollectiveCall, Op, Program
from tpsim.core.records import Record


@dataclass(frozen=True, slots=True)
class Send:
    """One transfer of a collective step."""

    links: tuple[int, ...]  # indices of the directed links it crosses
    payload: int  # bytes of data it carries
    wire: float  # bytes on the wire (payload times the protocol's overhead)
    latency_s: float  # before its first byte arrives
    cap_Bps: float  # its own rate limit in wire bytes/s (math.inf: links alone limit it)
    notify: tuple[int, ...]  # ranks whose step waits for its arrival
    peer: int = -1  # destination rank, for the trace (-1: a switch)
    shift: int = 0  # blocks between sender and receiver, when one block stands for all
    shifts: tuple[int, ...] = ()  # the same per notified rank, for sends seen by several


@dataclass(frozen=True, slots=True)
class Step:
    sends: tuple[Send, ...]
    expect: int  # arrivals this rank waits for before the step is over


@dataclass(frozen=True)
class Schedule:
    """A collective as steps per rank (``steps[rank]``), after a fixed ``base_s``."""

    algorithm: str
    protocol: str
    base_s: float
    steps: tuple[tuple[Step, ...], ...]


#: Called once per distinct collective call; returns its schedule over the group.
Planner = Callable[[CollectiveCall], Schedule]

_NO_CAUSE = (-1, 0.0)


class _Box:
    """Arrivals for one (collective, rank, step): (sender's step start, its cause)."""

    __slots__ = ("event", "msgs", "need")

    def __init__(self) -> None:
        self.msgs: list[tuple[float, tuple[int, float], float, int]] = []
        self.need = 0
        self.event: simpy.Event | None = None


class _Kernel:
    """A compute kernel in flight, whose progress rate changes while a collective runs."""

    __slots__ = ("done", "generation", "rate", "remaining", "since")

    def __init__(self, seconds: float, rate: float, now: float, done: simpy.Event) -> None:
        self.remaining = seconds  # seconds of work left at full speed
        self.rate = rate
        self.since = now
        self.done = done
        self.generation = 0


class _Run:
    def __init__(
        self,
        program: Program,
        ranks: int,
        planner: Planner,
        capacities: Sequence[float],
        slowdown: float,
        link_log: list[tuple[float, int, float]] | None = None,
    ) -> None:
        self.env = simpy.Environment()
        self.slowdown = slowdown  # compute progress divisor while a collective runs
        self.comm_busy = [0] * ranks
        self.running: list[_Kernel | None] = [None] * ranks
        self.cause_shift: dict[int, int] = {}  # record id -> hosts away its cause lies
        self.labels: dict[tuple[str, str, str, int], tuple[list[str], list[str]]] = {}
        self.net = Network(self.env, capacities, link_log)
        self.program = program
        self.records: list[Record] = []
        n = len(program.ops)
        self.launched = [[self.env.event() for _ in range(n)] for _ in range(ranks)]
        self.done = [[self.env.event() for _ in range(n)] for _ in range(ranks)]
        # (record id, end time) of the record that finished op i on rank r / launched it
        self.finished: list[list[tuple[int, float]]] = [[_NO_CAUSE] * n for _ in range(ranks)]
        self.launch_rec: list[list[tuple[int, float]]] = [[_NO_CAUSE] * n for _ in range(ranks)]
        self.boxes: dict[tuple[int, int, int], _Box] = {}
        self.schedules: dict[CollectiveCall, Schedule] = {}
        self.planner = planner

    # ------------------------------------------------------------------ records
    def op_record(self, rank: int, stream: str, i: int, op: Op, name: str, nbytes: int,
                  start: float, cause: int, detail: str) -> int:  # fmt: skip
        """A record of op ``i`` ending now (positional: the engine's hot path)."""
        rid = len(self.records)
        self.records.append(Record(rid, rank, stream, name, op.kind, op.category, op.layer,
                                   op.site, i, start, self.env.now, op.flops, nbytes, cause,
                                   detail))  # fmt: skip
        return rid

    def _launch_record(
        self,
        rank: int,
        i: int,
        name: str,
        layer: int,
        site: str,
        start: float,
        cause: int,
        detail: str,
    ) -> tuple[int, float]:
        rid = len(self.records)
        self.records.append(
            Record(
                rid,
                rank,
                "cpu",
                name,
                "launch",
                "launch_overhead",
                layer,
                site,
                i,
                start,
                self.env.now,
                0.0,
                0,
                cause,
                detail,
            )
        )
        return rid, self.env.now

    # ------------------------------------------------------------------ processes
    def cpu(self, rank: int, delay_s: float) -> Generator[simpy.Event, Any, None]:
        env, prev = self.env, _NO_CAUSE
        if delay_s > 0:
            yield env.timeout(delay_s)
            prev = self._launch_record(
                rank,
                -1,
                "launch skew",
                -1,
                "",
                0.0,
                -1,
                "waits for the host thread to reach this GPU",
            )
        if self.program.replay_s > 0:
            start = env.now
            yield env.timeout(self.program.replay_s)
            prev = self._launch_record(
                rank, -1, "graph_replay", -1, "", start, prev[0], "CUDA graph launch"
            )
        for i, op in enumerate(self.program.ops):
            if op.launch_s > 0:
                start = env.now
                yield env.timeout(op.launch_s)
                prev = self._launch_record(
                    rank,
                    i,
                    f"launch {op.name}",
                    op.layer,
                    op.site,
                    start,
                    prev[0],
                    f"host launch of {op.name}",
                )
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
                yield self._kernel(rank, op.seconds)
                rid = self.op_record(rank, name, i, op, op.name, op.bytes, start, cause[0],
                                     op.detail)  # fmt: skip
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
        self._comm(rank, +1)
        if sched.base_s > 0:
            start = env.now
            yield env.timeout(sched.base_s)
            rid = self.op_record(rank, "comm", i, op, f"{op.name}.base", 0, start, cause[0],
                                 f"{op.detail}; {label} fixed latency")  # fmt: skip
            cause = (rid, env.now)
        steps = sched.steps[rank]
        names, details = self._step_labels(op, label, len(steps))
        for s, step in enumerate(steps):
            ready = env.now
            sent = [self._send(i, s, snd, (ready, cause)) for snd in step.sends]
            yield from sent
            own_done = env.now
            box = self._box(i, rank, s)
            if len(box.msgs) < step.expect:
                box.need, box.event = step.expect, env.event()
                yield box.event
            start, by, shift = ready, cause, 0
            if box.msgs and box.msgs[-1][2] > own_done:  # a peer's send ended the step
                peer_start, peer_cause, _, peer_shift = box.msgs[-1]
                if peer_start > ready:
                    start, by, shift = peer_start, peer_cause, peer_shift
            nbytes = sum(x.payload for x in step.sends)
            rid = self.op_record(rank, "comm", i, op, names[s], nbytes, start, by[0], details[s])
            if shift:
                self.cause_shift[rid] = shift
            cause = (rid, env.now)
        self._comm(rank, -1)
        return cause

    def _step_labels(self, op: Op, label: str, n: int) -> tuple[list[str], list[str]]:
        """Names and details of a collective's step records (made once per op and shape)."""
        key = (op.name, op.detail, label, n)
        got = self.labels.get(key)
        if got is None:
            got = self.labels[key] = (
                [f"{op.name}[{s}]" for s in range(n)],
                [f"{op.detail}; {label} step {s + 1} of {n}" for s in range(n)],
            )
        return got

    # ------------------------------------------------------------------ SM sharing
    def _kernel(self, rank: int, seconds: float) -> simpy.Event:
        """A compute kernel's completion; it runs ``slowdown`` times slower while this rank
        has a collective in flight (the collective holds some of the SMs)."""
        if self.slowdown == 1.0:
            return self.env.timeout(seconds)
        rate = 1.0 / self.slowdown if self.comm_busy[rank] else 1.0
        k = self.running[rank] = _Kernel(seconds, rate, self.env.now, self.env.event())
        self._arm(rank, k)
        return k.done

    def _arm(self, rank: int, k: _Kernel) -> None:
        k.generation += 1
        generation = k.generation

        def fire(_e: object) -> None:
            if self.running[rank] is k and k.generation == generation:
                self.running[rank] = None
                k.done.succeed()

        self.env.timeout(k.remaining / k.rate).callbacks.append(fire)

    def _comm(self, rank: int, delta: int) -> None:
        self.comm_busy[rank] += delta
        k = self.running[rank]
        if k is None or self.slowdown == 1.0:
            return
        now = self.env.now
        k.remaining = max(0.0, k.remaining - (now - k.since) * k.rate)
        k.since = now
        k.rate = 1.0 / self.slowdown if self.comm_busy[rank] else 1.0
        self._arm(rank, k)

    def _send(self, i: int, s: int, snd: Send, msg: tuple[float, tuple[int, float]]) -> simpy.Event:
        env = self.env
        arrived = env.event()  # the network fires it; delivery runs before anyone resumes
        if snd.notify:

            def deliver(_e: object) -> None:
                for k, r in enumerate(snd.notify):
                    self._deliver(i, r, s, msg, snd.shifts[k] if snd.shifts else snd.shift)

            arrived.callbacks.append(deliver)

        def start(_e: object) -> None:
            self.net.send(snd.links, snd.wire, snd.cap_Bps, arrived)

        if snd.latency_s > 0:
            env.timeout(snd.latency_s).callbacks.append(start)
        else:
            start(None)
        return arrived

    def _deliver(
        self, i: int, rank: int, s: int, msg: tuple[float, tuple[int, float]], shift: int
    ) -> None:
        box = self._box(i, rank, s)
        box.msgs.append((msg[0], msg[1], self.env.now, shift))
        if box.event is not None and not box.event.triggered and len(box.msgs) >= box.need:
            box.event.succeed()

    def _box(self, op_index: int, rank: int, step: int) -> _Box:
        key = (op_index, rank, step)
        box = self.boxes.get(key)
        if box is None:
            box = self.boxes[key] = _Box()
        return box


def run(
    program: Program,
    ranks: int,
    planner: Planner,
    capacities: Sequence[float] = (),
    *,
    rank_delay_s: Sequence[float] | None = None,
    comm_sms: int = 0,
    sm_count: int = 1,
    link_log: list[tuple[float, int, float]] | None = None,
    cause_shift: dict[int, int] | None = None,
) -> tuple[list[Record], int]:
    """Simulate ``program`` on ``ranks`` ranks over links of the given capacities (B/s);
    ``rank_delay_s[r]`` holds rank r's host thread back before its first launch; while a
    collective runs it holds ``comm_sms`` of the ``sm_count`` SMs, and compute kernels that
    overlap it progress ``sm_count / (sm_count - comm_sms)`` times slower. Returns the
    records (in completion order) and the number of SimPy events processed; ``link_log``, if
    given, receives (time, link index, B/s) each time a link's load changes; ``cause_shift``,
    if given, receives for each record whose cause is a record of another host (when one
    host stands for several, :mod:`tpsim.core.symmetry`) how many hosts away it is."""
    slowdown = sm_count / (sm_count - comm_sms) if 0 < comm_sms < sm_count else 1.0
    r = _Run(program, ranks, planner, capacities, slowdown, link_log)
    delays = rank_delay_s or [0.0] * ranks
    for rank in range(ranks):
        r.env.process(r.cpu(rank, delays[rank]))
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
    stuck = [(k, i) for k in range(ranks) for i, ev in enumerate(r.done[k]) if not ev.triggered]
    if stuck:
        k, i = stuck[0]
        raise RuntimeError(f"deadlock: rank {k} op {i} ({program.ops[i].name}) never finished")
    if cause_shift is not None:
        cause_shift.update(r.cause_shift)
    return r.records, events


__all__ = ["Planner", "Schedule", "Send", "Step", "run"]
