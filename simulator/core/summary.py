"""The typed summary of one run: :class:`Summary` and its parts, all frozen.

:meth:`Summary.to_dict` is the JSON contract (``tpsim run --json``, ``Result.summary``):
its keys, their order and their values. A TP-only run (one group) leaves the layout's keys
out (``placement``, ``tokens_per_s_per_replica``, ``memory.stage``, ``memory_per_stage``),
as do its dicts; :meth:`Breakdown.to_dict` writes ``bubble`` only for a pipeline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tpsim.core.config import Options, Workload
from tpsim.core.memory import MemoryUse
from tpsim.core.metrics import pipelined_tpot
from tpsim.core.records import CATEGORIES
from tpsim.models.spec import ModelSpec


@dataclass(frozen=True)
class Breakdown:
    """Seconds of the critical path in each category, ``idle`` (its gaps) and, for a
    pipeline, ``bubble`` (:func:`tpsim.core.metrics.pipeline_breakdown`)."""

    compute: float
    memory: float
    communication: float
    launch_overhead: float
    host: float
    idle: float
    bubble: float | None = None

    @classmethod
    def of(cls, parts: Mapping[str, float]) -> Breakdown:
        return cls(
            compute=parts["compute"],
            memory=parts["memory"],
            communication=parts["communication"],
            launch_overhead=parts["launch_overhead"],
            host=parts["host"],
            idle=parts["idle"],
            bubble=parts.get("bubble"),
        )

    def to_dict(self) -> dict[str, float]:
        out = {c: getattr(self, c) for c in (*CATEGORIES, "idle")}
        if self.bubble is not None:
            out["bubble"] = self.bubble
        return out

    def total(self) -> float:
        """The parts' sum: the makespan, to rounding."""
        return math.fsum(self.to_dict().values())


@dataclass(frozen=True)
class SiteComm:
    """Communication at one site, as rank 0 sees it."""

    count: int
    bytes_sent_per_gpu: int
    time_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Communication:
    """:func:`tpsim.core.metrics.communication`, typed: ``p2p`` is None without sends."""

    collectives: int
    bytes_sent_per_gpu: int
    time_s: float
    by_site: tuple[tuple[str, SiteComm], ...]
    p2p: int | None = None

    @classmethod
    def of(cls, comm: Mapping[str, Any]) -> Communication:
        sites = tuple((k, SiteComm(**v)) for k, v in comm["by_site"].items())
        return cls(
            comm["collectives"], comm["bytes_sent_per_gpu"], comm["time_s"], sites, comm.get("p2p")
        )

    def site(self, name: str) -> SiteComm | None:
        return dict(self.by_site).get(name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "collectives": self.collectives,
            "bytes_sent_per_gpu": self.bytes_sent_per_gpu,
            "time_s": self.time_s,
            "by_site": {k: v.to_dict() for k, v in self.by_site},
        }
        if self.p2p is not None:
            out["p2p"] = self.p2p
        return out


@dataclass(frozen=True)
class ModelSplit:
    """What one rank holds of the model's heads (:class:`tpsim.core.lowering.shard.Shard`)."""

    heads_per_gpu: int
    kv_heads_per_gpu: int
    kv_replication: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LayerBreakdown:
    """The critical path within one layer (-1 the embedding, ``num_layers`` the head)."""

    layer: int
    breakdown: Breakdown
    regime: str

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "breakdown_s": self.breakdown.to_dict(), "regime": self.regime}


@dataclass(frozen=True)
class EngineStats:
    """The engine's own figures: SimPy events, wall seconds, ranks it ran."""

    events: int
    wall_s: float
    ranks_simulated: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LayoutShape:
    tp: int
    pp: int
    dp: int
    micro_batches: int
    pp_layers: tuple[int, ...]
    ep: int = 1  # expert-parallel ranks of the MoE layers
    attention_dp: int = 1  # attention data-parallel groups sharing them
    moe_tp: int = 1  # ranks splitting each routed expert's width

    def to_dict(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "micro_batches": self.micro_batches,
            "pp_layers": list(self.pp_layers),
            "ep": self.ep,
            "attention_dp": self.attention_dp,
            "moe_tp": self.moe_tp,
        }


@dataclass(frozen=True)
class Placed:
    """One layout rank: its (dp, pp, attention_dp, tp) coordinates and the GPU it runs on."""

    rank: int
    dp: int
    pp: int
    tp: int
    gpu: str
    attention_dp: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RunConfig:
    """What was run: the summary's ``config``. ``dtype`` and ``kv_dtype`` are the resolved
    precisions, written over the options' own; ``placement`` only for a layout."""

    model: ModelSpec
    topology: str
    nodes: int
    gpu: str
    tp: int
    gpus_per_node: int
    gpus: tuple[str, ...]
    ring_order: tuple[int, ...]
    layout: LayoutShape
    workload: Workload
    options: Options
    dtype: str
    kv_dtype: str
    launch_effective: str
    placement: tuple[Placed, ...] | None = None
    #: how 8- and 4-bit weights run on this GPU (Precision.note; '' for 16-bit runs):
    #: said in the run's text, not in the JSON
    precision_note: str = ""
    #: hosts joined over a network: its NICs per host, each one's rate and the one-way
    #: NIC-to-NIC latency, as simulated (None on one host)
    network: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model.to_dict(),
            "topology": self.topology,
            "nodes": self.nodes,
            "gpu": self.gpu,
            "tp": self.tp,
            "gpus_per_node": self.gpus_per_node,
            "gpus": list(self.gpus),
            "ring_order": list(self.ring_order),
            "layout": self.layout.to_dict(),
        }
        if self.placement is not None:
            out["placement"] = [p.to_dict() for p in self.placement]
        if self.network is not None:
            out["network"] = dict(self.network)
        out["workload"] = asdict(self.workload)
        out["options"] = asdict(self.options) | {"dtype": self.dtype, "kv_dtype": self.kv_dtype}
        out["launch_effective"] = self.launch_effective
        return out


