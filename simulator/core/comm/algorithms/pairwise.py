"""All-to-all as NCCL runs it: grouped point-to-point sends and receives to every peer.

``ncclAllToAll`` (and nccl-tests' alltoall) is ``ncclSend`` and ``ncclRecv`` of ``n/p`` bytes
to and from each peer inside one group: NCCL's P2P transport runs them in one send/recv
kernel, every peer's transfer at once on its own channels, so each rank has ``p-1`` flows out
and ``p-1`` in, contending on its links (its NVSwitch port) with each other. The protocol is
NCCL's P2P rule: LL up to ``NCCL_P2P_LL_THRESHOLD`` bytes per peer, Simple above (LL128 is
never used for P2P). The block a rank keeps for itself is a local copy, not a send.
"""

from __future__ import annotations

from tpsim.calibration import Protocol
from tpsim.core.comm.algorithms import Algorithm, Context
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import chunk_sizes, send, steps
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule


def pairwise(fab: Fabric, nbytes: int, proto: Protocol) -> Schedule:
    """One step: rank ``t`` sends block ``u`` of its ``nbytes`` buffer (``n/p`` bytes, the
    blocks differing by at most a byte) to every peer ``u`` at once and waits for the ``p-1``
    blocks its peers send it; after the protocol's P2P base latency."""
    p = fab.ranks
    blocks = chunk_sizes(nbytes, p)
    sends = [[[send(fab, t, u, blocks[u], proto) for u in range(p) if u != t]] for t in range(p)]
    return Schedule("pairwise", proto.name, proto.base("p2p"), steps(sends, [[p - 1]] * p))


def p2p_protocol(ctx: Context, nbytes: int) -> Protocol:
    """NCCL's protocol for a send of ``nbytes`` to each peer: LL up to the calibration's P2P
    LL threshold, else Simple; a calibration with neither (the ideal one): its first."""
    names = {pr.name: pr for pr in ctx.protocols}
    if "LL" in names and "Simple" in names:
        per_peer = -(-nbytes // ctx.fab.ranks)
        return names["LL" if per_peer <= ctx.fab.tuning.p2p_ll_threshold else "Simple"]
    return ctx.protocols[0]


def _why_not(fab: Fabric, op: str) -> str | None:
    return None  # any group whose ranks reach each other


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [pairwise(ctx.fab, call.nbytes, p2p_protocol(ctx, call.nbytes))]


ALGORITHM = Algorithm(
    name="pairwise",
    order=80,
    about="all-to-all: every GPU sends 1/p of its buffer to each peer at once "
    "(NCCL's grouped send/recv)",
    nccl=True,
    ops=("all_to_all",),
    why_not=_why_not,
    build=_build,
    max_steps=lambda p: 1,
)
