"""Routes between GPU ranks and ring orders over them.

Route choice between two ranks, in order: the largest bottleneck bandwidth, then the
smallest summed latency (compared in whole picoseconds so that equal sums taken in a
different order tie exactly), then the fewest hops, then the lexicographically smallest
sequence of node ids. It is found in two searches per pair, both stopping at the target:
a widest-path search gives the best bottleneck B*, then a Dijkstra over the edges with
bandwidth >= B* orders paths by (latency, hops, node ids). Results are cached per pair.

Transport between two GPUs of one host, as NCCL chooses it (src/graph/paths.cc,
ncclTopoCheckP2p and ncclTopoComputePaths): P2P (the GPU writes into its peer's memory
along the route) when the route is all NVLink-class links, or when it crosses only PCIe
switches (NCCL's default P2P level, PXB) and the topology allows PCIe P2P for the pair
(graph attrs p2p, p2p_pairs). Otherwise SHM: the traffic is diverted through host memory
at the CPU nearest the receiving GPU, so the route is (sender -> that CPU) + (that CPU ->
receiver), each leg chosen as above. GPUs of different hosts talk over the network.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

import networkx as nx
from tpsim.topologies.errors import TopologyError, show

__all__ = ["PEER_LINKS", "Routes", "ring_order"]

_EXHAUSTIVE_MAX = 8  # ranks per host searched exhaustively by ring_order
#: Link kinds that join GPUs directly (NCCL's path types NVL/NVB): P2P over a route made of
#: them needs no PCIe peer access, so the topology's p2p setting does not apply.
PEER_LINKS = frozenset({"nvlink", "nvlink_bridge", "xgmi"})


def _ps(latency_s: float) -> int:
    return round(latency_s * 1e12)


class Routes:
    """Routes between GPU ranks computed once per graph. Route choice: maximise the bottleneck
    bandwidth, then minimise summed latency, then fewest hops, then lexicographic node ids
    (deterministic)."""

    def __init__(self, g: nx.DiGraph) -> None:
        self.graph = g
        ranked = sorted((d["rank"], n) for n, d in g.nodes(data=True) if d.get("kind") == "gpu")
        self._nodes = [n for _, n in ranked]
        self._hosts = [g.nodes[n].get("host", 0) for n in self._nodes]
        self.num_ranks = len(self._nodes)
        # adjacency: node -> [(neighbour, bandwidth_Bps, latency_ps, latency_s)], sorted; a
        # path passes through a GPU only over NVLink-class links (NCCL's NVB: a GPU forwards
        # over NVLink, never from PCIe or to it), so the search has two adjacencies: one that
        # never enters a GPU on the way, and one of the peer links alone
        self._gpus = {n for n, d in g.nodes(data=True) if d.get("kind") == "gpu"}
        self._adj: dict[str, list[tuple[str, float, int, float]]] = {
            n: sorted(
                (v, d["bandwidth_Bps"], _ps(d["latency_s"]), d["latency_s"])
                for v, d in g.adj[n].items()
            )
            for n in g.nodes
        }
        self._peer_adj: dict[str, list[tuple[str, float, int, float]]] = {
            n: sorted(
                (v, d["bandwidth_Bps"], _ps(d["latency_s"]), d["latency_s"])
                for v, d in g.adj[n].items()
                if d.get("link") in PEER_LINKS
            )
            for n in g.nodes
        }
        self._cache: dict[tuple[int, int], tuple[tuple[str, str], ...]] = {}
        self._p2p: bool = g.graph.get("p2p", True)
        self._p2p_pairs: dict[tuple[str, str], bool] = g.graph.get("p2p_pairs", {})
        self._node_routes: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}
        self._local_cpus: dict[str, str] = {}

    def _check(self, rank: int) -> int:
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < self.num_ranks:
            raise TopologyError(f"rank={show(rank)}: must be an integer in 0..{self.num_ranks - 1}")
        return rank

    def node(self, rank: int) -> str:
        """Node id of a rank."""
        return self._nodes[self._check(rank)]

    def host(self, rank: int) -> int:
        """Host (server) index of a rank."""
        return self._hosts[self._check(rank)]

    def path(self, src: int, dst: int) -> tuple[tuple[str, str], ...]:
        """Directed edges from src to dst (empty when src == dst)."""
        key = (self._check(src), self._check(dst))
        if key not in self._cache:
            self._cache[key] = self._pair_route(self._nodes[src], self._nodes[dst])
        return self._cache[key]

    def transport(self, src: int, dst: int) -> str:
        """NCCL's transport from src to dst: "p2p", "shm" (through host memory) or "net"
        (between hosts); "p2p" when src == dst."""
        s, t = self.node(src), self.node(dst)
        if self._hosts[src] != self._hosts[dst]:
            return "net"
        return "p2p" if s == t or self._peer(s, t, self._route(s, t)) else "shm"

    def p2p_allowed(self, a: str, b: str) -> bool:
        """Whether the topology allows PCIe P2P between GPU nodes a and b (its p2p, or the
        pair's exception in p2p_pairs)."""
        return self._p2p_pairs.get((min(a, b), max(a, b)), self._p2p)

    def _pair_route(self, s: str, t: str) -> tuple[tuple[str, str], ...]:
        direct = self._route(s, t)
        g = self.graph
        if g.nodes[s].get("host", 0) != g.nodes[t].get("host", 0) or self._peer(s, t, direct):
            return direct
        cpu = self._local_cpu(t)
        return self._route(s, cpu) + self._route(cpu, t)

    def _peer(self, s: str, t: str, edges: tuple[tuple[str, str], ...]) -> bool:
        """Whether NCCL's P2P transport carries s -> t along ``edges`` (same host)."""
        g = self.graph
        kinds = {g.edges[e]["link"] for e in edges}
        if kinds <= PEER_LINKS:
            return True  # NVLink: path NVL (or NVB through a GPU), always P2P
        if "upi" in kinds or any(g.nodes[v].get("kind") == "cpu" for _, v in edges[:-1]):
            return False  # through a CPU (PHB) or across sockets (SYS): beyond level PXB
        return self.p2p_allowed(s, t)

    def _local_cpu(self, gpu: str) -> str:
        """The CPU nearest to ``gpu`` on its host (fewest hops to it, then node id): where
        NCCL's SHM transport stages data bound for ``gpu``."""
        if gpu not in self._local_cpus:
            g = self.graph
            host = g.nodes[gpu].get("host", 0)
            hops = nx.single_source_shortest_path_length(g.reverse(copy=False), gpu)
            cpus = [
                (n_hops, n)
                for n, n_hops in hops.items()
                if g.nodes[n].get("kind") == "cpu" and g.nodes[n].get("host", 0) == host
            ]
            if not cpus:
                raise TopologyError(
                    f"{gpu}: no cpu node on its host reaches it in {g.graph.get('name')!r}; "
                    "without P2P its copies go through host memory"
                )
            self._local_cpus[gpu] = min(cpus)[1]
        return self._local_cpus[gpu]

    def bandwidth_Bps(self, src: int, dst: int) -> float:
        """Bottleneck bandwidth of the path (inf when src == dst)."""
        edges = self.graph.edges
        return min((edges[e]["bandwidth_Bps"] for e in self.path(src, dst)), default=float("inf"))

    def latency_s(self, src: int, dst: int) -> float:
        """Summed one-way latency of the path (0 when src == dst)."""
        edges = self.graph.edges
        return sum((edges[e]["latency_s"] for e in self.path(src, dst)), 0.0)

    def link_kinds(self, src: int, dst: int) -> tuple[str, ...]:
        """Link kind of every edge of the path, in order."""
        edges = self.graph.edges
        return tuple(edges[e]["link"] for e in self.path(src, dst))

    def _next(self, u: str, s: str, t: str, relay: bool) -> list[tuple[str, float, int, float]]:
        """Where a path may go from ``u``: over peer links alone (``relay``: through GPUs),
        else anywhere but into a GPU other than ``t`` (and out of one other than ``s``)."""
        if relay:
            return self._peer_adj[u]
        if u != s and u in self._gpus:
            return []
        return [x for x in self._adj[u] if x[0] == t or x[0] not in self._gpus]

    def _widest(self, s: str, t: str, relay: bool) -> float:
        """The widest bottleneck from s to t (0 when none)."""
        best = {s: float("inf")}
        heap = [(-best[s], s)]
        done: set[str] = set()
        while heap:
            neg, u = heapq.heappop(heap)
            if u == t:
                return -neg
            if u in done:
                continue
            done.add(u)
            for v, bw, _, _ in self._next(u, s, t, relay):
                b = min(-neg, bw)
                if b > best.get(v, 0.0):
                    best[v] = b
                    heapq.heappush(heap, (-b, v))
        return 0.0

    def _route(self, s: str, t: str) -> tuple[tuple[str, str], ...]:
        """The best path from node s to node t along the graph (no transport rules)."""
        if (s, t) not in self._node_routes:
            self._node_routes[s, t] = self._search(s, t)
        return self._node_routes[s, t]

    def _search(self, s: str, t: str) -> tuple[tuple[str, str], ...]:
        if s == t:
            return ()
        found = []
        for relay in (False, True):
            floor = self._widest(s, t, relay)
            if floor > 0:
                lat, hops, nodes = self._within(s, t, relay, floor)
                found.append((-floor, lat, hops, nodes))
        if not found:
            raise TopologyError(
                f"{t} cannot be reached from {s} in {self.graph.graph.get('name')!r} (a path "
                "may pass through a GPU over NVLink-class links only)"
            )
        return tuple(itertools.pairwise(min(found)[3]))

    def _within(
        self, s: str, t: str, relay: bool, floor: float
    ) -> tuple[int, int, tuple[str, ...]]:
        """The lowest-latency path of bottleneck ``floor`` (then fewest hops, then node ids)."""
        heap: list[tuple[int, int, tuple[str, ...]]] = [(0, 0, (s,))]
        done: set[str] = set()
        while heap:
            lat, hops, nodes = heapq.heappop(heap)
            u = nodes[-1]
            if u == t:
                return lat, hops, nodes
            if u in done:
                continue
            done.add(u)
            for v, bw, ps, _ in self._next(u, s, t, relay):
                if bw >= floor and v not in done:
                    heapq.heappush(heap, (lat + ps, hops + 1, (*nodes, v)))
        raise AssertionError("unreachable: widest path exists")  # pragma: no cover


def _link_cost(routes: Routes, a: int, b: int) -> tuple[float, int]:
    return routes.bandwidth_Bps(a, b), _ps(routes.latency_s(a, b))


def _better(bw: float, ps: int, best: tuple[float, int] | None) -> bool:
    return best is None or bw > best[0] or (bw == best[0] and ps < best[1])


def _best_order(routes: Routes, members: list[int], cycle: bool, fixed_start: bool) -> list[int]:
    """Exhaustive branch-and-bound over orders of `members` (sorted), visited in
    lexicographic order so the first optimum found is the lexicographically smallest."""
    cost = {(a, b): _link_cost(routes, a, b) for a in members for b in members if a != b}
    min_ps = min(ps for _, ps in cost.values())
    n = len(members)
    edges_total = n if cycle else n - 1
    best: tuple[float, int] | None = None
    best_order: list[int] = []

    def extend(order: list[int], bw: float, ps: int) -> None:
        nonlocal best, best_order
        if best is not None:
            if bw < best[0]:
                return
            if bw == best[0] and ps + (edges_total - (len(order) - 1)) * min_ps >= best[1]:
                return
        if len(order) == n:
            if cycle:
                wbw, wps = cost[(order[-1], order[0])]
                bw, ps = min(bw, wbw), ps + wps
            if _better(bw, ps, best):
                best, best_order = (bw, ps), list(order)
            return
        for m in members:
            if m not in order:
                lbw, lps = cost[(order[-1], m)]
                order.append(m)
                extend(order, min(bw, lbw), ps + lps)
                order.pop()

    for start in members[:1] if fixed_start else members:
        extend([start], float("inf"), 0)
    return best_order


def _greedy_order(routes: Routes, members: list[int], start: int) -> list[int]:
    """Nearest neighbour: next is the widest, then lowest-latency, then smallest rank."""
    order, left = [start], set(members) - {start}
    while left:
        here = order[-1]
        nxt = min(
            left, key=lambda m: (-routes.bandwidth_Bps(here, m), _ps(routes.latency_s(here, m)), m)
        )
        order.append(nxt)
        left.remove(nxt)
    return order


#: Route-search steps the greedy ring order may take (block size² x links; about 10 s).
MAX_ORDER_WORK = 10**7


def ring_order(routes: Routes, ranks: Sequence[int]) -> list[int]:
    """An order of `ranks` for a ring, starting with the smallest rank.

    Each host's GPUs stay contiguous; hosts follow in the order of their smallest rank.
    With one host the whole ring is optimised as a cycle; with several each host block is
    optimised as a path (entry and exit free, except the first block, which starts with
    the smallest rank). Objective: the largest minimum bottleneck bandwidth between
    consecutive members, then the smallest total latency, then the lexicographically
    smallest order. Blocks of <= 8 ranks are searched exhaustively, larger ones greedily.
    """
    members = [routes._check(r) for r in ranks]
    if not members:
        raise TopologyError("ranks=[]: need at least one rank for a ring")
    if len(set(members)) != len(members):
        raise TopologyError(f"ranks={show(list(ranks))}: ranks must be distinct")
    by_host: dict[int, list[int]] = {}
    for r in sorted(members):
        by_host.setdefault(routes.host(r), []).append(r)
    blocks = sorted(by_host.values())  # by smallest rank
    big = max(len(b) for b in blocks)
    work = big * big * routes.graph.number_of_edges()  # greedy: a route search per pair
    if big > _EXHAUSTIVE_MAX and work > MAX_ORDER_WORK:
        raise TopologyError(
            f"ranks={len(members)}: ordering a ring of {big} GPUs on one host of "
            f"{routes.graph.graph.get('name')!r} takes about {work:.1e} route steps (minutes "
            f"to hours); at most {MAX_ORDER_WORK:.0e}: use fewer ranks or split them over hosts"
        )
    cycle = len(blocks) == 1
    order: list[int] = []
    for i, block in enumerate(blocks):
        if len(block) == 1:
            order.extend(block)
        elif len(block) <= _EXHAUSTIVE_MAX:
            order.extend(_best_order(routes, block, cycle, fixed_start=i == 0))
        else:
            order.extend(_greedy_order(routes, block, block[0]))
    return order


def max_inflow(graph: nx.DiGraph, sources: Sequence[str], sinks: Sequence[str]) -> float:
    """Most bytes/s the raw links can carry from ``sources`` into ``sinks`` (a max-flow)."""
    g = nx.DiGraph()
    for u, v, bw in graph.edges(data="bandwidth_Bps"):
        g.add_edge(u, v, capacity=bw)
    for x in sources:
        g.add_edge("_source", x)  # no capacity attribute: unbounded
    for x in sinks:
        g.add_edge(x, "_sink")
    return float(nx.maximum_flow_value(g, "_source", "_sink"))
