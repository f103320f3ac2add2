"""``tpsim calibrate`` on the published serving measurements (issues #13, #26): fitted on
each file's smallest TP degree, the fitted profile predicts the rest. LMDeploy and vLLM 2023
are predicted within 15%; TGI, whose steps beyond TP 1 are host-bound, cannot be from its
GPU-bound TP 1 points, and the report says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim.experiments.calibrate.measurements import read_points
from tpsim.experiments.validation.calibrate_holdout import HOLDOUTS, csv_text, run


def _held_out_errors(lines: list[str]) -> dict[str, float]:
    out, name = {}, ""
    for line in lines:
        if not line.startswith(" ") and ": fitted on" in line:
            name = line.split(":")[0]
        if "held-out geomean error" in line:
            out[name] = float(line.split("error ")[1].split("%")[0]) / 100
    return out


def test_the_cases_round_trip_through_the_measurements_format(tmp_path: Path) -> None:
    for h in HOLDOUTS:
        cases = h.cases()
        path = tmp_path / f"{h.name}.csv"
        path.write_text(csv_text(cases))
        points = read_points(path)
        assert [p.measured_s for p in points] == pytest.approx([c.measured_s for c in cases])
        assert [p.tp for p in points] == [c.tp for c in cases]
    vllm = read_points(tmp_path / "vllm-2023.csv")
    assert {(p.decode_steps, p.allreduce) for p in vllm} == {(255, "nccl"), (255, "auto")}


# the LMDeploy hold-out fits 41 points (80 s on CI's two cores): a benchmark, as is the full
# tpsim validate run that holds its bound too (holdout-lmdeploy)
@pytest.mark.parametrize(
    "only", [("vllm-2023", "tgi"), pytest.param(("lmdeploy",), marks=pytest.mark.benchmark)]
)
@pytest.mark.slow
def test_held_out_predictions(tmp_path: Path, only: tuple[str, ...]) -> None:
    lines = list(run(tmp_path, jobs=2, only=only))
    err = _held_out_errors(lines)
    assert set(err) == set(only)
    if "vllm-2023" in err:  # fitted on 33B at TP 2, predicting 70B at TP 4
        assert err["vllm-2023"] < 0.15
        # TP 1 hides TGI's host time behind the weight read: the fit takes it at the most the
        # TP 1 points allow, and the host-bound TP 2 and 4 follow (at the base's 50 us per
        # layer they came out 40-65% fast)
        assert err["tgi"] < 0.15
        assert any(line.startswith("  layer_host_us") and "the most the points allow" in line
                   for line in lines)  # fmt: skip
        assert (tmp_path / "tgi-v1-unfitted.yaml").is_file()
    else:  # fitted on 7B and 13B at TP 1, predicting 70B at TP 4
        assert err["lmdeploy"] < 0.15
        # the 7B and 13B steps at batch 64 and long contexts cannot fit in 80 GB: left out
        assert any(line.startswith("lmdeploy: fitted on 41 points (TP 1)") for line in lines)
        assert any(line.startswith("  rows 24, 25, 43, 44, 47, 48, 49: ") for line in lines)
    for name in only:
        assert (tmp_path / f"{name}.yaml").read_text().startswith("name: ")
        assert (tmp_path / f"{name}-held.csv").is_file()


def test_tgi_tp_1_cannot_see_the_host_time_that_sets_tp_4(tmp_path: Path) -> None:
    """Why the TGI hold-out needs the host time at the most TP 1 allows, checked rather than
    said: TGI's Python per layer at the hold-out's base (50 us) and at the value TGI's TP 2
    rows give it (393 us, tgi-v1.yaml) moves the TP 1 steps by about 1% (the 34B weight read
    hides it, so the fit at TP 1 cannot tell them apart) and the TP 4 steps by 1.7x (A100)
    and 2.4x (H100)."""
    from tpsim import Options, Workload, simulate
    from tpsim.experiments.validation.calibrate_holdout import TGI_UNFITTED

    base = tmp_path / "base.yaml"
    base.write_text(TGI_UNFITTED)
    host = tmp_path / "host.yaml"
    host.write_text(TGI_UNFITTED.replace("value: 50", "value: 393"))
    w = Workload(1, context_len=256)

    def step(topology: str, tp: int, profile: Path) -> float:
        return simulate("codellama-34b", topology, tp, w, Options(engine=str(profile))).latency_s

    for topology in ("dgx-a100", "dgx-h100"):
        assert step(topology, 1, host) / step(topology, 1, base) - 1 < 0.02
        assert step(topology, 4, host) / step(topology, 4, base) > 1.6
