"""From a topology to a run: the group, its fabric, planner and router, and the engine run.

The one path that both :func:`tpsim.core.api.simulate` (``tpsim run``) and
:func:`tpsim.core.collective_bench.collective_sweep` (``tpsim collective``) take: pick the
group's GPUs (:func:`tp_group`), index the links they communicate over and plan collectives
on them (:func:`connect`), then run per-rank programs there (:func:`run_programs`), with one
block of ranks standing for all when the hardware, the schedules and the programs allow it
(:mod:`tpsim.core.comm.symmetry`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import networkx as nx
from tpsim import calibration
from tpsim.calibration import Calibration
from tpsim.core.comm import symmetry
from tpsim.core.comm.algorithms.pairwise import peer_protocol, peer_send
from tpsim.core.comm.collectives import make_planner
from tpsim.core.comm.fabric import Fabric, build_fabric
from tpsim.core.engine import simulation as engine
from tpsim.core.engine.jitter import HostJitter
from tpsim.core.errors import ConfigError
from tpsim.core.program import CollectiveCall, Programs
from tpsim.core.records import Record
from tpsim.core.schedule import Planner, Router, Schedule, Send
from tpsim.topologies.gpus import GPUSpec
from tpsim.topologies.routing import Routes, ring_order


@dataclass(frozen=True)
class Group:
    """The GPUs of one TP group: GPU ranks by TP rank, their ring order, and the routes."""

    topology: nx.DiGraph
    routes: Routes
    gpu_ranks: tuple[int, ...]  # gpu_ranks[t] = GPU rank of TP rank t
    ring: tuple[int, ...]  # TP ranks in ring order
    gpu: GPUSpec

    def fabric(self, calib: Calibration) -> Fabric:
        """The group's links as its collectives see them under ``calib``."""
        return build_fabric(self.routes, self.gpu_ranks, self.gpu, calib)

    def labels(self) -> dict[int, str]:
        return {t: self.routes.node(g) for t, g in enumerate(self.gpu_ranks)}


