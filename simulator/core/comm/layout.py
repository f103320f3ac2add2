"""Several TP groups on one fabric: pipeline stages and data-parallel replicas.

A layout of ``dp`` replicas, each of ``pp`` pipeline stages of one ``tp``-way TP group,
has ``dp * pp * tp`` ranks, numbered ``rank = (d * pp + s) * tp + t`` (replica d, stage s,
TP rank t), and one TP group per (d, s): group ``g = d * pp + s``. Placement
(:func:`place`) gives consecutive ranks consecutive GPUs, host after host, as serving
engines place them: TP fills a host's fastest domain first, then the stages, then the
replicas. Every group plans its collectives on its own GPUs (its own fabric over the same
link indices), and :class:`LayoutComms` translates the schedules to global ranks, so all
groups run in one engine and share whatever links they share. Point-to-point sends between
stages cross the routed path between the two GPUs.

A replica can stand for all (:func:`replicas_independent`) only when that is exact: the
replicas use pairwise disjoint links, and a one-to-one map of links with equal capacities
and latencies carries replica 0's schedules and sends onto each other replica's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import networkx as nx
from tpsim.calibration import Calibration
from tpsim.core.comm.fabric import Fabric, build_fabric
from tpsim.core.comm.group import Comms, group_on, pair_router
from tpsim.core.errors import ConfigError
from tpsim.core.program import CollectiveCall, Programs
from tpsim.core.schedule import Planner, Router, Schedule, Send, Step
from tpsim.topologies.routing import Routes


def stage_layers(num_layers: int, pp: int, pp_layers: Sequence[int] = ()) -> tuple[range, ...]:
    """The layers of each stage: ``pp_layers`` if given (they must sum to the layers), else
    balanced (the first ``num_layers % pp`` stages take one more)."""
    if pp > num_layers:
        raise ConfigError(f"pp={pp}: more stages than the model's {num_layers} layers")
    if pp_layers:
        if len(pp_layers) != pp:
            raise ConfigError(
                f"pp_layers={','.join(map(str, pp_layers))}: {len(pp_layers)} stages, pp={pp}"
            )
        if any(n < 1 for n in pp_layers) or sum(pp_layers) != num_layers:
            raise ConfigError(
                f"pp_layers={','.join(map(str, pp_layers))}: each stage needs at least one "
                f"layer and they must sum to the model's {num_layers} layers"
            )
        sizes = list(pp_layers)
    else:
        sizes = [num_layers // pp + (1 if s < num_layers % pp else 0) for s in range(pp)]
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return tuple(out)


def place(
    routes: Routes,
    tp: int,
    pp: int,
    dp: int,
    per_host: int = 0,
    placement: Sequence[str] = (),
) -> tuple[int, ...]:
    """GPU rank of each layout rank: ``placement`` (GPU node names in layout-rank order)
    when given; else GPUs host after host (by rank inside a host), taking ``per_host`` from
    each host when given; consecutive layout ranks get consecutive GPUs, so a TP group stays
    inside a host whenever it fits."""
    name = routes.graph.graph.get("name", "topology")
    if placement:
        by_name = {routes.node(r): r for r in range(routes.num_ranks)}
        unknown = [p for p in placement if p not in by_name]
        if unknown:
            some = ", ".join(sorted(by_name)[:4])
            raise ConfigError(f"placement: {unknown[0]!r} is not a GPU of {name} (e.g. {some})")
        return tuple(by_name[p] for p in placement)
    hosts: dict[int, list[int]] = {}
    for r in range(routes.num_ranks):
        hosts.setdefault(routes.host(r), []).append(r)
    if per_host:
        if per_host > min(len(v) for v in hosts.values()):
            raise ConfigError(
                f"gpus_per_node={per_host}: {name} has {min(len(v) for v in hosts.values())} "
                "GPUs per host"
            )
        order = [r for h in sorted(hosts) for r in hosts[h][:per_host]]
    else:
        order = [r for h in sorted(hosts) for r in hosts[h]]
    need = tp * pp * dp
    if need > len(order):
        taken = (
            f"the {len(order)} GPUs gpus_per_node={per_host} takes of {name}'s "
            f"{routes.num_ranks} ({per_host} from each of its {len(hosts)} hosts; add hosts "
            "with --nodes, or place the ranks with --placement)"
            if per_host and len(order) < routes.num_ranks
            else f"the {len(order)} GPUs of {name} (add hosts: --nodes, or nodes= in the API)"
        )
        raise ConfigError(f"tp*pp*dp={tp}*{pp}*{dp}={need}: more than {taken}")
    return tuple(order[:need])


@dataclass(frozen=True)
class LayoutComms:
    """The groups of a layout and what they communicate over: one fabric indexing every
    link, a planner per group, and the router of point-to-point sends between ranks."""

    topology: nx.DiGraph
    routes: Routes
    gpu_ranks: tuple[int, ...]  # GPU rank of each layout rank
    tp: int
    calib: Calibration
    algo: str = "auto"
    #: the ranks of the communicator point-to-point sends run in (a pipeline's stages; 0:
    #: every rank of the layout)
    p2p_ranks: int = 0

    @property
    def groups(self) -> int:
        return len(self.gpu_ranks) // self.tp

    @cached_property
    def group_comms(self) -> tuple[Comms, ...]:
        tp = self.tp
        return tuple(
            Comms(
                group_on(
                    self.topology, self.routes, self.gpu_ranks[g * tp : (g + 1) * tp], "the layout"
                ),
                self.calib,
                self.algo,
            )
            for g in range(self.groups)
        )

    @cached_property
    def fabric(self) -> Fabric:
        """Every link of the topology (the same indices as each group's fabric)."""
        return build_fabric(self.routes, self.gpu_ranks, self.group_comms[0].group.gpu, self.calib)

    @cached_property
    def router(self) -> Router:
        size = self.p2p_ranks or len(self.gpu_ranks)
        gpu = self.group_comms[0].group.gpu
        return pair_router(self.routes, self.gpu_ranks, gpu, self.calib, size)

    def spanning(self, first: int, span: int) -> Comms:
        """The communication of ``span`` consecutive TP groups from group ``first`` on, as
        one group (a MoE group of attention data-parallel groups)."""
        if span == 1:
            return self.group_comms[first]
        key = (first, span)
        made = self._spans.get(key)
        if made is None:
            tp = self.tp
            ranks = self.gpu_ranks[first * tp : (first + span) * tp]
            group = group_on(self.topology, self.routes, ranks, "the layout")
            made = self._spans[key] = Comms(group, self.calib, self.algo)
        return made

    @cached_property
    def _spans(self) -> dict[tuple[int, int], Comms]:
        return {}

    def group_schedule(self, call: CollectiveCall) -> Schedule:
        """The schedule of ``call`` in its group's own ranks (0 .. tp * span - 1)."""
        comms = self.spanning(call.group, call.span)
        return comms.planner(replace(call, group=0, span=1))

    @cached_property
    def planner(self) -> Planner:
        n, tp = len(self.gpu_ranks), self.tp
        cache: dict[CollectiveCall, Schedule] = {}

        def plan(call: CollectiveCall) -> Schedule:
            sched = cache.get(call)
            if sched is None:
                base = call.group * tp
                local = self.group_schedule(call)

                def moved(s: Send) -> Send:
                    notify = tuple(base + r for r in s.notify)
                    peer = base + s.peer if s.peer >= 0 else s.peer
                    return replace(s, notify=notify, peer=peer)

                steps: list[tuple[Step, ...]] = [()] * n
                for t in range(tp * call.span):
                    steps[base + t] = tuple(
                        Step(tuple(map(moved, st.sends)), st.expect) for st in local.steps[t]
                    )
                sched = cache[call] = replace(local, steps=tuple(steps))
            return sched

        return plan

    def labels(self) -> dict[int, str]:
        return {r: self.routes.node(g) for r, g in enumerate(self.gpu_ranks)}


def _footprint(comms: LayoutComms, programs: Programs, ranks: range) -> list[tuple]:  # type: ignore[type-arg]
    """What replica ``ranks`` puts on the links, in program order: per distinct collective
    its schedule, per send its route, with links as indices (compared under a link map)."""
    out: list[tuple] = []  # type: ignore[type-arg]
    seen: set[CollectiveCall] = set()
    lo = ranks.start
    for r in ranks:
        for op in programs[r].ops:
            if op.collective is not None and op.collective not in seen:
                seen.add(op.collective)
                s = comms.group_schedule(op.collective)
                out.append(("coll", s.algorithm, s.protocol, s.base_s, s.steps))
            elif op.p2p is not None and op.p2p.direction == "send":
                snd = comms.router(r, op.p2p.peer, op.p2p.nbytes)
                out.append(("p2p", r - lo, op.p2p.peer - lo, snd))
    return out


def replicas_independent(comms: LayoutComms, programs: Programs, replicas: int) -> bool:
    """Whether replica 0 alone gives every replica's timeline exactly: same programs (up to
    the rank offset), pairwise disjoint links, and link maps with equal capacities and
    latencies carrying replica 0's footprint onto each other's."""
    if replicas < 2:
        return False
    per = programs.ranks // replicas
    caps, lats = comms.fabric.capacities, comms.fabric.latencies
    base = _footprint(comms, programs, range(0, per))
    used0 = {x for item in base for x in _links(item)}
    taken = set(used0)
    for d in range(1, replicas):
        other = _footprint(comms, programs, range(d * per, (d + 1) * per))
        if len(other) != len(base):
            return False
        link_map: dict[int, int] = {}
        for a, b in zip(base, other, strict=True):
            if _strip(a) != _strip(b):
                return False
            for x, y in zip(_links(a), _links(b), strict=True):
                if link_map.setdefault(x, y) != y or (caps[x], lats[x]) != (caps[y], lats[y]):
                    return False
        if len(set(link_map.values())) != len(link_map) or taken & set(link_map.values()):
            return False
        taken |= set(link_map.values())
    return _same_programs(programs, replicas, comms.tp)


def _links(item: tuple) -> list[int]:  # type: ignore[type-arg]
    if item[0] == "p2p":
        return list(item[3].links)
    return [x for steps in item[4] for st in steps for s in st.sends for x in s.links]


def _strip(item: tuple) -> tuple:  # type: ignore[type-arg]
    """``item`` without its link indices."""
    if item[0] == "p2p":
        return (*item[:3], replace(item[3], links=(), notify=(), peer=-1))
    steps = tuple(
        tuple(Step(tuple(replace(s, links=()) for s in st.sends), st.expect) for st in r)
        for r in item[4]
    )
    return (*item[:4], steps)


def _same_programs(programs: Programs, replicas: int, tp: int) -> bool:
    """Replica d's programs are replica 0's with collectives moved to its groups and p2p
    peers moved by its rank offset."""
    per = programs.ranks // replicas
    groups = per // tp  # TP groups of one replica
    for d in range(1, replicas):
        for r in range(per):
            a, b = programs[r], programs[d * per + r]
            if len(a.ops) != len(b.ops) or a.replay_s != b.replay_s:
                return False
            for x, y in zip(a.ops, b.ops, strict=True):
                if x.collective is not None:
                    if (c := y.collective) is None:
                        return False
                    y = replace(y, collective=replace(c, group=c.group - groups * d))
                elif x.p2p is not None:
                    if (q := y.p2p) is None:
                        return False
                    y = replace(y, p2p=replace(q, peer=q.peer - d * per))
                if x != y:
                    return False
    return True


__all__ = ["LayoutComms", "place", "replicas_independent", "stage_layers"]
