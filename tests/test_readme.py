"""The README runs: its quick start is the two documented commands, its Python example works,
and the demo it promises writes real plots."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def test_quick_start_is_the_two_commands() -> None:
    text = README.read_text()
    assert text.index("## Quick start") < text.index("```")
    first = blocks("bash")[0].strip().splitlines()
    assert first == ["pip install -e . && tpsim demo", "pip install -e '.[test]' && pytest"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "pip install -e '.[test]' && pytest" in ci


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
