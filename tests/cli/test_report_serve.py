"""tpsim report --serve: serving runs' per-request files on one HTML page, the same figures
as tpsim serve printed, the same bytes for the same files, one line and exit 2 for a bad file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpsim.cli import main

SERVE = ["serve", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1",
         "--rate", "6", "--requests", "40", "--prompt-len", "uniform:100-900",
         "--output-len", "uniform:5-60"]  # fmt: skip


def test_report_of_serving_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert main([*SERVE, "--out", "a.jsonl", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert main([*SERVE, "--prefill-workers", "1", "--out", "b.jsonl"]) == 0
    capsys.readouterr()
    pages = []
    for _ in range(2):
        assert main(["report", "--serve", "a.jsonl,b.jsonl", "--out", "r.html"]) == 0
        pages.append(Path("r.html").read_bytes())
    assert pages[0] == pages[1]
    page = pages[0].decode()
    for key in ("mean_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p90_e2el_ms"):
        assert f"<td>{j[key]:.2f}</td>" in page, key  # the numbers tpsim serve printed
    assert 'id="cdf"' in page and 'id="over-time"' in page and "against b" in page


@pytest.mark.parametrize(("line", "needle"), [
    ("not json", "line 1 is not JSON"),
    ('{"id": 0}', "arrival_s=None"),
    ('{"id": 0, "arrival_s": 2, "prompt_tokens": 5, "output_tokens": 3, "first_token_s": 1, '
     '"finish_s": 3}', "out of order"),
    ('{"id": 0.5, "arrival_s": 0, "prompt_tokens": 5, "output_tokens": 3, "first_token_s": 1, '
     '"finish_s": 3}', "id=0.5"),
    ("", "no requests"),
])  # fmt: skip
def test_bad_files(line: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    Path("x.jsonl").write_text(line + "\n")
    assert main(["report", "--serve", "x.jsonl", "--out", "r.html"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and needle in err
    assert not Path("r.html").exists()


def test_serve_is_reported_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["report", "--serve", "a.jsonl", "--model", "llama-3.1-8b", "--topology",
               "dgx-h100", "--tp", "1", "--out", str(tmp_path / "r.html")])  # fmt: skip
    assert rc == 2 and "reported alone" in capsys.readouterr().err
