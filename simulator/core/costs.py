"""Kernel cost models: pure functions from shapes to seconds.

Every kernel is priced by its roofline, ``max(flops / achievable FLOP/s, bytes / achievable
HBM B/s)``, plus a fixed per-kernel cost. The efficiencies, tiles and fixed costs come from
the GPU and the calibration (:class:`tpsim.calibration.Kernels`); with the ideal calibration
they are 1, none and 0, so a lone GEMM equals ``max(2mnk / peak, bytes / hbm)`` exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpsim import calibration
from tpsim.calibration import Kernels, TileShape
from tpsim.core.gemm import compute_seconds
from tpsim.topologies.gpus import GPUSpec


@dataclass(frozen=True, slots=True)
class Hardware:
    """The figures one GPU's kernels are priced with (efficiencies already chosen).

    ``tile is None`` means no tile/wave quantisation (the ideal calibration).
    """

    name: str
    peak_flops: float  # dense peak of the linear layers' math dtype, FLOP/s
    matmul_efficiency: float  # achievable fraction of peak in a full wave of GEMM tiles
    attention_efficiency: float
    hbm_Bps: float
    hbm_efficiency: float
    kernel_overhead_s: float
    sm_count: int = 1
    tile: TileShape | None = None
    attention_peak_flops: float = 0.0  # 0: same as peak_flops
    peak16_flops: float = 0.0  # 16-bit peak for GEMMs kept in 16-bit (lm_head); 0: peak_flops
    fp8_tensor_cores: bool = False
    split_k_min: int = 1  # smallest K slice a split-K GEMM gives one CTA
    attention_block_m: int = 1  # query rows per attention CTA

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

    fp8 uses the fp8 peak where the GPU has fp8 tensor cores. An A100 has none: an fp8 model
    there computes at the bf16 peak (weight-only fp8, see ``config.Precision``) and only its
    weight bytes shrink. Attention runs at the fp8 peak only for an fp8 KV cache on a GPU with
    fp8 tensor cores (FlashAttention-3), else at the 16-bit peak. ``kernels``: the shipped
    calibration's by default. The GPU's best achievable
    matmul / peak (MAMF: a shape whose last wave is full) is the efficiency of a full wave of
    tiles; fp8 GEMMs get the same fraction of the fp8 peak (no fp8 measurement). Attention
    never beats the GPU's own matmul fraction.
    """
    fp8 = gpu.fp8_flops is not None
    peak = gpu.fp8_flops if dtype == "fp8" and gpu.fp8_flops else gpu.bf16_flops
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
        attention_peak_flops=attn_peak,
        peak16_flops=gpu.bf16_flops,
        fp8_tensor_cores=fp8,
        split_k_min=k.split_k_min,
        attention_block_m=k.attention_block_m,
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


def _priced(t_compute: float, nbytes: int, flops: float, hw: Hardware) -> KernelCost:
    t_memory = nbytes / hw.hbm_achievable_Bps
    category = "compute" if t_compute > t_memory else "memory"
    return KernelCost(max(t_compute, t_memory) + hw.kernel_overhead_s, flops, nbytes, category)


def roofline(flops: float, nbytes: int, hw: Hardware, *, efficiency: float) -> KernelCost:
    """``max(flops / (peak * efficiency), bytes / (hbm * hbm_efficiency)) + fixed cost``."""
    return _priced(flops / (hw.peak_flops * efficiency), nbytes, flops, hw)


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
    ``out_bytes`` (default ``act_bytes``); tiled and wave-quantised (tpsim.core.gemm)."""
    out_b = act_bytes if out_bytes is None else out_bytes
    flops = 2.0 * m * n * k
    nbytes = round(m * k * act_bytes + k * n * w_bytes + m * n * out_b)
    t = compute_seconds(
        m,
        n,
        k,
        peak_flops=hw.matmul_flops,
        tile=hw.tile,
        sm_count=hw.sm_count,
        split_k_min=hw.split_k_min,
    )
    return _priced(t, nbytes, flops, hw)


def attention_prefill(
    batch: int,
    seq: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    hw: Hardware,
    *,
    act_bytes: float,
    kv_bytes: float,
) -> KernelCost:
    """Causal FlashAttention over a prompt: QK^T and PV over the lower triangle.

    FLOPs: ``4 * batch * heads * head_dim * seq * (seq + 1) / 2``. Bytes: read Q, K, V and
    write O once (tiles stay on chip), plus writing K and V into the cache. One CTA per
    (sequence, head, 128 queries): with few heads per rank and short prompts there are fewer
    CTAs than SMs, and the compute term is scaled by the waves' fill (when quantised).
    """
    flops = 4.0 * batch * heads * head_dim * seq * (seq + 1) / 2
    tokens = batch * seq
    qkvo = tokens * (2 * heads + 2 * kv_heads) * head_dim * act_bytes
    cache_write = tokens * 2 * kv_heads * head_dim * kv_bytes
    t = flops / (_attention_peak(hw) * hw.attention_efficiency)
    if hw.tile is not None:
        ctas = batch * heads * -(-seq // hw.attention_block_m)
        t *= -(-ctas // hw.sm_count) * hw.sm_count / ctas
    return _priced(t, round(qkvo + cache_write), flops, hw)


def attention_decode(
    batch: int,
    context: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    hw: Hardware,
    *,
    act_bytes: float,
    kv_bytes: float,
) -> KernelCost:
    """One new token per sequence attending over ``context`` cached keys and values.

    FLOPs: ``4 * batch * heads * head_dim * context``. Bytes: the K and V cache of every
    sequence (``batch * context * 2 * kv_heads * head_dim``) plus Q in and O out.
    """
    flops = 4.0 * batch * heads * head_dim * context
    cache_read = batch * context * 2 * kv_heads * head_dim * kv_bytes
    q_o = batch * 2 * heads * head_dim * act_bytes
    t = flops / (_attention_peak(hw) * hw.attention_efficiency)
    return _priced(t, round(cache_read + q_o), flops, hw)


def _attention_peak(hw: Hardware) -> float:
    return hw.attention_peak_flops or hw.peak_flops


def elementwise(nbytes: float, flops: float, hw: Hardware) -> KernelCost:
    """A bandwidth-bound kernel (norm, residual add, activation, rotary, embedding gather).

    Its FLOPs are priced at the tensor-core peak (the napkin formula); they never bind
    with real efficiencies, where the bytes term is 10-100x larger.
    """
    return roofline(flops, round(nbytes), hw, efficiency=hw.matmul_efficiency)
