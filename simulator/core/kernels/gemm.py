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
tiles than SMs splits K over the idle SMs (cuBLAS/CUTLASS split-K) as long as each slice
keeps at least ``split_k_min`` of K (calibration); at tiles = SMs + 1 there is no split and
the second wave holds a single tile, which is the wave-quantisation jump. Unquantised
(``tile is None``, the ideal calibration) compute is ``2mnk / peak`` exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpsim.calibration import TileShape


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


def plan(m: int, n: int, k: int, tile: TileShape, sm_count: int, split_k_min: int) -> TilePlan:
    """How the kernel covers ``[m, n]`` with tiles, split-K and waves on ``sm_count`` SMs."""
    tm = tile_rows(m, tile)
    tiles = math.ceil(m / tm) * math.ceil(n / tile.n)
    spare = sm_count // tiles  # CTAs per tile one wave can hold (0 if over a wave)
    # split K over the idle SMs, keeping at least split_k_min per slice (monotone in k)
    k_slice = max(k / spare, min(k, split_k_min)) if spare >= 2 else float(k)
    split = k / k_slice
    waves = math.ceil(tiles * split / sm_count - 1e-9)
    return TilePlan(tm, tile.n, tiles, k, k_slice, max(waves, 1))


def compute_seconds(
    m: int,
    n: int,
    k: int,
    *,
    peak_flops: float,
    tile: TileShape | None,
    sm_count: int,
    split_k_min: int,
) -> float:
    """Tensor-core time of the GEMM: ``2mnk / peak`` untiled, else waves of padded tiles.

    ``peak_flops`` is the achievable rate of the whole GPU (peak x full-wave efficiency).
    """
    if tile is None:
        return 2.0 * m * n * k / peak_flops
    p = plan(m, n, k, tile, sm_count, split_k_min)
    per_tile = 2.0 * p.tile_m * p.tile_n * p.k_slice
    return p.waves * per_tile / (peak_flops / sm_count)
