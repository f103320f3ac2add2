"""The one simulate path (issue #23): options resolved once into a RunPlan, one typed
Summary whose ``to_dict`` is the JSON contract, for a TP-only run and a layout alike."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest
from tpsim import Layout, Workload, simulate
from tpsim.core.plan import one_group, resolve
from tpsim.core.summary import Breakdown, Summary
from tpsim.models.catalog import get_model

SPEC = replace(get_model("llama-3.1-8b"), num_layers=2)
TP_KEYS = [
    "config", "latency_s", "tokens_per_s", "tokens_per_s_per_gpu", "regime", "breakdown_s",
    "memory", "communication", "model_split", "layers", "engine",
]  # fmt: skip
CONFIG_KEYS = [
    "model", "topology", "nodes", "gpu", "tp", "gpus_per_node", "gpus", "ring_order", "layout",
    "workload", "options", "launch_effective",
]  # fmt: skip


def test_tp_only_summary_keys() -> None:
    r = simulate(SPEC, "dgx-h100", 4, Workload(batch=2))
    assert isinstance(r.typed_summary, Summary)
    assert r.typed_summary.to_dict() == r.summary
    assert list(r.summary) == TP_KEYS
    assert list(r.summary["config"]) == CONFIG_KEYS
    assert list(r.summary["breakdown_s"])[-1] == "idle"
    assert r.summary["config"]["layout"] == {
        "tp": 4, "pp": 1, "dp": 1, "micro_batches": 1, "pp_layers": [2],
        "ep": 1, "attention_dp": 1, "moe_tp": 4,
    }  # fmt: skip
    assert r.typed_summary.breakdown.total() == pytest.approx(r.latency_s)


def test_layout_summary_keys() -> None:
    r = simulate(SPEC, "dgx-h100", Layout(2, pp=2, dp=2), Workload(batch=2))
    s = r.typed_summary
    assert s is not None and s.to_dict() == r.summary
    keys = [*TP_KEYS[:3], "tokens_per_s_per_replica", *TP_KEYS[3:7], "memory_per_stage"]
    keys += ["stage_s", "in_flight"]  # a decode of one micro-batch: its pipeline kept full
    assert list(r.summary) == keys + TP_KEYS[7:]
    flight = r.summary["in_flight"]
    assert flight["batches"] == 2 and flight["tpot_s"] >= max(r.summary["stage_s"]) * 2
    assert flight["tokens_per_s"] == pytest.approx(2 * 2 * 2 / flight["tpot_s"])  # dp pp b
    assert list(r.summary["config"]) == [*CONFIG_KEYS[:9], "placement", *CONFIG_KEYS[9:]]
    assert list(r.summary["breakdown_s"])[-2:] == ["idle", "bubble"]
    assert r.summary["memory"]["stage"] == s.memory_stage
    assert s.config.placement is not None and len(s.config.placement) == 8
    json.dumps(r.summary)  # the contract stays JSON


def test_plan_resolves_once() -> None:
    plan = resolve(SPEC, "dgx-h100", 4)
    assert plan.one_group and one_group(plan.layout)
    assert plan.stages == (range(0, 2),) and len(plan.memory) == 1
    layout = resolve(SPEC, "dgx-h100", Layout(2, pp=2))
    assert not layout.one_group and layout.gpu_ranks == (0, 1, 2, 3)
    assert len(layout.memory) == 2


def test_breakdown_round_trip() -> None:
    parts = {"compute": 1.0, "memory": 2.0, "communication": 0.5, "launch_overhead": 0.0,
             "host": 0.0, "idle": 0.25}  # fmt: skip
    assert Breakdown.of(parts).to_dict() == parts
    assert list(Breakdown.of(parts | {"bubble": 1.0}).to_dict())[-1] == "bubble"


def test_api_does_not_import_parallel_back() -> None:
    """api imports parallel and plan; neither they nor summary import api (the former cycle)."""
    import tpsim.core.parallel as parallel
    import tpsim.core.plan as plan
    import tpsim.core.summary as summary

    for module in (parallel, plan, summary):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "tpsim.core.api" not in names, module.__name__


def test_in_flight_names_the_largest_batch_whose_batches_fit() -> None:
    """Llama-3.1-405B fp8, TP 8 x PP 2 on two DGX H100 at 8K context: two batches of 192 do
    not fit and the advice was 192 / 2 = 96, where 191 fit; it is now the largest that does."""
    from tpsim import Options

    def flight(b: int) -> dict:
        r = simulate("llama-3.1-405b", "dgx-h100", Layout(8, pp=2), Workload(b, context_len=8192),
                     Options(dtype="fp8", kv_dtype="fp8"), nodes=2)  # fmt: skip
        return r.summary["in_flight"]

    over = flight(192)
    assert not over["fits"] and over["largest_batch"] == 191
    assert flight(191)["fits"]


def test_in_flight_s_largest_batch_is_the_same_from_a_small_batch_or_a_large_one() -> None:
    """The largest batch of which P fit grows each stage's activations and KV cache with the
    batch (it had held the small batch's activations: 698 from batch 8 against 692)."""

    def largest(b: int) -> int:
        r = simulate("llama-3.1-70b", "dgx-h100", Layout(4, pp=2), Workload(b, "decode", 512, 1024))
        return r.summary["in_flight"]["largest_batch"]

    assert largest(8) == largest(900) == 693
