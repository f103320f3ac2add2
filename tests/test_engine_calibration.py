"""Serving engines end to end against the published measurements shipped with the package
(the numbers judge the profiles; nothing is fitted to them)."""

from __future__ import annotations

from pathlib import Path

from tpsim.experiments.engine_calibration import (
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


def test_lmdeploy_and_vllm_2023_within_the_bound_tgi_reported(tmp_path: Path) -> None:
    by_file: dict[str, list[tuple[float, float]]] = {}
    for case in lmdeploy_cases() + e2e_cases():
        by_file.setdefault(case.file, []).append((simulate_case(case), case.measured_s))
    assert geomean_error(by_file["lmdeploy"]) <= BOUND
    assert geomean_error(by_file["vllm-2023"]) <= BOUND
    # TGI v1.2 is host-bound beyond what vllm-v0's profile holds (see the README): known gap
    assert geomean_error(by_file["tgi"]) > BOUND
    lines = list(run(tmp_path, e2e_cases()[:4]))
    assert lines[-1].startswith("wrote") and (tmp_path / "engine_calibration.png").is_file()


def test_lmdeploy_first_tokens_take_a_prefill_and_a_decode_step() -> None:
    """TurboMind v0.1's first token is a prefill of all but the last prompt token and a
    decode step (profile fastertransformer): every first-token point within 20%, the
    128-token prompts (where the decode step is most of it) within 10%."""
    for case in lmdeploy_cases():
        if "first token" not in case.label:
            continue
        err = simulate_case(case) / case.measured_s - 1
        assert abs(err) < (0.10 if " p128 " in case.label else 0.20), (case.label, err)
