"""GEMM cost as a tiled tensor-core kernel runs it: roofline plus tile and wave quantisation.

``[m, k] @ [k, n]`` is cut into output tiles of ``tile_m x tile_n``; each SM computes one
tile at a time (CUTLASS/cuBLAS "one CTA per SM"), so the kernel runs in
``waves = ceil(tiles / SMs)`` rounds and a partial last wave leaves SMs idle::

    compute = waves * (2 * tile_m * tile_n * k_slice) / (peak * tile_efficiency / SMs)
    memory  = (A + W + C bytes) / (HBM peak * HBM efficiency)
    time    = max(compute, memory) + fixed per-kernel cost

``memory`` reads the whole weight matrix once (the L2 serves the re-reads of a tile row), so a
small-M (decode) GEMM is weight-read bound. ``tile_m`` shrinks with small M down to the MMA
instruction's M (a GEMV-like kernel does not pad one token to 128 rows). A GEMM with fewer
tiles than SMs splits K over the idle SMs (cuBLAS/CUTLASS split-K) as long as each slice keeps
at least ``SPLIT_K_MIN`` of K; at tiles = SMs + 1 there is no split and the second wave
holds a single tile, which is the wave-quantisation jump. In ideal mode (``tile is None``)
compute is ``2mnk / peak`` exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TileShape:
    """Output tile of one CTA, and the smallest tile height the tensor-core MMA allows."""

    m: int
    n: int
    mma_m: int


#: CUTLASS default threadblock tile on Ampere/Ada, 128x128 (cutlass/gemm/device/
#: default_gemm_configuration.h, Sm80: ThreadblockShape<128, 128, 32>); the smallest useful tile
#: height is the mma.sync instruction's M = 16 (PTX ISA, mma.m16n8k16).
AMPERE_TILE = TileShape(128, 128, 16)
#: CUTLASS's Hopper warp-specialised kernels use 128x256 output tiles (CUTLASS 3 profiler's
#: fastest bf16 configs, e.g. 128x256x64 for sm90); wgmma's M is 64 (PTX ISA, wgmma.m64nNk16),
#: so no tile is shorter than 64 rows. Blackwell is given the same shape (estimate).
HOPPER_TILE = TileShape(128, 256, 64)
#: AMD MI300X: hipBLASLt's large bf16 macro tile is 256x256 (estimate from its tuned
#: configurations); MFMA 16x16x16 sets the smallest height.
CDNA3_TILE = TileShape(256, 256, 16)

TILES: dict[str, TileShape] = {
    "a100-sxm-80gb": AMPERE_TILE,
    "l40s": AMPERE_TILE,
    "rtx-4090": AMPERE_TILE,
    "h100-sxm": HOPPER_TILE,
    "h100-pcie": HOPPER_TILE,
    "h200-sxm": HOPPER_TILE,
    "b200": HOPPER_TILE,
    "mi300x": CDNA3_TILE,
}
DEFAULT_TILE = AMPERE_TILE  # GPUs from topology files

#: Smallest K slice a split-K kernel gives one CTA: a few 32-64 deep k-blocks so the
#: multi-stage mainloop still pipelines (estimate; CUTLASS's split-K examples use slices of
#: several hundred).
SPLIT_K_MIN = 256


def tile_for(gpu_name: str) -> TileShape:
    return TILES.get(gpu_name, DEFAULT_TILE)


def tile_rows(m: int, tile: TileShape) -> int:
    """Tile height for ``m`` rows: the smallest power-of-two multiple of the MMA's M that
    covers ``m``, at most ``tile.m``."""
    rows = tile.mma_m
    while rows < m and rows < tile.m:
        rows *= 2
    return min(rows, tile.m)


@dataclass(frozen=True, slots=True)
class TilePlan:
    tile_m: int
    tile_n: int
    tiles: int
    k: int
    k_slice: float  # K per CTA (k / split-K factor)
    waves: int

    @property
    def split_k(self) -> float:
        return self.k / self.k_slice


def plan(m: int, n: int, k: int, tile: TileShape, sm_count: int) -> TilePlan:
    """How the kernel covers ``[m, n]`` with tiles, split-K and waves on ``sm_count`` SMs."""
    tm = tile_rows(m, tile)
    tiles = math.ceil(m / tm) * math.ceil(n / tile.n)
    spare = sm_count // tiles  # CTAs per tile one wave can hold (0 if over a wave)
    # split K over the idle SMs, keeping at least SPLIT_K_MIN per slice (monotone in k)
    k_slice = max(k / spare, min(k, SPLIT_K_MIN)) if spare >= 2 else float(k)
    split = k / k_slice
    waves = math.ceil(tiles * split / sm_count - 1e-9)
    return TilePlan(tm, tile.n, tiles, k, k_slice, max(waves, 1))


def compute_seconds(
    m: int, n: int, k: int, *, peak_flops: float, tile: TileShape | None, sm_count: int
) -> float:
    """Tensor-core time of the GEMM: ``2mnk / peak`` untiled, else waves of padded tiles.

    ``peak_flops`` is the achievable rate of the whole GPU (peak x full-wave efficiency).
    """
    if tile is None:
        return 2.0 * m * n * k / peak_flops
    p = plan(m, n, k, tile, sm_count)
    per_tile = 2.0 * p.tile_m * p.tile_n * p.k_slice
    return p.waves * per_tile / (peak_flops / sm_count)
