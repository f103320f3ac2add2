"""Read the calibration data files (YAML beside this module) into frozen objects.

Every constant in the files is an entry ``{value: ..., source: "..."}``: a number (or an exact
ratio written ``a/b``, as NCCL's tuning code writes them), a table of them, and where it
comes from. Units are those of the file's key (``_us``, ``_GBps``, ``_GiB``); conversion to SI
is exact in decimal (0.35 us is 0.35e-6 s, as the literal). A malformed file is a
:class:`CalibrationError` naming the file, the field and the value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from tpsim.calibration.bounded import show
from tpsim.calibration.model import (
    Calibration,
    Collectives,
    Coordination,
    CustomKernel,
    Engine,
    HostCost,
    Kernels,
    LaunchCost,
    Launcher,
    Links,
    Memory,
    PayloadShares,
    Protocol,
    TileShape,
)


class CalibrationError(ValueError):
    """A calibration data file or profile that cannot be read; one line naming the value."""


def scale(x: float, exponent: int) -> float:
    """``x * 10**exponent``, exact in decimal (0.35 us -> 0.35e-6 s, like the literal)."""
    return float(Decimal(repr(float(x))).scaleb(exponent))


def number(value: object, field: str) -> float:
    """A finite number, or an exact ratio ``"a/b"`` of two numbers."""
    if isinstance(value, str) and value.count("/") == 1:
        a, b = (number(_float_text(part, field), field) for part in value.split("/"))
        if b == 0:
            raise CalibrationError(f"{field}={value!r}: division by zero")
        return a / b
    huge = isinstance(value, int) and value.bit_length() > 1000  # no float holds it
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or huge
        or not math.isfinite(value)
    ):
        raise CalibrationError(f"{field}={show(value)}: must be a finite number or a ratio a/b")
    return value


def _float_text(text: str, field: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise CalibrationError(f"{field}={text!r}: not a number") from None


def measured(name: str = "") -> Path:
    """A published measurement shipped in ``measured/`` (or the folder itself): the data the
    calibration is checked against, each file with its source in its ``#`` header."""
    return Path(str(resources.files("tpsim.calibration").joinpath("measured", name)))


def tables(name: str = "") -> Path:
    """A measured kernel table shipped in ``tables/`` (or the folder itself): per-operator
    times converted from the files in ``measured/``, each with its sources in its header."""
    return Path(str(resources.files("tpsim.calibration").joinpath("tables", name)))


