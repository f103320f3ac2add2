"""The LLMCompass entry: its cases are the file's prefill operators, each priced by the
function a run prices it with, and together within the entry's bound."""

from __future__ import annotations

import pytest
from tpsim.calibration import default as default_calibration
from tpsim.core.kernels import costs
from tpsim.core.kernels.costs import hardware_for
from tpsim.experiments.validation import llmcompass as lc
from tpsim.experiments.validation.registry import BY_NAME
from tpsim.topologies.gpus import get_gpu


def test_the_cases_are_the_ten_prefill_operators_once_each() -> None:
    got = {c.op: c.measured_s for c in lc.cases()}
    assert list(got) == list(lc.OPS)
    assert got["Q_K_V"] == pytest.approx(13721.82e-6)
    assert got["LayerNorm"] == pytest.approx(681.64e-6)  # MHA and FFN: one measurement
    assert got["AllReduce"] == pytest.approx(2890.9e-6)


def test_q_k_and_v_are_three_gemms_of_a_quarter_of_the_model() -> None:
    hw = hardware_for(get_gpu(lc.GPU), "fp16", default_calibration().kernels, kv_dtype="fp16")
    one = costs.gemm(8 * 2048, 12288 // 4, 12288, hw, act_bytes=2, w_bytes=2).seconds
    assert lc.price("Q_K_V") == pytest.approx(3 * one)


def test_the_score_matmul_writes_a_score_per_key_and_query() -> None:
    # Q K^T: 8 x 24 matrices [2048, 128] @ [128, 2048], fp16: 1.61 GB of scores written
    flops = 2 * 8 * 24 * 2048 * 2048 * 128
    hw = hardware_for(get_gpu(lc.GPU), "fp16", default_calibration().kernels, kv_dtype="fp16")
    t = lc.price("Q_mul_K")
    assert t > 8 * 24 * 2048 * 2048 * 2 / hw.hbm_achievable_Bps  # at least the scores' bytes
    assert t > flops / hw.matmul_flops


def test_the_entry_holds_the_prefill_within_its_bound() -> None:
    entry = BY_NAME["llmcompass-gpt3-prefill"]
    comparison = entry.runner()
    assert comparison.points == 10 and len(comparison.rows) == 10
    assert comparison.error == pytest.approx(lc.geomean_error())
    assert entry.status(comparison.error) == "pass"
    big = {r.label: r.error for r in comparison.rows}
    for op in ("Q_K_V", "Wo_proj", "W1_proj", "W2_proj", "AllReduce"):
        assert abs(big[op]) < 0.06, op  # the GEMMs and the all-reduce within 6%
