"""Read the calibration data files (YAML beside this module) into frozen objects.

What an entry is and how its numbers and units are read: :mod:`tpsim.calibration.entries`;
``nccl.yaml``: :mod:`tpsim.calibration.loader_nccl`. A malformed file is a
:class:`CalibrationError` naming the file, the field and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from tpsim.calibration.entries import (
    CalibrationError,
    _flag,
    _nonnegative_us,
    _numbers,
    _table,
    entry,
    number,
    read,
    scale,
)
from tpsim.calibration.loader_moe import moe_keys
from tpsim.calibration.loader_nccl import _collectives
from tpsim.calibration.model import (
    Calibration,
    Coordination,
    Engine,
    HostCost,
    LaunchCost,
    Links,
    Memory,
)
from tpsim.calibration.model_kernels import Kernels, TileShape


def _kernels(d: Mapping[str, Any]) -> Kernels:
    w = "kernels.yaml"
    tiles = {str(arch): _tile_candidates(shapes, f"{w}.tiles.{arch}")
             for arch, shapes in _table(entry(d, "tiles", w), f"{w}.tiles").items()}  # fmt: skip
    if "default" not in tiles:
        raise CalibrationError(f"{w}.tiles: needs a 'default' tile")
    archs = set(tiles) - {"default"}  # the GPU architectures the calibration knows

    def share(key: str, *, zero: bool = False) -> float:
        x = number(entry(d, key, w), f"{w}.{key}")
        if not (x >= 0 if zero else x > 0) or x > 2:
            raise CalibrationError(f"{w}.{key}={x!r}: must be a share of the rate, in (0, 2]")
        return float(x)

    def fixed(key: str) -> float | None:
        value = entry(d, key, w)
        return None if value is None else _nonnegative_us(value, f"{w}.{key}")

    split_kv, passes = entry(d, "attention_split_kv", w), entry(d, "norm_passes", w)
    _flag(split_kv, f"{w}.attention_split_kv")
    if isinstance(passes, bool) or passes not in (1, 2):
        raise CalibrationError(f"{w}.norm_passes={passes!r}: must be 1 or 2")
    return Kernels(
        attention_efficiency=number(entry(d, "attention_efficiency", w), "attention_efficiency"),
        attention_fp8_efficiency=number(
            entry(d, "attention_fp8_efficiency", w), "attention_fp8_efficiency"
        ),
        attention_block_m=int(entry(d, "attention_block_m", w)),
        split_k_min=int(entry(d, "split_k_min", w)),
        tiles=tiles,
        gemm_fixed_s=fixed("gemm_fixed_us"),
        matmul_fraction=share("matmul_fraction"),
        gemm_stream_efficiency=share("gemm_stream_efficiency"),
        attention_fixed_s=fixed("attention_fixed_us"),
        attention_fixed_by_arch_s=_by_arch(d, "attention_fixed_by_arch_us", archs),
        attention_stream_efficiency=share("attention_stream_efficiency"),
        attention_split_kv=split_kv,
        attention_append_efficiency=share("attention_append_efficiency", zero=True),
        attention_heads_per_cta=_heads_per_cta(entry(d, "attention_heads_per_cta", w)),
        elementwise_fixed_s=fixed("elementwise_fixed_us"),
        rowwise_efficiency=share("rowwise_efficiency"),
        rowwise_latency_s=_nonnegative_us(entry(d, "rowwise_latency_us", w), "rowwise_latency"),
        norm_passes=passes,
        gather_efficiency=share("gather_efficiency"),
        l2_resident_bytes=round(
            number(entry(d, "l2_resident_MiB", w), f"{w}.l2_resident_MiB") * 2**20
        ),
        l2_gain=share("l2_gain"),
        latency_scale=_latency_scale(entry(d, "latency_scale", w), archs),
        l2_bytes_per_flop=_l2_feed(entry(d, "l2_bytes_per_flop", w), f"{w}.l2_bytes_per_flop"),
        matmul_efficiency_scale=_scale(d, "matmul_efficiency_scale", w),
        attention_efficiency_scale=_scale(d, "attention_efficiency_scale", w),
        hbm_efficiency_scale=_scale(d, "hbm_efficiency_scale", w),
    )


#: The largest factor a profile may scale the fixed times by (a GPU's floors are within a
#: few times of another's; a thousandfold one is a slip).
MAX_LATENCY_SCALE = 10.0


def _latency_scale(value: object, archs: set[str]) -> dict[str, float]:
    """The fixed-time factor by GPU architecture (``default`` for the others): each a known
    architecture, each in [0, MAX_LATENCY_SCALE] (0: no fixed times, the ideal engine's)."""
    w = "kernels.yaml.latency_scale"
    out = _numbers(value, w)
    for arch, x in out.items():
        if arch != "default" and arch not in archs:
            known = ", ".join(["default", *sorted(archs)])
            raise CalibrationError(f"{w}: unknown architecture {arch!r} (known: {known})")
        if not 0 <= x <= MAX_LATENCY_SCALE:
            raise CalibrationError(f"{w}.{arch}={x!r}: must be from 0 to {MAX_LATENCY_SCALE:g}")
    return out


def _heads_per_cta(value: object) -> int:
    """0 (each KV head read once) or a power of two up to 64."""
    for n in (0, 1, 2, 4, 8, 16, 32, 64):
        if value == n and not isinstance(value, bool):
            return n
    raise CalibrationError(
        f"kernels.yaml.attention_heads_per_cta={value!r}: must be 0 or a power of two up to 64"
    )


def _by_arch(d: Mapping[str, Any], key: str, archs: set[str]) -> dict[str, float]:
    """A kernels.yaml table of times (us) by GPU architecture, in seconds."""
    w = "kernels.yaml"
    out = {}
    for arch, us in _table(entry(d, key, w), f"{w}.{key}").items():
        if arch not in archs:
            raise CalibrationError(
                f"{w}.{key}: unknown architecture {arch!r} (known: {', '.join(sorted(archs))})"
            )
        out[str(arch)] = _nonnegative_us(us, f"{w}.{key}.{arch}")
    return out


def _tile_candidates(shapes: Any, where: str) -> tuple[TileShape, ...]:
    """An architecture's GEMM tiles: a list of ``[tile_m, tile_n, mma_m]`` or ``[tile_m,
    tile_n, mma_m, cluster_m, cluster_n]``, the first the reference tile."""
    bad = f"{where}={shapes!r}: must be a list of [tile_m, tile_n, mma_m(, cluster_m, cluster_n)]"
    if not isinstance(shapes, list) or not shapes:
        raise CalibrationError(bad)
    out = []
    for shape in shapes:
        if not (
            isinstance(shape, list)
            and len(shape) in (3, 5)
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in shape)
        ):
            raise CalibrationError(bad)
        if shape[2] > shape[0]:
            raise CalibrationError(f"{where}: {shape!r} has mma_m above tile_m")
        out.append(TileShape(*shape))
    return tuple(out)