def read(name: str) -> dict[str, Any]:
    """The parsed data file ``name`` (e.g. ``"nccl.yaml"``) shipped with the package."""
    text = resources.files("tpsim.calibration").joinpath("data", name).read_text("utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise CalibrationError(f"{name}: must be a mapping of entries")
    return data


def entry(data: Mapping[str, Any], key: str, where: str) -> Any:
    """The ``value`` of entry ``key``, which must also cite its ``source``."""
    field = f"{where}.{key}"
    item = data.get(key)
    if not isinstance(item, dict) or set(item) != {"value", "source"}:
        raise CalibrationError(f"{field}: must be an entry with a value and a source")
    if not isinstance(item["source"], str) or not item["source"].strip():
        raise CalibrationError(f"{field}.source={item['source']!r}: must say where it comes from")
    return item["value"]


def _table(value: object, field: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise CalibrationError(f"{field}={value!r}: must be a table")
    return value


def _numbers(value: object, field: str, exponent: int = 0) -> dict[str, float]:
    return {
        str(k): scale(number(v, f"{field}.{k}"), exponent)
        if exponent
        else number(v, f"{field}.{k}")
        for k, v in _table(value, field).items()
    }


def _kernels(d: Mapping[str, Any]) -> Kernels:
    w = "kernels.yaml"
    tiles = {}
    for arch, shape in _table(entry(d, "tiles", w), f"{w}.tiles").items():
        if not (
            isinstance(shape, list) and len(shape) == 3 and all(isinstance(x, int) for x in shape)
        ):
            raise CalibrationError(f"{w}.tiles.{arch}={shape!r}: must be [tile_m, tile_n, mma_m]")
        tiles[str(arch)] = TileShape(*shape)
    if "default" not in tiles:
        raise CalibrationError(f"{w}.tiles: needs a 'default' tile")

    def share(key: str, *, zero: bool = False) -> float:
        x = number(entry(d, key, w), f"{w}.{key}")
        if not (x >= 0 if zero else x > 0) or x > 2:
            raise CalibrationError(f"{w}.{key}={x!r}: must be a share of the rate, in (0, 2]")
        return float(x)

    def fixed(key: str) -> float | None:
        value = entry(d, key, w)
        return None if value is None else _nonnegative_us(value, f"{w}.{key}")

    split_kv, passes = entry(d, "attention_split_kv", w), entry(d, "norm_passes", w)
    if not isinstance(split_kv, bool):
        raise CalibrationError(f"{w}.attention_split_kv={split_kv!r}: must be true or false")
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
        attention_stream_efficiency=share("attention_stream_efficiency"),
        attention_split_kv=split_kv,
        attention_append_efficiency=share("attention_append_efficiency", zero=True),
        elementwise_fixed_s=fixed("elementwise_fixed_us"),
        rowwise_efficiency=share("rowwise_efficiency"),
        rowwise_latency_s=_nonnegative_us(entry(d, "rowwise_latency_us", w), "rowwise_latency"),
        norm_passes=passes,
        gather_efficiency=share("gather_efficiency"),
        l2_resident_bytes=round(
            number(entry(d, "l2_resident_MiB", w), f"{w}.l2_resident_MiB") * 2**20
        ),
        l2_gain=share("l2_gain"),
        latency_scale=_numbers(entry(d, "latency_scale", w), f"{w}.latency_scale"),
        **{key: _scale(d, key, w) for key in EFFICIENCY_SCALES},
    )


#: Kernels' scales of the GPUs' achievable fractions (a fitted profile's, 1 as shipped).
EFFICIENCY_SCALES = (
    "matmul_efficiency_scale",
    "attention_efficiency_scale",
    "hbm_efficiency_scale",
)


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


def _protocol(name: str, d: Mapping[str, Any], field: str) -> Protocol:
    keys = {"base_us", "hop_us", "wire_factor", "max_busbw_GBps", "nvlink_only"}
    if not isinstance(d, dict) or not keys <= set(d) <= keys | {"tree_hop_us", "net_flush"}:
        raise CalibrationError(
            f"{field}: needs exactly {', '.join(sorted(keys))} "
            "(and optionally tree_hop_us, net_flush)"
        )
    base = _numbers(d["base_us"], f"{field}.base_us", -6)
    hop = _numbers(d["hop_us"], f"{field}.hop_us", -6)
    tree_hop = _numbers(d.get("tree_hop_us", {}), f"{field}.tree_hop_us", -6)
    for family in ("ring", "tree"):
        if family not in base:
            raise CalibrationError(f"{field}.base_us: no base latency for {family}")
    for cls in ("nvlink", "pci", "net"):
        if cls not in hop:
            raise CalibrationError(f"{field}.hop_us: no hop latency for {cls}")
    return Protocol(
        name,
        base,
        hop,
        number(d["wire_factor"], f"{field}.wire_factor"),
        _numbers(d["max_busbw_GBps"], f"{field}.max_busbw_GBps", 9),
        bool(d["nvlink_only"]),
        tree_hop,
        bool(d.get("net_flush", False)),
    )


def _collectives(d: Mapping[str, Any]) -> Collectives:
    w = "nccl.yaml"
    protocols = {
        str(name): _protocol(str(name), spec, f"{w}.protocols.{name}")
        for name, spec in _table(entry(d, "protocols", w), f"{w}.protocols").items()
    }
    probe = entry(d, "probe_protocol", w)
    if probe not in protocols:
        raise CalibrationError(f"{w}.probe_protocol={probe!r}: not one of the protocols")
    shares = _numbers(entry(d, "payload_share", w), f"{w}.payload_share")
    nvls, custom = _table(d.get("nvls"), f"{w}.nvls"), _table(d.get("custom_allreduce"), w)
    nvls_tree = _table(d.get("nvls_tree"), f"{w}.nvls_tree")
    launchers = {}
    for name, spec in _table(entry(d, "launchers", w), f"{w}.launchers").items():
        f = f"{w}.launchers.{name}"
        if not isinstance(spec, dict) or set(spec) != {"stagger_us", "call_us", "about"}:
            raise CalibrationError(f"{f}: needs exactly stagger_us, call_us, about")
        us = _numbers({k: spec[k] for k in ("stagger_us", "call_us")}, f, -6)
        launchers[str(name)] = Launcher(str(name), us["stagger_us"], us["call_us"], spec["about"])
    kernels = _custom_kernels(_table(custom.get("kernels"), f"{w}.custom_allreduce.kernels"))
    implementation = entry(custom, "implementation", w)
    if implementation not in kernels:
        raise CalibrationError(
            f"{w}.custom_allreduce.implementation={implementation!r}: "
            f"must be one of {', '.join(kernels)}"
        )
    try:
        payload = PayloadShares(**shares)
    except TypeError as e:
        raise CalibrationError(f"{w}.payload_share: {e}") from None
    return Collectives(
        protocols=protocols,
        probe_protocol=probe,
        shares=payload,
        link_class={str(k): str(v) for k, v in _table(entry(d, "link_class", w), w).items()},
        nvls_latency_s=scale(number(entry(nvls, "latency_us", f"{w}.nvls"), "nvls"), -6),
        nvls_efficiency=_numbers(entry(nvls, "efficiency", f"{w}.nvls"), f"{w}.nvls"),
        nvls_default_efficiency=number(
            entry(nvls, "default_efficiency", f"{w}.nvls"), "nvls.default_efficiency"
        ),
        custom_hop_s=scale(number(entry(custom, "hop_us", w), "custom.hop_us"), -6),
        custom_load_latency_s=scale(
            number(entry(custom, "load_latency_us", w), "custom.load_latency_us"), -6
        ),
        custom_barrier_peer_s=scale(
            number(entry(custom, "barrier_per_peer_us", w), "custom.barrier_per_peer_us"), -6
        ),
        custom_max_bytes=int(number(entry(custom, "max_MiB", w), "custom.max_MiB") * 2**20),
        custom_kernels=kernels,
        custom_implementation=implementation,
        custom_switch=_switch(entry(custom, "switch", w)),
        comm_sms=int(entry(d, "comm_sms", w)),
        launchers=launchers,
        tree_channel_max_Bps={
            str(proto): {str(k): _scales(v, f"{w}.tree_channel_max_GBps") for k, v in t.items()}
            for proto, t in _table(
                entry(d, "tree_channel_max_GBps", w), f"{w}.tree_channel_max_GBps"
            ).items()
        },
        nvls_tree_net_hop_s=scale(
            number(entry(nvls_tree, "net_hop_us", f"{w}.nvls_tree"), "nvls_tree.net_hop_us"), -6
        ),
        pipeline_slots=int(number(entry(d, "pipeline_slots", w), "pipeline_slots")),
        nvls_channels=int(number(entry(nvls, "channels", f"{w}.nvls"), "nvls.channels")),
        ll_multi_host_max_busbw_Bps=tuple(
            scale(number(x, f"{w}.ll_multi_host_max_busbw_GBps"), 9)
            for x in entry(d, "ll_multi_host_max_busbw_GBps", w)
        ),
        tree_size_efficiency={
            str(proto): tuple(number(x, f"{w}.tree_size_efficiency.{proto}") for x in row)
            for proto, row in _table(
                entry(d, "tree_size_efficiency", w), f"{w}.tree_size_efficiency"
            ).items()
        },
    )


def _switch(value: object) -> bool:
    if value not in ("engine", "fastest"):
        raise CalibrationError(f"nccl.yaml.custom_allreduce.switch={value!r}: engine or fastest")
    return value == "engine"


_KERNEL_KEYS = {"base_us", "host_us", "grid_threads", "serial_gather", "oneshot_below", "copy"}


def _custom_kernels(d: Mapping[str, Any]) -> dict[str, CustomKernel]:
    """``custom_allreduce.kernels``: one entry per implementation."""
    out = {}
    for name in d:
        f = f"nccl.yaml.custom_allreduce.kernels.{name}"
        spec = _table(entry(d, name, "nccl.yaml.custom_allreduce.kernels"), f)
        if set(spec) != _KERNEL_KEYS:
            raise CalibrationError(f"{f}: needs exactly {', '.join(sorted(_KERNEL_KEYS))}")
        rule = []
        for upto, below in sorted(_table(spec["oneshot_below"], f"{f}.oneshot_below").items()):
            if isinstance(upto, bool) or not isinstance(upto, int) or upto < 2:
                raise CalibrationError(f"{f}.oneshot_below: key {upto!r} is not a rank count")
            rule.append((upto, None if below is None else number(below, f"{f}.oneshot_below")))
        if spec["copy"] not in ("memcpy", "in_kernel"):
            raise CalibrationError(f"{f}.copy={spec['copy']!r}: must be memcpy or in_kernel")
        threads = spec["grid_threads"]
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise CalibrationError(f"{f}.grid_threads={threads!r}: a positive integer")
        if not isinstance(spec["serial_gather"], bool):
            raise CalibrationError(f"{f}.serial_gather={spec['serial_gather']!r}: true or false")
        out[str(name)] = CustomKernel(
            name=str(name),
            base_s=scale(number(spec["base_us"], f"{f}.base_us"), -6),
            host_s=scale(number(spec["host_us"], f"{f}.host_us"), -6),
            grid_threads=threads,
            serial_gather=spec["serial_gather"],
            oneshot_below=tuple(rule),
            copy=spec["copy"],
        )
    if not out:
        raise CalibrationError("nccl.yaml.custom_allreduce.kernels: needs at least one")
    return out


def _scales(v: object, field: str) -> tuple[float, ...]:
    """Three GB/s figures (one host, two, four or more) in B/s."""
    if not isinstance(v, list) or len(v) != 3:
        raise CalibrationError(f"{field}={v!r}: needs three figures (1, 2, 4+ hosts)")
    return tuple(scale(number(x, field), 9) for x in v)


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
    first = entry(d, "first_token", w)
    if first not in FIRST_TOKEN:
        choices = ", ".join(FIRST_TOKEN)
        raise CalibrationError(f"{w}.first_token={first!r}: must be one of {choices}")
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
    )


