"""``tpsim plan`` prices a pipeline's decode as serving engines run it (issue #25): P batches
in flight, no fill per step, so a pipeline is not shrunk to a batch of 1-4."""

from __future__ import annotations

import pytest
from tpsim.core.api import simulate
from tpsim.core.config import Layout, Workload
from tpsim.experiments.plan import PlanRequest, decode_step, evaluate

REQ = PlanRequest("llama-2-7b", "dgx-h100", prompt_len=512, context_len=1024, slo_tpot_ms=30)


def _latency(tp: int, pp: int, batch: int, micro_batches: int) -> float:
    lay = Layout(tp, pp=pp, micro_batches=micro_batches)
    return simulate(
        "llama-2-7b", "dgx-h100", lay, Workload(batch, "decode", 512, 1024)
    ).typed.latency_s


def test_a_pipeline_keeps_one_batch_per_stage_in_flight() -> None:
    step = decode_step(REQ, tp=2, pp=2, dp=1)(64)
    alone = _latency(2, 2, 32, 1)  # one of the two batches crossing both stages
    filled = _latency(2, 2, 64, 2)  # the whole batch as two micro-batches filling the pipe
    assert step.batch == 64
    assert step.tpot_s == pytest.approx(alone)  # balanced stages: the pass decides
    assert step.tpot_s < filled
    assert step.tokens_per_s == pytest.approx(64 / step.tpot_s)
    assert step.regime != "bubble-bound" and "bubble" not in dict(step.breakdown)
    # the breakdown is on TPOT's basis (the verdict compares it with one-stage layouts')
    assert sum(dict(step.breakdown).values()) == pytest.approx(step.tpot_s)


def test_batches_in_flight_are_whole_batches_per_stage() -> None:
    step = decode_step(REQ, tp=1, pp=4, dp=2)(30)  # 7 per batch, 4 batches in flight
    assert step.batch == 28
    assert step.tokens_per_s == pytest.approx(2 * 28 / step.tpot_s)
    assert step.headroom_bytes > 0


def test_a_pipeline_s_batch_grows_to_the_slo_not_to_a_fill() -> None:
    """TP 2 x PP 2 on 8 H100s serves about what TP 2 x DP 2 does (the sends apart): the
    same sequences per GPU at the same TPOT, where a fill per step made it a batch of 1-4."""
    pipe = evaluate(REQ, tp=2, pp=2, dp=2)
    replicas = evaluate(REQ, tp=2, pp=1, dp=4)
    assert pipe is not None and replicas is not None
    assert pipe.batch > 64 and pipe.tpot_ok
    assert pipe.tokens_per_s == pytest.approx(replicas.tokens_per_s, rel=0.15)


def test_run_text_gives_the_pipeline_with_its_batches_in_flight() -> None:
    """``tpsim run --pp`` times one batch's step (the fill included) and says beside it what
    the pipeline serves with a batch in flight per stage, by the rule ``plan`` uses."""
    from tpsim.core.metrics import pipelined_tpot
    from tpsim.outputs.text import summary_text

    s = simulate("llama-2-7b", "dgx-h100", Layout(2, pp=2),
                 Workload(16, "decode", 512, 1024)).typed  # fmt: skip
    assert s.stage_s is not None and sum(s.stage_s) == pytest.approx(s.latency_s, rel=0.03)
    tpot = pipelined_tpot(s.latency_s, max(s.stage_s), 2)
    assert s.latency_s <= tpot < 1.2 * s.latency_s
    line = next(ln for ln in summary_text(s).splitlines() if "in flight" in ln)
    assert f"{2 * 16 / tpot:,.0f} tokens/s" in line and "2 batches like this one" in line
    filled = simulate("llama-2-7b", "dgx-h100", Layout(2, pp=2, micro_batches=2),
                      Workload(16, "decode", 512, 1024)).typed  # fmt: skip
    assert "in flight" not in summary_text(filled)  # a micro-batched step is its own schedule
    # a batch whose KV cache fits once but not once per stage: no throughput it cannot hold
    big = simulate("llama-3.1-70b", "dgx-h100", Layout(4, pp=2),
                   Workload(900, "decode", 512, 1024)).typed  # fmt: skip
    line = next(ln for ln in summary_text(big).splitlines() if "in flight" in ln)
    assert "would need" in line and "--batch 693 or less" in line and "tokens/s" not in line
    most = simulate("llama-3.1-70b", "dgx-h100", Layout(4, pp=2),
                    Workload(693, "decode", 512, 1024)).typed  # fmt: skip
    assert most.in_flight is not None and most.in_flight.fits  # the largest, not 900 / 2