def _l2_feed(value: Any, where: str) -> dict[str, float]:
    feeds = _numbers(value, where)
    for arch, x in feeds.items():
        if not x > 0:
            raise CalibrationError(f"{where}.{arch}={x!r}: must be positive")
    return feeds


def _scale(d: Mapping[str, Any], key: str, where: str) -> float:
    x = number(entry(d, key, where), f"{where}.{key}")
    if x <= 0:
        raise CalibrationError(f"{where}.{key}={x!r}: must be positive")
    return x


def _launch(d: Mapping[str, Any]) -> dict[str, LaunchCost]:
    w = "launch.yaml"
    out = {}
    for mode, costs in _table(entry(d, "modes", w), f"{w}.modes").items():
        f = f"{w}.modes.{mode}"
        us = _numbers(costs, f, -6)
        keys = ("replay_us", "kernel_us", "collective_us", "gpu_gap_us")
        if set(us) != set(keys):
            raise CalibrationError(f"{f}: needs exactly {', '.join(keys)}")
        out[str(mode)] = LaunchCost(*(us[k] for k in keys))
    return out


def _links(d: Mapping[str, Any]) -> Links:
    w = "links.yaml"
    eff = _table(d.get("efficiency"), f"{w}.efficiency")
    return Links(
        nvlink_efficiency=_numbers(entry(eff, "nvlink", w), f"{w}.efficiency.nvlink"),
        efficiency=_numbers(entry(eff, "other", w), f"{w}.efficiency.other"),
        default_efficiency=number(entry(eff, "default", w), "links.efficiency.default"),
        bridge_efficiency=_numbers(entry(eff, "nvlink_bridge", w), f"{w}.efficiency.nvlink_bridge"),
    )


