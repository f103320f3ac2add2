"""NCCL's double binary tree all-reduce, pipelined in pieces."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from tpsim.calibration import Protocol
from tpsim.core.comm.algorithms import Algorithm, Bounded, Context
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import (
    best_pieces,
    chunk_sizes,
    send,
    share,
    step_costs,
    steps,
)
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule, Send

#: Pieces the tree pipeline may cut each half into (NCCL pipelines a tree in chunks).
MAX_PIECES = 64


def binary_tree(positions: Sequence[int]) -> dict[int, tuple[int, int]]:
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
        top = binary_tree(host_order)
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


def tree_channels(fab: Fabric, order: Sequence[int]) -> list[list[int]]:
    """NCCL's tree channels: across hosts one per GPU position, each host's block of the
    ring order rotated so that channel j's chain starts (and leaves the host) at its j-th
    GPU and NIC, as NCCL spreads its channels over the NICs; in one host, one channel."""
    if not fab.multi_host:
        return [list(order)]
    blocks: dict[int, list[int]] = {}
    for t in order:
        blocks.setdefault(fab.hosts[t], []).append(t)
    g = min(len(b) for b in blocks.values())
    return [[t for b in blocks.values() for t in b[j:] + b[:j]] for j in range(g)]


def _shapes(
    fab: Fabric, nbytes: int, proto: Protocol, channels: int
) -> Callable[[int, int, bool], Send]:
    """What a tree's send from rank ``a`` to ``b`` is but for its size (payload and wire
    bytes zero), for the first piece or a later one: each (a, b, later) built once."""
    frac = share(fab, proto, "tree", "all_reduce") * fab.tuning.tree_efficiency(proto.name, nbytes)
    hosts = len(set(fab.hosts))
    cap = fab.tuning.tree_channel_cap(proto.name, fab.gpu.scaleup_kind, hosts)
    net_cap = cap
    if proto.name == "LL":  # LL across hosts: the whole busbw capped (the host's proxy
        # moves its lines); a tree's algbw is half its busbw, shared by its 2 trees a channel
        net_cap = min(cap, fab.tuning.ll_multi_host_cap(hosts) / 2 / (2 * channels))
    slots = fab.tuning.pipeline_slots
    made: dict[tuple[int, int, bool], Send] = {}

    def shape(a: int, b: int, later: bool) -> Send:
        key = (a, b, later)
        snd = made.get(key)
        if snd is None:
            snd = send(fab, a, b, 0, proto, share=frac, family="tree")
            net = snd.net
            limit = (net_cap if net else cap) * proto.wire_factor
            if snd.cap_Bps > limit:
                snd = replace(snd, cap_Bps=limit)
            if net and later and slots > 1:  # overlapped with the pieces in flight before it
                snd = replace(snd, latency_s=snd.latency_s / slots)
            made[key] = snd
        return snd

    return shape


def tree(
    fab: Fabric, nbytes: int, proto: Protocol, order: Sequence[int], chunks: int | None = None
) -> Schedule:
    """Double binary tree all-reduce as NCCL builds it (:func:`nccl_trees`) on each channel
    (:func:`tree_channels`): the data is split evenly over the channels, each tree of a
    channel carries half of its part, pipelined in ``chunks`` pieces: a reduce up the tree,
    then a broadcast down. Steps: ``2 (depth + chunks - 1)``. Each tree runs at most at
    one channel's rate (the calibration's per-channel cap for the protocol)."""
    p = fab.ranks
    channels = [nccl_trees(fab, o) for o in tree_channels(fab, order)]
    depth = max(d for trees in channels for t in trees for _, d in t.values())
    parts = [chunk_sizes(part, 2) for part in chunk_sizes(nbytes, len(channels))]
    if chunks is None:
        chunks = tree_chunks(fab, parts[0][0], depth, proto, order)
    nsteps = 2 * (depth + chunks - 1)
    bcast0 = depth + chunks - 1  # first broadcast step
    sends: list[list[list[Send]]] = [[[] for _ in range(nsteps)] for _ in range(p)]
    expects = [[0] * nsteps for _ in range(p)]
    shape = _shapes(fab, nbytes, proto, len(channels))
    wire_factor = proto.wire_factor

    def edge(a: int, b: int, size: int, piece: int) -> Send:
        snd = shape(a, b, piece > 0)
        return Send(snd.links, size, size * wire_factor, snd.latency_s, snd.cap_Bps,
                    snd.notify, snd.peer, snd.shift, snd.shifts, snd.net)  # fmt: skip

    for trees, halves in zip(channels, parts, strict=True):
        for t, half in zip(trees, halves, strict=True):
            pieces = chunk_sizes(half, chunks)
            for node, (parent, d) in t.items():
                if parent < 0:
                    continue
                for c, size in enumerate(pieces):
                    up = depth - d + c  # nodes below send chunk c before their parent does
                    sends[node][up].append(edge(node, parent, size, c))
                    expects[parent][up] += 1
                    down = bcast0 + (d - 1) + c
                    sends[parent][down].append(edge(parent, node, size, c))
                    expects[node][down] += 1
    return Schedule("tree", proto.name, proto.base("tree"), steps(sends, expects))


def tree_chunks(fab: Fabric, half: int, depth: int, proto: Protocol, order: Sequence[int]) -> int:
    """The pipeline depth (1 to 64 pieces) that makes the tree fastest: with ``a`` the
    slowest step's latency and ``b`` its busiest link time with the data in one piece,
    ``2 (d + k - 1)(a + b / k)``, minimised over k (one schedule built, not 64)."""
    if depth <= 1 or half <= 0:
        return 1
    channels = len(tree_channels(fab, order))
    costs = step_costs(fab, tree(fab, 2 * half * channels, proto, order, chunks=1))
    if fab.multi_host:  # network steps' latency overlaps across pieces in flight
        return best_pieces(costs, fab.tuning.pipeline_slots, MAX_PIECES)
    alpha = max(lat for lat, _ in costs)
    busy = max(b for _, b in costs)
    return min(
        range(1, MAX_PIECES + 1), key=lambda k: (2 * (depth + k - 1) * (alpha + busy / k), k)
    )


def _why_not(fab: Fabric, op: str) -> str | None:
    if fab.ranks < 3:
        return "needs at least 3 ranks"
    return None


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [tree(ctx.fab, call.nbytes, pr, ctx.order) for pr in ctx.protocols]


#: Below this fraction of the bound, it is taken for a bound: what float rounding of the
#: sums in predict could take off (far more than it can).
BOUND_SLACK = 1e-9


def lower_bound(fab: Fabric, nbytes: int, proto: Protocol, order: Sequence[int]) -> float:
    """At most :func:`~tpsim.core.comm.schedules.predict` of :func:`tree` (any pieces),
    without building it: every one of its ``2 (depth + k - 1) >= 2 depth`` steps sends, so
    waits at least the shortest send latency; and each edge carries every piece of its
    tree's half once up and once down, in steps of their own, each step at least as long as
    a piece's wire bytes over its send's own rate cap."""
    channels = [nccl_trees(fab, o) for o in tree_channels(fab, order)]
    depth = max(d for trees in channels for t in trees for _, d in t.values())
    half = min(min(chunk_sizes(part, 2)) for part in chunk_sizes(nbytes, len(channels)))
    shape = _shapes(fab, nbytes, proto, len(channels))
    edges = [(node, parent) for trees in channels for t in trees
             for node, (parent, _) in t.items() if parent >= 0]  # fmt: skip
    shapes = [shape(a, b, later) for a, b in edges for later in (False, True)]
    shapes += [shape(b, a, later) for a, b in edges for later in (False, True)]
    latency = min(s.latency_s for s in shapes)
    wire = half * proto.wire_factor  # a later piece's send has the first's cap
    busy = max(wire / shape(a, b, False).cap_Bps + wire / shape(b, a, False).cap_Bps
               for a, b in edges)  # fmt: skip
    return (proto.base("tree") + 2 * depth * latency + busy) * (1 - BOUND_SLACK)


def _bounded(ctx: Context, call: CollectiveCall) -> list[Bounded]:
    fab, order, nbytes = ctx.fab, ctx.order, call.nbytes
    return [
        (lower_bound(fab, nbytes, pr, order), partial(tree, fab, nbytes, pr, order))
        for pr in ctx.protocols
    ]


ALGORITHM = Algorithm(
    name="tree",
    order=30,
    about="NCCL's double binary tree: a chain in each host, a binary tree over hosts",
    nccl=True,
    ops=("all_reduce",),
    why_not=_why_not,
    build=_build,
    bounded=_bounded,
    max_steps=lambda p: 2 * (p - 1 + MAX_PIECES - 1),
)
