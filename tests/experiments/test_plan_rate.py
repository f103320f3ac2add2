"""tpsim plan --rate / --concurrency: the most traffic a serving unit sustains under the SLOs,
found by simulation, and the units and GPUs a requested traffic needs."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
from tpsim.cli import main
from tpsim.experiments.plan_rate import RateRequest, _Prober, _setup, evaluate, verdict

SMALL = dict(prompt_len=512, output_len=32, requests=60, slo_ttft_ms=200.0, slo_tpot_ms=15.0)


@pytest.fixture(scope="module")
def tp1() -> tuple[RateRequest, object]:
    req = RateRequest("llama-3.1-8b", "dgx-h100", rate=30, **SMALL)  # type: ignore[arg-type]
    return req, evaluate(req, 1, 1, 0, 1)


def test_the_rate_found_is_the_edge(tp1: tuple[RateRequest, object]) -> None:
    """At the rate found the unit meets the SLOs; 10 % above it, it does not (the bisection's
    bracket), and the requested rate needs ceil(R / max) units."""
    req, row = tp1
    assert row is not None and row.ok and row.limit in ("p99 TTFT", "p99 TPOT", "saturation")
    prober = _Prober(req, _setup(req, 1, 1, 0, 1))
    prober.run(1.0)  # as the search does first: its latency sizes the later runs
    assert prober.count(row.max_load * 1.1) >= row.max_load * 1.1 * 10 * prober.latency_s
    assert prober.judge(prober.run(row.max_load))[0] == ""
    assert prober.judge(prober.run(row.max_load * 1.1))[0] != ""
    assert row.units == math.ceil(30 / row.max_load) and row.gpus == row.units * 1
    assert row.ttft_ms <= 200 and row.tpot_ms <= 15


def test_a_tighter_slo_sustains_less(tp1: tuple[RateRequest, object]) -> None:
    _, row = tp1
    tight = RateRequest(
        "llama-3.1-8b", "dgx-h100", rate=30, **{**SMALL, "slo_tpot_ms": row.tpot_ms * 0.9}
    )  # type: ignore[arg-type]
    t = evaluate(tight, 1, 1, 0, 1)
    assert t is not None and t.max_load < row.max_load


def test_an_attention_data_parallel_unit_is_sized_as_a_whole() -> None:
    """Two attention groups of one GPU over experts split two ways: a unit of 2 GPUs whose
    batch counts both groups' sequences, at a rate its groups keep under the SLOs."""
    req = RateRequest("qwen3-30b-a3b", "dgx-h100", rate=20, disaggregated=False,
                      **{**SMALL, "slo_tpot_ms": 25.0})  # type: ignore[arg-type]  # fmt: skip
    row = evaluate(req, 1, 2, 0, 1, 2)
    assert row is not None and row.ok
    assert (row.label, row.attention_dp, row.unit_gpus) == ("TP 1 x ADP 2 EP 2", 2, 2)
    assert row.tpot_ms <= 25 and row.gpus == row.units * 2
    prober = _Prober(req, _setup(req, 1, 2, 0, 1, 2))
    r = prober.run(row.max_load)
    assert len(r.steps) == 2  # the two groups' records


def test_a_pipeline_unit_spans_hosts() -> None:
    """TP 8 in each of two hosts as two pipeline stages: a unit of 16 GPUs, labelled so."""
    req = RateRequest("llama-3.1-8b", "dgx-h100", nodes=2, rate=20, disaggregated=False,
                      **SMALL)  # type: ignore[arg-type]  # fmt: skip
    row = evaluate(req, 8, 1, 0, 1, 1, 2)
    assert row is not None and row.ok
    assert (row.label, row.pp, row.unit_gpus) == ("TP 8 x PP 2", 2, 16)
    assert row.tpot_ms <= 15 and row.gpus == row.units * 16


def test_an_impossible_slo_says_so_and_shows_the_closest() -> None:
    req = RateRequest(
        "llama-3.1-8b", "dgx-h100", rate=5, disaggregated=False, **{**SMALL, "slo_ttft_ms": 0.5}
    )  # type: ignore[arg-type]
    rows = [r for r in (evaluate(req, t, 1, 0, 1) for t in (1, 2)) if r is not None]
    assert all(not r.ok and r.miss > 1 for r in rows)
    rows.sort(key=lambda r: r.miss)
    text = verdict(rows, req)
    assert text.startswith("No unit meets the SLOs") and rows[0].label in text


