"""The SimPy engine: runs one program per rank (:class:`~tpsim.core.program.Programs`) and
records what happened.

Per rank there is a CPU launch thread, a compute stream and a communication stream. An op
starts when it has been launched, its dependencies have finished and its stream is free;
overlap and launch starvation follow from that. A collective runs as a sequence of steps
(:class:`~tpsim.core.schedule.Schedule`); in each step a rank starts its sends, which cross
the shared links of a :class:`~tpsim.core.engine.flows.FlowNetwork`, and waits for the arrivals
it expects. A point-to-point send crosses the route to its peer
(:data:`~tpsim.core.schedule.Router`) the same way; the matching receive is over when the
send's bytes have arrived. The engine knows nothing of
transformers, topologies or collective algorithms.

The run is made of pieces with one job each: the record log (:mod:`tpsim.core.engine.recordlog`),
mailboxes for arrivals (:mod:`tpsim.core.engine.mailbox`), SM sharing between compute and
communication (:mod:`tpsim.core.engine.sm_sharing`) and the network
(:mod:`tpsim.core.engine.flows`);
kernels slowed by SM sharing and flows share one rated-timer mechanism
(:mod:`tpsim.core.engine.rated`).

Every record names its ``cause``: the record whose end released its start. Walking the
causes back from the last record gives the critical path (:mod:`tpsim.core.metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy
from tpsim.core.engine.flows import FlowNetwork
from tpsim.core.engine.jitter import HostJitter
from tpsim.core.engine.mailbox import Mailboxes
from tpsim.core.engine.recordlog import RecordLog
from tpsim.core.engine.sm_sharing import SMSharing
from tpsim.core.errors import ProgramError
from tpsim.core.program import CollectiveCall, Op, Program, Programs, check
from tpsim.core.records import Record
from tpsim.core.schedule import NET_STEP, Planner, Router, Schedule, Send

_NO_CAUSE = (-1, 0.0)
Cause = tuple[int, float]  # (record id, its end time) of what released a start


def _match_keys(program: Program, rank: int) -> list[Any]:
    """Per op, the key that names it across ranks: a collective's position among the rank's
    collectives; a p2p op's (source, destination, tag, k-th such); None for a kernel."""
    keys: list[Any] = []
    seen: dict[tuple[int, int, int], int] = {}
    collectives = 0
    for op in program.ops:
        if op.collective is not None:
            keys.append(collectives)
            collectives += 1
        elif op.p2p is not None:
            x = op.p2p
            pair = (rank, x.peer, x.tag) if x.direction == "send" else (x.peer, rank, x.tag)
            k = seen.get(pair, 0)
            seen[pair] = k + 1
            keys.append(("p2p", *pair, k))
        else:
            keys.append(None)
    return keys