def _memory(d: Mapping[str, Any]) -> Memory:
    w = "memory.yaml"
    return Memory(
        usable_fraction=number(entry(d, "usable_fraction", w), "usable_fraction"),
        runtime_bytes=round(number(entry(d, "runtime_GiB", w), "runtime_GiB") * 2**30),
    )


def _engine(d: Mapping[str, Any], name: str) -> Engine:
    w = "engine.yaml"
    phases = entry(d, "graph_phases", w)
    if not isinstance(phases, list) or not set(phases) <= {"decode", "prefill"}:
        raise CalibrationError(f"{w}.graph_phases={phases!r}: a list of decode, prefill")
    step = _table(entry(d, "step_host_us", w), f"{w}.step_host_us")
    pieces = ("schedule", "prepare_inputs", "sample", "process_outputs")
    if set(step) != set(pieces):
        raise CalibrationError(f"{w}.step_host_us: needs exactly {', '.join(pieces)}")
    overlap = number(entry(d, "host_overlap", w), f"{w}.host_overlap")
    if not 0 <= overlap <= 1:
        raise CalibrationError(f"{w}.host_overlap={overlap!r}: must be between 0 and 1")
    allreduce = entry(d, "allreduce", w)
    if allreduce not in ("auto", "nccl"):
        raise CalibrationError(f"{w}.allreduce={allreduce!r}: must be auto or nccl")
    max_tokens = entry(d, "graph_max_tokens", w)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise CalibrationError(f"{w}.graph_max_tokens={max_tokens!r}: a non-negative integer")
    jitter = number(entry(d, "host_jitter_cv", w), f"{w}.host_jitter_cv")
    if not 0 <= jitter <= 2:
        raise CalibrationError(f"{w}.host_jitter_cv={jitter!r}: must be between 0 and 2")
    fusion = entry(d, "allreduce_fusion", w)
    if fusion not in ALLREDUCE_FUSION:
        choices = ", ".join(ALLREDUCE_FUSION)
        raise CalibrationError(f"{w}.allreduce_fusion={fusion!r}: must be one of {choices}")
    compiled = entry(d, "compiled", w)
    if not isinstance(compiled, bool):
        raise CalibrationError(f"{w}.compiled={compiled!r}: must be true or false")
    sync = entry(d, "host_overlap_sync", w)
    if sync is not None:
        sync = number(sync, f"{w}.host_overlap_sync")
        if not 0 <= sync <= 1:
            raise CalibrationError(f"{w}.host_overlap_sync={sync!r}: must be between 0 and 1")
    pdl = entry(d, "pdl_archs", w)
    if not isinstance(pdl, list) or not all(isinstance(a, str) and a for a in pdl):
        raise CalibrationError(f"{w}.pdl_archs={pdl!r}: must be a list of GPU architectures")
    split = entry(d, "pipeline_split_tokens", w)
    if split is not None and (isinstance(split, bool) or not isinstance(split, int) or split < 1):
        raise CalibrationError(
            f"{w}.pipeline_split_tokens={split!r}: a positive number of tokens, or null"
        )
    first = entry(d, "first_token", w)
    if first not in FIRST_TOKEN:
        choices = ", ".join(FIRST_TOKEN)
        raise CalibrationError(f"{w}.first_token={first!r}: must be one of {choices}")
    kv = entry(d, "kv_cache_dtype", w)
    if kv not in KV_CACHE_DTYPE:
        choices = ", ".join(KV_CACHE_DTYPE)
        raise CalibrationError(f"{w}.kv_cache_dtype={kv!r}: must be one of {choices}")
    return Engine(
        name=name,
        graph_phases=tuple(p for p in ("decode", "prefill") if p in phases),
        graph_max_tokens=max_tokens,
        step_host={k: _host_cost(step[k], f"{w}.step_host_us.{k}") for k in pieces},
        host_overlap=overlap,
        layer_host_s=_nonnegative_us(entry(d, "layer_host_us", w), f"{w}.layer_host_us"),
        tp_coordination=_coordination(entry(d, "tp_coordination_us", w), f"{w}.tp_coordination_us"),
        allreduce=allreduce,
        collective_latency_s=_nonnegative_us(
            entry(d, "collective_latency_us", w), f"{w}.collective_latency_us"
        ),
        first_token=first,
        host_jitter_cv=jitter,
        allreduce_fusion=fusion,
        compiled=compiled,
        host_overlap_sync=sync,
        pdl_archs=tuple(pdl),
        pipeline_split_tokens=split,
        kv_cache_dtype=kv,
        **moe_keys(d, w),
    )