#: Where an engine's first token comes from (:attr:`Engine.first_token`).
FIRST_TOKEN = ("prefill", "decode_step")


def _nonnegative_us(value: object, field: str) -> float:
    x = number(value, field)
    if x < 0:
        raise CalibrationError(f"{field}={value!r}: must not be negative")
    return scale(x, -6)


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
FILES = ("kernels", "launch", "nccl", "links", "memory", "engine")


def read_all() -> dict[str, dict[str, Any]]:
    """Every calibration data file, parsed, by name (without ``.yaml``)."""
    return {name: read(f"{name}.yaml") for name in FILES}


def build(data: Mapping[str, Mapping[str, Any]], name: str, engine: str = "ideal") -> Calibration:
    """A calibration from parsed data files (:func:`read_all`, maybe with an engine's
    overrides); ``engine`` names the engine profile it stands for."""
    return Calibration(
        name,
        _kernels(data["kernels"]),
        _launch(data["launch"]),
        _collectives(data["nccl"]),
        _links(data["links"]),
        _memory(data["memory"]),
        _engine(data["engine"], engine),
    )


@cache
def default() -> Calibration:
    """The shipped calibration: best achievable kernels and NCCL, as measured and published,
    and the ideal engine (no host work)."""
    return build(read_all(), "default")
