"""Kernel cost models: pure functions from shapes to seconds.

Every kernel is priced by its roofline, ``max(flops / achievable FLOP/s, bytes / achievable
HBM B/s)``, plus a fixed per-kernel cost. The efficiencies, tiles and fixed costs come from
the GPU and the calibration (:class:`tpsim.calibration.Kernels`); with the ideal calibration
they are 1, none and 0, so a lone GEMM equals ``max(2mnk / peak, bytes / hbm)`` exactly.

:class:`Traits` says how the engine's kernels fall short of the best achievable ones (the
measured-kernel refit, ``engines/_kernels.yaml``): a fixed time per kernel family, GEMMs
below the best matmul rate and weight reads below STREAM, decode attention reading the KV
cache below STREAM, a prefill kernel that splits the KV range over idle SMs and appends the
new K and V from every CTA (FlashAttention-2's ``flash_attn_with_kvcache``), and row-per-CTA
elementwise kernels (norms, activation, rotary) bound by their bandwidth share or by one
memory round trip per 1024 elements of a row. Its defaults are neutral: today's model.
The attention kernels are priced in :mod:`tpsim.core.kernels.attention`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpsim import calibration
from tpsim.calibration import Kernels, TileShape
from tpsim.core.kernels.gemm import Feed, compute_seconds
from tpsim.topologies.gpus import GPUSpec

#: Elements of a row one CTA handles per memory round trip in a row-per-CTA kernel (vLLM's
#: norm, activation and rotary kernels launch min(row, 1024) threads, one element each), and
#: resident threads per SM (2048 on A100 and H100): two such CTAs per SM.
ROW_ELEMENTS_PER_TRIP = 1024
ROW_CTAS_PER_SM = 2


@dataclass(frozen=True, slots=True)
class Traits:
    """How the engine's kernels fall short of the best achievable ones; neutral by default.

    ``*_fixed_s`` None: the GPU's ``kernel_overhead_s``. Shares multiply the achievable rate.
    """

    gemm_fixed_s: float | None = None
    matmul_fraction: float = 1.0
    gemm_stream_efficiency: float = 1.0
    attention_fixed_s: float | None = None
    attention_stream_efficiency: float = 1.0
    attention_split_kv: bool = False
    attention_append_efficiency: float = 0.0  # 0: no in-kernel append
    attention_heads_per_cta: int = 0  # 0: each KV head read once per decode step
    elementwise_fixed_s: float | None = None
    rowwise_efficiency: float = 1.0
    rowwise_latency_s: float = 0.0
    norm_passes: int = 1
    gather_efficiency: float = 1.0
    l2_resident_bytes: int = 0
    l2_gain: float = 1.0

    @classmethod
    def of(cls, k: Kernels, arch: str) -> Traits:
        """The calibration's traits on a GPU of ``arch`` (fixed times and the row latency
        scaled by the architecture's ``latency_scale``)."""
        scale = k.latency_scale_of(arch)

        def fixed(s: float | None) -> float | None:
            return None if s is None else s * scale

        return cls(
            fixed(k.gemm_fixed_s),
            k.matmul_fraction,
            k.gemm_stream_efficiency,
            fixed(k.attention_fixed_of(arch)),
            k.attention_stream_efficiency,
            k.attention_split_kv,
            k.attention_append_efficiency,
            k.attention_heads_per_cta,
            fixed(k.elementwise_fixed_s),
            k.rowwise_efficiency,
            k.rowwise_latency_s * scale,
            k.norm_passes,
            k.gather_efficiency,
            k.l2_resident_bytes,
            k.l2_gain,
        )


@dataclass(frozen=True, slots=True)
class RowKernel:
    """A row-per-CTA elementwise kernel: ``rows`` rows of ``width`` elements, its input read
    ``passes`` times (an RMSNorm kernel that reduces, then rereads to scale, reads twice);
    ``tensor_bytes``: the bytes of one ``[rows, width]`` tensor."""

    rows: int
    width: int
    passes: int = 1
    tensor_bytes: float = 0.0


