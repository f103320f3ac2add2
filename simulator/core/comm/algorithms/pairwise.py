"""All-to-all as NCCL runs it: grouped point-to-point sends and receives to every peer.

``ncclAllToAll`` (and nccl-tests' alltoall) is ``ncclSend`` and ``ncclRecv`` of ``n/p`` bytes
to and from each peer inside one group: NCCL's P2P kernel runs them all at once, so each
rank has ``p-1`` flows out and ``p-1`` in, contending on its links (its NVSwitch port). The
block a rank keeps for itself is a local copy, not a send.

How NCCL schedules each peer's transfer (``enqueue.cc`` addP2pToPlan, calibration
``nccl.yaml`` ``p2p``): it is split into parts, one per channel (a thread block), the
channel count growing with the bytes per peer (``P2PTuning.channels``); the protocol is LL
while the bytes are at most some channels times NCCL_P2P_LL_THRESHOLD, else Simple (LL128
is never used for P2P): up to NCCL 2.28 the per-peer channels (512 KiB a peer on a DGX),
the LL parts then sized by the LL step; from 2.29 the channels of Simple-sized parts
(``P2PTuning.ll_rule``). A channel's block splits its warps between the send and the
receive, so one part moves at most at half of NCCL's per-channel Simple copy limit (LL at
LL's share of it), and under Simple it moves in chunks (NCCL_P2P_NVL_CHUNKSIZE) through the
connection's buffer: the sender writes a chunk into the peer's buffer, the receiver copies
it out, the two overlapping from the second chunk on, so a part takes one chunk's time more
than its bytes at the channel's rate (the pipeline's fill). The ideal calibration has no P2P
tuning: one flow per peer at the links' rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tpsim.calibration import Protocol
from tpsim.core.comm.algorithms import Algorithm, Context
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import chunk_sizes, exchange_blocks, many_to_many, send, steps
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule, Send


def per_peer_bytes(nbytes: int, ranks: int) -> list[int]:
    """The block each rank sends to each rank (its own included) of an all-to-all of
    ``nbytes`` (the nccl-tests size: a rank's whole send buffer), uniform over the ranks."""
    return chunk_sizes(nbytes, ranks)


def comm_channels(fab: Fabric) -> int:
    """The communicator's channels NCCL derives its P2P channels from (its rings)."""
    cost = fab.tuning.host_enqueue
    entry = cost.get(fab.gpu.arch) or cost.get("default")
    return entry.ring_channels if entry is not None else 1


def peer_channels(
    fab: Fabric, nbytes: int, protocol: str = "Simple", ranks: int | None = None
) -> int:
    """Channels NCCL runs one peer's transfer of ``nbytes`` under ``protocol`` on, in a
    communicator of ``ranks`` (default: the fabric's) (its parts sized by the protocol's
    step; 1 without P2P tuning)."""
    tun = fab.tuning.p2p
    if tun is None:
        return 1
    ranks = fab.ranks if ranks is None else ranks
    return tun.channels(nbytes, ranks, comm_channels(fab), fab.multi_host, protocol)


def channel_rate(fab: Fabric, proto: Protocol) -> float:
    """Payload B/s one channel moves in one direction under ``proto`` (inf: no cap): half
    (send/receive split) of NCCL's per-channel Simple copy limit; under LL the share of it
    NCCL's model gives LL's 8-byte flagged lines (its ring LL share of a one-host gather)."""
    tun = fab.tuning.p2p
    if tun is None or proto.name not in ("Simple", "LL"):
        return math.inf
    hosts = len(set(fab.hosts))
    cap = fab.tuning.tree_channel_cap("Simple", fab.gpu.scaleup_kind, hosts)
    if proto.name == "LL":
        cap *= fab.tuning.payload_share("LL", "ring", "all_gather", fab.multi_host)
    return cap / tun.send_recv_split


def peer_send(
    fab: Fabric,
    src: int,
    dst: int,
    nbytes: int,
    proto: Protocol,
    peers: int | None = None,
    ranks: int | None = None,
) -> Send:
    """``src``'s transfer of ``nbytes`` to ``dst``, one of its transfers to ``peers`` peers at
    once (default: every other rank, an all-to-all) in a communicator of ``ranks`` (default:
    the fabric's): its channels' rate cap and, under Simple, the chunk pipeline's fill (one
    chunk, or the whole part if smaller, at a channel's rate) before the first data is
    consumed: inside a host it stands for the protocol's hop (the step's handshake) when
    longer; across hosts it comes on top of the network's latency."""
    peers = fab.ranks - 1 if peers is None else peers
    base = send(fab, src, dst, nbytes, proto, family="p2p")  # NCCL's hop: not a ring's
    tun = fab.tuning.p2p
    rate = channel_rate(fab, proto)
    if tun is None or math.isinf(rate) or nbytes == 0:
        return many_to_many(fab, base, peers)
    n = peer_channels(fab, nbytes, proto.name, ranks)
    link = fab.path(src, dst).link_class
    part = -(-nbytes // n)
    # LL's receiver consumes each flagged line as it lands: no chunk to fill
    chunk = tun.chunk_bytes.get(link, tun.chunk_bytes["nvlink"]) if proto.name == "Simple" else 0
    fill = min(chunk, part) / rate
    cap = min(base.cap_Bps, n * rate * proto.wire_factor)
    snd = Send(
        links=base.links,
        payload=base.payload,
        wire=base.wire,
        latency_s=max(base.latency_s, fill) if not base.net else base.latency_s + fill,
        cap_Bps=cap,
        notify=base.notify,
        peer=base.peer,
        net=base.net,
    )
    return many_to_many(fab, snd, peers)


def pairwise(
    fab: Fabric, nbytes: int, proto: Protocol, blocks: list[list[int]] | None = None
) -> Schedule:
    """One step: rank ``t`` sends block ``u`` of its ``nbytes`` buffer (``n/p`` bytes, the
    blocks differing by at most a byte; ``blocks[t][u]`` when routing is uneven:
    :func:`~tpsim.core.comm.schedules.exchange_blocks`) to every peer ``u`` at once and waits
    for the ``p-1`` blocks its peers send it; after the protocol's P2P base latency."""
    p = fab.ranks
    rows = blocks or [per_peer_bytes(nbytes, p)] * p
    sends = [
        [[peer_send(fab, t, u, rows[t][u], proto) for u in range(p) if u != t]] for t in range(p)
    ]
    return Schedule("pairwise", proto.name, proto.base("p2p"), steps(sends, [[p - 1]] * p))


def p2p_protocol(ctx: Context, nbytes: int) -> Protocol:
    """NCCL's protocol for an all-to-all of ``nbytes`` (:func:`peer_protocol` of its bytes to
    one peer)."""
    return peer_protocol(ctx.fab, ctx.protocols, -(-nbytes // ctx.fab.ranks))


def peer_protocol(
    fab: Fabric, protocols: Sequence[Protocol], per_peer: int, ranks: int | None = None
) -> Protocol:
    """NCCL's protocol for a send of ``per_peer`` bytes to one peer in a communicator of
    ``ranks`` (default: the fabric's) (addP2pToPlan): LL while the bytes are at most some
    channels times the P2P LL threshold, else Simple; which channels is the calibration's
    ``p2p.ll_rule`` (up to NCCL 2.28 the per-peer channels, from 2.29 those of Simple-sized
    parts); a calibration with neither protocol (the ideal one): its first of
    ``protocols``."""
    names = {pr.name: pr for pr in protocols}
    tun = fab.tuning.p2p
    if "LL" in names and "Simple" in names:
        channels = 1
        if tun is not None:
            size = fab.ranks if ranks is None else ranks
            channels = tun.ll_limit(per_peer, size, comm_channels(fab), fab.multi_host)
        limit = channels * fab.tuning.p2p_ll_threshold
        return names["LL" if per_peer <= limit else "Simple"]
    return protocols[0]


def _why_not(fab: Fabric, op: str) -> str | None:
    return None  # any group whose ranks reach each other


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    blocks = exchange_blocks(call, ctx.fab.ranks) if call.shares else None
    return [pairwise(ctx.fab, call.nbytes, p2p_protocol(ctx, call.nbytes), blocks)]


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
