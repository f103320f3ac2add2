"""Collective algorithms as step schedules over a fabric (pure functions, no SimPy).

Each builder returns a :class:`~tpsim.core.engine.Schedule`: per rank, the steps it runs and
in each step the transfers it starts and the arrivals it waits for. The engine times them
over shared links; :func:`predict` gives the closed form of a schedule when every rank
starts together, which is the test oracle and what ``auto`` selection compares.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tpsim.calibration import Protocol
from tpsim.core.engine import Schedule, Send, Step
from tpsim.core.fabric import Fabric


def chunk_sizes(nbytes: int, parts: int) -> list[int]:
    """``nbytes`` split into ``parts`` chunks that differ by at most one byte."""
    q, r = divmod(nbytes, parts)
    return [q + (1 if j < r else 0) for j in range(parts)]


def _send(
    fab: Fabric,
    src: int,
    dst: int,
    payload: int,
    proto: Protocol,
    notify: tuple[int, ...] | None = None,
    hop_s: float | None = None,
    share: float = 1.0,
) -> Send:
    """One transfer under ``proto``: its wire bytes, its hop latency, and its rate cap (the
    protocol's busbw limit, and ``share`` of the path's bandwidth for the payload)."""
    path = fab.path(src, dst)
    hop = proto.hop_s[path.link_class] if hop_s is None else hop_s
    cap = proto.max_busbw_Bps.get(fab.gpu.scaleup_kind, math.inf) * proto.wire_factor
    if share < 1.0:
        cap = min(cap, share * path.bandwidth_Bps * proto.wire_factor)
    return Send(
        links=path.links,
        payload=payload,
        wire=payload * proto.wire_factor,
        latency_s=max(path.latency_s, hop),
        cap_Bps=cap,
        notify=(dst,) if notify is None else notify,
        peer=dst,
    )


def _share(fab: Fabric, proto: Protocol, algorithm: str, op: str) -> float:
    return fab.tuning.payload_share(proto.name, algorithm, op, fab.multi_host)


def _steps(sends: list[list[list[Send]]], expects: list[list[int]]) -> tuple[tuple[Step, ...], ...]:
    return tuple(
        tuple(Step(tuple(s), e) for s, e in zip(rank_sends, rank_expects, strict=True))
        for rank_sends, rank_expects in zip(sends, expects, strict=True)
    )


# ---------------------------------------------------------------------------- ring
RING_PHASES = {"all_reduce": ("rs", "ag"), "reduce_scatter": ("rs",), "all_gather": ("ag",)}


def ring(
    fab: Fabric, op: str, nbytes: int, proto: Protocol, orders: Sequence[Sequence[int]]
) -> Schedule:
    """Ring reduce-scatter and/or all-gather: ``p-1`` steps each, every rank sending one
    ``n/p`` chunk to its successor per step; with several rings (channels over different
    links) the data is split evenly between them and they run side by side."""
    p = fab.ranks
    phases = RING_PHASES[op]
    nsteps = len(phases) * (p - 1)
    sends: list[list[list[Send]]] = [[[] for _ in range(nsteps)] for _ in range(p)]
    share = _share(fab, proto, "ring", op)
    for order, ring_bytes in zip(orders, chunk_sizes(nbytes, len(orders)), strict=True):
        chunks = chunk_sizes(ring_bytes, p)
        for q, t in enumerate(order):
            succ = order[(q + 1) % p]
            s = 0
            for phase in phases:
                for k in range(p - 1):
                    c = chunks[(q - k) % p] if phase == "rs" else chunks[(q + 1 - k) % p]
                    sends[t][s].append(_send(fab, t, succ, c, proto, share=share))
                    s += 1
    expects = [[len(orders)] * nsteps for _ in range(p)]
    return Schedule("ring", proto.name, proto.base("ring"), _steps(sends, expects))


# ---------------------------------------------------------------------------- tree
def _binary_tree(positions: Sequence[int]) -> dict[int, tuple[int, int]]:
    """In-order binary tree over ``positions``: node -> (parent or -1, depth)."""
    out: dict[int, tuple[int, int]] = {}

    def build(lo: int, hi: int, parent: int, depth: int) -> None:
        if lo > hi:
            return
        mid = (lo + hi) // 2
        out[positions[mid]] = (parent, depth)
        build(lo, mid - 1, positions[mid], depth + 1)
        build(mid + 1, hi, positions[mid], depth + 1)

    build(0, len(positions) - 1, -1, 0)
    return out


def nccl_trees(fab: Fabric, order: Sequence[int]) -> list[dict[int, tuple[int, int]]]:
    """NCCL's two trees: a chain through each host's GPUs (in ring order), the chain heads
    joined by an in-order binary tree over the hosts, mirrored in the second tree."""
    hosts: dict[int, list[int]] = {}
    for t in order:
        hosts.setdefault(fab.hosts[t], []).append(t)
    chains = list(hosts.values())
    trees = []
    for host_order in (list(range(len(chains))), list(reversed(range(len(chains))))):
        top = _binary_tree(host_order)
        out: dict[int, tuple[int, int]] = {}
        # depth of a chain head: hosts above it times their chain lengths, plus 1 per hop
        head_depth: dict[int, int] = {}
        for h in sorted(top, key=lambda h: top[h][1]):
            parent_host, _ = top[h]
            if parent_host < 0:
                head_depth[h] = 0
                out[chains[h][0]] = (-1, 0)
            else:
                head_depth[h] = head_depth[parent_host] + 1
                out[chains[h][0]] = (chains[parent_host][0], head_depth[h])
            for i in range(1, len(chains[h])):
                out[chains[h][i]] = (chains[h][i - 1], head_depth[h] + i)
        trees.append(out)
    return trees


def tree(
    fab: Fabric, nbytes: int, proto: Protocol, order: Sequence[int], chunks: int | None = None
) -> Schedule:
    """Double binary tree all-reduce as NCCL builds it (:func:`nccl_trees`): each tree
    carries half the data, pipelined in ``chunks`` pieces: a reduce up the tree, then a
    broadcast down. Steps: ``2 (depth + chunks - 1)``."""
    p = fab.ranks
    trees = nccl_trees(fab, order)
    depth = max(d for t in trees for _, d in t.values())
    halves = chunk_sizes(nbytes, 2)
    if chunks is None:
        chunks = tree_chunks(fab, halves[0], depth, proto, order)
    nsteps = 2 * (depth + chunks - 1)
    bcast0 = depth + chunks - 1  # first broadcast step
    share = _share(fab, proto, "tree", "all_reduce")
    sends: list[list[list[Send]]] = [[[] for _ in range(nsteps)] for _ in range(p)]
    expects = [[0] * nsteps for _ in range(p)]
    for t, half in zip(trees, halves, strict=True):
        pieces = chunk_sizes(half, chunks)
        for node, (parent, d) in t.items():
            if parent < 0:
                continue
            for c, size in enumerate(pieces):
                up = depth - d + c  # nodes below send chunk c before their parent does
                sends[node][up].append(_send(fab, node, parent, size, proto, share=share))
                expects[parent][up] += 1
                down = bcast0 + (d - 1) + c
                sends[parent][down].append(_send(fab, parent, node, size, proto, share=share))
                expects[node][down] += 1
    return Schedule("tree", proto.name, proto.base("tree"), _steps(sends, expects))


def tree_chunks(fab: Fabric, half: int, depth: int, proto: Protocol, order: Sequence[int]) -> int:
    """The pipeline depth (1 to 64 pieces) that makes the tree fastest: with ``a`` the
    slowest step's latency and ``b`` its busiest link time with the data in one piece,
    ``2 (d + k - 1)(a + b / k)``, minimised over k (one schedule built, not 64)."""
    if depth <= 1 or half <= 0:
        return 1
    steps = step_costs(fab, tree(fab, 2 * half, proto, order, chunks=1))
    alpha = max(lat for lat, _ in steps)
    busy = max(b for _, b in steps)
    return min(range(1, 65), key=lambda k: (2 * (depth + k - 1) * (alpha + busy / k), k))


# ---------------------------------------------------------------------------- peer memory
def oneshot(fab: Fabric, nbytes: int) -> Schedule:
    """Every rank reads the whole buffer of each peer and reduces locally: one step,
    ``(p-1) n`` bytes into each rank."""
    p = fab.ranks
    proto, hop = _PEER, fab.tuning.custom_hop_s
    sends = [
        [[_send(fab, t, u, nbytes, proto, hop_s=hop) for u in range(p) if u != t]] for t in range(p)
    ]
    return Schedule("oneshot", "p2p", fab.tuning.custom_base_s, _steps(sends, [[p - 1]] * p))


def twoshot(fab: Fabric, nbytes: int) -> Schedule:
    """Reduce-scatter then all-gather through peer memory: two steps of ``(p-1) n/p``."""
    p = fab.ranks
    proto, hop = _PEER, fab.tuning.custom_hop_s
    chunks = chunk_sizes(nbytes, p)
    sends = [
        [
            [_send(fab, t, u, chunks[u], proto, hop_s=hop) for u in range(p) if u != t],
            [_send(fab, t, u, chunks[t], proto, hop_s=hop) for u in range(p) if u != t],
        ]
        for t in range(p)
    ]
    return Schedule("twoshot", "p2p", fab.tuning.custom_base_s, _steps(sends, [[p - 1, p - 1]] * p))


#: Peer-memory transfers: plain loads and stores, no protocol overhead or cap (the hop
#: latency is the calibration's flag per step).
_PEER = Protocol("p2p", {}, {"nvlink": 0.0, "pci": 0.0, "net": 0.0}, 1.0, {})


# ---------------------------------------------------------------------------- NVLS
def nvls(fab: Fabric, nbytes: int) -> Schedule:
    """In-switch reduction (NVLink SHARP): each GPU's share is reduced by the switch
    (multimem ld_reduce: its n/p comes back to it, n leaves it in all) and the result is
    multicast (multimem st: n/p up, n down). Both directions stream at once, so each link
    carries ``n (p+1)/p``; every rank waits for every rank's contribution."""
    assert fab.nvswitch is not None
    p = fab.ranks
    wire = nbytes * (p + 1) / p
    eff = fab.tuning.nvls_efficiency_of(fab.gpu.scaleup_kind)
    everyone = tuple(range(p))
    sends = []
    for up, down in fab.nvswitch:
        sends.append(
            [
                [
                    Send(
                        (up,), nbytes, wire, fab.latencies[up], fab.capacities[up] * eff, everyone
                    ),
                    Send((down,), 0, wire, fab.latencies[down], fab.capacities[down] * eff, ()),
                ]
            ]
        )
    return Schedule("nvls", "Simple", fab.tuning.nvls_latency_s, _steps(sends, [[p]] * p))


