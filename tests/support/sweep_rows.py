"""Sweep result rows made by hand for the sweep plots' and words' tests: one simulated
row (:func:`row`) and a grid of them over TP and batch (:func:`grid`)."""

from __future__ import annotations

from typing import Any

BATCHES = (1, 2, 4, 8, 16, 32, 64)


def row(tp: int, batch: int, *, hosts: int = 1, phase: str = "decode", **kw: Any) -> dict[str, Any]:
    """A simulated row: memory 60 % of the path, communication the rest (unless given)."""
    lat = kw.pop("latency_s", 1e-3 * batch / tp + 1e-3)
    mem = kw.pop("memory_share", 0.6)
    r = {
        "point_id": f"{tp:04x}{batch:04x}{hosts:08x}",
        "model": "m",
        "topology": kw.pop("topology", "dgx-h100"),
        "nodes": hosts,
        "gpus_per_node": 0,
        "tp": tp,
        "batch": batch,
        "phase": phase,
        "prompt_len": 512 if phase == "prefill" else None,
        "context_len": 1024 if phase == "decode" else None,
        "dtype": "bf16",
        "kv_dtype": None,
        "launch": "graph",
        "overlap": "none",
        "allreduce_algo": "auto",
        "sequence_parallel": False,
        "ideal": False,
        "engine": "vllm",
        "gpu": "h100-sxm",
        "hosts": hosts,
        "latency_s": lat,
        "tokens_per_s": batch / lat * tp**0.5,
        "tokens_per_s_per_gpu": batch / lat / tp**0.5,
        "regime": "memory-bound" if mem >= 0.5 else "communication-bound",
        "compute_s": 0.0,
        "memory_s": mem * lat,
        "communication_s": (1 - mem) * lat,
        "launch_overhead_s": 0.0,
        "host_s": 0.0,
        "idle_s": 0.0,
        "fits": True,
        "error": None,
    }
    return r | kw


def grid(**kw: Any) -> list[dict[str, Any]]:
    rows = [row(tp, b, **kw) for tp in (1, 2, 4, 8) for b in BATCHES]
    return rows + [row(16, b, hosts=2, **kw) for b in BATCHES]