class _Run:
    """The per-rank processes of one run, over the log, mailboxes, SM sharing and network."""

    def __init__(
        self,
        programs: Programs,
        planner: Planner,
        router: Router | None,
        capacities: Sequence[float],
        comm_sms: int,
        sm_count: int,
        link_log: list[tuple[float, int, float]] | None = None,
        jitter: HostJitter | None = None,
    ) -> None:
        ranks = programs.ranks
        self.jitter = jitter if jitter is not None and jitter.active else None
        self.env = env = simpy.Environment()
        self.log = RecordLog()
        self.boxes = Mailboxes(env)
        self.sms = SMSharing(env, ranks, comm_sms, sm_count)
        self.net = FlowNetwork(env, capacities, link_log)
        self.programs = programs
        # a program without p2p ops has the same keys on every rank: make them once
        made: dict[int, list[Any]] = {}
        self.keys: list[list[Any]] = []
        for r, p in enumerate(programs):
            keys = made.get(id(p))
            if keys is None:
                keys = _match_keys(p, r)
                if not any(op.p2p for op in p.ops):
                    made[id(p)] = keys
            self.keys.append(keys)
        sizes = [len(p.ops) for p in programs]
        self.launched = [[env.event() for _ in range(n)] for n in sizes]
        self.done = [[env.event() for _ in range(n)] for n in sizes]
        # (record id, end time) of the record that finished op i on rank r / launched it
        self.finished: list[list[Cause]] = [[_NO_CAUSE] * n for n in sizes]
        self.launch_rec: list[list[Cause]] = [[_NO_CAUSE] * n for n in sizes]
        self.schedules: dict[CollectiveCall, Schedule] = {}
        self.net_steps: dict[tuple[CollectiveCall, int], tuple[bool, ...]] = {}
        self.planner = planner
        self.router = router

    # ------------------------------------------------------------------ processes
    def cpu(self, rank: int, delay_s: float) -> Generator[simpy.Event, Any, None]:
        env, log, prev = self.env, self.log, _NO_CAUSE
        program = self.programs[rank]
        if delay_s > 0:
            yield env.timeout(delay_s)
            rid = log.launch(rank, -1, "launch skew", -1, "", 0.0, env.now, -1,
                             "waits for the host thread to reach this GPU")  # fmt: skip
            prev = (rid, env.now)
        if program.replay_s > 0:
            start = env.now
            yield env.timeout(program.replay_s)
            rid = log.launch(rank, -1, "graph_replay", -1, "", start, env.now, prev[0],
                             "CUDA graph launch")  # fmt: skip
            prev = (rid, env.now)
        launch_rec, launched = self.launch_rec[rank], self.launched[rank]
        finished, done = self.finished[rank], self.done[rank]
        jitter, segment = self.jitter, 0
        scale = jitter.factor(rank, 0) if jitter is not None else 1.0
        for i, op in enumerate(program.ops):
            if op.stream == "cpu":  # host work: the thread itself runs it, after its inputs
                for d in op.deps:
                    yield done[d]
                if jitter is not None and op.deps:  # the thread waited: a new segment
                    segment += 1
                    scale = jitter.factor(rank, segment)
                cause = max([finished[d] for d in op.deps] + [prev], key=lambda c: c[1])
                start = env.now
                yield env.timeout(op.seconds if op.driver else op.seconds * scale)
                rid = log.op(rank, "cpu", i, op, op.name, 0, start, env.now, cause[0], op.detail)
                prev = finished[i] = (rid, env.now)
                done[i].succeed()
                continue
            if op.launch_s > 0:
                start = env.now
                yield env.timeout(op.launch_s * scale)
                rid = log.launch(rank, i, f"launch {op.name}", op.layer, op.site, start,
                                 env.now, prev[0], f"host launch of {op.name}")  # fmt: skip
                prev = (rid, env.now)
            launch_rec[i] = prev
            launched[i].succeed()

    def stream(self, rank: int, name: str) -> Generator[simpy.Event, Any, None]:
        env, prev = self.env, _NO_CAUSE
        finished, done = self.finished[rank], self.done[rank]
        for i, op in enumerate(self.programs[rank].ops):
            if op.stream != name:
                continue
            yield self.launched[rank][i]
            for d in op.deps:
                yield done[d]
            # what released this op: a dependency, else the stream, else its launch
            cause = max(
                [finished[d] for d in op.deps] + [prev, self.launch_rec[rank][i]],
                key=lambda c: c[1],
            )
            if op.collective is not None:
                prev = yield from self.collective(rank, i, op, cause)
            elif op.p2p is not None:
                prev = yield from self.p2p(rank, i, op, cause)
            else:
                if op.dispatch_s > 0:  # launched alone: the GPU's gap before it starts
                    start = env.now
                    yield env.timeout(op.dispatch_s)
                    cause = (self.log.dispatch(rank, i, op, start, env.now, cause[0]), env.now)
                start = env.now
                yield self.sms.kernel(rank, op.seconds)
                rid = self.log.op(rank, name, i, op, op.name, op.bytes, start, env.now,
                                  cause[0], op.detail)  # fmt: skip
                prev = (rid, env.now)
            finished[i] = prev
            done[i].succeed()

    def collective(
        self, rank: int, i: int, op: Op, cause: Cause
    ) -> Generator[simpy.Event, Any, Cause]:
        env, log, boxes = self.env, self.log, self.boxes
        call = op.collective
        assert call is not None
        sched = self.schedules.get(call)
        if sched is None:
            sched = self.schedules[call] = self.planner(call)
        label = f"{sched.algorithm}/{sched.protocol}"
        seq = self.keys[rank][i]
        self.sms.comm(rank, +1)
        if sched.base_s > 0:
            start = env.now
            yield env.timeout(sched.base_s)
            rid = log.op(rank, "comm", i, op, f"{op.name}.base", 0, start, env.now, cause[0],
                         f"{op.detail}; {label} fixed latency")  # fmt: skip
            cause = (rid, env.now)
        steps = sched.steps[rank]
        names, details = log.step_labels(op, label, len(steps))
        nets = self.net_steps.get((call, rank))
        if nets is None:  # which steps cross the network: fixed by the schedule, found once
            nets = self.net_steps[call, rank] = tuple(any(x.net for x in st.sends) for st in steps)
        landing: list[simpy.Event] = []
        for s, step in enumerate(steps):
            ready = env.now
            sent = [self._send(seq, s, snd, ready, cause) for snd in step.sends]
            yield from (own for own, _ in sent)
            landing += [landed for _, landed in sent]
            if s == len(steps) - 1:  # the collective is over when its sends have landed
                yield from landing
            own_done = env.now
            wait, msgs = boxes.wait((seq, rank, s), step.expect)
            if wait is not None:
                yield wait
            start, by, shift = ready, cause, 0
            detail = details[s]
            if msgs and msgs[-1][2] > own_done:  # a peer's send ended the step
                peer_start, peer_cause, _, peer_shift = msgs[-1]
                if peer_start > ready:
                    # the record starts where the late peer's send did (the critical path
                    # runs through it); the wait since this rank posted its own sends is said
                    start, by, shift = peer_start, peer_cause, peer_shift
                    detail += _waited(ready, peer_start)
            nbytes = sum(x.payload for x in step.sends)
            if nets[s]:
                detail += NET_STEP
            rid = log.op(rank, "comm", i, op, names[s], nbytes, start, env.now, by[0], detail)
            if shift:
                log.cause_shift[rid] = shift
            cause = (rid, env.now)
        self.sms.comm(rank, -1)
        return cause

    def p2p(self, rank: int, i: int, op: Op, cause: Cause) -> Generator[simpy.Event, Any, Cause]:
        """A send: its bytes cross the route to the peer, and it ends when they arrive; its
        record is made as they land, and the message the receive gets names it. A receive:
        it ends when the matching send's bytes have arrived (at once if they have). When it
        waited for them, the send released it: its record starts as they land and names the
        send as its cause (the critical path crosses from one stage to the next through the
        transfer), its detail says when it was posted and how long it waited."""
        env, log, x, key = self.env, self.log, op.p2p, self.keys[rank][i]
        assert x is not None
        ready = env.now
        self.sms.comm(rank, +1)
        tagged = f" (tag {x.tag}); {op.detail}" if op.detail else f" (tag {x.tag})"
        if x.direction == "send":
            assert self.router is not None
            snd = self.router(rank, x.peer, x.nbytes)
            sent: list[Cause] = []
            detail = f"send {x.nbytes} B to rank {x.peer}{tagged}"

            def deliver(_e: object) -> None:
                rid = log.op(rank, op.stream, i, op, op.name, x.nbytes, ready, env.now, cause[0],
                             detail)  # fmt: skip
                sent.append((rid, env.now))
                self.boxes.deliver(key, ready, sent[0], 0)

            yield self._transfer(snd, deliver)
            self.sms.comm(rank, -1)
            return sent[0]
        wait, msgs = self.boxes.wait(key, 1)
        if wait is not None:
            yield wait
        _, send, arrived, _ = msgs[-1]
        start, by, detail = ready, cause, f"recv {x.nbytes} B from rank {x.peer}{tagged}"
        if arrived > ready:  # it waited for the send's bytes: the send released it
            start, by = arrived, send
            detail += _waited(ready, arrived)
        rid = log.op(rank, op.stream, i, op, op.name, 0, start, env.now, by[0], detail)
        self.sms.comm(rank, -1)
        return (rid, env.now)

    # ------------------------------------------------------------------ transfers
    def _send(
        self, seq: int, s: int, snd: Send, ready: float, cause: Cause
    ) -> tuple[simpy.Event, simpy.Event]:
        """A collective step's send: on arrival, a message in each notified rank's box.
        Returns what the sending rank's step waits for, and the arrival.

        Over NVLink or PCIe the sender's threads write into the peer's buffer, and the step
        waits for the write to land. A send across the network is handed to the NIC (NCCL's
        proxy posts it from the send buffer) and flies on: the step waits for its bytes to
        leave, and they land one network latency later. A ring over two hosts then pays
        that latency where its chunks cross hosts, not on every step of every rank (each
        rank's next step waits for what it receives)."""
        boxes = self.boxes
        deliver: Callable[[object], None] | None = None
        if snd.notify:

            def deliver(_e: object) -> None:
                for k, r in enumerate(snd.notify):
                    shift = snd.shifts[k] if snd.shifts else snd.shift
                    boxes.deliver((seq, r, s), ready, cause, shift)

        if snd.net:
            return self._handed_over(snd, deliver)
        arrived = self._transfer(snd, deliver)
        return arrived, arrived

    def _handed_over(
        self, snd: Send, deliver: Callable[[object], None] | None
    ) -> tuple[simpy.Event, simpy.Event]:
        """A send across the network: its bytes flow over its links at once (the event
        ``left`` when they have), then arrive after its latency (``arrived``)."""
        env = self.env
        left, arrived = env.event(), env.event()
        if deliver is not None:
            arrived.callbacks.append(deliver)

        def arrive(_e: object) -> None:
            arrived.succeed()

        def land(_e: object) -> None:
            if snd.latency_s > 0:
                env.timeout(snd.latency_s).callbacks.append(arrive)
            else:
                arrived.succeed()

        left.callbacks.append(land)
        self.net.send(snd.links, snd.wire, snd.cap_Bps, left)
        return left, arrived

    def _transfer(self, snd: Send, deliver: Callable[[object], None] | None) -> simpy.Event:
        """Start ``snd``: after its latency, a flow over its links; the event fires when it
        has arrived, after ``deliver`` (so deliveries run before anyone resumes)."""
        env = self.env
        arrived = env.event()
        if deliver is not None:
            arrived.callbacks.append(deliver)

        def start(_e: object) -> None:
            self.net.send(snd.links, snd.wire, snd.cap_Bps, arrived)

        if snd.latency_s > 0:
            env.timeout(snd.latency_s).callbacks.append(start)
        else:
            start(None)
        return arrived


