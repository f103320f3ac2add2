"""The calibration object: every fitted or published constant the cost models use.

Frozen dataclasses in SI units (seconds, bytes, B/s), filled from the data files beside this
module by :mod:`tpsim.calibration.loader`. :meth:`Calibration.ideal` is the first-principles
variant behind ``--ideal``: every efficiency 1, every fixed overhead 0, no tile or protocol
quantisation. It is the only place that says what "ideal" means; an engine profile will be
another set of overrides of the same object.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class TileShape:
    """Output tile of one GEMM CTA, and the smallest tile height the tensor-core MMA allows."""

    m: int
    n: int
    mma_m: int


@dataclass(frozen=True)
class Kernels:
    """How kernels are priced beyond each GPU's own datasheet and measured figures."""

    attention_efficiency: float  # FlashAttention's fraction of the 16-bit peak
    attention_fp8_efficiency: float  # FlashAttention-3's fraction of the fp8 peak
    attention_block_m: int  # query rows per attention CTA
    split_k_min: int  # smallest K slice a split-K GEMM gives one CTA
    tiles: Mapping[str, TileShape]  # by GPU architecture; "default" for any other
    #: Tile and wave quantisation of GEMMs and attention; False prices 2mnk / peak exactly.
    quantised: bool = True
    #: Overrides of every GPU's own figures (None: the GPU's measured or default figure).
    matmul_efficiency: float | None = None
    hbm_efficiency: float | None = None
    kernel_overhead_s: float | None = None
    #: Scales of the GPU's achievable fractions (a fitted profile, ``tpsim calibrate``; 1:
    #: as measured). Applied after the overrides above, capped at the peak.
    matmul_efficiency_scale: float = 1.0
    attention_efficiency_scale: float = 1.0
    hbm_efficiency_scale: float = 1.0
    #: Kernels as engines run them (``engines/_kernels.yaml``); the defaults are neutral: the
    #: best achievable kernels, every one with the GPU's ``kernel_overhead_s``.
    gemm_fixed_s: float | None = None  # fixed time of a GEMM kernel (None: kernel_overhead_s)
    matmul_fraction: float = 1.0  # share of the GPU's best achievable matmul rate reached
    gemm_stream_efficiency: float = 1.0  # share of achievable HBM a weight-read-bound GEMM gets
    attention_fixed_s: float | None = None  # fixed time of an attention call
    attention_stream_efficiency: float = 1.0  # share of achievable HBM a decode KV read gets
    attention_split_kv: bool = False  # a prefill grid under one wave splits the KV over SMs
    attention_append_efficiency: float = 0.0  # >0: each CTA appends the new K/V (FA2 kvcache)
    elementwise_fixed_s: float | None = None  # fixed time of an elementwise kernel
    rowwise_efficiency: float = 1.0  # share of achievable HBM of a row-per-CTA kernel
    rowwise_latency_s: float = 0.0  # one memory access per element of a row-per-CTA kernel
    norm_passes: int = 1  # times an RMSNorm kernel reads its input
    gather_efficiency: float = 1.0  # share of achievable HBM of the embedding gather
    l2_resident_bytes: int = 0  # activations up to this size are read back from L2
    l2_gain: float = 1.0  # L2 read rate of such activations / achievable HBM bandwidth
    #: Per architecture: the fixed times and the row latency relative to the fitted ones
    #: (a GPU generation's kernel start, tail and memory round trips); missing: 1.
    latency_scale: Mapping[str, float] = field(default_factory=dict)

    def latency_scale_of(self, arch: str) -> float:
        return self.latency_scale.get(arch, self.latency_scale.get("default", 1.0))

    def tile(self, arch: str) -> TileShape | None:
        """The GEMM tile of a GPU architecture, or None when kernels are not quantised."""
        if not self.quantised:
            return None
        return self.tiles.get(arch) or self.tiles["default"]

    def ideal(self) -> Kernels:
        """First principles: every efficiency 1, every fixed cost 0, no quantisation, and
        none of the measured kernels' extra mechanisms."""
        return replace(
            self,
            attention_efficiency=1.0,
            attention_fp8_efficiency=1.0,
            quantised=False,
            matmul_efficiency=1.0,
            hbm_efficiency=1.0,
            kernel_overhead_s=0.0,
            gemm_fixed_s=None,
            matmul_fraction=1.0,
            gemm_stream_efficiency=1.0,
            attention_fixed_s=None,
            attention_stream_efficiency=1.0,
            attention_split_kv=False,
            attention_append_efficiency=0.0,
            elementwise_fixed_s=None,
            rowwise_efficiency=1.0,
            rowwise_latency_s=0.0,
            norm_passes=1,
            gather_efficiency=1.0,
            l2_resident_bytes=0,
            l2_gain=1.0,
            latency_scale={},
            matmul_efficiency_scale=1.0,
            attention_efficiency_scale=1.0,
            hbm_efficiency_scale=1.0,
        )