@dataclass(frozen=True)
class InFlight:
    """A pipeline's decode as serving engines run it (vLLM's virtual engines, the
    micro-batches TensorRT-LLM and SGLang keep in flight): ``batches`` batches like the
    simulated one crossing the stages at once, each getting a token every ``tpot_s``
    (:func:`~tpsim.core.metrics.pipelined_tpot`), with every batch's KV cache held; what
    ``plan`` prices. ``fits``: whether the fullest GPU holds them (``bytes_per_gpu``)."""

    batches: int
    tpot_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    bytes_per_gpu: int
    fits: bool
    #: the largest batch of which ``batches`` fit at once (each stage's weights and this
    #: batch's activations beside ``batches`` times a batch's KV cache)
    largest_batch: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Summary:
    """One run's summary. ``memory`` is the worst stage's (``memory_stage``, None for one
    group); ``tokens_per_s_per_replica`` and ``memory_per_stage`` are None for one group."""

    config: RunConfig
    latency_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    regime: str
    breakdown: Breakdown
    memory: MemoryUse
    communication: Communication
    model_split: ModelSplit
    layers: tuple[LayerBreakdown, ...]
    engine: EngineStats
    tokens_per_s_per_replica: float | None = None
    memory_stage: int | None = None
    memory_per_stage: tuple[MemoryUse, ...] | None = None
    #: a pipeline's: seconds one batch spends in each stage (tpsim.core.metrics.stage_times)
    stage_s: tuple[float, ...] | None = None

    @property
    def in_flight(self) -> InFlight | None:
        """A pipeline's decode step of one batch (one micro-batch) run as serving engines
        run it, ``pp`` batches in flight (None: one stage, prefill, several micro-batches,
        or an engine that splits each batch itself and runs one at a time)."""
        lay, w = self.config.layout, self.config.workload
        splits = self.config.options.calibration.engine.pipeline_split_tokens is not None
        if lay.pp <= 1 or lay.micro_batches != 1 or w.phase != "decode" or splits:
            return None
        tpot = pipelined_tpot(self.latency_s, max(self.stage_s or (self.latency_s,)), lay.pp)
        rate = lay.dp * lay.attention_dp * lay.pp * w.batch / tpot
        stages = self.memory_per_stage or (self.memory,)
        # the other batches' KV caches beside this one's, on every stage
        need = max(m.total_bytes_per_gpu + (lay.pp - 1) * m.kv_cache_bytes_per_gpu for m in stages)
        room = min(m.capacity_bytes_per_gpu for m in stages)
        gpus = lay.tp * lay.attention_dp * lay.pp * lay.dp
        # a batch's KV cache and activations grow with it (decode rows, the logits), the
        # weights stay: b' of them fit while weights + b' (act + pp kv) / b holds
        most = min(
            (m.capacity_bytes_per_gpu - m.weights_bytes_per_gpu)
            * w.batch
            // (m.activation_bytes_per_gpu + lay.pp * m.kv_cache_bytes_per_gpu)
            if m.kv_cache_bytes_per_gpu
            else w.batch
            for m in stages
        )
        return InFlight(lay.pp, tpot, rate, rate / gpus, need, need <= room, max(0, most))

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract: today's keys in today's order."""
        out: dict[str, Any] = {
            "config": self.config.to_dict(),
            "latency_s": self.latency_s,
            "tokens_per_s": self.tokens_per_s,
        }
        if self.tokens_per_s_per_replica is not None:
            out["tokens_per_s_per_replica"] = self.tokens_per_s_per_replica
        out["tokens_per_s_per_gpu"] = self.tokens_per_s_per_gpu
        out["regime"] = self.regime
        out["breakdown_s"] = self.breakdown.to_dict()
        memory: dict[str, Any] = self.memory.to_dict()
        if self.memory_stage is not None:
            memory = memory | {"stage": self.memory_stage}
        out["memory"] = memory
        if self.memory_per_stage is not None:
            out["memory_per_stage"] = [m.to_dict() for m in self.memory_per_stage]
        if self.stage_s is not None:
            out["stage_s"] = list(self.stage_s)
        flight = self.in_flight
        if flight is not None:
            out["in_flight"] = flight.to_dict()
        out["communication"] = self.communication.to_dict()
        out["model_split"] = self.model_split.to_dict()
        out["layers"] = [layer.to_dict() for layer in self.layers]
        out["engine"] = self.engine.to_dict()
        return out


def layers_of(layers: Sequence[Mapping[str, Any]]) -> tuple[LayerBreakdown, ...]:
    """:func:`tpsim.core.metrics.breakdown_by_layer`'s rows, typed."""
    return tuple(
        LayerBreakdown(row["layer"], Breakdown.of(row["breakdown_s"]), row["regime"])
        for row in layers
    )


__all__ = [
    "Breakdown",
    "Communication",
    "EngineStats",
    "LayerBreakdown",
    "LayoutShape",
    "ModelSplit",
    "Placed",
    "RunConfig",
    "SiteComm",
    "Summary",
    "layers_of",
]
