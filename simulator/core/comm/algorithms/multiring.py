"""Several rings side by side (NCCL's channels), over links no other ring uses.

The ring set is searched once per group (:func:`ring_set`): extra rings that share no link
with the rings so far (a Hamiltonian decomposition of a mesh), or rotations of the ring; each
is kept if it makes a large all-reduce at least 1% faster.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from tpsim.core.comm.algorithms import Algorithm, Context
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import predict, ring
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule


def _why_not(fab: Fabric, op: str) -> str | None:
    p = fab.ranks
    if p < 3 or (not fab.multi_host and p > 16):
        return "needs 3 to 16 GPUs in one host, or several hosts"
    counts = [fab.hosts.count(h) for h in set(fab.hosts)]
    if len(set(counts)) > 1:
        return "needs the same number of GPUs on every host"
    return None


def ring_set(fab: Fabric, order: Sequence[int]) -> list[list[int]]:
    """Channels as NCCL builds them: extra rings, over other links, that add bandwidth.

    In one host the candidates are rings over direct links that no earlier ring uses
    (:func:`_disjoint_rings`: all seven of a full 8-GPU mesh), then the orders
    ``order[i*s mod p]`` for ``s`` coprime with ``p``; across hosts, the same ring with
    every host's block rotated by ``j``, so each ring leaves and enters a host through
    different GPUs and NICs (NCCL's rails). A candidate is kept if a large all-reduce over
    the rings so far gets at least 1% faster with it."""
    p = fab.ranks
    rings = [list(order)]
    if _why_not(fab, "all_reduce"):
        return rings
    if fab.multi_host:
        blocks: dict[int, list[int]] = {}
        for t in order:
            blocks.setdefault(fab.hosts[t], []).append(t)
        g = len(next(iter(blocks.values())))
        cands = [[t for b in blocks.values() for t in b[j:] + b[:j]] for j in range(1, g)]
    else:
        cands = _disjoint_rings(fab, order)
        cands += [
            [order[(i * s) % p] for i in range(p)] for s in range(2, p) if math.gcd(s, p) == 1
        ]
    proto = fab.tuning.protocols[fab.tuning.probe_protocol]
    big = 1 << 28
    best = predict(fab, ring(fab, "all_reduce", big, proto, rings))
    for cand in cands:
        time_s = predict(fab, ring(fab, "all_reduce", big, proto, [*rings, cand]))
        if time_s < 0.99 * best:
            rings.append(cand)
            best = time_s
    return rings


#: Search nodes one ring decomposition may visit (a full 8-GPU mesh needs under a hundred).
RING_SEARCH_BUDGET = 200_000


def _disjoint_rings(fab: Fabric, order: Sequence[int]) -> list[list[int]]:
    """As many rings as can be found that each visit every rank over direct GPU-to-GPU
    links and share no directed link with ``order`` or with each other: a directed
    Hamiltonian decomposition of the mesh (a complete 8-GPU mesh has 7 rings, one per
    link of each GPU). The search asks for the most rings the links allow and settles for
    fewer when its node budget runs out."""
    p = fab.ranks
    succ: dict[int, list[int]] = {a: [] for a in range(p)}
    for a in range(p):
        for b in range(p):
            if a != b and len(fab.routes.path(fab.gpu_ranks[a], fab.gpu_ranks[b])) == 1:
                succ[a].append(b)
    used = {(order[i], order[(i + 1) % p]) for i in range(p)}
    if not all(b in succ[a] for a, b in used):
        return []
    for want in range(min(len(v) for v in succ.values()) - 1, 0, -1):
        rings = _find_rings(succ, used, order[0], want)
        if rings:
            return rings
    return []


def _find_rings(
    succ: dict[int, list[int]], used: set[tuple[int, int]], start: int, want: int
) -> list[list[int]] | None:
    """``want`` Hamiltonian cycles through ``start`` over the arcs ``succ`` not in ``used``,
    pairwise arc-disjoint; depth-first in rank order (deterministic), None if none is found
    within :data:`RING_SEARCH_BUDGET` nodes. ``used`` is restored before returning."""
    p = len(succ)
    rings: list[list[int]] = []
    visits = 0

    def extend(path: list[int], seen: set[int]) -> bool:
        nonlocal visits
        visits += 1
        if visits > RING_SEARCH_BUDGET:
            return False
        u = path[-1]
        if len(path) == p:
            if (u, start) in used or start not in succ[u]:
                return False
            used.add((u, start))
            rings.append(list(path))
            if len(rings) == want or extend([start], {start}):
                used.discard((u, start))
                return True
            rings.pop()
            used.discard((u, start))
            return False
        for v in succ[u]:
            if v in seen or (u, v) in used:
                continue
            used.add((u, v))
            seen.add(v)
            path.append(v)
            found = extend(path, seen)
            path.pop()
            seen.discard(v)
            used.discard((u, v))
            if found:
                return True
        return False

    return rings if extend([start], {start}) else None


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    rings = ctx.once("rings", lambda: ring_set(ctx.fab, ctx.order))
    if ctx.choosing and len(rings) < 2:
        return []  # one ring is the ring algorithm: only an explicit choice runs it so
    out = [ring(ctx.fab, call.op, call.nbytes, pr, rings) for pr in ctx.protocols]
    return [replace(s, algorithm=f"ring x{len(rings)}") for s in out]


ALGORITHM = Algorithm(
    name="multiring",
    order=20,
    about="several rings over different links (NCCL channels); auto uses it only with 2 or more",
    nccl=True,
    ops=("all_reduce", "all_gather", "reduce_scatter"),
    why_not=_why_not,
    build=_build,
    max_steps=lambda p: 2 * (p - 1),
)