@dataclass(frozen=True, slots=True)
class Hardware:
    """The figures one GPU's kernels are priced with (efficiencies already chosen).

    ``tile is None`` means no tile/wave quantisation (the ideal calibration); else the
    candidate GEMM kernels (tiles) the library chooses among per shape.
    """

    name: str
    peak_flops: float  # dense peak of the linear layers' math dtype, FLOP/s
    matmul_efficiency: float  # achievable fraction of peak in a full wave of GEMM tiles
    attention_efficiency: float
    hbm_Bps: float
    hbm_efficiency: float
    kernel_overhead_s: float
    sm_count: int = 1
    tile: tuple[TileShape, ...] | None = None
    l2_Bps: float = 0.0  # L2 bandwidth feeding GEMM operand tiles (0: no such bound)
    attention_peak_flops: float = 0.0  # 0: same as peak_flops
    peak16_flops: float = 0.0  # 16-bit peak for GEMMs kept in 16-bit (lm_head); 0: peak_flops
    fp8_tensor_cores: bool = False
    fp4_tensor_cores: bool = False
    split_k_min: int = 1  # smallest K slice a split-K GEMM gives one CTA
    attention_block_m: int = 1  # query rows per attention CTA
    traits: Traits = Traits()  # the engine's kernels (neutral: the best achievable)
    arch: str = ""  # the GPU's architecture (gpus.yaml arch), "" where not known
    l2_bytes: int = 256_000_000  # its on-chip last-level cache (GPUSpec.l2_bytes)

    @property
    def matmul_flops(self) -> float:
        return self.peak_flops * self.matmul_efficiency

    @property
    def hbm_achievable_Bps(self) -> float:
        return self.hbm_Bps * self.hbm_efficiency


def hardware_for(
    gpu: GPUSpec, dtype: str, kernels: Kernels | None = None, *, kv_dtype: str | None = None
) -> Hardware:
    """The cost-model view of ``gpu`` running ``dtype`` math under ``kernels``' calibration.

    fp8 uses the fp8 peak where the GPU has fp8 tensor cores, fp4 the fp4 peak where it has
    fp4 tensor cores (Blackwell; elsewhere ``precision.precision`` runs 4-bit weights at fp8 or
    16-bit math). An A100 has none: an fp8 model
    there computes at the bf16 peak (weight-only fp8, see ``precision.Precision``) and only its
    weight bytes shrink. Attention runs at the fp8 peak only for an fp8 KV cache on a GPU with
    fp8 tensor cores (FlashAttention-3), else at the 16-bit peak. ``kernels``: the shipped
    calibration's by default. The GPU's best achievable
    matmul / peak (MAMF: a shape whose last wave is full) is the efficiency of a full wave of
    tiles; fp8 GEMMs get the same fraction of the fp8 peak (no fp8 measurement). Attention
    never beats the GPU's own matmul fraction.
    """
    fp8 = gpu.fp8_flops is not None
    peak = gpu.fp8_flops if dtype == "fp8" and gpu.fp8_flops else gpu.bf16_flops
    if dtype == "fp4" and gpu.fp4_flops:
        peak = gpu.fp4_flops
    fp8_attention = kv_dtype == "fp8" and fp8
    attn_peak = gpu.fp8_flops if fp8_attention and gpu.fp8_flops else gpu.bf16_flops
    k = kernels or calibration.default().kernels
    matmul = gpu.matmul_efficiency if k.matmul_efficiency is None else k.matmul_efficiency
    matmul = _scaled(matmul, k.matmul_efficiency_scale)
    attn_eff = k.attention_fp8_efficiency if fp8_attention else k.attention_efficiency
    attn_eff = _scaled(attn_eff, k.attention_efficiency_scale)
    hbm = gpu.hbm_efficiency if k.hbm_efficiency is None else k.hbm_efficiency
    return Hardware(
        name=gpu.name,
        peak_flops=peak,
        matmul_efficiency=matmul,
        attention_efficiency=min(matmul, attn_eff),
        hbm_Bps=gpu.hbm_Bps,
        hbm_efficiency=_scaled(hbm, k.hbm_efficiency_scale),
        kernel_overhead_s=(
            gpu.kernel_overhead_s if k.kernel_overhead_s is None else k.kernel_overhead_s
        ),
        sm_count=gpu.sm_count,
        tile=k.tile(gpu.arch),
        l2_Bps=k.l2_bytes_per_flop_of(gpu.arch) * gpu.bf16_flops,
        attention_peak_flops=attn_peak,
        peak16_flops=gpu.bf16_flops,
        fp8_tensor_cores=fp8,
        fp4_tensor_cores=gpu.fp4_flops is not None,
        split_k_min=k.split_k_min,
        attention_block_m=k.attention_block_m,
        traits=Traits.of(k, gpu.arch),
        arch=gpu.arch,
        l2_bytes=gpu.l2_bytes,
    )


def _scaled(efficiency: float, scale: float) -> float:
    """An achievable fraction times a fitted profile's scale, never above the peak (a
    profile fitted on one GPU may run on another whose fraction is higher)."""
    return efficiency if scale == 1.0 else min(1.0, efficiency * scale)


