"""Read ``data/nccl.yaml`` into :class:`~tpsim.calibration.model.Collectives`: NCCL's
protocols and tuning constants, the benchmarks' launchers, NCCL's host enqueue and its
channel rule, and the serving engines' peer-memory all-reduce kernels (``custom_allreduce``).

Part of :mod:`tpsim.calibration.loader`, which builds the whole calibration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tpsim.calibration.entries import (
    CalibrationError,
    _count,
    _fields,
    _flag,
    _nonnegative_us,
    _numbers,
    _table,
    entry,
    number,
    scale,
)
from tpsim.calibration.hardware import ARCHITECTURES
from tpsim.calibration.model_collectives import (
    ChannelThreshold,
    Collectives,
    CustomKernel,
    DeepEP,
    DeepEPMode,
    HostEnqueue,
    Launcher,
    NvlsPipeline,
    SymmMem,
)
from tpsim.calibration.model_p2p import P2PTuning
from tpsim.calibration.model_protocols import PayloadShares, Protocol


def _protocol(name: str, d: Mapping[str, Any], field: str) -> Protocol:
    keys = {"base_us", "hop_us", "wire_factor", "max_busbw_GBps", "nvlink_only"}
    optional = {"tree_hop_us", "net_flush", "measured_base_us", "measured_hop_us"}
    if not isinstance(d, dict) or not keys <= set(d) <= keys | optional:
        raise CalibrationError(
            f"{field}: needs exactly {', '.join(sorted(keys))} "
            f"(and optionally {', '.join(sorted(optional))})"
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
    measured_base = _numbers(d.get("measured_base_us", {}), f"{field}.measured_base_us", -6)
    measured_hop = _numbers(d.get("measured_hop_us", {}), f"{field}.measured_hop_us", -6)
    for family in measured_base:  # only a ring builds NCCL's view of itself (model_s)
        if family != "ring":
            raise CalibrationError(
                f"{field}.measured_base_us: {family!r}: only the ring's is modelled apart"
            )
    for cls in measured_hop:
        if cls not in hop:
            raise CalibrationError(f"{field}.measured_hop_us: {cls!r} is not in hop_us")
    return Protocol(
        name,
        base,
        hop,
        number(d["wire_factor"], f"{field}.wire_factor"),
        _numbers(d["max_busbw_GBps"], f"{field}.max_busbw_GBps", 9),
        bool(d["nvlink_only"]),
        tree_hop,
        bool(d.get("net_flush", False)),
        measured_base,
        measured_hop,
    )


def _text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise CalibrationError(f"{field}={value!r}: must be text")
    return value


def _records(
    table: object, field: str, readers: Mapping[str, Callable[[object, str], Any]], make: Any
) -> dict[str, Any]:
    """Each entry of ``table`` as ``make(name, *values)``: exactly the keys of ``readers``,
    each value read by its reader."""
    out = {}
    for name, spec in _table(table, field).items():
        f = f"{field}.{name}"
        x = _fields(spec, tuple(readers), f)
        out[str(name)] = make(str(name), *(read(x[k], f"{f}.{k}") for k, read in readers.items()))
    return out


def _launchers(table: object, field: str) -> dict[str, Launcher]:
    readers = {"per_host": _flag, "call_us": _nonnegative_us, "about": _text, "sync": _flag}
    return _records(table, field, readers, Launcher)


def _host_enqueue(table: object, field: str) -> dict[str, HostEnqueue]:
    readers = {"gpu_us": _nonnegative_us, "channel_us": _nonnegative_us, "ring_channels": _count}
    out = _records(table, field, readers, lambda _arch, *v: HostEnqueue(*v))
    if "default" not in out:
        raise CalibrationError(f"{field}: needs a default entry")
    return out


def _channel_thresholds(table: object, field: str) -> dict[str, ChannelThreshold]:
    readers = {"threads": _count, "bytes_per_thread": _count, "ring_times_ranks": _flag}
    return _records(table, field, readers, lambda _proto, *v: ChannelThreshold(*v))


def deepep(d: Mapping[str, Any]) -> DeepEP:
    """``deepep.yaml``: DeepEP's low-latency and normal kernels."""
    w = "deepep.yaml"

    def mode(name: str) -> DeepEPMode:
        m = _table(d.get(name), f"{w}.{name}")
        f = f"{w}.{name}"
        base = _numbers(entry(m, "base_us", f), f"{f}.base_us", -6)
        if "dispatch" not in base:
            raise CalibrationError(f"{f}.base_us: needs dispatch (and combine)")
        nvl = _numbers(entry(m, "nvlink_efficiency", f), f"{f}.nvlink_efficiency")
        rdma = number(entry(m, "rdma_efficiency", f), f"{f}.rdma_efficiency")
        if "dispatch" not in nvl:
            raise CalibrationError(f"{f}.nvlink_efficiency: needs dispatch (and combine)")
        for key, x in (*((f"nvlink_efficiency.{k}", v) for k, v in nvl.items()),
                       ("rdma_efficiency", rdma)):  # fmt: skip
            _fraction(x, f"{f}.{key}")
        post = _nonnegative_us(entry(m, "rdma_post_us", f), f"{f}.rdma_post_us")
        sm = 0.0
        if "dispatch_sm_GBps" in m:
            sm = scale(number(entry(m, "dispatch_sm_GBps", f), f"{f}.dispatch_sm_GBps"), 9)
        return DeepEPMode(base, nvl, rdma, post, sm)

    return DeepEP(mode("low_latency"), mode("normal"))


