"""NVLSTree: NCCL's multi-host all-reduce with NVLink SHARP inside each host.

Inside a host the NVSwitch reduces (each GPU ends up owning the sum of its ``1/g`` share of
the host's data); the owners of the same share on each host all-reduce it across hosts over
their own NICs, up and down a double binary tree of hosts (each tree carries half); the
switch multicasts the result back to every GPU of the host. Only one copy of the buffer
crosses between hosts (against ``2 (p-1)/p`` of it for a ring), and the reduction inside
the host costs each NVLink ``n (g+1)/g`` as NVLS does. The stages are pipelined in pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tpsim.core.comm.algorithms import Algorithm, Context
from tpsim.core.comm.algorithms.tree import binary_tree
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import best_pieces, chunk_sizes, send, step_costs, steps
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule, Send

#: Most pieces the pipeline cuts the data into (as the tree).
MAX_PIECES = 64


def host_blocks(fab: Fabric, order: Sequence[int]) -> list[list[int]]:
    """Each host's ranks in ring order; hosts in order of first appearance."""
    blocks: dict[int, list[int]] = {}
    for t in order:
        blocks.setdefault(fab.hosts[t], []).append(t)
    return list(blocks.values())


def nvlstree(fab: Fabric, nbytes: int, order: Sequence[int], pieces: int | None = None) -> Schedule:
    """The NVLSTree all-reduce in ``pieces`` pieces (the fastest count up to
    :data:`MAX_PIECES` by the closed form if None).

    Stages of a piece of ``c`` bytes: the switch reduces it (each GPU sends ``c`` up and
    receives its ``c/g`` share), the share goes up each tree of hosts and comes back down
    (``c/2g`` per tree and GPU, over its NIC), the switch multicasts it (``c/g`` up, ``c``
    down). Piece ``k`` runs stage ``s`` in step ``k + s``. A network step costs the
    NVLSTree network latency plus the path's (the first piece in full; the pipeline keeps
    ``slots`` pieces in flight per connection, so a later piece waits for ``1/slots`` of
    it); the NVLS part's latency is paid once, before the first step.
    """
    if pieces is None:
        costs = step_costs(fab, nvlstree(fab, nbytes, order, 1))
        pieces = best_pieces(costs, fab.tuning.pipeline_slots, MAX_PIECES)
    links = fab.host_switches
    assert links is not None
    tun = fab.tuning
    proto = tun.protocols[tun.probe_protocol]
    blocks = host_blocks(fab, order)
    g, nh = len(blocks[0]), len(blocks)
    trees = [binary_tree(list(range(nh))), binary_tree(list(reversed(range(nh))))]
    depth = max(d for t in trees for _, d in t.values())
    nstages = 2 + 2 * depth
    nsteps = pieces + nstages - 1
    eff = tun.nvls_efficiency_of(fab.gpu.scaleup_kind)
    if tun.nvls_channels > 1:  # one channel's SM serves the network
        eff *= (tun.nvls_channels - 1) / tun.nvls_channels
    sync_s = proto.hop("ring", "nvlink")  # one pipelined NVLS step: a Simple step over NVLink
    p = fab.ranks
    up_wire = [[0.0] * nsteps for _ in range(p)]
    down_wire = [[0.0] * nsteps for _ in range(p)]
    payload = [[0] * nsteps for _ in range(p)]
    nvls_step = [[False] * nsteps for _ in range(p)]
    net: list[list[list[Send]]] = [[[] for _ in range(nsteps)] for _ in range(p)]
    expects = [[0] * nsteps for _ in range(p)]
    for k, piece in enumerate(chunk_sizes(nbytes, pieces)):
        share = piece / g
        for block in blocks:
            for t in block:
                up_wire[t][k] += piece  # reduce: its piece into the switch
                down_wire[t][k] += share  # ... and its share of the sum back
                payload[t][k] += piece
                nvls_step[t][k] = True
                last = k + nstages - 1
                up_wire[t][last] += share  # multicast: its share up, every share down
                down_wire[t][last] += piece
                payload[t][last] += round(share)
                nvls_step[t][last] = True
        half = share / 2
        for i in range(g):
            for tree in trees:
                for h, (parent, d) in tree.items():
                    if parent < 0:
                        continue
                    child, head = blocks[h][i], blocks[parent][i]
                    up = k + 1 + (depth - d)  # deeper hosts first
                    down = k + 1 + depth + (d - 1)
                    for s, a, b in ((up, child, head), (down, head, child)):
                        snd = send(fab, a, b, round(half), proto, hop_s=tun.nvls_tree_net_hop_s)
                        if k > 0:  # overlapped with the pieces in flight before it
                            snd = replace(snd, latency_s=snd.latency_s / tun.pipeline_slots)
                        net[a][s].append(snd)
                        expects[b][s] += 1
    sends: list[list[list[Send]]] = [[[] for _ in range(nsteps)] for _ in range(p)]
    for block in blocks:
        for t in block:
            up, down = links[t]
            for s in range(nsteps):
                if nvls_step[t][s]:
                    sends[t][s].append(
                        Send(
                            (up,),
                            payload[t][s],
                            up_wire[t][s],
                            max(fab.latencies[up], sync_s),
                            fab.capacities[up] * eff,
                            tuple(block),
                        )
                    )
                    sends[t][s].append(
                        Send(
                            (down,),
                            0,
                            down_wire[t][s],
                            max(fab.latencies[down], sync_s),
                            fab.capacities[down] * eff,
                            (),
                        )
                    )
                    expects[t][s] += g
                sends[t][s].extend(net[t][s])
    return Schedule("nvlstree", "Simple", tun.nvls_latency_s, steps(sends, expects))


def _why_not(fab: Fabric, op: str) -> str | None:
    if not fab.multi_host:
        return "needs GPUs on more than one host (in one host NVLS runs alone)"
    counts = [fab.hosts.count(h) for h in set(fab.hosts)]
    if len(set(counts)) > 1 or counts[0] < 2:
        return "needs the same number (at least 2) of GPUs on every host"
    if fab.host_switches is None:
        return (
            "needs each host's GPUs on one NVSwitch that reduces in the switch "
            "(H100/H200/B200; a topology file says so with nvls: true)"
        )
    return None


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [nvlstree(ctx.fab, call.nbytes, ctx.order)]


ALGORITHM = Algorithm(
    name="nvlstree",
    order=65,
    about="NVLS reduce in each host, a tree of hosts over every NIC, NVLS multicast",
    nccl=True,
    ops=("all_reduce",),
    why_not=_why_not,
    build=_build,
    max_steps=lambda p: MAX_PIECES + 2 * max(1, (p // 2).bit_length()) + 1,
)