@dataclass(frozen=True, slots=True)
class KernelCost:
    seconds: float
    flops: float
    bytes: int
    category: str  # "compute" if the FLOP term binds, else "memory"
    measured: bool = False  # seconds from a kernel table, not the model

    @classmethod
    def of_parts(cls, parts: list[KernelCost]) -> KernelCost:
        """Kernels run one after the other as one cost: their times, FLOPs and bytes added,
        compute-bound when the compute-bound parts take most of the time."""
        seconds = sum(p.seconds for p in parts)
        compute = sum(p.seconds for p in parts if p.category == "compute")
        return cls(seconds, sum(p.flops for p in parts), sum(p.bytes for p in parts),
                   "compute" if 2 * compute > seconds else "memory")  # fmt: skip


def _priced(
    t_compute: float,
    nbytes: int,
    flops: float,
    hw: Hardware,
    *,
    stream: float = 1.0,
    fixed_s: float | None = None,
    t_memory: float | None = None,
    extra_s: float = 0.0,
) -> KernelCost:
    """``max(compute, memory) + fixed (+ extra)``: memory is ``nbytes`` at ``stream`` x the
    achievable HBM bandwidth unless given; fixed is the GPU's kernel overhead unless given."""
    if t_memory is None:
        t_memory = nbytes / (hw.hbm_achievable_Bps * stream)
    category = "compute" if t_compute > t_memory else "memory"
    fixed = hw.kernel_overhead_s if fixed_s is None else fixed_s
    seconds = max(t_compute, t_memory) + fixed
    if extra_s:
        seconds += extra_s
    return KernelCost(seconds, flops, nbytes, category)


def gemm(
    m: int,
    n: int,
    k: int,
    hw: Hardware,
    *,
    act_bytes: float,
    w_bytes: float,
    out_bytes: float | None = None,
) -> KernelCost:
    """``[m, k] @ [k, n]``: input at ``act_bytes``, weights at ``w_bytes``, output at
    ``out_bytes`` (default ``act_bytes``); tiled and wave-quantised (tpsim.core.kernels.gemm)."""
    out_b = act_bytes if out_bytes is None else out_bytes
    flops = 2.0 * m * n * k
    nbytes = round(m * k * act_bytes + k * n * w_bytes + m * n * out_b)
    tr = hw.traits
    tiles = hw.tile
    if tiles is not None and w_bytes < 1 and act_bytes >= 2:  # 4-bit weights, 16-bit math
        tiles = (*tiles, *MARLIN_TILES)
    t = compute_seconds(
        m,
        n,
        k,
        peak_flops=hw.matmul_flops * tr.matmul_fraction,
        tile=tiles,
        sm_count=hw.sm_count,
        split_k_min=hw.split_k_min,
        feed=Feed(hw.l2_Bps, act_bytes, w_bytes),
    )
    return _priced(t, nbytes, flops, hw, stream=tr.gemm_stream_efficiency, fixed_s=tr.gemm_fixed_s)


#: The blocks of the W4A16 kernels that run 4-bit weights at 16-bit math (Marlin: vLLM's
#: awq_marlin, gptq_marlin, and its fp4 and MXFP4 Marlin paths): mma.sync m16n8k16 on every
#: NVIDIA GPU since Ampere, Hopper's and Blackwell's too, 16 rows per m-block and up to 4
#: m-blocks a CTA (thread_m_blocks), 256 columns, K in blocks of 64, its tiles' K blocks
#: striped evenly over the SMs with a global reduction (IST-DASLab/marlin README: "near-ideal
#: ~4x speedups up to batchsizes of 16-32 tokens"; its "striped" partitioning). Without them
#: a Hopper prices a decode token padded to wgmma's 64 rows: 4x the arithmetic, compute-bound
#: beside 4-bit weight reads.
MARLIN_TILES = tuple(TileShape(rows, 256, 16, stripe_k=64) for rows in (16, 32, 64))
#: The fused MoE kernel's block at small batch with 16-bit math (bf16/fp16, and 4-bit
#: weights dequantised to 16 bits): 16 rows (a token or two per expert) by 32 columns, on
#: mma.sync m16n8k16 on every NVIDIA GPU since Ampere. vLLM's and SGLang's Triton fused_moe
#: ``get_default_config``: BLOCK_SIZE_M 16, BLOCK_SIZE_N 32 while the tokens are at most the
#: experts (64 rows above; fp8 W8A8: 64 rows at any batch, as TensorRT-LLM's and DeepGEMM's
#: grouped kernels, which the GPU's own tiles price); the W4A16 path 16 rows up to 20
#: tokens. Without it a Hopper prices each expert's row or two padded to wgmma's 64.
MOE_SMALL_TILE = TileShape(16, 32, 16)
#: Rows per expert up to which the small block is among the kernels the MoE picks from.
MOE_SMALL_ROWS = 16


