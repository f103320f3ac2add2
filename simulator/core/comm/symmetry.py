"""Host symmetry: simulate one host of a group of identical hosts and copy the rest.

A TP group over H identical hosts (``tpsim.topologies.builders.join_hosts``), g GPUs each,
runs the same program on every rank (detected, :meth:`tpsim.core.program.Programs.shared`,
never assumed). If every collective schedule maps onto itself when every rank moves one
host over (rank r -> r + g, link ``n{h}.x -> n{h}.y`` -> ``n{h+1}.x ->
n{h+1}.y``), then host h's timeline is host 0's: ranks in the same position on each host
are in lockstep. The quotient runs host 0's g ranks alone: a send to rank u lands on rank
``u mod g`` of host 0, over host 0's image of its links (the flow that really shares those
links is the image of this one, on every host at once), and remembers how many hosts over
its true receiver was, so that the copies' causes point at the right host's records.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpsim.core.comm.fabric import Fabric
from tpsim.core.program import CollectiveCall, Programs
from tpsim.core.records import STREAMS, Record
from tpsim.core.schedule import Planner, Schedule, Send, Step

_HOST = re.compile(r"^n(\d+)\.(.+)$")


@dataclass(frozen=True)
class HostSymmetry:
    """A rotation of the group's ranks by ``per_host`` that the hardware does not notice.

    ``hosts`` copies of ``per_host`` ranks: identical hosts (rotate by one host), or one
    host whose GPUs all sit alike on one switch or mesh (rotate by one GPU: ``per_host`` 1).
    """

    hosts: int  # copies: the order of the rotation
    per_host: int  # ranks simulated
    shift: dict[int, int]  # link index -> the same link one rotation step over
    home: dict[int, int]  # link index -> the representative of its orbit
    free: frozenset[int]  # links whose orbit has ``hosts`` distinct links


def find(fab: Fabric) -> HostSymmetry | None:
    """The rotation of ``fab``'s group, if it has one: by host across identical hosts, or
    by GPU inside a host whose GPUs are interchangeable."""
    sigma = _host_rotation(fab) if fab.multi_host else _gpu_rotation(fab)
    if sigma is None:
        return None
    node_map, copies, per = sigma
    index = {e: i for i, e in enumerate(fab.edges)}
    shift: dict[int, int] = {}
    for i, (u, v) in enumerate(fab.edges):
        j = index.get((node_map.get(u, u), node_map.get(v, v)))
        if j is None or (fab.capacities[j], fab.latencies[j]) != (
            fab.capacities[i], fab.latencies[i]):  # fmt: skip
            return None
        shift[i] = j
    home, free = {}, set()
    for i in shift:
        orbit = [i]
        while (nxt := shift[orbit[-1]]) != i and len(orbit) <= copies:
            orbit.append(nxt)
        home[i] = min(orbit)
        if len(orbit) == copies:
            free.add(i)
    return HostSymmetry(copies, per, shift, home, frozenset(free))


def _host_rotation(fab: Fabric) -> tuple[dict[str, str], int, int] | None:
    """Node map moving every node of host h to host h + 1 (node names ``n{h}.x``)."""
    hosts = sorted(set(fab.hosts))
    g = fab.hosts.count(hosts[0])
    n_hosts = len(hosts)
    if any(fab.hosts[t] != hosts[t // g] for t in range(fab.ranks)) or fab.ranks != g * n_hosts:
        return None
    node_host = {}
    for t, r in enumerate(fab.gpu_ranks):
        m = _HOST.match(fab.routes.node(r))
        if m is None:
            return None
        node_host[t] = int(m.group(1))
    host_ids = [node_host[t * g] for t in range(n_hosts)]
    if host_ids != list(range(host_ids[0], host_ids[0] + n_hosts)):
        return None
    base = host_ids[0]
    node_map = {}
    for node in fab.routes.graph.nodes:
        m = _HOST.match(node)
        if m and base <= int(m.group(1)) < base + n_hosts:
            h = (int(m.group(1)) - base + 1) % n_hosts
            node_map[node] = f"n{base + h}.{m.group(2)}"
    return node_map, n_hosts, g


def _gpu_rotation(fab: Fabric) -> tuple[dict[str, str], int, int] | None:
    """Node map moving the GPU of rank t to that of rank t + 1 (other nodes stay)."""
    p = fab.ranks
    if p < 2:
        return None
    nodes = [fab.routes.node(r) for r in fab.gpu_ranks]
    return {nodes[t]: nodes[(t + 1) % p] for t in range(p)}, p, 1


def invariant(sym: HostSymmetry, sched: Schedule) -> bool:
    """Whether ``sched`` maps onto itself when every rank moves one host over."""
    p = sym.hosts * sym.per_host

    def moved(s: Send) -> tuple:  # type: ignore[type-arg]
        return (tuple(sym.shift[x] for x in s.links), s.payload, s.wire, s.latency_s,
                s.cap_Bps, tuple(sorted((r + sym.per_host) % p for r in s.notify)))  # fmt: skip

    def key(s: Send) -> tuple:  # type: ignore[type-arg]
        return (s.links, s.payload, s.wire, s.latency_s, s.cap_Bps, tuple(sorted(s.notify)))

    if any(x not in sym.free for r in sched.steps for st in r for snd in st.sends
           for x in snd.links):  # fmt: skip
        return False  # a link shared by several rotations would be undercounted
    for t in range(p):
        u = (t + sym.per_host) % p
        mine, theirs = sched.steps[t], sched.steps[u]
        if len(mine) != len(theirs):
            return False
        for a, b in zip(mine, theirs, strict=True):
            if a.expect != b.expect or sorted(map(moved, a.sends)) != sorted(map(key, b.sends)):
                return False
    return True


def quotient(sym: HostSymmetry, sched: Schedule) -> Schedule:
    """Host 0's ranks of ``sched``, with sends folded onto host 0 (see the module doc)."""
    g = sym.per_host

    def fold(s: Send) -> Send:
        links = tuple(sym.home[x] for x in s.links)
        notify = tuple(r % g for r in s.notify)
        if len(s.notify) == 1:
            return Send(links, s.payload, s.wire, s.latency_s, s.cap_Bps, notify, s.peer,
                        s.notify[0] // g, net=s.net)  # fmt: skip
        # seen by several ranks (NVLS): each arrival remembers its own receiver's block
        return Send(links, s.payload, s.wire, s.latency_s, s.cap_Bps, notify, s.peer, 0,
                    tuple(r // g for r in s.notify), s.net)  # fmt: skip

    steps = tuple(
        tuple(Step(tuple(fold(s) for s in step.sends), step.expect) for step in sched.steps[t])
        for t in range(g)
    )
    return Schedule(sched.algorithm, sched.protocol, sched.base_s, steps, sched.model_s)


def plan_quotient(sym: HostSymmetry, programs: Programs, planner: Planner) -> Planner | None:
    """A planner for host 0 alone, or None if the ranks do not all run one program (the
    same object or equal ones), if it sends point to point, or if some collective of it is
    not host-symmetric."""
    program = programs.shared()
    if program is None or programs.has_p2p():
        return None
    folded: dict[CollectiveCall, Schedule] = {}
    for op in program.ops:
        call = op.collective
        if call is None or call in folded:
            continue
        sched = planner(call)
        if not invariant(sym, sched):
            return None
        folded[call] = quotient(sym, sched)
    return folded.__getitem__


_STREAM = {s: i for i, s in enumerate(STREAMS)}


def canonical(records: Sequence[Record], cause_shift: Mapping[int, int] | None = None,
              copies: int = 1, per_host: int = 0) -> list[Record]:  # fmt: skip
    """Records renumbered in a fixed order: by rank, stream, start, end, op, name; ids are
    positions and causes follow. With ``copies`` > 1, ``records`` are one host's and each
    further host gets a copy with ranks moved ``per_host`` over; a record whose cause lay
    ``cause_shift[id]`` hosts away points at that host's copy."""
    order = sorted(records, key=lambda r: (r.rank, _STREAM[r.stream], r.start_s, r.end_s,
                                           r.op, r.name))  # fmt: skip
    pos = {r.id: k for k, r in enumerate(order)}
    n = len(order)
    shifts = cause_shift or {}
    # per record: (position of its cause or -1, hosts away its cause lies)
    links = [(pos[r.cause] if r.cause >= 0 else -1, shifts.get(r.id, 0)) for r in order]
    columns: list[Sequence[Any]] = (
        list(zip(*order, strict=True)) if order else [()] * len(Record._fields)
    )
    ranks, causes = columns[1], [c for c, _ in links]
    make = Record._make
    out: list[Record] = []
    collecting = gc.isenabled()
    gc.disable()  # millions of new tuples, no cycles: don't let the collector rescan them
    try:
        for h in range(copies):
            moved = h * per_host
            columns[0] = range(h * n, (h + 1) * n)
            columns[1] = [r + moved for r in ranks] if moved else ranks
            columns[13] = (
                [((h - shift) % copies) * n + c if c >= 0 else -1 for c, shift in links]
                if copies > 1
                else causes
            )
            out.extend(map(make, zip(*columns, strict=True)))
    finally:
        if collecting:
            gc.enable()
    return out