def test_the_batch_is_where_tokens_per_s_peaks_not_only_the_largest_meeting_the_slo() -> None:
    """Llama-3.1-70B at TP 8 on an H100 node, TPOT under 30 ms: 320 sequences meet it at
    10,813 tokens/s, 256 at 12,033 (past 256 a GEMM's rows spill into another row of
    tiles); the plan takes 256 and says why."""
    req = PlanRequest(
        "llama-3.1-70b", "dgx-h100", prompt_len=512, context_len=1024, slo_tpot_ms=30.0
    )  # the CLI's default lengths
    row = evaluate(req, 8, 1, 1)
    assert row is not None and row.batch == 256 and row.batch_limit == "tokens/s peak"
    larger = decode_step(req, 8, 1, 1)(320)
    assert larger.tpot_s * 1e3 <= 30 and larger.tokens_per_s < row.tokens_per_s


@pytest.mark.parametrize("layers", [(70, 10), (10, 70)])
def test_the_slowest_stage_sets_the_pipeline_s_rate_wherever_it_sits(layers: tuple) -> None:
    """Two batches in flight over stages of 70 and 10 layers: the 70-layer stage serves
    both every token, first stage or last (the last stage's share alone priced 70,10 as
    fast as a balanced split)."""
    lay = Layout(8, pp=2, pp_layers=layers)
    s = simulate("llama-3.1-70b", "dgx-h100", lay, Workload(32, "decode", 512, 2048),
                 nodes=2).typed  # fmt: skip
    assert s.stage_s is not None
    big = s.stage_s[layers.index(70)]
    assert big > 5 * s.stage_s[layers.index(10)]
    from tpsim.outputs.text import summary_text

    line = next(ln for ln in summary_text(s).splitlines() if "in flight" in ln)
    assert f"{2 * 32 / (2 * big):,.0f} tokens/s" in line


def test_a_stage_of_attention_dp_groups_is_timed_over_all_its_ranks() -> None:
    """With attention DP a stage is tp x attention_dp ranks: taking tp of them timed other
    groups' ranks (Qwen3-30B-A3B, 40 + 8 layers: 1.13 ms for the 40-layer stage, not 4.9),
    and the in-flight rate left the groups' batches out."""
    from tpsim.outputs.text import summary_text

    lay = Layout(2, pp=2, attention_dp=2, pp_layers=(40, 8))
    s = simulate("qwen3-30b-a3b", "dgx-h100", lay, Workload(2, "decode", 512, 1024)).typed
    assert s.stage_s is not None and s.stage_s[0] > 3 * s.stage_s[1]
    assert s.breakdown.bubble is not None and s.breakdown.bubble < s.latency_s
    line = next(ln for ln in summary_text(s).splitlines() if "in flight" in ln)
    assert f"{2 * 2 * 2 / (2 * s.stage_s[0]):,.0f} tokens/s" in line
    micro = simulate("llama-2-7b", "dgx-h100", Layout(2, pp=2, micro_batches=2),
                     Workload(8, "decode", 512, 1024)).typed  # fmt: skip
    assert micro.stage_s is None  # a stage serves several micro-batches: no one batch's share


def test_the_batch_is_no_more_than_the_engine_runs_at_once() -> None:
    """vLLM runs at most max_num_seqs sequences (1024 on an 80 GB GPU) per engine, one
    engine per pipeline stage as serve runs them: plan had given TP 4 x PP 2 of Qwen3-30B-A3B
    2684 sequences (2 x 1342) and TP 8 1342, which only memory bounded; --batch-max lifts
    the cap (the engine set to run that many)."""
    req = PlanRequest("qwen3-30b-a3b", "dgx-h100", context_len=2048)
    plain, piped = evaluate(req, tp=8, pp=1, dp=1), evaluate(req, tp=4, pp=2, dp=1)
    assert plain is not None and piped is not None
    assert (plain.batch, piped.batch) == (1024, 2048)
    assert plain.batch_limit == "the engine's max_num_seqs, 1024"
    assert piped.batch_limit == "the engine's max_num_seqs, 1024 a virtual engine"
    lifted = evaluate(PlanRequest("qwen3-30b-a3b", "dgx-h100", context_len=2048,
                                  batch_max=1200), tp=8, pp=1, dp=1)  # fmt: skip
    assert lifted is not None and lifted.batch == 1200 and lifted.batch_limit == "--batch-max"
