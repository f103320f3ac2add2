"""The calibration object: every fitted or published constant the cost models use.

Frozen dataclasses in SI units (seconds, bytes, B/s), filled from the data files beside this
module by :mod:`tpsim.calibration.loader`. :meth:`Calibration.ideal` is the first-principles
variant behind ``--ideal``: every efficiency 1, every fixed overhead 0, no tile or protocol
quantisation. It is the only place that says what "ideal" means; an engine profile will be
another set of overrides of the same object.

The parts with most to say have their own modules: :class:`Kernels` and :class:`TileShape`
in :mod:`tpsim.calibration.model_kernels`, :class:`Collectives` and what it holds in
:mod:`tpsim.calibration.model_collectives`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tpsim.calibration.model_collectives import Collectives
from tpsim.calibration.model_kernels import Kernels
from tpsim.calibration.model_protocols import Protocol


@dataclass(frozen=True, slots=True)
class LaunchCost:
    """What launching work costs in one launch mode."""

    replay_s: float  # host, once per pass before the first op (CUDA graph launch)
    kernel_s: float  # host, per compute kernel
    collective_s: float  # host, per collective call
    gpu_gap_s: float  # device, added to every kernel: dispatch after the one before


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
    #: step done while this one runs: an overlap scheduler, asynchronous output processing),
    #: as the engine schedules by default (its profile's ``scheduler.async_scheduling``).
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
    #: Coefficient of variation of a rank's host time per segment (the host work between two
    #: waits for its GPU): each rank's host thread is a lognormal factor of mean 1 slower or
    #: faster, and a collective waits for the slowest (tpsim.core.engine.jitter). 0: none.
    host_jitter_cv: float = 0.0
    #: What the engine's all-reduce kernel does besides summing: "none", or
    #: "residual_rms_norm" (TensorRT-LLM's AllReduceFusionOp: the residual add and the next
    #: RMSNorm in the same kernel, when its own one-shot/two-shot kernels run).
    allreduce_fusion: str = "none"
    #: Whether torch.compile (Inductor) generates the step's kernels whatever ``--launch``
    #: says (gpt-fast): residual adds fused into the norms, rotary into its neighbours.
    compiled: bool = False
    #: The fraction overlapped when the engine's asynchronous scheduling is turned off
    #: (``tpsim serve --no-async-scheduling``: vLLM's ``--no-async-scheduling``); None: the
    #: engine has no such mode, ``host_overlap`` either way.
    host_overlap_sync: float | None = None
    #: GPU architectures on which the engine launches its kernels with programmatic
    #: dependent launch (PDL): in a CUDA graph, a kernel that follows another of its chain
    #: is launched while that one drains, so no dispatch gap separates them.
    pdl_archs: tuple[str, ...] = ()
    #: How the engine runs one batch through pipeline stages. None: it splits none; it keeps
    #: a batch per stage in flight instead (vLLM's virtual engines, SGLang, TensorRT-LLM).
    #: A number of tokens: it splits each batch itself, FasterTransformer's
    #: ``getLocalBatchSize``: by the number of stages when they divide it, then in halves
    #: while a micro-batch holds more than this many tokens and an even number of sequences.
    pipeline_split_tokens: int | None = None
    #: DeepEP's buffers as the engine makes them (``--moe-a2a deepep``): its low-latency
    #: buffer's tokens a rank (``num_max_dispatch_tokens_per_rank``), and its normal
    #: kernels' NVLink buffer and (a group across hosts) RDMA buffer in MiB (None: DeepEP's
    #: own size hints for its configs, one RDMA buffer shared with the low-latency kernels)
    deepep_ll_tokens: int = 128
    deepep_nvl_MiB: float | None = None
    deepep_rdma_MiB: float | None = None
    #: The hidden sizes the low-latency kernels of the engine's DeepEP are compiled for
    #: (``SWITCH_HIDDEN``), and whether the engine pads a model's hidden size up to the next
    #: (vLLM) or fails on one not listed (SGLang: DeepEP's "Unsupported hidden" assertion)
    deepep_hidden_sizes: tuple[int, ...] = (2048, 2560, 4096, 5120, 6144, 7168, 8192)
    deepep_pad_hidden: bool = False
    #: Whether the engine runs a MoE layer's tokens through DeepEP's low-latency kernels in
    #: chunks of ``deepep_ll_tokens`` a rank, dispatch, experts and combine per chunk (vLLM's
    #: VLLM_MOE_DP_CHUNK_SIZE), or hands them over at once, and more than the buffer holds
    #: fail (SGLang: DeepEP's ``x.size(0) <= num_max_dispatch_tokens_per_rank`` assertion)
    deepep_ll_chunked: bool = False
    #: An MXFP4 checkpoint's routed experts (gpt-oss) as the engine builds them, by GPU
    #: architecture (the MoE kernel it picks there): the multiples each expert's width per
    #: GPU and the experts' hidden size are rounded up to, ``(width, hidden)``; an
    #: architecture not listed: as stored. ``_batched``: what it picks when DeepEP's
    #: low-latency kernels hand the experts their tokens batched per expert (None: as by
    #: architecture)
    mxfp4_expert_pad: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    mxfp4_expert_pad_batched: tuple[int, int] | None = None
    #: Whether the engine splits the routed experts both ways at once, some whole experts to
    #: each expert-parallel rank and each of them in width slices (``1 < ep < tp x
    #: attention_dp``: SGLang's moe_tp_size = tp_size / ep_size, TensorRT-LLM's moe_tp x
    #: moe_ep); False: either tensor-parallel experts or expert parallelism over the whole
    #: MoE group (vLLM's ``--enable-expert-parallel``: ep = tp x dp, no MoE-TP)
    moe_ep_with_tp: bool = True
    #: The tokens the engine's fused MoE kernels take at a time (vLLM's
    #: VLLM_FUSED_MOE_CHUNK_SIZE): a longer step runs its routed experts chunk by chunk,
    #: their buffers sized for one chunk; None: every token of the step at once
    fused_moe_chunk_tokens: int | None = None
    #: The KV cache's dtype when ``--kv-dtype`` is not given, as the engine's own default
    #: (``--kv-cache-dtype auto``) sets it for the checkpoints ``--dtype`` stands for:
    #: "quantised", fp8 with the linear layers under ``--dtype fp8`` and, where the GPU
    #: has fp8 tensor cores, ``fp4`` (TensorRT-LLM's ModelOpt checkpoints declare an fp8
    #: cache); "activation", the activations' 16-bit dtype whatever ``--dtype`` quantises
    #: (vLLM, SGLang). int4 and a checkpoint run as stored keep a 16-bit cache either way.
    kv_cache_dtype: str = "quantised"

    def pipeline_micro_batches(self, batch: int, tokens_per_seq: int, stages: int) -> int:
        """Micro-batches one step of ``batch`` sequences of ``tokens_per_seq`` tokens each
        (1 at decode) is split into over ``stages`` pipeline stages, as the engine splits it
        (:attr:`pipeline_split_tokens`)."""
        if stages < 2 or self.pipeline_split_tokens is None:
            return 1
        local = batch // stages if batch % stages == 0 else batch
        while local * tokens_per_seq > self.pipeline_split_tokens and local % 2 == 0:
            local //= 2
        return batch // local

    def synchronous(self) -> Engine:
        """This engine with its asynchronous scheduling turned off (its host work overlapped
        as :attr:`host_overlap_sync` says)."""
        if self.host_overlap_sync is None:
            return self
        return replace(self, host_overlap=self.host_overlap_sync)

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
            "ideal",
            {"ring": 0.0, "tree": 0.0, "p2p": 0.0},
            {k: 0.0 for k in ("nvlink", "pci", "net")},
            1.0,
            {},
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
                ring_block_copy_Bps={},
                model_ring_busbw_Bps={},
                ring_final_receive=(),
                ring_read_archs=(),
                nvls_tree_net_hop_s=0.0,
                nvls_channels=0,
                nvls_pipeline=None,
                ll_multi_host_max_busbw_Bps=(),
                tree_size_efficiency={},
                launchers={n: replace(la, call_s=0.0) for n, la in c.launchers.items()},
                host_enqueue={},
                p2p=None,
                deepep=None,
                switch_all_to_all_efficiency=1.0,
                reference_clock_Hz=0.0,
                symm_mem=(
                    None if c.symm_mem is None else replace(c.symm_mem, base_s=0.0, efficiency=1.0)
                ),
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
                host_jitter_cv=0.0,
            ),
        )
