"""DeepEP's normal kernels (prefill, high throughput). Inside one node: every rank writes
``n/p`` bytes to every other GPU over NVLink. Across nodes, two stages: rank ``(h, l)`` (node
``h``, local index ``l``) sends what it has for node ``h'`` once, by RDMA, to the GPU of the
same local index there, ``(h', l)``, which forwards each GPU of its node its share over
NVLink; tokens bound for its own node's GPUs go through its own forwarding. A token bound
for several GPUs of one node crosses the network once: the call's ``node_dedup`` is the
share of the bytes for a node's GPUs that crosses (1: no token goes to two GPUs of a node).

The stages are pipelined (DeepEP forwards RDMA chunks as they land), so they run as one
step: the RDMA flows and the NVLink forwarding flows at once, the forwarding's first bytes
after the network's latency. A serving engine's kernel, not NCCL's: run only when named.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from tpsim.core.comm.algorithms import Algorithm, Context, _deepep
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import steps
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule, Send


def nodes_of(hosts: tuple[int, ...]) -> dict[int, list[int]]:
    """The ranks of each node, in rank order (a rank's local index is its position)."""
    out: dict[int, list[int]] = defaultdict(list)
    for r, h in enumerate(hosts):
        out[h].append(r)
    return dict(out)


def normal(ctx: Context, call: CollectiveCall) -> Schedule:
    fab = ctx.fab
    p = fab.ranks
    m = _deepep.mode(fab, low_latency=False)
    blocks = _deepep.block(call, p)
    nodes = nodes_of(fab.hosts)
    sends: list[list[list[Send]]] = [[[]] for _ in range(p)]
    expects = [0] * p
    for h, members in nodes.items():
        others = [h2 for h2 in nodes if h2 != h]
        for li, t in enumerate(members):
            # stage 1: one RDMA flow to the same local index on each other node
            rail = [nodes[h2][li] for h2 in others if li < len(nodes[h2])]
            lat = 0.0
            for r in rail:
                dests = nodes[fab.hosts[r]]
                nbytes = round(sum(blocks[t][d] for d in dests) * call.node_dedup)
                snd = _deepep.flow(fab, m, t, r, nbytes, len(rail), phase=call.phase)
                lat = max(lat, snd.latency_s)
                sends[t][0].append(snd)
                expects[r] += 1
            # stage 2: forward to each GPU of this node what every node's rank of local
            # index li has for it (its own included), after the RDMA stage's latency
            # one rank of index li per node (t itself among them) sends through t
            sources = [nodes[h2][li] for h2 in nodes if li < len(nodes[h2])]
            for u in members:
                if u == t:
                    continue
                nbytes = sum(blocks[s][u] for s in sources)
                n_local = len(members) - 1
                snd = _deepep.flow(fab, m, t, u, nbytes, n_local, lat, phase=call.phase)
                sends[t][0].append(snd)
                expects[u] += 1
    base = m.base(call.phase) if m is not None else 0.0
    return Schedule("deepep_normal", "direct", base, steps(sends, [[e] for e in expects]))


def _why_not(fab: Fabric, op: str) -> str | None:
    problem = _deepep.why_not(fab, op)
    if problem is None and len(set(Counter(fab.hosts).values())) > 1:
        problem = "needs the same number of GPUs on every node (one RDMA peer per local index)"
    return problem


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [normal(ctx, call)]


ALGORITHM = Algorithm(
    name="deepep_normal",
    order=91,
    about="all-to-all: DeepEP's normal kernels (prefill): RDMA to the same local index on "
    "each node, then NVLink forwarding (a serving engine's, run only when named)",
    nccl=False,
    ops=("all_to_all",),
    why_not=_why_not,
    build=_build,
    max_steps=lambda p: 1,
    explicit_only=True,
)
