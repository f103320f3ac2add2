"""The README runs: its quick start is the two documented commands, its Python example works,
and the demo it promises writes real plots."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def test_quick_start_is_the_two_commands() -> None:
    text = README.read_text()
    assert text.index("## Quick start") < text.index("```")
    first = blocks("bash")[0].strip().splitlines()
    assert first == ["pip install -e . && tpsim demo", "pip install -e '.[test]' && pytest"]
    # CI's tests are that command, as written (no marker filter), after the static checks
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    ci = [line for line in ci if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == "pip install -e '.[test]' && pytest"
    assert "python .ci/checks.py" in ci[:-1]


def test_python_example_runs() -> None:
    (code,) = blocks("python")
    namespace: dict[str, object] = {}
    exec(compile(code, str(README), "exec"), namespace)
    result = namespace["result"]
    assert result.summary["config"]["tp"] == 8  # type: ignore[attr-defined]


def test_demo_writes_its_plots(demo_run: tuple[Path, list[str]]) -> None:
    tmp_path, lines = demo_run
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["breakdown.png", "gantt_tp8.png", "regime_map.png", "throughput_vs_tp.png"]
    assert (tmp_path / "tp_batch_sweep.csv").is_file()
    assert sum(f"wrote {tmp_path / p}" in lines for p in pngs) == 4
    for p in tmp_path.glob("*.png"):
        assert p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 10_000
    assert any("memory-bound" in line or "communication-bound" in line for line in lines)


@pytest.mark.slow
def test_calibrate_example_prints_what_the_readme_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The "Calibrate your own engine profile" example of docs/guide.md runs and prints the
    report the guide shows: the same lines, parameters and warnings (numbers masked: the
    fit's last digits may move with the cost models, the report's shape may not)."""
    from tpsim.cli import main

    guide = README.parent / "docs" / "guide.md"
    section = guide.read_text().split("## Calibrate your own engine profile")[1]
    section = section.split("\n## ")[0]
    (csv,) = re.findall(r"```csv[^\n]*\n(.*?)```", section, re.S)
    (command,) = re.findall(r"```console-slow\n(.*?)```", section, re.S)
    (shown,) = re.findall(r"```text\n(.*?)```", section, re.S)
    monkeypatch.chdir(tmp_path)
    Path("measured.csv").write_text(csv)
    args = command.split()
    assert args[0] == "tpsim" and main(args[1:]) == 0

    def mask(text: str) -> list[str]:
        numbers = (re.sub(r"[-+]?\d[\d.e+-]*", "#", line) for line in text.splitlines())
        return [" ".join(line.split()) for line in numbers]  # column widths follow the numbers

    assert mask(capsys.readouterr().out) == mask(shown)
    assert Path("my-vllm.yaml").is_file()


def _readme_examples(slow: bool) -> list:
    from readme_outputs import examples

    return [e for e in examples(README.read_text()) if e.slow == slow]


def _shows_what_it_prints(example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from readme_outputs import printed

    monkeypatch.chdir(tmp_path)
    assert printed(example.command) == example.shown, (
        f"README.md shows stale output for `{example.command}`: "
        "python tests/support/readme_outputs.py rewrites it"
    )


@pytest.mark.parametrize("example", _readme_examples(False), ids=lambda e: e.command[:60])
def test_readme_shows_what_it_prints(
    example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each worked command's output in the README is what tpsim prints today, byte for byte."""
    _shows_what_it_prints(example, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("example", _readme_examples(True), ids=lambda e: e.command[:60])
def test_readme_slow_example_shows_what_it_prints(
    example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shows_what_it_prints(example, tmp_path, monkeypatch)


def test_readme_examples_are_found() -> None:
    """The five worked commands are read with their outputs (the parser above sees them)."""
    fast, slow = _readme_examples(False), _readme_examples(True)
    assert len(fast) == 4 and len(slow) == 1
    assert all(e.shown.strip() for e in fast + slow)
