"""``tpsim calibrate --predict``: points the fit did not see, priced with the fitted profile,
each naming the kept parameters its prediction rests on (TGI 1.2's published rows: fitted at
TP 1, weight-bound; TP 4 is host-bound, and the host time is the base's estimate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpsim.cli import main
from tpsim.experiments.validation.calibrate_holdout import HOLDOUTS, csv_text, write_base

HEADER = "model,topology,nodes,tp,batch,phase,prompt_len,context_len,dtype,measured_ms\n"


def _tgi(tmp_path: Path) -> tuple[Path, Path, Path]:
    (h,) = [h for h in HOLDOUTS if h.name == "tgi"]
    cases = h.cases()
    fit = [c for c in cases if h.fit(c, cases)]
    held = [c for c in cases if not h.fit(c, cases) and c.label.endswith("H100 TP4")]
    write_base(tmp_path)
    fit_csv, held_csv = tmp_path / "fit.csv", tmp_path / "held.csv"
    fit_csv.write_text(csv_text(fit))
    held_csv.write_text(csv_text(held))
    return fit_csv, held_csv, tmp_path / "tgi-v1-unfitted.yaml"


def test_a_host_bound_prediction_names_the_host_time_it_rests_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fit, held, base = _tgi(tmp_path)
    out = tmp_path / "fitted.yaml"
    args = ["calibrate", str(fit), "--engine", str(base), "--out", str(out), "--jobs", "1"]
    assert main([*args, "--predict", str(held)]) == 0
    text = capsys.readouterr().out
    assert f"predicted ({held}, points the fit did not see):" in text
    (row,) = [line for line in text.splitlines() if "dgx-h100 TP 4" in line and "%" in line]
    assert "31.77" in row  # measured, then the prediction, 60% short
    assert "rests on layer_host_us (kept at the base value" in text
    assert "1 of 1 predictions rest on a parameter" in text
    assert "--hidden-host most" in text  # what prices the hidden host time pessimistically
    assert out.is_file() and not list(tmp_path.glob(".tpsim-predict-*"))

    assert main([*args, "--predict", str(held), "--json"]) == 0
    (pred,) = json.loads(capsys.readouterr().out)["predicted"]
    assert pred["measured_ms"] == pytest.approx(31.77)
    assert pred["predicted_ms"] < 0.5 * 31.77
    rests = {r["parameter"]: r for r in pred["rests_on"]}
    assert rests["layer_host_us"]["moved"] == "x 4"
    assert rests["layer_host_us"]["change"] > 0.3 > abs(rests["layer_host_us"]["fitted_change"])


def test_hidden_host_most_takes_the_host_time_at_the_most_tp_1_allows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``--hidden-host most`` the host time TP 1 hides under the 34B weight read is taken
    at the most the TP 1 points allow (each moved by 1% at most): the host-bound TP 4 step
    comes out within 20% (65% short at the base's estimate), and --predict says it rests on
    a bound (the host may be faster, not slower)."""
    fit, held, base = _tgi(tmp_path)
    out = tmp_path / "fitted.yaml"
    args = ["calibrate", str(fit), "--engine", str(base), "--out", str(out), "--jobs", "1",
            "--hidden-host", "most", "--predict", str(held), "--json"]  # fmt: skip
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    layer = {p["name"]: p for p in doc["parameters"]}["layer_host_us"]
    assert layer["at_most"] and not layer["fitted"] and layer["value"] > 4 * layer["base"]
    assert max(abs(p["error"]) for p in doc["points"]) < 0.03  # the fitted points still fit
    (pred,) = doc["predicted"]
    assert 0.8 * 31.77 < pred["predicted_ms"] < 31.77
    rests = {r["parameter"]: r for r in pred["rests_on"]}
    assert rests["layer_host_us"]["moved"] == "/ 4"
    assert rests["layer_host_us"]["kept_because"] == "taken at the most the fitted points allow"
    assert rests["layer_host_us"]["change"] < -0.3 < -abs(rests["layer_host_us"]["fitted_change"])
    profile = out.read_text()
    assert f"layer_host_us:\n      value: {layer['value']:g}" in profile
    assert "an upper bound" in profile


def test_a_bad_predict_file_exits_2_before_the_fit_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fit, _, base = _tgi(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text(
        HEADER.replace(",measured_ms", "") + "codellama-34b,dgx-h100,1,4,1,decode,,256,\n"
    )
    out = tmp_path / "fitted.yaml"
    args = ["calibrate", str(fit), "--engine", str(base), "--out", str(out), "--predict", str(bad)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.csv" in err[0] and "measured_ms" in err[0]
    assert not out.exists()
