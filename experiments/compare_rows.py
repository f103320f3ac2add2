"""Sweep results rows read back as the parts of a run summary a comparison reads
(``compare --results FILE --rows ID,ID``, the words of sweeps and studies): the config with
its layout, the critical path by part, the launch mode the step ran in, and a pipeline's
decode kept full (``in_flight``)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from tpsim.core.config import Options, Workload
from tpsim.core.errors import INPUT_ERRORS
from tpsim.core.lowering.step import launch_mode
from tpsim.experiments.compare import PARTS
from tpsim.experiments.sweep.rows import IN_FLIGHT, kept_full


def replica_hosts(row: Mapping[str, Any]) -> int:
    """The hosts one replica of a row's layout spans (its TP group and pipeline stages):
    its TP group's (the row's ``hosts``), or as many as its GPUs fill when a host holds
    fewer (``gpus_per_node``, else the topology's), as ``tpsim run`` places them."""
    group = int(row.get("hosts") or 1)
    gpus = int(row["tp"]) * int(row.get("pp") or 1) * int(row.get("attention_dp") or 1)
    per = int(row.get("gpus_per_node") or 0) or _gpus_per_host(str(row["topology"]))
    return max(group, -(-gpus // per)) if per else group


@lru_cache(maxsize=64)
def _gpus_per_host(topology: str) -> int:
    """A topology's GPUs per host (0: not known), read once per topology of the rows."""
    from tpsim.topologies.io import get_topology

    return int(get_topology(topology, 1).graph.get("gpus_per_host") or 0)


def config_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a run's ``config`` a comparison reads, rebuilt from a sweep results row
    (``spans_hosts`` from the hosts one replica spans: :func:`replica_hosts`)."""
    model = str(row["model"])
    return {
        "model": {"name": model.rsplit("/", 1)[-1]},
        "topology": row["topology"],
        "nodes": row["nodes"],
        "gpu": row["gpu"],
        "tp": row["tp"],
        "spans_hosts": replica_hosts(row) > 1,
        "tp_hosts": int(row.get("hosts") or 1),  # the row names no GPU to read them from
        "layout": {  # an older file's row: one TP group
            "tp": row["tp"],
            **{k: int(row.get(k) or 1) for k in ("pp", "dp", "micro_batches", "ep")},
            "attention_dp": int(row.get("attention_dp") or 1),
            "moe_tp": expert_tp(row),
        },
        "workload": {
            "batch": row["batch"],
            "phase": row["phase"],
            "prompt_len": row.get("prompt_len"),
            "context_len": row.get("context_len"),
        },
        "options": {
            "engine": row.get("engine") or Options.engine,
            "launch": row["launch"],
            "dtype": row.get("dtype") or "model's",
            "moe_a2a": row.get("moe_a2a") or Options.moe_a2a,  # an older file's: NCCL's
        },
        "launch_effective": launch_ran(row),
    }


def expert_tp(row: Mapping[str, Any]) -> int:
    """The ranks splitting each routed expert's width, as ``run --json``'s
    ``config.layout.moe_tp`` gives it: the row's ``moe_tp``, or where it is 0 (derived; an
    older file's row) tp * attention_dp / ep."""
    given = int(row.get("moe_tp") or 0)
    group = int(row["tp"]) * int(row.get("attention_dp") or 1)
    return given or max(1, group // int(row.get("ep") or 1))


def launch_ran(row: Mapping[str, Any]) -> str:
    """The launch mode a row's step ran in: its ``launch``, or eager where the engine has no
    CUDA graph for the step (as ``tpsim run`` says it)."""
    lengths = {k: int(row[k]) for k in ("prompt_len", "context_len") if row.get(k)}
    try:
        workload = Workload(int(row["batch"]), str(row["phase"]), **lengths)
        engine = str(row.get("engine") or Options.engine)
        options = Options(engine=engine, launch=str(row["launch"]), ideal=bool(row.get("ideal")))
        return launch_mode(workload, options)
    except INPUT_ERRORS:
        return str(row["launch"])


def summary_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a run summary a comparison reads, rebuilt from a sweep results row
    (``compare --results FILE --rows ID,ID``). Raises ValueError for a row without a result."""
    if row.get("error") or not row.get("latency_s"):
        reason = row.get("error") or "no result"
        raise ValueError(f"point_id={row['point_id']}: {reason}")
    out = {
        "latency_s": row["latency_s"],
        "tokens_per_s": row["tokens_per_s"],
        "tokens_per_s_per_gpu": row["tokens_per_s_per_gpu"],
        "regime": row["regime"],
        "breakdown_s": breakdown_from_row(row),
        "memory": {
            "total_bytes_per_gpu": row["total_bytes_per_gpu"] or 0,
            "capacity_bytes_per_gpu": row["capacity_bytes_per_gpu"] or 0,
        },
        "config": config_from_row(row),
    }
    if kept_full(row):  # as run --json gives it: compare's "tokens/s, pipelines full"
        out["in_flight"] = {k: row[f"in_flight_{k}"] for k in IN_FLIGHT}
    return out


def breakdown_from_row(row: Mapping[str, Any]) -> dict[str, float]:
    """A results row's critical path by part (its ``<part>_s`` columns; absent: 0)."""
    return {p: float(row.get(f"{p}_s") or 0.0) for p in PARTS}


__all__ = ["breakdown_from_row", "config_from_row", "expert_tp", "summary_from_row"]
