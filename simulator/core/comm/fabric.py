"""The links a TP group's collectives run over: indexed, with achievable capacities.

Built once per (topology, group). Paths between TP ranks come from the topology's routes;
each directed link gets one index and a capacity in B/s (raw bandwidth times the link's
achievable fraction, from the calibration: 1 in the ideal one). The fabric also carries the
collective tuning constants its schedules are built with (:attr:`Fabric.tuning`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import networkx as nx
from tpsim.calibration import Calibration, Collectives
from tpsim.topologies.gpus import GPUSpec
from tpsim.topologies.routing import Routes

#: NCCL's link classes, fastest first: a path is as slow as its slowest class.
CLASS_ORDER = ("nvlink", "pci", "net")
#: NVIDIA NVLink link kinds: the links NCCL enables LL128 over.
NVLINK_KINDS = ("nvlink", "nvlink_bridge")


@dataclass(frozen=True)
class Path:
    links: tuple[int, ...]
    latency_s: float
    link_class: str  # the slowest class on the path: "nvlink" < "pci" < "net"
    bandwidth_Bps: float  # the path's bottleneck capacity


@dataclass
class Fabric:
    ranks: int
    gpu: GPUSpec
    tuning: Collectives  # protocols, shares and latencies the schedules use
    capacities: list[float]
    latencies: list[float]  # one-way latency of each link
    hosts: tuple[int, ...]  # host of each TP rank
    #: per rank (up link, down link) to its host's NVSwitch, if every host's GPUs sit on one
    #: switch that reduces (NVLSTree across hosts); ``nvswitch``: the same within one host
    host_switches: tuple[tuple[int, int], ...] | None
    routes: Routes
    gpu_ranks: tuple[int, ...]
    _index: dict[tuple[str, str], int]
    edges: list[tuple[str, str]] = field(default_factory=list)  # link index -> (src, dst)
    _paths: dict[tuple[int, int], Path] = field(default_factory=dict)
    #: the calibration's constants at the reference clock (None: ``tuning`` is): NCCL has
    #: one tuning table for every GPU and chooses by it, whatever the GPU's clock
    reference_tuning: Collectives | None = None

    def at_reference(self) -> Fabric:
        """This fabric with NCCL's table as written (the reference clock): what NCCL ranks
        its algorithms and protocols by. Itself where its tuning is that already."""
        if self.reference_tuning is None or self.reference_tuning is self.tuning:
            return self
        return replace(self, tuning=self.reference_tuning, reference_tuning=None)

    @property
    def nvswitch(self) -> tuple[tuple[int, int], ...] | None:
        """Per rank (up link, down link) to the one NVSwitch of a one-host group, if it
        reduces in the switch (NVLS); None otherwise."""
        return self.host_switches if len(set(self.hosts)) == 1 else None

    def via_nvswitch(self, links: tuple[int, ...]) -> bool:
        """Whether a route over ``links`` passes through an NVSwitch."""
        nodes = self.routes.graph.nodes
        return any(nodes[self.edges[i][1]].get("kind") == "nvswitch" for i in links)

    def path(self, src: int, dst: int) -> Path:
        """The route from TP rank ``src`` to TP rank ``dst``."""
        key = (src, dst)
        p = self._paths.get(key)
        if p is None:
            edges = self.routes.path(self.gpu_ranks[src], self.gpu_ranks[dst])
            g = self.routes.graph
            links = tuple(self._index[e] for e in edges)
            link_class = self.tuning.link_class
            classes = [link_class[g.edges[e]["link"]] for e in edges] or ["nvlink"]
            p = Path(
                links,
                sum(g.edges[e]["latency_s"] for e in edges),
                max(classes, key=CLASS_ORDER.index),
                min((self.capacities[i] for i in links), default=float("inf")),
            )
            self._paths[key] = p
        return p

    @property
    def multi_host(self) -> bool:
        return len(set(self.hosts)) > 1

    def nvlink_within_hosts(self, order: Sequence[int]) -> bool:
        """Whether every hop between consecutive TP ranks of ``order`` on one host runs over
        NVLink, on a GPU that has NVLink (NCCL's typeIntra <= NVB: the condition on which
        it enables LL128, tuning.cc)."""
        if not (self.gpu.scaleup_kind.startswith("nvlink") or self.gpu.nvlink_bridge != "none"):
            return False
        g = self.routes.graph
        for a, b in zip(order, [*order[1:], *order[:1]], strict=True):
            if a == b or self.hosts[a] != self.hosts[b]:
                continue
            edges = self.routes.path(self.gpu_ranks[a], self.gpu_ranks[b])
            if any(g.edges[e]["link"] not in NVLINK_KINDS for e in edges):
                return False
        return True


def build_fabric(
    routes: Routes, gpu_ranks: Sequence[int], gpu: GPUSpec, calib: Calibration
) -> Fabric:
    g: nx.DiGraph = routes.graph
    edges = sorted(g.edges)
    index = {e: i for i, e in enumerate(edges)}
    caps = []
    lats = [g.edges[e]["latency_s"] for e in edges]
    for e in edges:
        raw, link = g.edges[e]["bandwidth_Bps"], g.edges[e]["link"]
        kind = gpu.nvlink_bridge if link == "nvlink_bridge" else gpu.scaleup_kind
        caps.append(raw * calib.links.efficiency_of(link, kind))
    hosts = tuple(routes.host(r) for r in gpu_ranks)
    return Fabric(
        ranks=len(gpu_ranks),
        gpu=gpu,
        tuning=calib.collectives.at_clock(gpu.sm_clock_Hz),  # NCCL's latencies at its clock
        reference_tuning=calib.collectives,
        capacities=caps,
        latencies=lats,
        hosts=hosts,
        host_switches=_switch_links(g, routes, gpu_ranks, index, hosts),
        routes=routes,
        gpu_ranks=tuple(gpu_ranks),
        _index=index,
        edges=edges,
    )


def _switch_links(
    g: nx.DiGraph,
    routes: Routes,
    gpu_ranks: Sequence[int],
    index: dict[tuple[str, str], int],
    hosts: tuple[int, ...],
) -> tuple[tuple[int, int], ...] | None:
    """Each rank's (up, down) links to its host's NVSwitch, if the system reduces in the
    switch (graph ``nvls``) and every host's GPUs sit on one switch; None otherwise."""
    if not g.graph.get("nvls"):
        return None
    out: list[tuple[int, int]] = []
    switches: dict[int, set[str]] = {}
    for t, r in enumerate(gpu_ranks):
        node = routes.node(r)
        sw = [n for n in g.successors(node) if g.nodes[n].get("kind") == "nvswitch"]
        if len(sw) != 1 or (node, sw[0]) not in index or (sw[0], node) not in index:
            return None
        switches.setdefault(hosts[t], set()).add(sw[0])
        out.append((index[(node, sw[0])], index[(sw[0], node)]))
    return tuple(out) if all(len(s) == 1 for s in switches.values()) else None
