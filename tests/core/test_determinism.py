"""Determinism: the same command gives byte-identical output, in one process or in fresh
processes with different hash seeds (JSON minus ``engine``, text summary, record CSV, trace,
Gantt PNG and SVG)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tpsim import Options, Workload, simulate
from tpsim.cli import main
from tpsim.outputs.export import records_csv

ROOT = Path(__file__).parents[2]
RUN = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--nodes", "2", "--tp", "4"]
RUN += ["--gpus-per-node", "2", "--batch", "4", "--launch", "eager", "--overlap", "chunked"]
OUTPUTS = ["--trace", "t.json", "--gantt", "g.png"]
FILES = ("t.json", "g.png", "g.svg")


def _outputs(folder: Path, stdout_json: str, stdout_text: str) -> dict[str, bytes]:
    summary = json.loads(stdout_json)
    del summary["engine"]  # events and wall time: the only keys allowed to differ
    out = {name: (folder / name).read_bytes() for name in FILES}
    out["json"] = json.dumps(summary, sort_keys=True).encode()
    out["text"] = stdout_text.encode()
    return out


def _cli_twice_in_process(
    folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> dict[str, bytes]:
    folder.mkdir()
    monkeypatch.chdir(folder)
    assert main([*RUN, *OUTPUTS, "--json"]) == 0
    as_json = capsys.readouterr().out
    assert main([*RUN, "--gantt", "g.svg"]) == 0
    as_text = capsys.readouterr().out
    return _outputs(folder, as_json, as_text)


@pytest.mark.slow
def test_same_command_twice_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _cli_twice_in_process(tmp_path / "a", monkeypatch, capsys)
    b = _cli_twice_in_process(tmp_path / "b", monkeypatch, capsys)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == b[key], key


def test_records_csv_is_identical() -> None:
    wl, opts = Workload(4, "prefill", prompt_len=64), Options(sequence_parallel=True)
    first = simulate("llama-2-7b", "dgx-a100", 4, wl, opts)
    second = simulate("llama-2-7b", "dgx-a100", 4, wl, opts)
    assert records_csv(first.records) == records_csv(second.records)
    assert first.critical_path == second.critical_path


def _subprocess(folder: Path, seed: str) -> dict[str, bytes]:
    folder.mkdir()
    env = {**os.environ, "PYTHONHASHSEED": seed}
    outs = []
    for extra in ([*OUTPUTS, "--json"], ["--gantt", "g.svg"]):
        p = subprocess.run(
            [sys.executable, "-m", "tpsim", *RUN, *extra],
            capture_output=True,
            text=True,
            check=False,
            cwd=folder,
            env=env,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr
        outs.append(p.stdout)
    out = _outputs(folder, outs[0], outs[1])
    p = subprocess.run(
        [sys.executable, "-c", CSV_SCRIPT], capture_output=True, check=True, env=env, timeout=300
    )
    out["csv"] = p.stdout
    return out


CSV_SCRIPT = """
from tpsim import Options, Workload, simulate
from tpsim.outputs.export import records_csv
r = simulate("llama-2-7b", "dgx-a100", 4, Workload(4, "prefill", prompt_len=64),
             Options(sequence_parallel=True))
print(records_csv(r.records), end="")
"""


@pytest.mark.slow
def test_fresh_processes_with_different_hash_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _subprocess(tmp_path / "seed1", "1")
    two = _subprocess(tmp_path / "seed2", "12345")
    here = _cli_twice_in_process(tmp_path / "here", monkeypatch, capsys)
    for key in one:
        assert one[key] == two[key], key
        assert key == "csv" or one[key] == here[key], key
    wl, opts = Workload(4, "prefill", prompt_len=64), Options(sequence_parallel=True)
    assert one["csv"].decode() == records_csv(
        simulate("llama-2-7b", "dgx-a100", 4, wl, opts).records
    )
