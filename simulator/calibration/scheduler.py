"""The serving engine's scheduler as data: :class:`SchedulerSpec`, read from ``scheduler.yaml``
with the engine profile's ``scheduler`` overrides (``tpsim serve``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpsim.calibration.entries import CalibrationError, entry, number
from tpsim.calibration.profiles import by_file, merged_file

POLICIES = ("continuous", "static")
ADMISSIONS = ("on_demand", "reserve")
MEMORY_RULES = ("total", "free")
SLIDING_KV = ("hybrid", "pool", "full")


@dataclass(frozen=True)
class SchedulerSpec:
    """What one engine's scheduler does (``scheduler.yaml`` says each field's source)."""

    engine: str
    policy: str  # continuous | static
    max_num_batched_tokens: int
    max_num_seqs: int
    chunked_prefill: bool
    mixed_batches: bool
    block_size: int
    gpu_memory_utilization: float
    memory_rule: str  # total | free
    kv_admission: str  # on_demand | reserve
    preemption: str
    prefix_caching: bool
    #: the next iteration is planned while this one runs (vLLM's async scheduling, SGLang's
    #: and TensorRT-LLM's overlap schedulers): a request arriving during an iteration is
    #: first scheduled in the one after the next, unless the engine has nothing else to run
    async_scheduling: bool = False
    #: how the paged cache holds sliding-window layers beside full ones: "hybrid" (vLLM V1's
    #: hybrid KV cache manager: layers grouped by kind, a sliding group keeping only the
    #: window's blocks), "pool" (SGLang's SWAKVPool: the sliding layers in a pool of their
    #: own, ``swa_full_tokens_ratio`` the full one's tokens, a sequence keeping there its
    #: last window, ``swa_eviction_interval`` tokens and a page) or "full" (every layer's
    #: cache at the sequence's length)
    sliding_window_kv: str = "full"
    #: "pool": the sliding pool's tokens over the full pool's
    swa_full_tokens_ratio: float = 0.8
    #: "pool": decode steps between two frees of a sequence's sliding tokens past the window
    swa_eviction_interval: int = 128


def _by_gpu(value: Any, field: str, large: bool) -> int:
    if isinstance(value, dict):
        key = "large_gpu" if large else "small_gpu"
        if set(value) != {"large_gpu", "small_gpu"}:
            raise CalibrationError(f"{field}={value!r}: needs large_gpu and small_gpu")
        value = value[key]
    n = number(value, field)
    if n != int(n) or n < 1:
        raise CalibrationError(f"{field}={value!r}: must be a positive integer")
    return int(n)


def _flag(data: dict[str, Any], key: str, where: str) -> bool:
    v = entry(data, key, where)
    if not isinstance(v, bool):
        raise CalibrationError(f"{where}.{key}={v!r}: must be true or false")
    return v


def _one_of(data: dict[str, Any], key: str, where: str, allowed: tuple[str, ...]) -> str:
    v = entry(data, key, where)
    if v not in allowed:
        raise CalibrationError(f"{where}.{key}={v!r}: must be one of {', '.join(allowed)}")
    return str(v)


def _ratio(data: dict[str, Any], key: str, where: str) -> float:
    v = number(entry(data, key, where), f"{where}.{key}")
    if not 0 < v <= 1:
        raise CalibrationError(f"{where}.{key}={v}: must be in (0, 1]")
    return v


def scheduler(engine: str, gpu_memory_bytes: float) -> SchedulerSpec:
    """The scheduler of ``engine`` (a profile name or file) on a GPU of that much memory
    (vLLM's defaults depend on it)."""
    data = merged_file(engine, "scheduler")
    where = f"engine {engine}: scheduler"
    large = gpu_memory_bytes >= number(entry(data, "large_gpu_GiB", where), where) * 2**30
    util = number(entry(data, "gpu_memory_utilization", where), f"{where}.gpu_memory_utilization")
    if not 0 < util <= 1:
        raise CalibrationError(f"{where}.gpu_memory_utilization={util}: must be in (0, 1]")
    return SchedulerSpec(
        engine=engine,
        policy=_one_of(data, "policy", where, POLICIES),
        max_num_batched_tokens=_by_gpu(
            entry(data, "max_num_batched_tokens", where), f"{where}.max_num_batched_tokens", large
        ),
        max_num_seqs=_by_gpu(entry(data, "max_num_seqs", where), f"{where}.max_num_seqs", large),
        chunked_prefill=_flag(data, "chunked_prefill", where),
        mixed_batches=_flag(data, "mixed_batches", where),
        block_size=_by_gpu(entry(data, "block_size", where), f"{where}.block_size", large),
        gpu_memory_utilization=util,
        memory_rule=_one_of(data, "memory_rule", where, MEMORY_RULES),
        kv_admission=_one_of(data, "kv_admission", where, ADMISSIONS),
        preemption=_one_of(data, "preemption", where, ("recompute",)),
        prefix_caching=_flag(data, "prefix_caching", where),
        async_scheduling=_flag(data, "async_scheduling", where),
        sliding_window_kv=_one_of(data, "sliding_window_kv", where, SLIDING_KV),
        swa_full_tokens_ratio=_ratio(data, "swa_full_tokens_ratio", where),
        swa_eviction_interval=_by_gpu(
            entry(data, "swa_eviction_interval", where), f"{where}.swa_eviction_interval", large
        ),
    )


@by_file
def checked(engine: str) -> bool:
    """Whether ``engine``'s scheduler overrides are valid (CalibrationError if not): what
    ``tpsim serve`` reads, checked wherever the profile is used, so that a profile is not
    valid for one command and refused by another. Once per profile file as it is now."""
    scheduler(engine, 0.0)
    return True


__all__ = ["SchedulerSpec", "checked", "scheduler"]
