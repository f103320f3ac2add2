"""``tpsim calibrate``'s points: columns of the user's own are kept with each point and
echoed (issue #26), and points whose steps cannot fit in their GPUs' memory are left out of
the fit with a warning naming their rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpsim.cli import main
from tpsim.core.errors import ConfigError
from tpsim.experiments.calibrate.fit import calibrate
from tpsim.experiments.calibrate.measurements import read_points
from tpsim.experiments.calibrate.simulate import fits

M8 = "llama-3.1-8b"
NOTED = f"""model,topology,tp,batch,context_len,measured_ms,notes
{M8},dgx-h100,1,1,2048,7.5,first run
{M8},dgx-h100,2,1,2048,5.5,
{M8},dgx-h100,2,64,2048,9.0,"a note, with a comma"
"""


def test_unknown_columns_are_named_once_and_echoed_in_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv, out = tmp_path / "m.csv", tmp_path / "p.yaml"
    csv.write_text(NOTED)
    assert [p.extra for p in read_points(csv)] == [
        (("notes", "first run"),),
        (("notes", ""),),
        (("notes", "a note, with a comma"),),
    ]
    assert main(["calibrate", str(csv), "--engine", "vllm", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sum("'notes'" in w for w in doc["warnings"]) == 1
    assert [p["extra"] for p in doc["points"]] == [
        {"notes": "first run"},
        {"notes": ""},
        {"notes": "a note, with a comma"},
    ]
    assert out.is_file()


def test_a_tpsim_column_misspelt_is_named_not_read(tmp_path: Path) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text(NOTED.replace("batch", "bacth"))
    points = read_points(csv)
    assert [p.workload.batch for p in points] == [1, 1, 1]  # the default, not 64
    assert points[2].extra == (("bacth", "64"), ("notes", "a note, with a comma"))


def test_points_that_cannot_fit_in_memory_are_left_out_and_named(tmp_path: Path) -> None:
    """Llama-3.1-70B's 141 GB of weights on one 80 GB H100: no engine ran that step."""
    csv = tmp_path / "m.csv"
    csv.write_text(NOTED + "llama-3.1-70b,dgx-h100,1,1,2048,30,\n")
    points = read_points(csv)
    assert [fits(p, "vllm") for p in points] == [True, True, True, False]
    result = calibrate(csv, "vllm")
    assert [p.row for p in result.points] == [2, 3, 4]
    (oom,) = [w for w in result.warnings if "left out of the fit" in w]
    assert oom.startswith("row 5: the weights, KV cache and activations do not fit")


def test_fewer_than_two_points_that_fit_are_refused(tmp_path: Path) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text(
        "model,topology,tp,measured_ms\n"
        f"{M8},dgx-h100,1,7.5\nllama-3.1-70b,dgx-h100,1,30\nllama-3.1-70b,dgx-h100,1,31\n"
    )
    with pytest.raises(ConfigError, match=r"rows 3, 4 do not fit .* 1 point left, at least 2"):
        calibrate(csv, "vllm")
