"""GEMM cost as a tiled tensor-core kernel runs it: roofline plus tile and wave quantisation,
with the kernel (tile) chosen per shape as cuBLAS/cuBLASLt heuristics and CUTLASS profilers do.

``[m, k] @ [k, n]`` is cut into output tiles of ``tile_m x tile_n``; each SM computes one
tile at a time (CUTLASS/cuBLAS "one CTA per SM"), so the kernel runs in
``waves = ceil(tiles / SMs)`` rounds and a partial last wave leaves SMs idle. A tile's time is
the longer of its math and of feeding its operand tiles from the L2 cache::

    math    = 2 * tile_m * tile_n * k_slice / (peak * tile_efficiency / SMs)
    feed    = (tile_m * A bytes / cluster_n + tile_n * B bytes / cluster_m) * k_slice
              / (L2 bandwidth / SMs)
    compute = waves * max(math, feed)
    memory  = (A + W + C bytes) / (HBM peak * HBM efficiency)
    time    = max(compute, memory) + fixed per-kernel cost

The feed term is why a smaller tile is slower per FLOP: it re-reads more operand bytes per
FLOP (``1/tile_n + 1/tile_m``), and Hopper's TMA multicast shares a B tile over the
``cluster_m`` CTAs of a cluster along M (an A tile over ``cluster_n`` along N). The library
has a short list of kernels per architecture (calibration ``tiles``) and takes the one of
least modelled time for the shape (:func:`choose`); the first is the tile the GPU's best
matmul rate was measured with, whose feed does not bind.

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
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

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


@dataclass(frozen=True, slots=True)
class Feed:
    """What a tile's operand feed is priced with: the L2 bandwidth shared by all SMs (0: no
    feed bound) and the bytes of one A (activation) and one B (weight) element."""

    l2_Bps: float = 0.0
    a_bytes: float = 2.0
    w_bytes: float = 2.0


NO_FEED = Feed()


def tile_seconds(
    m: int,
    n: int,
    k: int,
    tile: TileShape,
    *,
    peak_flops: float,
    sm_count: int,
    split_k_min: int,
    feed: Feed = NO_FEED,
) -> float:
    """Tensor-core time of the GEMM run with one kernel, ``tile``: waves of the longer of a
    tile's math and its operand feed."""
    p = plan(m, n, k, tile, sm_count, split_k_min)
    if tile.stripe_k:  # K blocks of every tile spread evenly over the SMs
        blocks = p.tiles * math.ceil(k / tile.stripe_k)
        p = TilePlan(p.tile_m, p.tile_n, p.tiles, k, k / math.ceil(k / tile.stripe_k), 1)
        rounds = math.ceil(blocks / sm_count - 1e-9)
        p = TilePlan(p.tile_m, p.tile_n, p.tiles, k, p.k_slice, max(rounds, 1))
    per_tile = 2.0 * p.tile_m * p.tile_n * p.k_slice / (peak_flops / sm_count)
    if feed.l2_Bps > 0:
        # bytes of A and B per unit of K, less what cluster multicast shares; the rows of a
        # tile beyond M (padding) are masked (TMA's out-of-bounds fill, a masked load) and
        # move no bytes
        a = min(m, p.tile_m) * feed.a_bytes / tile.cluster_n
        operand = a + p.tile_n * feed.w_bytes / tile.cluster_m
        per_tile = max(per_tile, operand * p.k_slice / (feed.l2_Bps / sm_count))
    return p.waves * per_tile


@lru_cache(maxsize=1 << 16)
def choose(
    m: int,
    n: int,
    k: int,
    tiles: tuple[TileShape, ...],
    *,
    peak_flops: float,
    sm_count: int,
    split_k_min: int,
    feed: Feed = NO_FEED,
) -> tuple[TileShape, float]:
    """The kernel of ``tiles`` the library picks for the shape, the least modelled time (the
    first of equal times), and that time."""
    best, best_s = tiles[0], math.inf
    for tile in tiles:
        s = tile_seconds(m, n, k, tile, peak_flops=peak_flops, sm_count=sm_count,
                         split_k_min=split_k_min, feed=feed)  # fmt: skip
        if s < best_s:
            best, best_s = tile, s
    return best, best_s


def compute_seconds(
    m: int,
    n: int,
    k: int,
    *,
    peak_flops: float,
    tile: Sequence[TileShape] | TileShape | None,
    sm_count: int,
    split_k_min: int,
    feed: Feed = NO_FEED,
) -> float:
    """Tensor-core time of the GEMM: ``2mnk / peak`` untiled, else that of the best of the
    candidate kernels ``tile`` (one :class:`TileShape` or several).

    ``peak_flops`` is the achievable rate of the whole GPU (peak x full-wave efficiency).
    """
    if tile is None:
        return 2.0 * m * n * k / peak_flops
    tiles = (tile,) if isinstance(tile, TileShape) else tuple(tile)
    return choose(m, n, k, tiles, peak_flops=peak_flops, sm_count=sm_count,
                  split_k_min=split_k_min, feed=feed)[1]  # fmt: skip
