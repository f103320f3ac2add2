"""NCCL's point-to-point tuning as calibration holds it: how a send/receive to one peer is cut
into channels and parts, and which protocol it runs under, by NCCL release (the part of the
collectives calibration, :mod:`tpsim.calibration.model_collectives`, that all-to-all and the
pipeline's sends use).

Filled from ``data/nccl.yaml`` ``p2p`` by :mod:`tpsim.calibration.loader_nccl`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class P2PTuning:
    """How NCCL runs grouped sends and receives (``enqueue.cc`` addP2pToPlan,
    ``graph/paths.cc`` ncclTopoComputeP2pChannels): each peer's transfer is split into
    parts, one per channel (one thread block each), moved in chunks through the
    connection's buffer of NCCL_STEPS slots."""

    chunk_bytes: Mapping[str, int]  # per link class: the Simple chunk (NCCL_P2P_*_CHUNKSIZE)
    max_channels: int  # NCCL_MAX_P2P_NCHANNELS: the most P2P channels of a communicator
    net_peer_channels: int  # NCCL_NCHANNELS_PER_NET_PEER: channels to a peer on another host
    #: part size bounds in steps, one host and several: (smallest, largest)
    part_chunks_one_host: tuple[float, float]
    part_chunks_multi_host: tuple[float, float]
    #: a channel's thread block splits its warps between the send and the receive it runs
    send_recv_split: int
    #: host time per send or receive task of a grouped call (ncclSend/ncclRecv and its
    #: share of the plan at ncclGroupEnd), per GPU architecture and "default"
    task_s: Mapping[str, float]
    #: one LL step of the connection's buffer (its 16-byte lines, flags included): the step
    #: an LL part is sized by under the per_peer rule
    ll_step_bytes: int = 0
    #: how NCCL sets a peer's LL threshold: "per_peer" (up to NCCL 2.28: the per-peer
    #: channels times the threshold, then parts sized by the protocol's step) or "parts"
    #: (2.29: the channels of Simple-sized parts times the threshold)
    ll_rule: str = "parts"
    #: the first NCCL release of the "parts" rule ("": every release)
    ll_parts_since: str = ""

    def for_nccl(self, version: str) -> P2PTuning:
        """These rules as NCCL ``version`` (``"2.27.3"``) runs them: the LL rule of that
        release (``ll_parts_since``); unchanged when the version or the release is not
        known."""
        if not version or not self.ll_parts_since:
            return self
        rule = "parts" if _release(version) >= _release(self.ll_parts_since) else "per_peer"
        return replace(self, ll_rule=rule)

    def ll_limit(self, per_peer_bytes: int, ranks: int, comm_channels: int, net: bool) -> int:
        """The most bytes to one peer NCCL sends under LL (addP2pToPlan), for a transfer of
        ``per_peer_bytes`` (the threshold itself is per channel: NCCL_P2P_LL_THRESHOLD is
        ``ll_threshold``, applied by the caller): the channels it multiplies."""
        if self.ll_rule == "per_peer":
            return self.peer_channels_max(comm_channels, net)
        return self.channels(per_peer_bytes, ranks, comm_channels, net, "Simple")

    def total_channels(self, comm_channels: int) -> int:
        """The communicator's P2P channels (comm->p2pnChannels): its channels, at most
        NCCL_MAX_P2P_NCHANNELS, up to a power of two."""
        return _pow2_up(min(comm_channels, self.max_channels))

    def peer_channels_max(self, comm_channels: int, net: bool) -> int:
        """NCCL's channels per peer (comm->p2pnChannelsPerPeer, addP2pToPlan's
        nChannelsMax): the most one peer's transfer is split over, and the factor of the
        LL threshold."""
        peer = _pow2_up(self.net_peer_channels if net else comm_channels)
        return min(peer, self.total_channels(comm_channels))

    def step_bytes(self, protocol: str, net: bool) -> int:
        """The step a part of ``protocol`` is sized by (addP2pToPlan's stepSize): the P2P
        chunk, and under LL with the per_peer rule the LL buffer's step (NCCL 2.29 sizes
        the parts for Simple before it picks the protocol)."""
        if protocol == "LL" and self.ll_rule == "per_peer" and self.ll_step_bytes > 0:
            return self.ll_step_bytes
        return self.chunk_bytes["net" if net else "nvlink"]

    def channels(
        self,
        per_peer_bytes: int,
        ranks: int,
        comm_channels: int,
        net: bool,
        protocol: str = "Simple",
    ) -> int:
        """Channels one peer's transfer of ``per_peer_bytes`` runs on (addP2pToPlan): from
        the per-peer channels, halved while they times the ranks exceed the communicator's
        P2P channels (nChannelsMin); one per smallest part (a fraction of the protocol's
        step) up to that, doubled (up to the per-peer channels) while a part is larger than
        the largest."""
        total = self.total_channels(comm_channels)
        per_peer = self.peer_channels_max(comm_channels, net)
        low = per_peer
        while low * ranks > total and low > 1:
            low //= 2
        if per_peer_bytes <= 0:
            return 1
        step = self.step_bytes(protocol, net)
        smallest, largest = self.part_chunks_multi_host if net else self.part_chunks_one_host
        min_part, max_part = max(1, int(step * smallest)), int(step * largest)
        n = min(low, -(-per_peer_bytes // min_part))
        part = max(min_part, -(-per_peer_bytes // n))
        while part > max_part and n <= per_peer // 2:
            n *= 2
            part = -(-per_peer_bytes // n)
        return n


def _release(version: str) -> tuple[int, ...]:
    """``"2.27.3"`` as (2, 27, 3), to compare NCCL releases."""
    return tuple(int(x) for x in version.split(".") if x.isdigit())


def _pow2_up(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()