def grouped_gemm(
    rows: int,
    n: int,
    k: int,
    hw: Hardware,
    *,
    experts_read: float,
    act_bytes: float,
    w_bytes: float,
    out_bytes: float | None = None,
) -> KernelCost:
    """A grouped GEMM of routed experts (a fused MoE kernel): ``rows`` token-expert pairs,
    each ``[1, k] @ [k, n]`` by its expert's weights, of which ``experts_read`` experts' are
    read (the expected number picked by some token: a float).

    FLOPs: ``2 * rows * n * k``. Bytes: the rows in and out, and ``experts_read`` weight
    matrices ``[k, n]``. Tiled, the pairs are spread evenly over the ``ceil(experts_read)``
    experts read, each a GEMM of ``ceil(rows / experts)`` rows, their tiles side by side in
    one grid; unquantised (the ideal calibration) compute is ``2 * rows * n * k / peak``.
    """
    out_b = act_bytes if out_bytes is None else out_bytes
    flops = 2.0 * rows * n * k
    nbytes = round(rows * k * act_bytes + experts_read * k * n * w_bytes + rows * n * out_b)
    tr = hw.traits
    peak = hw.matmul_flops * tr.matmul_fraction
    if hw.tile is None:
        t = flops / peak
    else:
        groups = max(1, math.ceil(experts_read - 1e-9))
        per = max(1, -(-rows // groups))
        tiles = hw.tile
        if act_bytes >= 2 and per <= MOE_SMALL_ROWS:  # 16-bit math: the small-batch block
            tiles = (*tiles, MOE_SMALL_TILE)
        t = compute_seconds(per, n * groups, k, peak_flops=peak, tile=tiles,
                            sm_count=hw.sm_count, split_k_min=hw.split_k_min,
                            feed=Feed(hw.l2_Bps, act_bytes, w_bytes))  # fmt: skip
    return _priced(t, nbytes, flops, hw, stream=tr.gemm_stream_efficiency, fixed_s=tr.gemm_fixed_s)


def elementwise(
    nbytes: float, flops: float, hw: Hardware, *, row: RowKernel | None = None, gather: bool = False
) -> KernelCost:
    """A bandwidth-bound kernel (norm, residual add, activation, rotary, embedding gather).

    Its FLOPs are priced at the tensor-core peak (the napkin formula); they never bind
    with real efficiencies, where the bytes term is 10-100x larger. A kernel of at most
    ``l2_resident_bytes`` reads its operands at ``l2_gain`` x the achievable HBM bandwidth
    (they are still in L2 from the kernel that wrote them). ``row``: a row-per-CTA kernel
    (norms, activation, rotary: one CTA per token), which streams at ``rowwise_efficiency``
    of the achievable bandwidth (its extra passes included), and whose CTAs take at least
    ``rowwise_latency_s`` per element access (each read or write of a tensor element) per
    1024 elements of a row, one wave of two CTAs per SM after another. ``gather``: the
    embedding lookup, which streams at ``gather_efficiency`` of the achievable bandwidth.
    """
    tr = hw.traits
    t_compute = flops / (hw.peak_flops * hw.matmul_efficiency)
    fixed = tr.elementwise_fixed_s
    neutral = tr.rowwise_efficiency == 1.0 and not tr.rowwise_latency_s
    if row is None or (neutral and row.passes == 1):
        stream = tr.l2_gain if nbytes <= tr.l2_resident_bytes else 1.0
        if gather:
            stream = tr.gather_efficiency
        return _priced(t_compute, round(nbytes), flops, hw, stream=stream, fixed_s=fixed)
    streamed = nbytes + (row.passes - 1) * row.tensor_bytes
    t_memory = streamed / (hw.hbm_achievable_Bps * tr.rowwise_efficiency)
    if tr.rowwise_latency_s and row.tensor_bytes:
        waves = -(-row.rows // (hw.sm_count * ROW_CTAS_PER_SM))
        accesses = streamed / row.tensor_bytes  # element reads and writes per element
        trips = -(-row.width // ROW_ELEMENTS_PER_TRIP) * accesses
        t_memory = max(t_memory, waves * trips * tr.rowwise_latency_s)
    return _priced(t_compute, round(nbytes), flops, hw, fixed_s=fixed, t_memory=t_memory)