def _collectives(d: Mapping[str, Any], ep: Mapping[str, Any] | None = None) -> Collectives:
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
        custom_max_by_gpu=_by_gpu(
            entry(custom, "max_MiB_by_gpu", w), f"{w}.custom_allreduce.max_MiB_by_gpu"
        ),
        symm_mem=_symm_mem(entry(custom, "symm_mem", w)),
        comm_sms=int(entry(d, "comm_sms", w)),
        launchers=_launchers(entry(d, "launchers", w), f"{w}.launchers"),
        host_enqueue=_host_enqueue(entry(d, "host_enqueue", w), f"{w}.host_enqueue"),
        channel_thresholds=_channel_thresholds(
            entry(d, "channel_thresholds", w), f"{w}.channel_thresholds"
        ),
        p2p_ll_threshold=int(number(entry(d, "p2p_ll_threshold", w), "p2p_ll_threshold")),
        p2p=_p2p(_table(d.get("p2p"), f"{w}.p2p"), f"{w}.p2p"),
        deepep=deepep(ep) if ep is not None else None,
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
        nvls_pipeline=_nvls_pipeline(nvls),
        ll_multi_host_max_busbw_Bps=tuple(
            scale(number(x, f"{w}.ll_multi_host_max_busbw_GBps"), 9)
            for x in entry(d, "ll_multi_host_max_busbw_GBps", w)
        ),
        ring_block_copy_Bps=(
            _numbers(entry(d, "ring_block_copy_GBps", w), f"{w}.ring_block_copy_GBps", 9)
            if "ring_block_copy_GBps" in d
            else {}
        ),
        model_ring_busbw_Bps=(
            _numbers(entry(d, "model_ring_busbw_GBps", w), f"{w}.model_ring_busbw_GBps", 9)
            if "model_ring_busbw_GBps" in d
            else {}
        ),
        ring_final_receive=(
            tuple(str(x) for x in entry(d, "ring_final_receive", w))
            if "ring_final_receive" in d
            else ()
        ),
        ring_read_archs=(
            tuple(str(x) for x in entry(d, "ring_read_archs", w)) if "ring_read_archs" in d else ()
        ),
        auto_composed=_flag(entry(d, "auto_composed", w), f"{w}.auto_composed"),
        reference_clock_Hz=_clock(entry(d, "reference_clock_GHz", w), f"{w}.reference_clock_GHz"),
        switch_all_to_all_efficiency=_fraction(
            entry(d, "switch_all_to_all_efficiency", w), f"{w}.switch_all_to_all_efficiency"
        ),
        tree_size_efficiency={
            str(proto): tuple(number(x, f"{w}.tree_size_efficiency.{proto}") for x in row)
            for proto, row in _table(
                entry(d, "tree_size_efficiency", w), f"{w}.tree_size_efficiency"
            ).items()
        },
    )


def _nvls_pipeline(nvls: Mapping[str, Any]) -> NvlsPipeline | None:
    """``nvls.pipeline``: NCCL's NVLS chunk and its warp-group stages (absent: none)."""
    if "pipeline" not in nvls:
        return None
    w = "nccl.yaml.nvls.pipeline"
    v = _table(entry(nvls, "pipeline", "nccl.yaml.nvls"), w)
    shrink = []
    for pair in v.get("shrink", ()):
        if not isinstance(pair, list) or len(pair) != 2:
            raise CalibrationError(f"{w}.shrink={pair!r}: needs [factor, KiB]")
        factor, kib = (number(x, f"{w}.shrink") for x in pair)
        shrink.append((int(factor), int(kib * 1024)))
    return NvlsPipeline(
        chunk_bytes=int(number(v.get("chunk_KiB"), f"{w}.chunk_KiB") * 1024),
        shrink=tuple(shrink),
        stages=_count(v.get("stages"), f"{w}.stages"),
    )


