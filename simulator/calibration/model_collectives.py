"""The collectives part of the calibration object: NCCL's tuning constants (protocols,
payload shares, tree and NVLS figures), the benchmarks' launchers and the serving engines'
peer-memory all-reduce kernels.

Filled from ``data/nccl.yaml`` by :mod:`tpsim.calibration.loader_nccl`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tpsim.calibration.model_p2p import P2PTuning
from tpsim.calibration.model_protocols import PayloadShares, Protocol


@dataclass(frozen=True, slots=True)
class Launcher:
    """How a benchmark calls a collective: each host thread spends ``call_s`` per call, then
    enqueues the collective on every GPU it drives (``per_host``: all of its host's ranks,
    as nccl-tests -g P; else its own one). Back to back (the host runs ahead, one
    synchronise at the end) an iteration lasts the longer of the host's and the device's
    time; with ``sync`` (a synchronise after every call) the two in series."""

    name: str
    per_host: bool
    call_s: float
    about: str
    sync: bool = False


@dataclass(frozen=True, slots=True)
class HostEnqueue:
    """NCCL's host time to enqueue one collective on one GPU: ``gpu_s`` (the kernel launch
    and NCCL's plan) plus ``channel_s`` for each channel the operation runs on, of at most
    ``ring_channels`` (the ring and tree channels NCCL builds)."""

    gpu_s: float
    channel_s: float
    ring_channels: int


@dataclass(frozen=True, slots=True)
class ChannelThreshold:
    """NCCL's per-protocol rule for an operation's channels: one fewer channel while the
    bytes are under channels x ``threads`` x ``bytes_per_thread`` (times the ranks for a
    ring when ``ring_times_ranks``)."""

    threads: int
    bytes_per_thread: int
    ring_times_ranks: bool


@dataclass(frozen=True, slots=True)
class NvlsPipeline:
    """How NCCL's NVLS all-reduce moves its data (``enqueue.cc`` calcCollChunking,
    ``device/all_reduce.h``): each channel takes its share in loops of one chunk per head
    (rank), through ``stages`` warp groups connected by the NVLS buffer's slots (scatter
    into the buffer, multimem reduce and multicast store, gather out); the chunk shrinks
    for small operations (``shrink``: below ``factor`` x channels x heads x chunk, at most
    ``bytes``)."""

    chunk_bytes: int  # comm->nvlsChunkSize (NCCL_NVLS_CHUNKSIZE)
    shrink: tuple[tuple[int, int], ...]  # (factor, chunk bytes), in NCCL's order
    stages: int  # warp groups a chunk passes through in turn

    def chunk(self, nbytes: int, channels: int, heads: int) -> int:
        """The chunk NCCL uses for an NVLS all-reduce of ``nbytes``."""
        size = self.chunk_bytes
        ops = channels * heads
        for factor, most in self.shrink:
            if nbytes < factor * ops * size and size > most:
                size = most
        return size

    def fill_bytes(self, nbytes: int, channels: int, heads: int) -> int:
        """Bytes of one channel's first loop (one chunk per head, or the channel's whole
        share if smaller): what each stage after the first waits for before it starts, the
        pipeline's fill being ``stages - 1`` of them at the channel's rate."""
        loop = heads * self.chunk(nbytes, channels, heads)
        return min(loop, -(-nbytes // max(1, channels)))


@dataclass(frozen=True, slots=True)
class DeepEPMode:
    """One mode of DeepEP's expert-parallel all-to-all kernels (``data/deepep.yaml``)."""

    base_s: Mapping[str, float]  # per phase ("dispatch", "combine"): kernel start and signals
    nvlink_efficiency_by_phase: Mapping[str, float]  # per phase: share of the NVLink port
    rdma_efficiency: float  # share of a GPU's NIC its RDMA writes reach
    rdma_post_s: float  # one RDMA write's software cost (IBGDA post from the GPU), per step
    #: what one SM of the dispatch grid quantizes and sends, B/s of messages (0: no limit)
    dispatch_sm_Bps: float = 0.0

    def grid_sms(self, experts: int, sm_count: int) -> int:
        """SMs of DeepEP's low-latency grid: one per expert, several experts an SM once they
        outnumber the GPU's SMs (``ceil(E / ceil(E / SMs))``); 0: not known."""
        if experts <= 0 or sm_count <= 0:
            return 0
        return -(-experts // -(-experts // sm_count))

    def base(self, phase: str) -> float:
        """The fixed time of one call of ``phase`` (dispatch's when the phase is not named)."""
        return self.base_s.get(phase or "dispatch", self.base_s["dispatch"])

    def nvlink_efficiency(self, phase: str) -> float:
        """The share of a GPU's NVLink port the kernel of ``phase`` reaches."""
        table = self.nvlink_efficiency_by_phase
        return table.get(phase or "dispatch", table["dispatch"])


@dataclass(frozen=True, slots=True)
class DeepEP:
    """DeepEP's low-latency (decode) and normal (prefill) kernels."""

    low_latency: DeepEPMode
    normal: DeepEPMode


@dataclass(frozen=True, slots=True)
class CustomKernel:
    """One serving engine's peer-memory all-reduce kernels (one-shot and two-shot): what its
    code fixes (grid size, the one-shot/two-shot switch, how eager calls get the input into
    the shared buffer) and what was fitted to measurements (fixed device and host costs)."""

    name: str
    base_s: float  # device: kernel start and the entry barrier (a flag to and from each peer)
    host_s: float  # host time of one eager call (Python, dispatch, its launches)
    grid_threads: int  # threads of the grid, each with one 16-byte load per peer in flight
    serial_gather: bool  # two-shot's all-gather loads one peer at a time (stores between)
    #: ``(ranks up to, bytes)``: one-shot below that many bytes, two-shot from there (None:
    #: one-shot at any size); empty: no rule (``auto`` runs the faster of the two).
    oneshot_below: tuple[tuple[int, float | None], ...]
    copy: str  # eager input into the shared buffer: "memcpy" (a copy kernel) | "in_kernel"

    def oneshot_limit(self, ranks: int) -> float | None:
        """Bytes from which the engine runs two-shot on ``ranks`` GPUs (inf: never; None: no
        rule)."""
        for upto, below in self.oneshot_below:
            if ranks <= upto:
                return math.inf if below is None else below
        return None if not self.oneshot_below else 0.0


@dataclass(frozen=True)
class SymmMem:
    """An engine's all-reduce on torch symmetric memory, between its custom kernels and NCCL
    (vLLM's ``SymmMemCommunicator``): per GPU architecture, the largest message it takes by
    group size and the group sizes it runs the multimem (in-switch) kernel for."""

    base_s: float  # device: the multimem kernel's start and its barriers over the signal pads
    efficiency: float  # the share of the links' rate the multimem kernel streams at
    max_bytes: Mapping[str, Mapping[int, int]]  # arch -> ranks -> messages below this
    multimem_ranks: Mapping[str, tuple[int, ...]]  # arch -> group sizes run multimem

    def multimem_below(self, arch: str, ranks: int) -> int:
        """Bytes below which a message over ``ranks`` GPUs of ``arch`` runs the multimem
        kernel (0: never)."""
        if ranks not in self.multimem_ranks.get(arch, ()):
            return 0
        return self.max_bytes.get(arch, {}).get(ranks, 0)


@dataclass(frozen=True)
class Collectives:
    """NCCL's tuning constants and the peer-memory all-reduce of serving engines."""

    protocols: Mapping[str, Protocol]
    probe_protocol: str  # the protocol extra rings are tried with
    shares: PayloadShares | None  # None: every payload reaches the whole path
    link_class: Mapping[str, str]  # link kind -> "nvlink" | "pci" | "net"
    nvls_latency_s: float
    nvls_efficiency: Mapping[str, float]  # per scale-up kind
    nvls_default_efficiency: float
    custom_hop_s: float  # a flag over NVLink: a barrier between two steps
    custom_load_latency_s: float  # one 16-byte load from a peer's memory, issue to data
    custom_barrier_peer_s: float  # a barrier's cost per peer it waits for
    custom_max_bytes: int
    custom_kernels: Mapping[str, CustomKernel]
    custom_implementation: str  # the engine's kernels, one of custom_kernels
    #: Whether ``auto`` follows the kernels' one-shot/two-shot switch (a serving engine's
    #: code) or runs the faster of the two (the ideal engine).
    custom_switch: bool
    comm_sms: int  # SMs a collective kernel holds while it runs
    launchers: Mapping[str, Launcher]
    #: per protocol, per scale-up kind: one tree channel's payload rate cap (B/s) for 1, 2
    #: and 4+ hosts; a protocol or kind not listed: no cap
    tree_channel_max_Bps: Mapping[str, Mapping[str, tuple[float, ...]]] = field(
        default_factory=dict
    )
    nvls_tree_net_hop_s: float = 0.0  # NVLSTree: software latency of one network step
    #: pieces a pipelined network connection keeps in flight (NCCL_STEPS): after the first,
    #: a piece's network latency overlaps with the ones before it
    pipeline_slots: int = 1
    nvls_channels: int = 0  # NVLS channels (SMs); NVLSTree gives one to the network; 0: none
    #: LL across hosts: the whole collective's busbw cap (B/s) on 2 and on 4+ hosts; empty:
    #: the one-host cap of the GPU
    ll_multi_host_max_busbw_Bps: tuple[float, ...] = ()
    #: per protocol: the tree's bandwidth efficiency at each power-of-two size from 64 B
    #: (index log2(bytes / 64)); beyond the list, or a protocol not listed: 1
    tree_size_efficiency: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: per GPU architecture (and "default"): NCCL's host enqueue of one collective; empty:
    #: no host time (the ideal calibration)
    host_enqueue: Mapping[str, HostEnqueue] = field(default_factory=dict)
    #: per protocol: NCCL's rule for how many channels an operation of a size runs on
    channel_thresholds: Mapping[str, ChannelThreshold] = field(default_factory=dict)
    #: NCCL's P2P protocol rule: a send of at most this many bytes to one peer runs LL,
    #: a larger one Simple (NCCL_P2P_LL_THRESHOLD)
    p2p_ll_threshold: int = 0
    #: NCCL's grouped send/receive (all-to-all); None: one flow per peer at the link's rate
    #: (the ideal calibration)
    p2p: P2PTuning | None = None
    #: DeepEP's kernels (``deepep.yaml``); None: plain flows at the links' rate (ideal)
    deepep: DeepEP | None = None
    #: NCCL's NVLS chunk pipeline; None: the data streams with no fill (ideal)
    nvls_pipeline: NvlsPipeline | None = None
    #: per scale-up kind: the bytes (loads plus stores) one ring channel's thread block
    #: moves per second under Simple; a kind not listed: no cap (the ideal calibration)
    ring_block_copy_Bps: Mapping[str, float] = field(default_factory=dict)
    #: per scale-up kind: the busbw NCCL's tuning model gives a ring over one host's
    #: NVSwitch (its ring graph's channels x bandwidth), by which it chooses a protocol; a
    #: kind not listed: the path's own bandwidth (the ideal calibration)
    model_ring_busbw_Bps: Mapping[str, float] = field(default_factory=dict)
    #: protocols whose ring pays its last primitive (the final receive) as one more hop;
    #: empty: NCCL's count of p - 1 steps per phase (the ideal calibration)
    ring_final_receive: tuple[str, ...] = ()
    #: GPU architectures whose NVLink pairs NCCL runs in P2P read mode (the Simple buffer on
    #: the sender, each receive pulling its slices over NVLink: a load latency a slice,
    #: ``custom_load_latency_s``); empty: write mode everywhere (the ideal calibration)
    ring_read_archs: tuple[str, ...] = ()
    #: per GPU architecture, per group size: the size the custom kernels take messages below,
    #: where it is under ``custom_max_bytes`` (vLLM's table when symmetric memory is on)
    custom_max_by_gpu: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    #: the engine's symmetric-memory all-reduce, and with it the engine's rule of taking the
    #: first of its kernels that applies (custom, symmetric memory, then NCCL) instead of the
    #: fastest; None: no such tier, ``auto`` runs the faster of the custom kernels and NCCL
    symm_mem: SymmMem | None = None
    #: the share of a GPU's switch port that many-to-many traffic (an all-to-all: flows to
    #: and from several peers at once through the host's switch) gets of what one peer's
    #: traffic gets; 1: none lost (the ideal calibration)
    switch_all_to_all_efficiency: float = 1.0
    #: whether ``auto`` may run tpsim's own compositions of collective phases
    #: (:attr:`~tpsim.core.comm.algorithms.Algorithm.composed`: the hierarchical all-reduce
    #: across hosts): the ideal engine may; a serving engine calls NCCL there
    auto_composed: bool = True
    #: the SM clock (Hz) at which the protocols' latencies hold as written; on a GPU of
    #: another clock their SM-side parts scale (:meth:`at_clock`); 0: they never scale (the
    #: ideal calibration)
    reference_clock_Hz: float = 0.0

    def at_clock(self, clock_Hz: float | None) -> Collectives:
        """These constants on a GPU whose SM runs at ``clock_Hz`` (None: not known, as
        written): NCCL's fixed latency and its NVLink hop are the kernel's own work (its
        blocks starting, the protocol's set-up, each step's flag written and polled by its
        threads), so they take as many SM cycles on any GPU: ``reference / clock`` times the
        written time (:meth:`Protocol.clocked`)."""
        if not self.reference_clock_Hz or not clock_Hz or clock_Hz == self.reference_clock_Hz:
            return self
        factor = self.reference_clock_Hz / clock_Hz
        return replace(self, protocols={k: p.clocked(factor) for k, p in self.protocols.items()})

    def custom_max(self, arch: str, ranks: int) -> int:
        """The largest message the custom kernels take over ``ranks`` GPUs of ``arch``."""
        below = self.custom_max_by_gpu.get(arch, {}).get(ranks)
        return self.custom_max_bytes if below is None else min(self.custom_max_bytes, below - 1)

    @property
    def custom(self) -> CustomKernel:
        """The peer-memory all-reduce kernels the engine runs."""
        return self.custom_kernels[self.custom_implementation]

    def custom_oneshot_limit(self, ranks: int) -> float | None:
        """Bytes from which ``auto`` runs two-shot (inf: never; None: the faster runs)."""
        return self.custom.oneshot_limit(ranks) if self.custom_switch else None

    @property
    def custom_base_s(self) -> float:
        return self.custom.base_s

    def custom_barrier_s(self, ranks: int) -> float:
        """One barrier of the peer-memory kernels over ``ranks`` GPUs beyond a flag's hop."""
        return self.custom_barrier_peer_s * (ranks - 1)

    def payload_share(self, proto: str, algorithm: str, op: str, multi_host: bool) -> float:
        if self.shares is None:
            return 1.0
        return self.shares.share(proto, algorithm, op, multi_host)

    def protocols_over(self, nvlink: bool) -> list[Protocol]:
        """The protocols NCCL may use on a group whose GPUs of one host talk over NVLink
        (``nvlink``) or not."""
        return [p for p in self.protocols.values() if nvlink or not p.nvlink_only]

    def nvls_efficiency_of(self, scaleup_kind: str) -> float:
        return self.nvls_efficiency.get(scaleup_kind, self.nvls_default_efficiency)

    def tree_channel_cap(self, proto: str, scaleup_kind: str, hosts: int) -> float:
        """One tree channel's payload rate cap (B/s; inf: none) on ``hosts`` hosts."""
        caps = self.tree_channel_max_Bps.get(proto, {}).get(scaleup_kind)
        return _by_scale(caps, hosts)

    def ring_copy_cap(
        self, proto: str, scaleup_kind: str, op: str, ranks: int, blocks: int
    ) -> float:
        """Wire B/s a ring's ``blocks`` channels let each rank send under ``proto`` (inf: no
        cap).

        Each channel is one thread block that runs NCCL's ring primitives one after the
        other (``device/all_gather.h`` etc. runRing), each a copy from its sources to its
        destinations; per byte a rank sends, its blocks load and store
        :func:`ring_copy_bytes` bytes. Simple and LL128 move whole lines at the block's
        copy rate (LL128 its 128-byte lines, flags included); LL's flag-per-8-bytes loop has
        its own, lower cap (``max_busbw_GBps``), which this leaves alone."""
        rate = self.ring_block_copy_Bps.get(scaleup_kind)
        if proto not in ("Simple", "LL128") or rate is None or ranks < 2:
            return math.inf
        return blocks * rate / ring_copy_bytes(op, ranks)

    def tree_efficiency(self, proto: str, nbytes: float) -> float:
        """The tree's bandwidth efficiency for a ``nbytes`` all-reduce under ``proto``
        (NCCL's treeCorrectionFactor: trees fall short of their model at medium sizes)."""
        table = self.tree_size_efficiency.get(proto, ())
        index = max(int(nbytes) >> 6, 1).bit_length() - 1
        return table[index] if index < len(table) else 1.0

    def ll_multi_host_cap(self, hosts: int) -> float:
        """LL's busbw cap (B/s; inf: none) for a collective across ``hosts`` hosts."""
        caps = self.ll_multi_host_max_busbw_Bps
        if hosts < 2 or not caps:
            return math.inf
        return caps[0] if hosts == 2 else caps[-1]


def ring_copy_bytes(op: str, ranks: int) -> float:
    """Bytes a ring channel's block loads and stores per byte its rank sends, for NCCL's
    ring primitives on ``ranks`` GPUs (non-registered buffers: through the connection's
    buffer). A loop over one chunk per rank runs, per chunk of c bytes:

    - all-gather: directCopySend (load the input, store it to the output and the next
      rank's buffer: 3c), p - 2 directRecvCopyDirectSend (3c each), directRecv (load the
      buffer, store the output: 2c): 3p - 1 chunks for p - 1 sent;
    - reduce-scatter: directSend (2c), p - 2 directRecvReduceDirectSend (the buffer and the
      input loaded, the sum stored: 3c each), directRecvReduceCopy (3c): 3p - 1 for p - 1;
    - all-reduce: its reduce-scatter half (send, p - 2 recvReduceSend), one
      directRecvReduceCopyDirectSend (4c), p - 2 directRecvCopyDirectSend (3c each) and
      directRecv (2c): 6p - 4 for 2(p - 1) sent.
    """
    p = ranks
    if op == "all_reduce":
        return (3 * p - 2) / (p - 1)
    return (3 * p - 1) / (p - 1)


def _by_scale(caps: tuple[float, ...] | None, hosts: int) -> float:
    """NCCL's tuning scales: one host, two hosts, four or more (0 or missing: no cap)."""
    if not caps:
        return math.inf
    cap = caps[0 if hosts <= 1 else 1 if hosts == 2 else 2]
    return cap if cap > 0 else math.inf
