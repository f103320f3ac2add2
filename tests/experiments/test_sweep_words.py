"""The words a sweep prints and its plots carry: regimes with their shares, the
assumptions line of each host layout and launch mode."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from sweep_rows import grid, row
from tpsim.cli import main
from tpsim.experiments.plots.words import assumption_lines, row_regime_text
from tpsim.experiments.studies.base import table


def test_regime_text_of_rows_and_study_tables() -> None:
    """Defect: the regime without its share or its near runner-up."""
    assert row_regime_text(row(1, 1, memory_share=0.53)) == "memory-bound (53%; communication 47%)"
    assert row_regime_text(row(1, 1, memory_share=0.9)) == "memory-bound (90%)"
    lines = table([row(1, 1, memory_share=0.53)], lambda r: "x")
    assert lines[1].endswith("memory-bound (53%; communication 47%)")


def test_assumptions_of_rows() -> None:
    lines = assumption_lines(grid())
    assert len(lines) == 2  # one host; the TP 16 group over two
    assert "network not used (one host)" in lines[0] and "engine vllm" in lines[0]
    assert "NICs per host" in lines[1] and "launch graph" in lines[1]


def test_attention_dp_groups_over_hosts_are_not_called_a_tp_group_over_them() -> None:
    """TP 2 x attention DP 8 on 2 DGX H100s: its TP groups of 2 stay in a host; the 16
    GPUs that share the experts do not (the line said 'TP group over several hosts')."""
    rows = [row(1, 8, attention_dp=8, ep=8), row(2, 8, hosts=2, attention_dp=8, ep=16)]
    lines = assumption_lines(rows)
    assert "x2 nodes, TP x attention-DP group over several hosts)" in lines[-1]


def test_a_pipeline_over_hosts_is_not_called_a_tp_group_over_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sweep", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--nodes", "2",
            "--tp", "8", "--pp", "2", "--out", str(tmp_path / "s.csv"), "--quiet"]  # fmt: skip
    assert main(args) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("assumptions")]
    assert "layout over 2 hosts" in line and "TP group" not in line
    assert "NICs per host" in line  # its stages' sends cross the network
    (row,) = list(csv.DictReader((tmp_path / "s.csv").read_text().splitlines()))
    assert row["hosts"] == "1"  # the hosts its TP group spans, as the guide defines it


def test_assumptions_say_the_launch_mode_each_step_ran_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As run says it: vLLM's 4096-token prefill runs eager beside its graphed decode, and
    FasterTransformer has no CUDA graphs at all."""
    args = ["sweep", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1",
            "--phase", "prefill,decode", "--prompt-len", "4096", "--engine",
            "vllm,fastertransformer", "--out", str(tmp_path / "s.csv"), "--quiet"]  # fmt: skip
    assert main(args) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("assumptions")]
    eager = "launch eager (no CUDA graph for this step in the engine)"
    vllm = [x.endswith(eager) for x in lines if "engine vllm;" in x]
    ft = [x.endswith(eager) for x in lines if "engine fastertransformer;" in x]
    assert sorted(vllm) == [False, True] and ft == [True]


def test_sweep_prints_its_assumptions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sweep", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1,2"]
    args += ["--out", str(tmp_path / "s.csv"), "--quiet", "--jobs", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "assumptions (dgx-h100): gpu " in out and "engine " in out and "launch " in out
    assert "regime: memory-bound at 2 points (" in out


def test_a_regime_s_share_is_one_figure_where_its_points_agree() -> None:
    """'memory-bound at 1 point (58%-58% of the path)': a range of one value."""
    from tpsim.experiments.plots.words import regime_summary

    one = regime_summary([row(4, 16, memory_share=0.58)])
    assert "memory-bound at 1 point (58% of the path)" in one
    two = regime_summary([row(4, 16, memory_share=0.58), row(8, 16, memory_share=0.9)])
    assert "memory-bound at 2 points (58%-90% of the path)" in two
