"""Choosing and planning collectives: which algorithms fit a group, and the fastest one.

``auto`` predicts every feasible (algorithm, protocol) pair with its closed form and runs
the fastest, as NCCL does; ``nccl`` restricts the choice to NCCL's own algorithms (ring,
multi-ring channels, tree, NVLS), leaving out the peer-memory all-reduces that serving
engines add for small messages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tpsim.calibration import Protocol
from tpsim.core import schedules
from tpsim.core.config import ALLREDUCE_ALGOS
from tpsim.core.engine import Planner, Schedule
from tpsim.core.errors import ConfigError
from tpsim.core.fabric import Fabric
from tpsim.core.program import CollectiveCall
from tpsim.core.schedules import predict

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
ALGORITHMS: tuple[str, ...] = ALLREDUCE_ALGOS
NCCL_ALGORITHMS = ("ring", "multiring", "tree", "nvls")


def ring_all_reduce_time(nbytes: float, ranks: int, alpha_s: float, bandwidth_Bps: float) -> float:
    """Closed form of the ring all-reduce: ``2(p-1)(alpha + n / (p B))``."""
    return 2 * (ranks - 1) * (alpha_s + nbytes / (ranks * bandwidth_Bps))


def why_not(fab: Fabric, algo: str, op: str) -> str | None:
    """Why ``algo`` cannot run ``op`` on this group, or None if it can."""
    p = fab.ranks
    if op != "all_reduce" and algo not in ("ring", "multiring"):
        return f"{algo} runs only all_reduce; {op} uses ring"
    if algo == "multiring":
        if p < 3 or (not fab.multi_host and p > 16):
            return "needs 3 to 16 GPUs in one host, or several hosts"
        counts = [fab.hosts.count(h) for h in set(fab.hosts)]
        if len(set(counts)) > 1:
            return "needs the same number of GPUs on every host"
    if algo == "tree" and p < 3:
        return "needs at least 3 ranks"
    if algo in ("oneshot", "twoshot"):
        if fab.multi_host:
            return "works through peer memory inside one host only"
        if p > 8:
            return "supports at most 8 GPUs (as vLLM's custom all-reduce)"
        if not all(_peer_access(fab, a, b) for a in range(p) for b in range(p) if a != b):
            return "needs a direct NVLink/xGMI link or one NVSwitch between every pair of GPUs"
    if algo == "nvls" and fab.nvswitch is None:
        return "needs GPUs on one NVSwitch that reduces in the switch (H100/H200/B200 systems)"
    if algo == "hierarchical":
        if not fab.multi_host:
            return "needs GPUs on more than one host"
        counts = [fab.hosts.count(h) for h in set(fab.hosts)]
        if len(set(counts)) > 1 or counts[0] < 2:
            return "needs the same number (at least 2) of GPUs on every host"
    return None


def _peer_access(fab: Fabric, a: int, b: int) -> bool:
    """Whether GPU a can read GPU b's memory over NVLink/xGMI: a direct link, or one hop
    through an NVSwitch (GPUs do not forward NVLink traffic for each other)."""
    g = fab.routes.graph
    edges = fab.routes.path(fab.gpu_ranks[a], fab.gpu_ranks[b])
    if fab.path(a, b).link_class != "nvlink" or len(edges) > 2:
        return False
    return len(edges) == 1 or g.nodes[edges[0][1]].get("kind") == "nvswitch"


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
    if why_not(fab, "multiring", "all_reduce"):
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
    best = predict(fab, schedules.ring(fab, "all_reduce", big, proto, rings))
    for cand in cands:
        time_s = predict(fab, schedules.ring(fab, "all_reduce", big, proto, [*rings, cand]))
        if time_s < 0.99 * best:
            rings.append(cand)
            best = time_s
    return rings


def make_planner(fab: Fabric, order: Sequence[int], *, algo: str = "auto") -> Planner:
    """A planner for collectives over the fabric's group along ring ``order`` (TP ranks).

    ``algo``: one of :data:`ALGORITHMS`. In ideal mode the protocol is ideal (no base or
    hop latency, no overhead bytes, full link bandwidth).
    """
    if algo not in ALGORITHMS:
        raise ConfigError(f"algo={algo!r}: must be one of {', '.join(ALGORITHMS)}")
    if fab.ranks > 1 and algo not in ("auto", "nccl"):
        problem = why_not(fab, algo, "all_reduce")
        if problem:
            raise ConfigError(f"algo={algo}: {problem}")
    rings = ring_set(fab, order) if algo in ("auto", "nccl", "multiring") else [list(order)]
    protocols: list[Protocol] = fab.tuning.protocols_for(fab.gpu.scaleup_kind)
    cache: dict[CollectiveCall, Schedule] = {}

    def candidates(call: CollectiveCall) -> list[Schedule]:
        if algo in ("auto", "nccl"):
            names = [a for a in ALGORITHMS[2:] if algo == "auto" or a in NCCL_ALGORITHMS]
        else:
            names = [algo if call.op == "all_reduce" or algo == "multiring" else "ring"]
        out = []
        for name in names:
            if why_not(fab, name, call.op):
                continue
            if name == "multiring" and len(rings) < 2 and algo in ("auto", "nccl"):
                continue
            if (
                algo == "auto"
                and name in ("oneshot", "twoshot")
                and call.nbytes > fab.tuning.custom_max_bytes
            ):
                continue  # a serving engine hands large messages to NCCL
            out.extend(_build(fab, name, call, protocols, order, rings))
        return out

    def plan(call: CollectiveCall) -> Schedule:
        sched = cache.get(call)
        if sched is None:
            options = candidates(call)
            if not options:
                raise ConfigError(f"algo={algo}: cannot run {call.op} on this group")
            sched = cache[call] = min(options, key=lambda s: predict(fab, s))
        return sched

    return plan


def _build(
    fab: Fabric,
    name: str,
    call: CollectiveCall,
    protocols: list[Protocol],
    order: Sequence[int],
    rings: list[list[int]],
) -> list[Schedule]:
    n = call.nbytes
    if name == "ring":
        return [schedules.ring(fab, call.op, n, pr, [list(order)]) for pr in protocols]
    if name == "multiring":
        out = [schedules.ring(fab, call.op, n, pr, rings) for pr in protocols]
        return [_rename(s, f"ring x{len(rings)}") for s in out]
    if name == "tree":
        return [schedules.tree(fab, n, pr, order) for pr in protocols]
    if name == "hierarchical":
        return [schedules.hierarchical(fab, n, pr, order) for pr in protocols]
    if name == "oneshot":
        return [schedules.oneshot(fab, n)]
    if name == "twoshot":
        return [schedules.twoshot(fab, n)]
    return [schedules.nvls(fab, n)]


def _rename(s: Schedule, algorithm: str) -> Schedule:
    return Schedule(algorithm, s.protocol, s.base_s, s.steps)


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
