"""Kernel cost models: pure functions from shapes to seconds.

Every kernel is priced by its roofline, ``max(flops / achievable FLOP/s, bytes / achievable
HBM B/s)``, plus a fixed per-kernel cost; in ideal mode the efficiencies are 1 and the
fixed cost is 0, so a lone GEMM equals ``max(2mnk / peak, bytes / hbm)`` exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from topologies.gpus import GPUSpec

#: FlashAttention forward reaches about 73% of the dense peak on A100 (FlashAttention-2,
#: Dao 2023, section 4.1: "up to 73% of the theoretical maximum FLOPs/s") and about 75% on
#: H100 (FlashAttention-3, Shah et al. 2024: 740 of 989 TFLOP/s bf16). Attention kernels
#: never beat the GPU's own best matmul fraction, so the smaller of the two is used.
ATTENTION_EFFICIENCY = 0.73


@dataclass(frozen=True, slots=True)
class Hardware:
    """The figures one GPU's kernels are priced with (efficiencies already chosen)."""

    name: str
    peak_flops: float  # dense peak of the compute dtype, FLOP/s
    matmul_efficiency: float
    attention_efficiency: float
    hbm_Bps: float
    hbm_efficiency: float
    kernel_overhead_s: float

    @property
    def matmul_flops(self) -> float:
        return self.peak_flops * self.matmul_efficiency

    @property
    def hbm_achievable_Bps(self) -> float:
        return self.hbm_Bps * self.hbm_efficiency


def hardware_for(gpu: GPUSpec, dtype: str, *, ideal: bool = False) -> Hardware:
    """The cost-model view of ``gpu`` running ``dtype`` math (fp8 uses the fp8 peak if any)."""
    peak = gpu.fp8_flops if dtype == "fp8" and gpu.fp8_flops else gpu.bf16_flops
    if ideal:
        return Hardware(gpu.name, peak, 1.0, 1.0, gpu.hbm_Bps, 1.0, 0.0)
    return Hardware(
        name=gpu.name,
        peak_flops=peak,
        matmul_efficiency=gpu.matmul_efficiency,
        attention_efficiency=min(gpu.matmul_efficiency, ATTENTION_EFFICIENCY),
        hbm_Bps=gpu.hbm_Bps,
        hbm_efficiency=gpu.hbm_efficiency,
        kernel_overhead_s=gpu.kernel_overhead_s,
    )


@dataclass(frozen=True, slots=True)
class KernelCost:
    seconds: float
    flops: float
    bytes: int
    category: str  # "compute" if the FLOP term binds, else "memory"


def roofline(flops: float, nbytes: int, hw: Hardware, *, efficiency: float) -> KernelCost:
    """``max(flops / (peak * efficiency), bytes / (hbm * hbm_efficiency)) + fixed cost``."""
    t_compute = flops / (hw.peak_flops * efficiency)
    t_memory = nbytes / hw.hbm_achievable_Bps
    category = "compute" if t_compute > t_memory else "memory"
    return KernelCost(max(t_compute, t_memory) + hw.kernel_overhead_s, flops, nbytes, category)


def gemm(m: int, n: int, k: int, hw: Hardware, *, act_bytes: float, w_bytes: float) -> KernelCost:
    """``[m, k] @ [k, n]``: activations in and out at ``act_bytes``, weights at ``w_bytes``."""
    flops = 2.0 * m * n * k
    nbytes = round(m * k * act_bytes + k * n * w_bytes + m * n * act_bytes)
    return roofline(flops, nbytes, hw, efficiency=hw.matmul_efficiency)


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
    write O once (tiles stay on chip), plus writing K and V into the cache.
    """
    flops = 4.0 * batch * heads * head_dim * seq * (seq + 1) / 2
    tokens = batch * seq
    qkvo = tokens * (2 * heads + 2 * kv_heads) * head_dim * act_bytes
    cache_write = tokens * 2 * kv_heads * head_dim * kv_bytes
    return roofline(flops, round(qkvo + cache_write), hw, efficiency=hw.attention_efficiency)


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
    return roofline(flops, round(cache_read + q_o), hw, efficiency=hw.attention_efficiency)


def elementwise(nbytes: float, flops: float, hw: Hardware) -> KernelCost:
    """A bandwidth-bound kernel (norm, residual add, activation, rotary, embedding gather)."""
    return roofline(flops, round(nbytes), hw, efficiency=hw.matmul_efficiency)
