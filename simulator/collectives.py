"""Collective algorithms over routed links, as step schedules the engine runs.

A ring all-reduce is ``2(p-1)`` steps (reduce-scatter, then all-gather), each rank sending
one ``n/p`` chunk to its ring successor per step; an all-gather is ``p-1`` such steps. Each
step costs the hop's latency plus the chunk over the hop's achievable bandwidth. The
closed forms below are the test oracle and the protocol chooser's prediction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.engine import Planner, StepSchedule
from simulator.errors import ConfigError
from simulator.program import CollectiveCall
from topologies.gpus import GPUSpec
from topologies.routing import Routes


@dataclass(frozen=True)
class Protocol:
    """NCCL's cost model for one protocol of the ring algorithm (src/graph/tuning.cc):
    a base latency per collective, a latency per hop by link class, and the fraction of
    the link's bandwidth the protocol achieves."""

    name: str
    base_s: float
    hop_s: dict[str, float]  # by link class: "nvlink", "pci", "net"
    bw_fraction: float


#: ../shared/calibration/README.md, "NCCL's own cost model": ring base latency LL 6.6 us,
#: LL128 14.0 us, Simple 8.4 us; NVLink hop LL 0.6, LL128 1.9, Simple 3.4 us; bandwidth
#: LL ~50%, LL128 ~92%, Simple ~100%. PCI and network hop latencies are NCCL's hwLat
#: table for the ring (tuning.cc: PCI 1.0 / 2.5 / 5.7 us, NET 2.7 / 4.0 / 14.0 us).
PROTOCOLS: dict[str, Protocol] = {
    "LL": Protocol("LL", 6.6e-6, {"nvlink": 0.6e-6, "pci": 1.0e-6, "net": 2.7e-6}, 0.50),
    "LL128": Protocol("LL128", 14.0e-6, {"nvlink": 1.9e-6, "pci": 2.5e-6, "net": 4.0e-6}, 0.92),
    "Simple": Protocol("Simple", 8.4e-6, {"nvlink": 3.4e-6, "pci": 5.7e-6, "net": 14.0e-6}, 1.0),
}
IDEAL = Protocol("ideal", 0.0, {"nvlink": 0.0, "pci": 0.0, "net": 0.0}, 1.0)

#: Class of each link kind in NCCL's latency table.
LINK_CLASS = {
    "nvlink": "nvlink",
    "xgmi": "nvlink",
    "pcie": "pci",
    "upi": "pci",
    "infiniband": "net",
}

#: Fraction of a link's raw bandwidth a collective achieves with the Simple protocol.
#: NVLink: ring all-reduce busbw over the per-GPU NVLink bandwidth, 235/300 on 8x A100 and
#: 370/450 on 8x H100 (../shared/calibration/collective_peaks.csv); NVLink5 assumed as
#: NVLink4. InfiniBand: practical per-NIC bandwidth, 24/25 GB/s HDR and 47/50 GB/s NDR
#: (same file). PCIe, UPI and xGMI: 0.80, an estimate (protocol and DMA overheads), not
#: a measurement.
NVLINK_EFFICIENCY = {"nvlink3": 235 / 300, "nvlink4": 370 / 450, "nvlink5": 370 / 450}
LINK_EFFICIENCY = {"pcie": 0.80, "upi": 0.80, "xgmi": 0.80, "infiniband": 0.95}


@dataclass(frozen=True)
class Hop:
    """One ring neighbour link as the collective sees it."""

    latency_s: float  # wire and switch latency along the route
    bandwidth_Bps: float  # achievable (raw bottleneck times link efficiency)
    link_class: str  # the slowest class on the route: "nvlink" < "pci" < "net"


def ring_all_reduce_time(nbytes: float, ranks: int, alpha_s: float, bandwidth_Bps: float) -> float:
    """Closed form of the ring all-reduce: ``2(p-1)(alpha + n / (p B))``."""
    return 2 * (ranks - 1) * (alpha_s + nbytes / (ranks * bandwidth_Bps))


def ring_all_gather_time(nbytes: float, ranks: int, alpha_s: float, bandwidth_Bps: float) -> float:
    """Closed form of the ring all-gather of an ``n``-byte output: ``(p-1)(alpha + n/(pB))``."""
    return (ranks - 1) * (alpha_s + nbytes / (ranks * bandwidth_Bps))


def chunk_sizes(nbytes: int, ranks: int) -> list[int]:
    """``nbytes`` split into ``ranks`` chunks that differ by at most one byte."""
    q, r = divmod(nbytes, ranks)
    return [q + (1 if j < r else 0) for j in range(ranks)]