def test_closed_loop_cost_is_at_the_requested_clients() -> None:
    """$/Mtok of a closed loop is priced at the clients each unit gets of the requested ones,
    not at the most one unit sustains (a unit with fewer clients makes fewer tokens/s)."""
    req = RateRequest("llama-3.1-8b", "dgx-h100", concurrency=50, gpu_hour_usd=2.0,
                      disaggregated=False, **SMALL)  # type: ignore[arg-type]  # fmt: skip
    row = evaluate(req, 1, 1, 0, 1)
    assert row is not None and row.ok and row.units >= 2 and row.usd_per_mtok is not None
    prober = _Prober(req, _setup(req, 1, 1, 0, 1))
    prober.run(1.0)
    share, extra = divmod(50, row.units)
    per_s = sum(k * prober.run(float(c)).summary()["output_throughput"]
                for c, k in ((share + 1, extra), (share, row.units - extra)) if k)  # fmt: skip
    assert row.usd_per_mtok == pytest.approx(row.units * 2.0 / 3600 / per_s * 1e6, rel=1e-9)
    at_max = prober.run(row.max_load).summary()["output_throughput"]
    assert row.usd_per_mtok > 2.0 / 3600 / at_max * 1e6  # dearer than a unit at full load


def test_cli_concurrency_json_and_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--prompt-len", "512",
            "--output-len", "16", "--requests", "40", "--slo-tpot-ms", "12", "--jobs", "1",
            "--no-disaggregated"]  # fmt: skip
    assert main([*base, "--concurrency", "64", "--nodes", "1", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    units = j["units"]
    assert {u["tp"] for u in units} == {1, 2, 4, 8}
    best = j["recommendation"]  # the text's recommendation, its unit the table's first
    assert best["unit"] == units[0]["label"] and best["gpus"] == units[0]["gpus"]
    assert best["text"].startswith("Recommended: ") and best["meets_slo"] is True
    ok = [u for u in units if u["max_load"] > 0]
    assert ok and all(u["units"] == math.ceil(64 / u["max_load"]) for u in ok)
    assert main([*base, "--rate", "10", "--gpu-hour-usd", "2"]) == 0
    out = capsys.readouterr().out
    assert "Recommended:" in out and "$/Mtok" in out
    assert " GPU for 10 req/s" in out or " GPUs for 10 req/s" in out


@pytest.mark.parametrize(("args", "needle"), [
    (["--rate", "0"], "--rate"),
    (["--rate", "1", "--concurrency", "2"], "--concurrency=2"),
    (["--rate", "1", "--slo-percentile", "0"], "--slo-percentile"),
    (["--rate", "1", "--requests", "5"], "--requests=5"),
    (["--rate", "1", "--batch-max", "8"], "--batch-max=8"),
    (["--rate", "1", "--prompt-len", "4096"], "--output-len"),
    (["--concurrency", "8"], "never saturates"),
])  # fmt: skip
def test_bad_values(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--model", "llama-3.1-8b", "--topology", "dgx-h100", *args])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err


def test_disaggregated_units_sit_beside_aggregated() -> None:
    req = RateRequest("llama-3.1-8b", "dgx-h100", rate=20, **SMALL)  # type: ignore[arg-type]
    from tpsim.experiments.plan_rate import Unit, units

    us = units(req)
    assert Unit(1) in us and Unit(1, 1, 1, 1) in us and Unit(4, 1, 1, 1) in us
    assert all((u.prefill_workers + u.decode_workers) * u.tp <= 8 for u in us if u.prefill_workers)
    assert all(u.attention_dp == 1 and u.pp == 1 for u in us)  # no ADP, one host: no pipeline
    moe = units(RateRequest("qwen3-30b-a3b", "dgx-h100", rate=1, disaggregated=False))
    assert Unit(2, 2) in moe and Unit(2, 1) in moe  # experts split over the group too
    # attention data parallelism in one host, the experts over every group's GPUs
    assert Unit(1, 8, attention_dp=8) in moe and Unit(2, 8, attention_dp=4) in moe
    assert all(u.tp * u.attention_dp <= 8 for u in moe)
    # across hosts: a pipeline of whole hosts, one TP group each (vLLM's multi-node recipe)
    two = units(RateRequest("llama-3.1-70b", "dgx-h100", nodes=2, rate=1, disaggregated=False))
    assert Unit(8, pp=2) in two and all(u.tp == 8 for u in two if u.pp > 1)
    assert all(u.attention_dp == 1 for u in two)  # a dense model: no attention DP
    # a MoE model across hosts: attention groups over both hosts, the experts over all 16
    wide = units(RateRequest("qwen3-30b-a3b", "dgx-h100", nodes=2, rate=1, disaggregated=False))
    assert Unit(1, 16, attention_dp=16) in wide and Unit(4, 16, attention_dp=4) in wide
    assert all(u.tp * u.attention_dp in (1, 2, 4, 8, 16) for u in wide)


def test_static_plan_batches_are_limited_by_memory_or_the_slo() -> None:
    """No fixed cap: each layout's batch is the largest that fits in memory, or, where that
    misses the TPOT SLO, within 1/8 of the largest meeting it; the verdict's reason is what
    the rows show."""
    from tpsim.core.api import simulate
    from tpsim.core.config import Layout, Workload
    from tpsim.experiments.plan import PlanRequest, _fits, plan
    from tpsim.experiments.plan_text import recommendation

    req = PlanRequest("llama-3.1-8b", "dgx-h100", gpus=2, slo_tpot_ms=30)
    rows = plan(req, jobs=1)
    assert max(r.batch for r in rows) > 64
    for r in rows:
        fits = _fits(req, r.tp, r.pp)
        assert r.tpot_ok and fits(r.batch)
        assert r.batch_limit in ("memory", "TPOT SLO")
        if r.batch_limit == "memory":
            assert not fits(r.batch + 1)
        else:  # a batch 1/8 larger (or more) misses the SLO
            b = r.batch + max(1, r.batch // 8) + 1
            if fits(b):
                lay = Layout(r.tp, pp=r.pp, dp=r.dp, micro_batches=min(r.pp, b))
                w = Workload(b, "decode", req.prompt_len, req.context_len)
                assert simulate(req.model, req.topology, lay, w).typed.latency_s * 1e3 > 30
    best, second = rows[0], rows[1]
    text = recommendation(rows)
    if best.in_flight > second.in_flight:
        assert f"limited by {best.batch_limit}" in text
    else:
        assert best.tpot_s < second.tpot_s and "decode step is" in text


def test_static_plan_with_no_layout_meeting_the_slos_names_the_closest() -> None:
    from tpsim.experiments.plan import PlanRequest, plan
    from tpsim.experiments.plan_text import recommendation

    rows = plan(PlanRequest("llama-3.1-8b", "dgx-h100", gpus=2, slo_tpot_ms=30, slo_ttft_ms=5),
                jobs=1)  # fmt: skip
    assert not any(r.slo_ok for r in rows)
    assert rows[0].miss == min(r.miss for r in rows) > 1
    text = recommendation(rows)
    assert text.startswith("No layout meets the SLOs. The closest is " + rows[0].label)


def test_the_static_table_s_cost_column_lines_up_after_a_missed_slo() -> None:
    """README's plan: '$/Mtok' of a row that missed its TPOT SLO stood 8 characters right of
    the others' ('met    0.396' against 'TPOT missed   71.604')."""
    from tpsim.experiments.plan import PlanRequest, PlanRow
    from tpsim.experiments.plan_text import table

    def row(tp: int, tpot_ok: bool, usd: float) -> PlanRow:
        return PlanRow(tp, 1, 8 // tp, 8, 0.05, 0.03, 1e3, 125.0, 10**10, "memory-bound",
                       True, tpot_ok, usd)  # fmt: skip

    req = PlanRequest("llama-3.1-70b", "dgx-h100", slo_tpot_ms=30, gpu_hour_usd=2.5)
    head, met, missed = table([row(4, True, 0.396), row(1, False, 71.604)], req).splitlines()[:3]
    assert met.endswith("met            0.396") and missed.endswith("TPOT missed   71.604")
    assert head.index("$/Mtok") + len("$/Mtok") == len(met) == len(missed)


def test_a_short_probe_judged_saturated_runs_again_long_enough(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A probe that looks saturated after fewer than 10 lifetimes of its first quarter's
    requests runs again, long enough (a short run can show a queue's fill as growth, and
    such probes were taken as the unit's limit: TP 4 at 50 req/s where it sustains 58)."""
    req = RateRequest("llama-3.1-8b", "dgx-h100", rate=30, **SMALL)  # type: ignore[arg-type]
    prober = _Prober(req, _setup(req, 1, 1, 0, 1))
    prober.run(1.0)
    real = prober._serve
    asked: list[int] = []

    def serve(load: float, n: int):  # type: ignore[no-untyped-def]
        asked.append(n)
        r = real(load, n)
        if len(asked) == 1:  # the first run as a saturated one: its summary says so
            return SimpleNamespace(
                requests=r.requests,
                timer=r.timer,
                summary=lambda: {**r.summary(), "saturated": True},
            )
        return r

    monkeypatch.setattr(prober, "_serve", serve)
    prober.run(60.0)  # about twice what it sustains: its requests live longer than at 1
    assert len(asked) == 2 and asked[1] > asked[0]


def test_traffic_lengths_may_be_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    """Under traffic --prompt-len and --output-len take tpsim serve's distributions (clients
    with one length stay in step; varied lengths are not); the static plan refuses them, and
    a distributed prompt needs its --output-len."""
    base = ["plan", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--requests", "40",
            "--slo-tpot-ms", "15", "--jobs", "1", "--no-disaggregated", "--nodes", "1"]  # fmt: skip
    assert main([*base, "--rate", "4", "--prompt-len", "uniform:256-768", "--output-len",
                 "uniform:8-24", "--json"]) == 0  # fmt: skip
    units = json.loads(capsys.readouterr().out)["units"]
    assert units and all(u["max_load"] > 0 for u in units)
    for argv, says in (
        (["--prompt-len", "uniform:256-768"], "a number of tokens (a distribution"),
        (["--rate", "4", "--prompt-len", "uniform:256-768"], "give --output-len too"),
        (["--rate", "4", "--output-len", "zipf:1"], "--output-len=zipf:1"),
    ):
        assert main([*base[:5], *argv]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1


def test_the_output_rate_of_a_distribution_is_its_mean() -> None:
    req = RateRequest("llama-3.1-8b", "dgx-h100", rate=3, gpu_hour_usd=2.0,
                      **{**SMALL, "output_len": "uniform:10-30"})  # type: ignore[arg-type]  # fmt: skip
    prober = _Prober(req, _setup(req, 1, 1, 0, 1))
    from tpsim.experiments.plan_rate import _output_rate

    assert _output_rate(req, prober, 3.0, prober.run(1.0), 1) == pytest.approx(3 * 20)


def test_a_closed_loop_is_judged_without_its_cold_start() -> None:
    """Every client's first request is sent at t = 0: that wave queues as no steady stream of
    users does, and set the p99 TTFT of a 10-requests-a-client probe alone."""
    import numpy as np
    from tpsim.experiments.serve.metrics import per_request

    lengths = {**SMALL, "prompt_len": "uniform:256-768", "output_len": "uniform:16-48"}
    req = RateRequest("llama-3.1-8b", "dgx-h100", concurrency=16,
                      **lengths)  # type: ignore[arg-type]  # fmt: skip
    prober = _Prober(req, _setup(req, 1, 1, 0, 1))
    r = prober.run(16.0)
    later = [x for x in r.requests if x.arrival_s > 0]
    assert 0 < len(later) < len(r.requests)
    _, ttft, _, _ = prober.judge(r)
    assert ttft == pytest.approx(float(np.percentile(per_request(later)["ttft"], 99)) * 1e3)
    assert ttft < float(np.percentile(per_request(r.requests)["ttft"], 99)) * 1e3


def test_static_plan_holds_no_more_sequences_than_the_engine_s_kv_cache() -> None:
    """Qwen3-235B, TP 4 x attention DP 2, EP 8 on 8 H100s: plan took batch 307 a group (what
    run's memory allows), where vLLM's cache, sized at start-up beside a profiling step of
    8,192 tokens, holds 285 sequences of 1,024 tokens: serving 307 preempted and missed the
    TPOT SLO the plan said it met. The batch is now the cache's (287: the profiling step's
    expert buffers as the fused MoE kernel holds them, gate|up and output in one)."""
    from tpsim.calibration.scheduler import scheduler
    from tpsim.core.config import Options
    from tpsim.core.step_timer import IterationTimer
    from tpsim.experiments.plan import PlanRequest, _fits, engine_sequences
    from tpsim.experiments.serve.run import kv_blocks

    req = PlanRequest("qwen3-235b-a22b", "dgx-h100", context_len=1024)
    most = engine_sequences(req, 4, 1, 8, 2)
    it = IterationTimer(req.model, req.topology, 4, Options(), ep=8, attention_dp=2)
    kv = kv_blocks(it, scheduler("vllm", it.plan.gpu.hbm_bytes))
    assert most == kv.blocks // (1024 // kv.block_size) == 287
    fits = _fits(req, 4, 1, 8, 2)
    assert fits(most) and not fits(most + 1)