#: Where an engine's first token comes from (:attr:`Engine.first_token`).
FIRST_TOKEN = ("prefill", "decode_step")
#: What an engine's all-reduce kernel fuses (:attr:`Engine.allreduce_fusion`).
ALLREDUCE_FUSION = ("none", "residual_rms_norm")
#: Where an engine keeps the KV cache without ``--kv-dtype`` (:attr:`Engine.kv_cache_dtype`).
KV_CACHE_DTYPE = ("quantised", "activation")


def _coordination(triple: object, field: str) -> Coordination:
    if not isinstance(triple, list) or len(triple) != 3:
        raise CalibrationError(
            f"{field}={triple!r}: must be [base us, us per sequence, us per sequence per worker "
            "beyond the second]"
        )
    return Coordination(*(_nonnegative_us(x, field) for x in triple))


def _host_cost(pair: object, field: str) -> HostCost:
    if not isinstance(pair, list) or len(pair) != 2:
        raise CalibrationError(f"{field}={pair!r}: must be [base us, us per unit]")
    return HostCost(_nonnegative_us(pair[0], field), _nonnegative_us(pair[1], field))


#: The data files a calibration is built from (the hardware figures of gpus.yaml and of
#: links.yaml's bandwidths and latencies are read by :mod:`tpsim.calibration.hardware`).
FILES = ("kernels", "launch", "nccl", "deepep", "links", "memory", "engine", "scheduler")


def read_all() -> dict[str, dict[str, Any]]:
    """Every calibration data file, parsed, by name (without ``.yaml``)."""
    return {name: read(f"{name}.yaml") for name in FILES}


def build(data: Mapping[str, Mapping[str, Any]], name: str, engine: str = "ideal") -> Calibration:
    """A calibration from parsed data files (:func:`read_all`, maybe with an engine's
    overrides); ``engine`` names the engine profile it stands for."""
    kernels = _kernels(data["kernels"])
    collectives = _collectives(data["nccl"], data["deepep"])
    eng = _engine(data["engine"], engine)
    # the GPU architectures the calibration knows are those with tiles (kernels.yaml): a
    # table keyed by another (a typo, "hoper") would be silently unused
    archs = {str(a) for a in entry(data["kernels"], "tiles", "kernels.yaml")} - {"default"}
    known = ", ".join(["default", *sorted(archs)])
    for arch in collectives.host_enqueue:
        if arch != "default" and arch not in archs:
            raise CalibrationError(
                f"nccl.yaml.host_enqueue: unknown architecture {arch!r} (known: {known})"
            )
    for key, keyed in (("pdl_archs", eng.pdl_archs), ("mxfp4_expert_pad", eng.mxfp4_expert_pad)):
        for arch in keyed:
            if arch not in archs:
                raise CalibrationError(
                    f"engine.yaml.{key}: unknown architecture {arch!r} (known: "
                    f"{', '.join(sorted(archs))})"
                )
    return Calibration(
        name,
        kernels,
        _launch(data["launch"]),
        collectives,
        _links(data["links"]),
        _memory(data["memory"]),
        eng,
    )


@cache
def default() -> Calibration:
    """The shipped calibration: best achievable kernels and NCCL, as measured and published,
    and the ideal engine (no host work)."""
    return build(read_all(), "default")


#: What other modules import from here (the entry helpers are re-exported from entries.py).
__all__ = [
    "FILES",
    "CalibrationError",
    "build",
    "default",
    "entry",
    "number",
    "read",
    "read_all",
    "scale",
]