@dataclass(frozen=True, slots=True)
class LaunchCost:
    """What launching work costs in one launch mode."""

    replay_s: float  # host, once per pass before the first op (CUDA graph launch)
    kernel_s: float  # host, per compute kernel
    collective_s: float  # host, per collective call
    gpu_gap_s: float  # device, added to every kernel: dispatch after the one before


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol: latencies, wire overhead and bandwidth cap."""

    name: str
    base_s: Mapping[str, float]  # per algorithm family ("ring", "tree"): fixed latency
    hop_s: Mapping[str, float]  # per link class ("nvlink", "pci", "net"): one step's latency
    wire_factor: float  # bytes on the wire per payload byte
    max_busbw_Bps: Mapping[str, float]  # per scale-up kind: the protocol's busbw cap
    nvlink_only: bool = False  # NCCL enables it only over NVLink (LL128)
    #: per link class: one tree step's latency (NCCL prices tree hops apart from ring hops);
    #: empty: the ring's ``hop_s``
    tree_hop_s: Mapping[str, float] = field(default_factory=dict)
    #: a network step also waits for a flush of the received data (GPUDirect RDMA), one more
    #: network latency (NCCL adds the net device's latency twice for Simple)
    net_flush: bool = False

    def hop(self, family: str, link_class: str) -> float:
        """One step's latency over a path of ``link_class`` in an algorithm ``family``."""
        if family == "tree" and link_class in self.tree_hop_s:
            return self.tree_hop_s[link_class]
        return self.hop_s[link_class]

    def base(self, family: str) -> float:
        """Fixed latency of one collective of an algorithm family; an unknown family is a
        defect of the calibration, never a silent 0."""
        try:
            return self.base_s[family]
        except KeyError:
            raise KeyError(f"protocol {self.name} has no base latency for {family!r}") from None


@dataclass(frozen=True)
class PayloadShares:
    """Fraction of a path's bandwidth a protocol's payload reaches (NCCL's tuning model)."""

    ring_ll_all_reduce: float  # ring LL in an all-reduce, or across hosts
    ring_ll_gather: float  # ring LL in a one-host all-gather or reduce-scatter
    tree: float  # any tree
    tree_ll: float  # LL on a tree, on top of ``tree``
    tree_ll128_one_host: float
    tree_ll128_multi_host: float

    def share(self, proto: str, algorithm: str, op: str, multi_host: bool) -> float:
        if algorithm == "tree":
            if proto == "LL":
                return self.tree * self.tree_ll
            if proto == "LL128":
                ll128 = self.tree_ll128_multi_host if multi_host else self.tree_ll128_one_host
                return self.tree * ll128
            return self.tree * 1.0
        if proto == "LL":
            return (
                self.ring_ll_all_reduce if multi_host or op == "all_reduce" else self.ring_ll_gather
            )
        return 1.0


@dataclass(frozen=True, slots=True)
class Launcher:
    """How a benchmark starts a collective on its ranks: rank i joins ``i * stagger_s``
    after rank 0; ``call_s`` of host time per call passes before any rank can start."""

    name: str
    stagger_s: float
    call_s: float
    about: str


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


def _by_scale(caps: tuple[float, ...] | None, hosts: int) -> float:
    """NCCL's tuning scales: one host, two hosts, four or more (0 or missing: no cap)."""
    if not caps:
        return math.inf
    cap = caps[0 if hosts <= 1 else 1 if hosts == 2 else 2]
    return cap if cap > 0 else math.inf


@dataclass(frozen=True)
class Links:
    """Fraction of each link's raw bandwidth collective traffic achieves."""

    nvlink_efficiency: Mapping[str, float]  # per scale-up kind (nvlink3, nvlink4, ...)
    efficiency: Mapping[str, float]  # per other link kind (pcie, upi, xgmi, infiniband)
    default_efficiency: float
    nvlink_default_kind: str = "nvlink4"
    #: NVLink bridges, per NVLink generation of the bridged cards (nvlink3, nvlink4)
    bridge_efficiency: Mapping[str, float] = field(default_factory=dict)

    def efficiency_of(self, link: str, scaleup_kind: str) -> float:
        """The achievable fraction of a ``link``; ``scaleup_kind`` is the GPU's scale-up
        fabric, or for an ``nvlink_bridge`` the NVLink generation of the bridge."""
        if link == "nvlink":
            eff = self.nvlink_efficiency
            return eff.get(scaleup_kind, eff[self.nvlink_default_kind])
        if link == "nvlink_bridge":
            eff = self.bridge_efficiency
            return eff.get(scaleup_kind, eff.get(self.nvlink_default_kind, self.default_efficiency))
        return self.efficiency.get(link, self.default_efficiency)


@dataclass(frozen=True)
class Memory:
    usable_fraction: float  # share of HBM the serving engine lets the process use
    runtime_bytes: int  # CUDA context, NCCL buffers, workspaces: out of the usable share


@dataclass(frozen=True, slots=True)
class HostCost:
    """Host time of one piece of engine work per step: ``base_s`` plus ``per_seq_s`` for each
    sequence in the batch."""

    base_s: float
    per_seq_s: float

    def seconds(self, batch: int) -> float:
        return self.base_s + self.per_seq_s * batch


