"""Serving engines end to end against the published measurements shipped with the package
(the numbers judge the profiles; one constant is fitted to them: tgi-v1's Python per decoder
layer, to the two TGI rows at TP 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim.experiments.validation.engines import (
    BOUND,
    e2e_cases,
    geomean_error,
    lmdeploy_cases,
    run,
    simulate_case,
)


def test_cases_cover_the_files() -> None:
    lm = lmdeploy_cases()
    assert len(lm) == 72 and {c.model for c in lm} == {"llama-2-7b", "llama-2-13b", "llama-2-70b"}
    e2e = e2e_cases()
    assert sum(c.file == "tgi" for c in e2e) == 6
    assert sum(c.file == "vllm-2023" for c in e2e) == 4  # the A30 and T4 rows have no GPU


@pytest.mark.slow
def test_every_file_and_all_together_within_the_bound(tmp_path: Path) -> None:
    by_file: dict[str, list[tuple[float, float]]] = {}
    for case in lmdeploy_cases() + e2e_cases():
        by_file.setdefault(case.file, []).append((simulate_case(case), case.measured_s))
    for points in by_file.values():
        assert geomean_error(points) <= BOUND
    assert geomean_error([p for points in by_file.values() for p in points]) <= BOUND
    lines = list(run(tmp_path, e2e_cases()[:4]))
    assert lines[-1].startswith("wrote") and (tmp_path / "engine_calibration.png").is_file()


def test_tgi_fitted_at_tp_2_predicts_tp_1_and_tp_4() -> None:
    """tgi-v1's Python per layer is fitted to the two host-bound TP 2 rows; TP 1 (the GPUs'
    time) and TP 4 (the same host floor; measured 10-13% above it) are predictions within 12%,
    and TP 4 is no faster than TP 2: the host, not the GPUs, sets the step."""
    tgi = {c.label: (simulate_case(c), c.measured_s) for c in e2e_cases() if c.file == "tgi"}
    for label, (sim, meas) in tgi.items():
        assert abs(sim / meas - 1) < (0.03 if label.endswith("TP2") else 0.12), label
    for gpu in ("A100-80G", "H100"):
        assert tgi[f"TGI {gpu} TP4"][0] > 0.97 * tgi[f"TGI {gpu} TP2"][0]


def test_lmdeploy_first_tokens_take_a_prefill_and_a_decode_step() -> None:
    """TurboMind v0.1's first token is a prefill of all but the last prompt token and a
    decode step (profile fastertransformer): every first-token point within 12%. The
    127-token prefills are the fast side (7B and 13B 4-5%, 70B at TP 4 11%): GEMMs of about
    128 tokens sit at the A100's ridge, where Vidur's measured ones run 19% slower than the
    refit prices them (vidur-kernels-refit's 128-token GEMMs on A100)."""
    for case in lmdeploy_cases():
        if "first token" not in case.label:
            continue
        err = simulate_case(case) / case.measured_s - 1
        assert abs(err) < 0.12, (case.label, err)