# ---------------------------------------------------------------------------- hierarchical
def hierarchical(fab: Fabric, nbytes: int, proto: Protocol, order: Sequence[int]) -> Schedule:
    """Multi-host all-reduce: ring reduce-scatter inside each host, ring all-reduce across
    hosts among GPUs with the same local index (on ``n/g`` each), ring all-gather inside."""
    hosts: dict[int, list[int]] = {}
    for t in order:  # hosts are contiguous in the ring order
        hosts.setdefault(fab.hosts[t], []).append(t)
    groups = list(hosts.values())
    g, nh = len(groups[0]), len(groups)
    p = fab.ranks
    local = chunk_sizes(nbytes, g)
    plan: list[tuple[str, list[list[int]], list[int]]] = [("rs", groups, local)]
    inter = [[grp[i] for grp in groups] for i in range(g)]
    plan.append(("ar", inter, chunk_sizes(local[0], nh)))
    plan.append(("ag", groups, local))
    nsteps = 2 * (g - 1) + 2 * (nh - 1)
    share = _share(fab, proto, "ring", "all_reduce")
    sends: list[list[list[Send]]] = [[[] for _ in range(nsteps)] for _ in range(p)]
    expects = [[1] * nsteps for _ in range(p)]
    s0 = 0
    for phase, rings, chunks in plan:
        n_ring = len(rings[0])
        width = 2 * (n_ring - 1) if phase == "ar" else n_ring - 1
        for members in rings:
            for q, t in enumerate(members):
                succ = members[(q + 1) % n_ring]
                for k in range(width):
                    c = chunks[(q - k) % n_ring]
                    sends[t][s0 + k].append(_send(fab, t, succ, c, proto, share=share))
        s0 += width
    return Schedule("hierarchical", proto.name, proto.base("ring"), _steps(sends, expects))


# ---------------------------------------------------------------------------- prediction
def predict(fab: Fabric, sched: Schedule) -> float:
    """Closed-form time of a schedule when every rank starts together and steps stay in
    lockstep: the base latency plus, per step, the longest latency and the heaviest link
    load (bytes over capacity) or the slowest capped flow."""
    return sched.base_s + sum(lat + busy for lat, busy in step_costs(fab, sched))


def step_costs(fab: Fabric, sched: Schedule) -> list[tuple[float, float]]:
    """Per step: the longest latency, and the time of the busiest link or capped flow."""
    out = []
    for s in range(max(len(r) for r in sched.steps)):
        load: dict[int, float] = {}
        latency = 0.0
        capped = 0.0
        for rank_steps in sched.steps:
            if s >= len(rank_steps):
                continue
            for snd in rank_steps[s].sends:
                latency = max(latency, snd.latency_s)
                capped = max(capped, snd.wire / snd.cap_Bps)
                for link in snd.links:
                    load[link] = load.get(link, 0.0) + snd.wire
        busy = max((b / fab.capacities[k] for k, b in load.items()), default=0.0)
        out.append((latency, max(busy, capped)))
    return out
