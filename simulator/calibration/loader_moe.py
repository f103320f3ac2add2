"""An engine profile's mixture-of-experts keys (``engine.yaml``): DeepEP's buffers, the hidden
sizes it takes and how the engine feeds its low-latency kernels (``deepep_*``), and how the
engine pads an MXFP4 checkpoint's experts (``mxfp4_expert_pad*``), whether it splits experts
expert- and tensor-parallel at once (``moe_ep_with_tp``), how many tokens its fused MoE
kernels take at a time (``fused_moe_chunk_tokens``). A malformed value is a
:class:`CalibrationError` naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpsim.calibration.entries import CalibrationError, entry, number


def moe_keys(d: Mapping[str, Any], w: str) -> dict[str, Any]:
    """The engine's ``deepep_*``, ``mxfp4_expert_pad*`` and ``moe_ep_with_tp`` keys, as
    :class:`Engine` fields."""
    ll_tokens = entry(d, "deepep_ll_tokens", w)
    if isinstance(ll_tokens, bool) or not isinstance(ll_tokens, int) or ll_tokens < 1:
        raise CalibrationError(f"{w}.deepep_ll_tokens={ll_tokens!r}: a positive number of tokens")
    sizes: dict[str, float | None] = {}
    for key in ("deepep_nvl_MiB", "deepep_rdma_MiB"):
        mib = entry(d, key, w)
        if mib is not None:
            mib = number(mib, f"{w}.{key}")
            if not mib > 0:
                raise CalibrationError(f"{w}.{key}={mib!r}: must be positive, or null")
        sizes[key] = mib
    hidden = entry(d, "deepep_hidden_sizes", w)
    if (
        not isinstance(hidden, list)
        or not hidden
        or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hidden)
        or hidden != sorted(set(hidden))
    ):
        raise CalibrationError(
            f"{w}.deepep_hidden_sizes={hidden!r}: must be a list of hidden sizes, increasing"
        )
    flags = {}
    for key in ("deepep_pad_hidden", "deepep_ll_chunked", "moe_ep_with_tp"):
        flags[key] = entry(d, key, w)
        if not isinstance(flags[key], bool):
            raise CalibrationError(f"{w}.{key}={flags[key]!r}: must be true or false")
    table = entry(d, "mxfp4_expert_pad", w)
    if not isinstance(table, Mapping):
        raise CalibrationError(
            f"{w}.mxfp4_expert_pad={table!r}: must map GPU architectures to [width, hidden]"
        )
    pads = {str(arch): _pad(v, f"{w}.mxfp4_expert_pad.{arch}") for arch, v in table.items()}
    batched = entry(d, "mxfp4_expert_pad_batched", w)
    chunk = entry(d, "fused_moe_chunk_tokens", w)
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise CalibrationError(
            f"{w}.fused_moe_chunk_tokens={chunk!r}: a positive number of tokens, or null"
        )
    return {
        "deepep_ll_tokens": ll_tokens,
        "deepep_nvl_MiB": sizes["deepep_nvl_MiB"],
        "deepep_rdma_MiB": sizes["deepep_rdma_MiB"],
        "deepep_hidden_sizes": tuple(hidden),
        "deepep_pad_hidden": flags["deepep_pad_hidden"],
        "deepep_ll_chunked": flags["deepep_ll_chunked"],
        "moe_ep_with_tp": flags["moe_ep_with_tp"],
        "fused_moe_chunk_tokens": chunk,
        "mxfp4_expert_pad": pads,
        "mxfp4_expert_pad_batched": None
        if batched is None
        else _pad(batched, f"{w}.mxfp4_expert_pad_batched"),
    }


def _pad(value: object, where: str) -> tuple[int, int]:
    """``[width, hidden]``: the multiples an expert's width per GPU and its hidden size are
    rounded up to (1: as they are)."""
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
    ):
        raise CalibrationError(
            f"{where}={value!r}: must be [width, hidden], the multiples (1 or more) they are "
            "rounded up to"
        )
    return value[0], value[1]


__all__ = ["moe_keys"]