def tp_group(topology: nx.DiGraph, size: int, per_host: int = 0) -> Group:
    """The first ``size`` GPUs of ``topology`` (by rank) as a group, ring-ordered; with
    ``per_host``, the first ``per_host`` GPUs of each host in turn."""
    routes = Routes(topology)
    name = topology.graph.get("name", "topology")
    if size > routes.num_ranks:
        raise ConfigError(
            f"tp={size}: larger than the {routes.num_ranks} GPUs of {name} "
            "(add hosts: --nodes, or nodes= in the API)"
        )
    if per_host:
        hosts: dict[int, list[int]] = {}
        for r in range(routes.num_ranks):
            hosts.setdefault(routes.host(r), []).append(r)
        if per_host > min(len(v) for v in hosts.values()):
            raise ConfigError(
                f"gpus_per_node={per_host}: {name} has {min(len(v) for v in hosts.values())} "
                "GPUs per host"
            )
        if size // per_host > len(hosts):
            raise ConfigError(
                f"tp={size} with gpus_per_node={per_host} needs {size // per_host} hosts; "
                f"{name} has {len(hosts)} (add hosts: --nodes, or nodes= in the API)"
            )
        gpu_ranks = tuple(r for h in sorted(hosts)[: size // per_host] for r in hosts[h][:per_host])
    else:
        gpu_ranks = tuple(range(size))
    return group_on(topology, routes, gpu_ranks, f"tp={size}: the group")


def group_on(topology: nx.DiGraph, routes: Routes, gpu_ranks: tuple[int, ...], what: str) -> Group:
    """The group of GPUs ``gpu_ranks`` (in TP-rank order), ring-ordered; one GPU type only
    (``what`` names the group in the refusal)."""
    gpus = {topology.nodes[routes.node(g)]["gpu"] for g in gpu_ranks}
    if len(gpus) > 1:
        names = ", ".join(sorted(g.name for g in gpus))
        raise ConfigError(f"{what} mixes GPU types ({names}); use one type")
    tp_of = {g: t for t, g in enumerate(gpu_ranks)}
    ring = tuple(tp_of[g] for g in ring_order(routes, gpu_ranks))
    return Group(topology, routes, gpu_ranks, ring, gpus.pop())


def p2p_router(fab: Fabric, ranks: int | None = None) -> Router:
    """Point-to-point sends over ``fab`` (a pipeline's activations between stages) in a
    communicator of ``ranks`` (default: the fabric's; a pipeline's: its stages), as NCCL's
    ncclSend/ncclRecv runs one: its P2P kernel's fixed latency (the protocol's ``p2p``
    base), then the transfer as one peer's part of a grouped send
    (:func:`~tpsim.core.comm.algorithms.pairwise.peer_send`: LL up to NCCL's P2P LL
    threshold, else Simple with its chunk pipeline's fill, on the channels its bytes get,
    at their rate). Without P2P tuning (the ideal calibration): the routed path's wire
    latency, then the bytes as a flow over its links."""
    protocols = fab.tuning.protocols_over(True)

    def route(src: int, dst: int, nbytes: int) -> Send:
        if fab.tuning.p2p is None:
            path = fab.path(src, dst)
            return Send(path.links, nbytes, float(nbytes), path.latency_s, math.inf, (dst,), dst)
        proto = peer_protocol(fab, protocols, nbytes, ranks)
        snd = peer_send(fab, src, dst, nbytes, proto, peers=1, ranks=ranks)
        return replace(snd, latency_s=proto.base("p2p") + snd.latency_s)

    return route


def pair_router(
    routes: Routes, gpu_ranks: Sequence[int], gpu: GPUSpec, calib: Calibration, ranks: int
) -> Router:
    """Point-to-point sends between the ranks of ``gpu_ranks`` (their GPU ranks), each priced
    by :func:`p2p_router` on the fabric of its own two GPUs (link indices are the
    topology's, whatever the fabric), so that a pair inside a host runs NCCL's one-host P2P
    channels though the layout spans hosts; ``ranks``: the communicator's size (a
    pipeline's stages)."""
    made: dict[tuple[int, int], Router] = {}

    def route(src: int, dst: int, nbytes: int) -> Send:
        one = made.get((src, dst))
        if one is None:
            pair = (gpu_ranks[src], gpu_ranks[dst])
            fab = build_fabric(routes, pair, gpu, calib)
            one = made[(src, dst)] = p2p_router(fab, ranks)
        return replace(one(0, 1, nbytes), notify=(dst,), peer=dst)

    return route


def p2p_seconds(router: Router, src: int, dst: int, nbytes: int, bandwidth_Bps: float) -> float:
    """The time of ``router``'s send of ``nbytes`` alone on its path of ``bandwidth_Bps``:
    its latency, then its wire bytes at the lower of the path's rate and its own cap."""
    snd = router(src, dst, nbytes)
    return snd.latency_s + snd.wire / min(bandwidth_Bps, snd.cap_Bps)


@dataclass(frozen=True)
class Comms:
    """A group and what its communication runs over. The fabric, planner and router are
    built on first use, so that a run refused for other reasons never plans collectives."""

    group: Group
    calib: Calibration  # link efficiencies and collective tuning
    algo: str = "auto"  # collective algorithm (tpsim.core.comm.collectives.ALGORITHMS)

    @cached_property
    def fabric(self) -> Fabric:
        return self.group.fabric(self.calib)

    @cached_property
    def planner(self) -> Planner:
        plan = make_planner(self.fabric, self.group.ring, algo=self.algo)
        extra = self.calib.engine.collective_latency_s
        if extra <= 0:
            return plan

        def with_engine_latency(call: CollectiveCall) -> Schedule:
            """The planned schedule after the engine's own latency per call (the same for
            every algorithm, so it never changes which one is chosen)."""
            sched = plan(call)
            return replace(sched, base_s=sched.base_s + extra)

        return with_engine_latency

    @cached_property
    def router(self) -> Router:
        return p2p_router(self.fabric)


def connect(
    topology: nx.DiGraph,
    size: int,
    *,
    per_host: int = 0,
    calib: Calibration | None = None,
    algo: str = "auto",
) -> Comms:
    """The group of ``size`` GPUs of ``topology`` (:func:`tp_group`) and its communication,
    priced with ``calib`` (the shipped calibration by default)."""
    return Comms(tp_group(topology, size, per_host), calib or calibration.default(), algo)


@dataclass(frozen=True)
class Ran:
    """What :func:`run_programs` produced: the records in canonical order
    (:func:`tpsim.core.comm.symmetry.canonical`), the SimPy events processed and how many ranks
    the engine ran (fewer than the group when one block stood for all)."""

    records: list[Record]
    events: int
    ranks_simulated: int


def run_programs(
    comms: Comms,
    programs: Programs,
    *,
    rank_delay_s: Sequence[float] | None = None,
    comm_sms: int = 0,
    link_log: list[tuple[float, int, float]] | None = None,
    use_symmetry: bool = True,
    host_jitter: HostJitter | None = None,
    canonical: bool = True,
) -> Ran:
    """Run ``programs`` (one per rank of the group) on ``comms``. One block of ranks stands
    for all when nothing tells the blocks apart: no launch delays, no host jitter, no link
    log, identical programs without p2p, and a hardware rotation that maps every collective
    onto itself. ``rank_delay_s``, ``comm_sms``, ``link_log`` and ``host_jitter`` are
    :func:`tpsim.core.engine.simulation.run`'s. ``canonical=False`` returns the simulated
    ranks' records as the engine emitted them (no renumbering, no copies of the block that
    stood for all: the same times, for a caller that only needs when lanes end)."""
    fab = comms.fabric
    delays = list(rank_delay_s) if rank_delay_s is not None else [0.0] * programs.ranks
    # ranks whose host threads differ (a skew, jitter) are not copies of one another
    jitter = host_jitter if host_jitter is not None and host_jitter.touches(programs) else None
    skewed = any(d != 0 for d in delays) or jitter is not None
    sym = None if (skewed or link_log is not None or not use_symmetry) else symmetry.find(fab)
    quotient = symmetry.plan_quotient(sym, programs, comms.planner) if sym else None
    shifts: dict[int, int] = {}
    ranks = sym.per_host if (sym and quotient) else programs.ranks
    records, events = engine.run(
        programs.head(ranks),
        quotient or comms.planner,
        fab.capacities,
        router=comms.router,
        rank_delay_s=delays[:ranks],
        comm_sms=comm_sms,
        sm_count=comms.group.gpu.sm_count,
        link_log=link_log,
        cause_shift=shifts,
        host_jitter=jitter,
    )
    if canonical and sym and quotient:
        records = symmetry.canonical(records, shifts, sym.hosts, sym.per_host)
    elif canonical:
        records = symmetry.canonical(records)
    return Ran(records, events, ranks)


__all__ = [
    "Comms",
    "Group",
    "Ran",
    "connect",
    "p2p_router",
    "p2p_seconds",
    "pair_router",
    "run_programs",
    "tp_group",
]