def hops(routes: Routes, group: Sequence[int], order: Sequence[int], *, ideal: bool) -> list[Hop]:
    """The hop from each ring position to the next; ``order`` lists TP ranks in ring order
    and ``group[t]`` is the GPU rank of TP rank ``t``."""
    out: list[Hop] = []
    if len(order) < 2:
        return out  # one rank: no links to cross
    classes = ("nvlink", "pci", "net")
    for pos, t in enumerate(order):
        src, dst = group[t], group[order[(pos + 1) % len(order)]]
        bw = min(_achievable(routes, src, e, ideal) for e in _edges(routes, src, dst))
        kinds = routes.link_kinds(src, dst)
        cls = max((LINK_CLASS.get(k, "pci") for k in kinds), key=classes.index)
        out.append(Hop(routes.latency_s(src, dst), bw, cls))
    return out


def _edges(routes: Routes, src: int, dst: int) -> list[tuple[float, str]]:
    g = routes.graph
    return [
        (g.edges[u, v]["bandwidth_Bps"], g.edges[u, v]["link"]) for u, v in routes.path(src, dst)
    ]


def _achievable(routes: Routes, src: int, edge: tuple[float, str], ideal: bool) -> float:
    bandwidth, link = edge
    if ideal:
        return bandwidth
    if link == "nvlink":
        gpu: GPUSpec = routes.graph.nodes[routes.node(src)]["gpu"]
        return bandwidth * NVLINK_EFFICIENCY.get(gpu.scaleup_kind, NVLINK_EFFICIENCY["nvlink4"])
    return bandwidth * LINK_EFFICIENCY.get(link, 0.80)


def _ring_steps(call: CollectiveCall, ranks: int) -> list[list[int]]:
    """Bytes each ring position sends in each step."""
    chunks = chunk_sizes(call.nbytes, ranks)
    if call.op == "all_reduce":
        rs = [[chunks[(q - s) % ranks] for s in range(ranks - 1)] for q in range(ranks)]
        ag = [[chunks[(q + 1 - s) % ranks] for s in range(ranks - 1)] for q in range(ranks)]
        return [a + b for a, b in zip(rs, ag, strict=True)]
    if call.op == "all_gather":
        return [[chunks[(q - s) % ranks] for s in range(ranks - 1)] for q in range(ranks)]
    raise ConfigError(f"collective op={call.op!r}: must be all_reduce or all_gather")


def ring_schedule(
    call: CollectiveCall, order: Sequence[int], ring: Sequence[Hop], protocol: Protocol
) -> StepSchedule:
    """The ring schedule of ``call`` over ``order`` (TP ranks) with the given protocol."""
    p = len(order)
    pos = {t: q for q, t in enumerate(order)}
    per_pos = _ring_steps(call, p)
    send_bytes, send_s = [], []
    for t in range(p):
        q = pos[t]
        hop = ring[q]
        lat = max(hop.latency_s, protocol.hop_s[hop.link_class])
        bw = hop.bandwidth_Bps * protocol.bw_fraction
        send_bytes.append(tuple(per_pos[q]))
        send_s.append(tuple(lat + b / bw for b in per_pos[q]))
    return StepSchedule(
        algorithm="ring",
        protocol=protocol.name,
        base_s=protocol.base_s,
        send_to=tuple(order[(pos[t] + 1) % p] for t in range(p)),
        recv_from=tuple(order[(pos[t] - 1) % p] for t in range(p)),
        send_bytes=tuple(send_bytes),
        send_s=tuple(send_s),
    )


def predicted_time(sched: StepSchedule) -> float:
    """Closed-form time of a schedule when every rank starts together: the base latency
    plus, per step, the slowest rank's send."""
    return sched.base_s + sum(max(col) for col in zip(*sched.send_s, strict=True))


def make_planner(
    routes: Routes, group: Sequence[int], order: Sequence[int], *, algo: str, ideal: bool
) -> Planner:
    """A planner for collectives over ``group`` (GPU ranks by TP rank) along ``order``.

    ``algo`` is "ring" or "auto" (the fastest predicted (algorithm, protocol) pair, as NCCL
    picks); in ideal mode the protocol is ideal: no base or protocol latency, full bandwidth.
    """
    if algo not in ("auto", "ring"):
        raise ConfigError(f"allreduce_algo={algo!r}: must be one of auto, ring")
    ring = hops(routes, group, order, ideal=ideal)
    protocols = [IDEAL] if ideal else list(PROTOCOLS.values())

    def plan(call: CollectiveCall) -> StepSchedule:
        candidates = [ring_schedule(call, order, ring, proto) for proto in protocols]
        return min(candidates, key=predicted_time)

    return plan