def _p2p(d: Mapping[str, Any], w: str) -> P2PTuning:
    """``p2p``: NCCL's grouped send/receive (channels per peer, chunks, parts, host tasks)."""
    chunk = _numbers(entry(d, "chunk_KiB", w), f"{w}.chunk_KiB")
    if set(chunk) != {"nvlink", "pci", "net"}:
        raise CalibrationError(f"{w}.chunk_KiB: needs nvlink, pci and net")

    def pair(key: str) -> tuple[float, float]:
        v = entry(d, key, w)
        if not isinstance(v, list) or len(v) != 2:
            raise CalibrationError(f"{w}.{key}={v!r}: needs [smallest, largest]")
        lo, hi = (number(x, f"{w}.{key}") for x in v)
        if not 0 < lo <= hi:
            raise CalibrationError(f"{w}.{key}={v!r}: needs 0 < smallest <= largest")
        return lo, hi

    return P2PTuning(
        chunk_bytes={k: int(v * 1024) for k, v in chunk.items()},
        max_channels=_count(entry(d, "max_channels", w), f"{w}.max_channels"),
        net_peer_channels=_count(entry(d, "net_peer_channels", w), f"{w}.net_peer_channels"),
        part_chunks_one_host=pair("part_chunks_one_host"),
        part_chunks_multi_host=pair("part_chunks_multi_host"),
        send_recv_split=_count(entry(d, "send_recv_split", w), f"{w}.send_recv_split"),
        task_s=_numbers(entry(d, "task_us", w), f"{w}.task_us", -6),
        ll_step_bytes=int(number(entry(d, "ll_step_KiB", w), f"{w}.ll_step_KiB") * 1024),
        ll_rule=_ll_rule(entry(d, "ll_rule", w), f"{w}.ll_rule"),
        ll_parts_since=str(entry(d, "ll_parts_since", w)),
    )


def _ll_rule(value: object, field: str) -> str:
    if value not in ("per_peer", "parts"):
        raise CalibrationError(f"{field}={value!r}: per_peer or parts")
    return str(value)


def _by_gpu(value: object, field: str) -> dict[str, dict[int, int]]:
    """``{arch: {ranks: MiB}}`` in bytes: the size each takes messages below (vLLM's tables
    are read ``size < max``)."""
    out: dict[str, dict[int, int]] = {}
    for arch, sizes in _table(value, field).items():
        if arch not in ARCHITECTURES:
            raise CalibrationError(
                f"{field}: {arch!r} is not a GPU architecture ({', '.join(ARCHITECTURES)})"
            )
        row: dict[int, int] = {}
        for ranks, mib in _table(sizes, f"{field}.{arch}").items():
            if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
                raise CalibrationError(f"{field}.{arch}: key {ranks!r} is not a rank count")
            row[ranks] = round(number(mib, f"{field}.{arch}.{ranks}") * 2**20)
        out[str(arch)] = row
    return out


def _fraction(value: object, field: str) -> float:
    """A share in (0, 1]."""
    x = number(value, field)
    if not 0 < x <= 1:
        raise CalibrationError(f"{field}={x!r}: must be in (0, 1]")
    return x


def _clock(value: object, field: str) -> float:
    """A clock in GHz, in (0, 10], as Hz."""
    x = number(value, field)
    if not 0 < x <= 10:
        raise CalibrationError(f"{field}={x!r}: must be a clock in (0, 10] GHz")
    return scale(x, 9)


def _symm_mem(value: object) -> SymmMem | None:
    """``custom_allreduce.symm_mem``: null, or the engine's symmetric-memory all-reduce."""
    if value is None:
        return None
    f = "nccl.yaml.custom_allreduce.symm_mem"
    spec = _table(value, f)
    if set(spec) != {"base_us", "efficiency", "max_MiB", "multimem_ranks"}:
        raise CalibrationError(f"{f}: needs exactly base_us, efficiency, max_MiB, multimem_ranks")
    eff = _fraction(spec["efficiency"], f"{f}.efficiency")
    ranks = {}
    for arch, sizes in _table(spec["multimem_ranks"], f"{f}.multimem_ranks").items():
        if arch not in ARCHITECTURES or not isinstance(sizes, list):
            raise CalibrationError(f"{f}.multimem_ranks.{arch}: a GPU architecture's rank list")
        if any(isinstance(r, bool) or not isinstance(r, int) or r < 2 for r in sizes):
            raise CalibrationError(f"{f}.multimem_ranks.{arch}={sizes!r}: rank counts")
        ranks[str(arch)] = tuple(sizes)
    limits = _by_gpu(spec["max_MiB"], f"{f}.max_MiB")
    return SymmMem(scale(number(spec["base_us"], f"{f}.base_us"), -6), eff, limits, ranks)


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