@dataclass(frozen=True, slots=True)
class Coordination:
    """Host time per step for a driver to hand the step to its TP workers (tp > 1): a fixed
    round trip, serialising the batch, and sending it to each further worker."""

    base_s: float
    per_seq_s: float
    per_seq_per_rank_s: float  # per sequence and per worker beyond the second rank

    def seconds(self, tp: int, batch: int) -> float:
        if tp < 2:
            return 0.0
        return self.base_s + batch * (self.per_seq_s + self.per_seq_per_rank_s * (tp - 2))


@dataclass(frozen=True)
class Engine:
    """The serving engine around the kernels: its host work per step and its choices.

    The default (the ``ideal`` engine) does no host work and lets ``--launch`` decide every
    step; a serving engine's profile overrides these from its own measurements.
    """

    name: str
    #: Phases whose steps replay CUDA graphs under ``--launch graph|compiled`` ("decode",
    #: "prefill"); other steps run eager.
    graph_phases: tuple[str, ...]
    graph_max_tokens: int  # largest step (tokens) with a captured graph; larger run eager
    #: Host work per step: schedule, prepare inputs (before the forward), sample, process
    #: outputs (after the logits), in that order.
    step_host: Mapping[str, HostCost]
    #: Fraction of the step's host work the engine overlaps with the GPU (work for the next
    #: step done while this one runs: V1's asynchronous scheduling and output processing).
    host_overlap: float
    layer_host_s: float  # host time per layer in an eager step (Python module calls)
    tp_coordination: Coordination  # per step when tp > 1 (the driver hands out the step)
    allreduce: str  # "auto" (custom all-reduce below its limit, then NCCL) or "nccl"
    #: Device time the engine adds to every collective call before its data moves (its
    #: synchronisation around each all-reduce beyond NCCL's own latency).
    collective_latency_s: float = 0.0
    #: Where a prefill's first token comes from: "prefill" (the pass samples it from the
    #: last prompt token's logits) or "decode_step" (FasterTransformer and TurboMind v0.1:
    #: the context decoder fills the KV cache of all but the last prompt token, with no
    #: logits, and a decode step over that token, in the same iteration, samples it).
    first_token: str = "prefill"

    def graphs(self, phase: str, tokens: int) -> bool:
        """Whether a step of ``tokens`` in ``phase`` replays a CUDA graph (when the launch
        mode uses graphs at all)."""
        return phase in self.graph_phases and tokens <= self.graph_max_tokens


@dataclass(frozen=True)
class Calibration:
    """Every constant of the cost models, by concern; ``name`` says which variant."""

    name: str
    kernels: Kernels
    launch: Mapping[str, LaunchCost]  # per launch mode (eager, graph, compiled)
    collectives: Collectives
    links: Links
    memory: Memory
    engine: Engine

    def ideal(self) -> Calibration:
        """First principles: efficiencies 1, fixed overheads 0 (host work included), no
        quantisation (``--ideal``).

        Memory stays as calibrated: what fits is a fact of the serving process, not of the
        roofline.
        """
        zero_launch = LaunchCost(0.0, 0.0, 0.0, 0.0)
        c = self.collectives
        ideal_protocol = Protocol(
            "ideal", {"ring": 0.0, "tree": 0.0}, {k: 0.0 for k in ("nvlink", "pci", "net")}, 1.0, {}
        )
        return Calibration(
            name="ideal",
            kernels=self.kernels.ideal(),
            launch={mode: zero_launch for mode in self.launch},
            collectives=replace(
                c,
                protocols={"ideal": ideal_protocol},
                probe_protocol="ideal",
                shares=None,
                nvls_latency_s=0.0,
                nvls_efficiency={},
                nvls_default_efficiency=1.0,
                custom_hop_s=0.0,
                custom_load_latency_s=0.0,
                custom_barrier_peer_s=0.0,
                custom_switch=False,
                custom_kernels={
                    k: replace(v, base_s=0.0, host_s=0.0, oneshot_below=())
                    for k, v in c.custom_kernels.items()
                },
                comm_sms=0,
                tree_channel_max_Bps={},
                nvls_tree_net_hop_s=0.0,
                nvls_channels=0,
                ll_multi_host_max_busbw_Bps=(),
                tree_size_efficiency={},
                launchers={
                    n: replace(la, stagger_s=0.0, call_s=0.0) for n, la in c.launchers.items()
                },
            ),
            links=replace(
                self.links,
                nvlink_efficiency=dict.fromkeys(self.links.nvlink_efficiency, 1.0),
                efficiency=dict.fromkeys(self.links.efficiency, 1.0),
                default_efficiency=1.0,
                bridge_efficiency=dict.fromkeys(self.links.bridge_efficiency, 1.0),
            ),
            memory=self.memory,
            engine=replace(
                self.engine,
                step_host={k: HostCost(0.0, 0.0) for k in self.engine.step_host},
                layer_host_s=0.0,
                tp_coordination=Coordination(0.0, 0.0, 0.0),
                collective_latency_s=0.0,
            ),
        )
