"""Hierarchical all-reduce across hosts: inside, across among peers, inside again."""

from __future__ import annotations

from collections.abc import Sequence

from tpsim.calibration import Protocol
from tpsim.core.comm.algorithms import Algorithm, Context
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import chunk_sizes, send, share, steps
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule, Send


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
    frac = share(fab, proto, "ring", "all_reduce")
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
                    sends[t][s0 + k].append(send(fab, t, succ, c, proto, share=frac))
        s0 += width
    return Schedule("hierarchical", proto.name, proto.base("ring"), steps(sends, expects))


def _why_not(fab: Fabric, op: str) -> str | None:
    if not fab.multi_host:
        return "needs GPUs on more than one host"
    counts = [fab.hosts.count(h) for h in set(fab.hosts)]
    if len(set(counts)) > 1 or counts[0] < 2:
        return "needs the same number (at least 2) of GPUs on every host"
    return None


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [hierarchical(ctx.fab, call.nbytes, pr, ctx.order) for pr in ctx.protocols]


ALGORITHM = Algorithm(
    name="hierarchical",
    order=70,
    about="ring reduce-scatter in each host, ring all-reduce across hosts, all-gather inside",
    nccl=False,
    ops=("all_reduce",),
    why_not=_why_not,
    build=_build,
    max_steps=lambda p: 2 * (p - 1),
    composed=True,
)
