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
from tpsim.calibration.model import (
    Calibration,
    Collectives,
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
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CalibrationError(f"{field}={value!r}: must be a finite number or a ratio a/b")
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


def _kernels() -> Kernels:
    d, w = read("kernels.yaml"), "kernels.yaml"
    tiles = {}
    for arch, shape in _table(entry(d, "tiles", w), f"{w}.tiles").items():
        if not (
            isinstance(shape, list) and len(shape) == 3 and all(isinstance(x, int) for x in shape)
        ):
            raise CalibrationError(f"{w}.tiles.{arch}={shape!r}: must be [tile_m, tile_n, mma_m]")
        tiles[str(arch)] = TileShape(*shape)
    if "default" not in tiles:
        raise CalibrationError(f"{w}.tiles: needs a 'default' tile")
    return Kernels(
        attention_efficiency=number(entry(d, "attention_efficiency", w), "attention_efficiency"),
        attention_fp8_efficiency=number(
            entry(d, "attention_fp8_efficiency", w), "attention_fp8_efficiency"
        ),
        attention_block_m=int(entry(d, "attention_block_m", w)),
        split_k_min=int(entry(d, "split_k_min", w)),
        tiles=tiles,
    )


def _launch() -> dict[str, LaunchCost]:
    d, w = read("launch.yaml"), "launch.yaml"
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
    if not isinstance(d, dict) or set(d) != keys:
        raise CalibrationError(f"{field}: needs exactly {', '.join(sorted(keys))}")
    base = _numbers(d["base_us"], f"{field}.base_us", -6)
    hop = _numbers(d["hop_us"], f"{field}.hop_us", -6)
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
    )


def _collectives() -> Collectives:
    d, w = read("nccl.yaml"), "nccl.yaml"
    protocols = {
        str(name): _protocol(str(name), spec, f"{w}.protocols.{name}")
        for name, spec in _table(entry(d, "protocols", w), f"{w}.protocols").items()
    }
    probe = entry(d, "probe_protocol", w)
    if probe not in protocols:
        raise CalibrationError(f"{w}.probe_protocol={probe!r}: not one of the protocols")
    shares = _numbers(entry(d, "payload_share", w), f"{w}.payload_share")
    nvls, custom = _table(d.get("nvls"), f"{w}.nvls"), _table(d.get("custom_allreduce"), w)
    launchers = {}
    for name, spec in _table(entry(d, "launchers", w), f"{w}.launchers").items():
        f = f"{w}.launchers.{name}"
        if not isinstance(spec, dict) or set(spec) != {"stagger_us", "call_us", "about"}:
            raise CalibrationError(f"{f}: needs exactly stagger_us, call_us, about")
        us = _numbers({k: spec[k] for k in ("stagger_us", "call_us")}, f, -6)
        launchers[str(name)] = Launcher(str(name), us["stagger_us"], us["call_us"], spec["about"])
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
        custom_base_s=scale(number(entry(custom, "base_us", w), "custom.base_us"), -6),
        custom_hop_s=scale(number(entry(custom, "hop_us", w), "custom.hop_us"), -6),
        custom_max_bytes=int(number(entry(custom, "max_MiB", w), "custom.max_MiB") * 2**20),
        comm_sms=int(entry(d, "comm_sms", w)),
        launchers=launchers,
    )


def _links() -> Links:
    d, w = read("links.yaml"), "links.yaml"
    eff = _table(d.get("efficiency"), f"{w}.efficiency")
    return Links(
        nvlink_efficiency=_numbers(entry(eff, "nvlink", w), f"{w}.efficiency.nvlink"),
        efficiency=_numbers(entry(eff, "other", w), f"{w}.efficiency.other"),
        default_efficiency=number(entry(eff, "default", w), "links.efficiency.default"),
    )


def _memory() -> Memory:
    d, w = read("memory.yaml"), "memory.yaml"
    return Memory(
        usable_fraction=number(entry(d, "usable_fraction", w), "usable_fraction"),
        runtime_bytes=round(number(entry(d, "runtime_GiB", w), "runtime_GiB") * 2**30),
    )


@cache
def default() -> Calibration:
    """The shipped calibration: best achievable kernels and NCCL, as measured and published."""
    return Calibration("default", _kernels(), _launch(), _collectives(), _links(), _memory())


@cache
def ideal() -> Calibration:
    """The first-principles variant of :func:`default` (``--ideal``)."""
    return default().ideal()


def for_options(ideal_mode: bool) -> Calibration:
    """The calibration a run uses: ideal or the default."""
    return ideal() if ideal_mode else default()
