"""Outputs over inputs (issue #27, second adversarial round): an output path that is one of the
command's own inputs is refused before anything runs, exit 2 and one line naming the flag and
the input, and the input is left byte for byte as it was: the topology file or the model's
config.json under ``run --trace``, the same through a symbolic or a hard link, a model folder's
config.json, an engine profile or a measured topology under ``calibrate --out``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_corpus import DATA
from tpsim.cli import main

RUN = ["run", "--tp", "2", "--batch", "1"]
MEASURED = "model,topology,tp,measured_ms\nllama-2-7b,{topology},2,9.0\n"


def _topology_json(folder: Path) -> Path:
    target = folder / "ring4.json"
    shutil.copy(DATA / "topologies" / "ring4.json", target)
    return target


def _model_file(folder: Path) -> Path:
    target = folder / "config.json"
    shutil.copy(DATA / "models" / "illustrative.json", target)
    return target


def _run_trace_over_topology(tmp: Path) -> tuple[list[str], Path, str]:
    topo = _topology_json(tmp)
    argv = [*RUN, "--model", "llama-2-7b", "--topology", str(topo), "--trace", str(topo)]
    return argv, topo, "--trace="


def _run_trace_over_model(tmp: Path) -> tuple[list[str], Path, str]:
    model = _model_file(tmp)
    argv = [*RUN, "--model", str(model), "--topology", "dgx-h100", "--trace", str(model)]
    return argv, model, "is the --model file"


def _run_trace_over_model_folder(tmp: Path) -> tuple[list[str], Path, str]:
    model = _model_file(tmp)
    argv = [*RUN, "--model", str(tmp), "--topology", "dgx-h100", "--trace", str(model)]
    return argv, model, "is the --model file"


def _run_trace_through_a_symlink(tmp: Path) -> tuple[list[str], Path, str]:
    topo = _topology_json(tmp)
    link = tmp / "trace.json"
    link.symlink_to(topo)
    argv = [*RUN, "--model", "llama-2-7b", "--topology", str(topo), "--trace", str(link)]
    return argv, topo, "is the --topology file"


def _run_trace_through_a_hardlink(tmp: Path) -> tuple[list[str], Path, str]:
    model = _model_file(tmp)
    link = tmp / "trace.json"
    os.link(model, link)
    argv = [*RUN, "--model", str(model), "--topology", "dgx-h100", "--trace", str(link)]
    return argv, model, "is the --model file"


def _calibrate_over_a_measured_topology(tmp: Path) -> tuple[list[str], Path, str]:
    topo = tmp / "pair.yaml"
    shutil.copy(DATA / "topologies" / "pair.yaml", topo)
    measured = tmp / "m.csv"
    measured.write_text(MEASURED.format(topology=topo))
    argv = ["calibrate", str(measured), "--engine", "vllm-v0", "--out", str(topo)]
    return argv, topo, "is the --topology file"


def _calibrate_over_its_base_profile(tmp: Path) -> tuple[list[str], Path, str]:
    base = tmp / "base.yaml"
    base.write_text("name: base\nextends: vllm-v0\n")
    measured = tmp / "m.csv"
    measured.write_text(MEASURED.format(topology="dgx-h100"))
    argv = ["calibrate", str(measured), "--engine", str(base), "--out", str(base)]
    return argv, base, "is the --engine file"


CASES: dict[str, Callable[[Path], tuple[list[str], Path, str]]] = {
    "run --trace over the topology file": _run_trace_over_topology,
    "run --trace over the model's config.json": _run_trace_over_model,
    "run --trace over the config.json of a model folder": _run_trace_over_model_folder,
    "run --trace through a symlink to the topology": _run_trace_through_a_symlink,
    "run --trace through a hard link to the model": _run_trace_through_a_hardlink,
    "calibrate --out over a topology the measurements name": _calibrate_over_a_measured_topology,
    "calibrate --out over its base profile": _calibrate_over_its_base_profile,
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_over_an_input_is_refused_and_the_input_kept(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, victim, needle = CASES[case](tmp_path)
    before = victim.read_bytes()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tpsim: error: "), err
    assert needle in err, err
    assert victim.read_bytes() == before


def test_an_output_beside_its_input_is_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topo = _topology_json(tmp_path)
    argv = [*RUN, "--model", "llama-2-7b", "--topology", str(topo)]
    assert main([*argv, "--trace", str(tmp_path / "t.json")]) == 0
    assert (tmp_path / "t.json").stat().st_size > 0
