"""The kernels part of the calibration object: GEMM tiles and how kernels are priced.

Filled from ``data/kernels.yaml`` (and an engine profile's overrides of it) by
:mod:`tpsim.calibration.loader`; :meth:`Kernels.ideal` is its part of ``--ideal``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class TileShape:
    """Output tile of one GEMM kernel's CTA, the smallest tile height the tensor-core MMA
    allows, and the thread-block cluster the operand tiles are multicast over (Hopper TMA
    multicast: ``cluster_m`` CTAs along M share one B tile, ``cluster_n`` along N one A tile;
    1 x 1 before Hopper)."""

    m: int
    n: int
    mma_m: int
    cluster_m: int = 1
    cluster_n: int = 1
    #: the kernel splits its tiles' K loops into blocks of this depth and spreads them
    #: evenly over the SMs (Marlin's striped partition, a global reduction joining the
    #: pieces of a tile): no wave quantisation beyond one block (0: one CTA per tile)
    stripe_k: int = 0


@dataclass(frozen=True)
class Kernels:
    """How kernels are priced beyond each GPU's own datasheet and measured figures."""

    attention_efficiency: float  # FlashAttention's fraction of the 16-bit peak
    attention_fp8_efficiency: float  # FlashAttention-3's fraction of the fp8 peak
    attention_block_m: int  # query rows per attention CTA
    split_k_min: int  # smallest K slice a split-K GEMM gives one CTA
    #: By GPU architecture ("default" for any other): the GEMM kernels the library chooses
    #: among per shape, the first the one the GPU's best matmul rate was measured with.
    tiles: Mapping[str, tuple[TileShape, ...]]
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
    #: per architecture, an attention call's fixed time where the engine runs another
    #: kernel there (missing: attention_fixed_s)
    attention_fixed_by_arch_s: Mapping[str, float] = field(default_factory=dict)
    attention_stream_efficiency: float = 1.0  # share of achievable HBM a decode KV read gets
    attention_split_kv: bool = False  # a prefill grid under one wave splits the KV over SMs
    attention_append_efficiency: float = 0.0  # >0: each CTA appends the new K/V (FA2 kvcache)
    attention_heads_per_cta: int = 0  # >0: query heads a decode CTA covers (GQA re-reads)
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
    #: Per architecture: the bytes per FLOP of the dense 16-bit peak that the L2 cache feeds
    #: the SMs' operand tiles (missing: no such bound).
    l2_bytes_per_flop: Mapping[str, float] = field(default_factory=dict)

    def latency_scale_of(self, arch: str) -> float:
        return self.latency_scale.get(arch, self.latency_scale.get("default", 1.0))

    def attention_fixed_of(self, arch: str) -> float | None:
        """An attention call's fixed time on ``arch`` before ``latency_scale`` (None: the
        GPU's kernel_overhead)."""
        return self.attention_fixed_by_arch_s.get(arch, self.attention_fixed_s)

    def tile(self, arch: str) -> tuple[TileShape, ...] | None:
        """The candidate GEMM tiles of a GPU architecture, or None when kernels are not
        quantised."""
        if not self.quantised:
            return None
        return self.tiles.get(arch) or self.tiles["default"]

    def l2_bytes_per_flop_of(self, arch: str) -> float:
        """The L2 operand feed of ``arch`` in bytes per peak FLOP; 0: unbounded."""
        return self.l2_bytes_per_flop.get(arch, self.l2_bytes_per_flop.get("default", 0.0))

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
            attention_fixed_by_arch_s={},
            attention_stream_efficiency=1.0,
            attention_split_kv=False,
            attention_append_efficiency=0.0,
            attention_heads_per_cta=0,
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
