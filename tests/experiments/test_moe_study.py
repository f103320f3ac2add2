"""The named study moe_tp_vs_ep on a reduced set: claims that can fail."""

from __future__ import annotations

from pathlib import Path

from tpsim.experiments.studies.moe_tp_vs_ep import CASES, WORKLOADS, moe_tp_vs_ep


def test_ep_loses_at_one_sequence_per_group_and_attention_dp_wins_prefill(tmp_path: Path) -> None:
    cases = [c for c in CASES if c.key == "mixtral_a100x8"]
    workloads = [w for w in WORKLOADS if w[0] in ("decode 1/group", "prefill 2K")]
    study = moe_tp_vs_ep(tmp_path, jobs=1, cases=cases, workloads=workloads)
    speed = study.summary["speed_vs_tp_experts"]["mixtral_a100x8"]
    # one sequence per group: whole experts on the GPUs a token picks read more than slices
    assert speed["decode 1/group"]["TP 8 EP 8"] < 1.0
    assert speed["decode 1/group"]["ADP 8 EP 8"] < 1.0
    # eight 2K prompts: all-to-all of the pairs moves less than all-reducing every token
    assert speed["prefill 2K"]["ADP 8 EP 8"] > 1.1
    assert study.summary["fastest"]["mixtral_a100x8"]["prefill 2K"] == "ADP 8 EP 8"
    assert (tmp_path / "moe_tp_vs_ep.png").stat().st_size > 10_000
    assert any("is fastest" in line for line in study.lines)