def _waited(ready: float, start: float) -> str:
    """The detail's note of a step that waited for a late peer, or of a receive that waited
    for its send's bytes: when this rank posted it and how long it waited (the record's
    cause names the peer's record; a receive's, the send, whose trace arrow points to it)."""
    return f"; posted at {ready * 1e6:.3f} us, waited {(start - ready) * 1e6:.3f} us"


def run(
    programs: Programs,
    planner: Planner,
    capacities: Sequence[float] = (),
    *,
    router: Router | None = None,
    rank_delay_s: Sequence[float] | None = None,
    comm_sms: int = 0,
    sm_count: int = 1,
    link_log: list[tuple[float, int, float]] | None = None,
    cause_shift: dict[int, int] | None = None,
    host_jitter: HostJitter | None = None,
) -> tuple[list[Record], int]:
    """Simulate ``programs`` (rank r runs ``programs[r]``) over links of the given capacities
    (B/s). Collectives are planned by ``planner``; point-to-point sends cross the routes
    ``router`` gives. ``rank_delay_s[r]`` holds rank r's host thread back before its first
    launch; while a collective or transfer runs it holds ``comm_sms`` of the ``sm_count``
    SMs, and compute kernels that overlap it progress ``sm_count / (sm_count - comm_sms)``
    times slower. Returns the records (in completion order) and the number of SimPy events
    processed; ``link_log``, if given, receives (time, link index, B/s) each time a link's
    load changes; ``cause_shift``, if given, receives for each record whose cause is a
    record of another host (when one host stands for several, :mod:`tpsim.core.comm.symmetry`)
    how many hosts away it is; ``host_jitter``, if given, scales each rank's host ops and
    kernel launches by its factor in the segment they fall in
    (:mod:`tpsim.core.engine.jitter`). Raises :class:`~tpsim.core.errors.ProgramError` when the
    programs do not fit together (:func:`tpsim.core.program.check`), RuntimeError when they
    deadlock."""
    check(programs)
    if router is None and programs.has_p2p():
        raise ProgramError("the programs send point to point: run them with a router")
    ranks = programs.ranks
    r = _Run(programs, planner, router, capacities, comm_sms, sm_count, link_log, host_jitter)
    delays = rank_delay_s or [0.0] * ranks
    for rank in range(ranks):
        r.env.process(r.cpu(rank, delays[rank]))
        r.env.process(r.stream(rank, "compute"))
        r.env.process(r.stream(rank, "comm"))
        if any(op.stream == "p2p" for op in programs[rank].ops):  # pipeline sends
            r.env.process(r.stream(rank, "p2p"))
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
        raise RuntimeError(f"deadlock: rank {k} op {i} ({programs[k].ops[i].name}) never finished")
    if cause_shift is not None:
        cause_shift.update(r.log.cause_shift)
    return r.log.records, events


__all__ = ["run"]
