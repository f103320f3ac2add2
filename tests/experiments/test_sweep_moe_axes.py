"""Sweep axes moe_tp and moe_a2a (run's --moe-tp, --moe-a2a): grid flags and YAML keys, each
point's run, refusals as error rows, the columns after every earlier one, point ids of
default points kept, older files read (not resumed), and the plots, words, ``compare
--results`` and ``report`` naming the axis where it varies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tpsim.cli import main
from tpsim.core.api import simulate
from tpsim.core.config import Options
from tpsim.core.errors import ConfigError
from tpsim.experiments.compare_rows import summary_from_row
from tpsim.experiments.plots import figures
from tpsim.experiments.plots.regime_map import draw_regime_map
from tpsim.experiments.plots.report_charts import sweep_figure
from tpsim.experiments.plots.sweep import draw_series_comparison, draw_throughput_vs_tp
from tpsim.experiments.plots.words import layout_label
from tpsim.experiments.sweep.grid import (
    AXES,
    MOE_SPLIT_AXES,
    grid_from_flags,
    grid_from_yaml,
    point_from_row,
)
from tpsim.experiments.sweep.reading import read_rows
from tpsim.experiments.sweep.rows import COLUMNS, EARLIER_HEADERS, full_row, results_text
from tpsim.experiments.sweep.run import run_point
from tpsim.topologies.io import get_topology

#: Qwen3-30B-A3B, its experts over 2 attention-DP groups of one GPU: a step in about 0.5 s.
MOE = {"model": "qwen3-30b-a3b", "topology": "dgx-h100", "tp": "1", "attention_dp": "2",
       "ep": "2", "batch": "8", "context_len": "256"}  # fmt: skip
Row = dict[str, Any]


def _flags(grid: dict[str, str]) -> list[str]:
    return [x for k, v in grid.items() for x in ("--" + k.replace("_", "-"), v)]


@pytest.fixture(scope="module")
def rows() -> dict[tuple[int, str], Row]:
    """(moe_tp, moe_a2a) -> the row of the point: derived or given as 1, NCCL or DeepEP."""
    points = grid_from_flags(MOE | {"moe_tp": "0,1", "moe_a2a": "nccl,deepep"})
    return {(p.moe_tp, p.moe_a2a): full_row(run_point(p)) for p in points}


def test_axes_from_flags_and_yaml_at_runs_defaults(tmp_path: Path) -> None:
    points = grid_from_flags(MOE | {"moe_tp": "0,1", "moe_a2a": "nccl,deepep"})
    assert [(p.moe_tp, p.moe_a2a) for p in points] == [
        (0, "nccl"), (0, "deepep"), (1, "nccl"), (1, "deepep")]  # fmt: skip
    grid = tmp_path / "g.yaml"
    grid.write_text(
        "model: qwen3-30b-a3b\ntopology: dgx-h100\ntp: 1\nattention_dp: 2\nep: 2\nbatch: 8\n"
        "context_len: 256\nmoe_tp: [0, 1]\nmoe_a2a: [nccl, deepep]\n"
    )
    assert grid_from_yaml(grid) == points
    (plain,) = grid_from_flags(MOE)
    assert (plain.moe_tp, plain.moe_a2a) == (0, "nccl")  # run's defaults: derived, NCCL
    assert {k: AXES[k][1] for k in MOE_SPLIT_AXES} == MOE_SPLIT_AXES
    assert plain.layout().moe_tp == 0 and plain.options().moe_a2a == "nccl"
    with pytest.raises(ConfigError, match="moe_a2a='nvshmem'"):
        grid_from_flags(MOE | {"moe_a2a": "nccl,nvshmem"})
    grid.write_text("model: qwen3-30b-a3b\ntopology: dgx-h100\ntp: 1\nmoe_tp: -1\n")
    with pytest.raises(ConfigError, match="moe_tp=-1"):
        grid_from_yaml(grid)


def test_cli_bad_moe_a2a_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.csv"
    assert main(["sweep", *_flags(MOE | {"moe_a2a": "deepep,x"}), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "moe_a2a" in err[0] and not out.exists()


def test_default_points_keep_their_ids() -> None:
    """The new axes enter a point's id only away from their defaults: a results file written
    before them resumes its points (ids as that version gave them)."""
    (p,) = grid_from_flags(MOE)
    assert p.point_id == "52954747fb6beb48"  # the id before these axes existed
    (q,) = grid_from_flags(MOE | {"moe_tp": "0", "moe_a2a": "nccl"})
    assert q.point_id == p.point_id
    (dense,) = grid_from_flags({"model": "llama-3.1-8b", "topology": "dgx-h100", "tp": "2",
                                "batch": "4", "context_len": "256"})  # fmt: skip
    assert dense.point_id == "c9993bcb8b4cac4e"  # test_sweep_layout.py's
    others = grid_from_flags(MOE | {"moe_tp": "0,1", "moe_a2a": "nccl,deepep"})[1:]
    assert len({p.point_id, *(o.point_id for o in others)}) == 4


def test_each_point_runs_its_split_and_all_to_all(rows: dict[tuple[int, str], Row]) -> None:
    nccl, deepep = rows[0, "nccl"], rows[0, "deepep"]
    assert not nccl["error"] and not deepep["error"]
    p = point_from_row(deepep)
    assert p.options().moe_a2a == "deepep"
    graph = get_topology(p.topology, p.nodes)
    options = Options(moe_a2a="deepep", allow_oom=True)
    s = simulate(p.model, graph, p.layout(), p.workload(), options)
    assert deepep["latency_s"] == s.summary["latency_s"] != nccl["latency_s"]
    # moe_tp 1 given is the split ep 2 derives: the same step, a row of its own
    assert rows[1, "nccl"]["latency_s"] == nccl["latency_s"]
    assert rows[1, "deepep"]["latency_s"] == deepep["latency_s"]
    assert (nccl["moe_tp"], nccl["moe_a2a"], rows[1, "deepep"]["moe_tp"]) == (0, "nccl", 1)


def test_combinations_run_refuses_are_error_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DeepEP on a dense model, DeepEP with experts split by width (moe_tp > 1), moe_tp that
    is not the MoE group over ep: each an error row with run's words, the sweep going on."""
    dense = {"model": "llama-3.1-8b", "topology": "dgx-h100", "tp": "2", "batch": "4",
             "context_len": "256", "moe_a2a": "deepep"}  # fmt: skip
    width = MOE | {"ep": "1", "moe_tp": "2", "moe_a2a": "deepep"}
    wrong = MOE | {"moe_tp": "2"}
    for grid, words in ((dense, "moe_a2a=deepep: the all-to-all kernels of token dispatch"),
                        (width, "moe_a2a=deepep: DeepEP dispatches tokens to whole experts"),
                        (wrong, "moe_tp=2: moe_tp*ep must be the MoE group")):  # fmt: skip
        (p,) = grid_from_flags(grid)
        assert run_point(p)["error"].startswith(words)
        run = ["run", *_flags(grid)]
        assert main(run) == 2 and words in capsys.readouterr().err  # run refuses it alike
    out = tmp_path / "s.csv"
    args = ["sweep", *_flags(MOE | {"ep": "1,2", "moe_tp": "1"}), "--out", str(out), "--quiet"]
    assert main(args) == 0
    got = {r["ep"]: r["error"] for r in read_rows(out)}
    assert got[2] is None and got[1].startswith("moe_tp=1: moe_tp*ep must be the MoE group")


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_rows_round_trip_with_the_columns_last(
    rows: dict[tuple[int, str], Row], tmp_path: Path, fmt: str
) -> None:
    assert COLUMNS[-2:] == ("moe_tp", "moe_a2a")  # after every earlier column
    out = tmp_path / f"s.{fmt}"
    out.write_text(results_text(rows.values(), fmt))
    back = read_rows(out)
    assert back == list(rows.values())
    assert [point_from_row(r).point_id for r in back] == [r["point_id"] for r in back]


def test_an_older_file_reads_as_nccl_derived_and_is_not_resumed(
    rows: dict[tuple[int, str], Row], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = rows[0, "nccl"]
    before = EARLIER_HEADERS[-1]  # the in_flight version's header
    assert before == COLUMNS[:-2]
    text = results_text([row], "csv").splitlines()
    old = tmp_path / "old.csv"
    old.write_text(",".join(before) + "\n" + text[1].rsplit(",", 2)[0] + "\n")
    (back,) = read_rows(old)
    assert back == row and point_from_row(back).point_id == row["point_id"]
    jsonl = tmp_path / "old.jsonl"
    jsonl.write_text(json.dumps({k: v for k, v in row.items() if k in before}) + "\n")
    assert read_rows(jsonl) == [row]
    for path in (old, jsonl):
        was = path.read_bytes()
        args = ["sweep", *_flags(MOE), "--out", str(path), "--resume", "--quiet"]
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "older tpsim, without the columns moe_tp, moe_a2a;" in err[0]
        assert path.read_bytes() == was


def test_plots_name_the_all_to_all_and_the_width_split(
    rows: dict[tuple[int, str], Row], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(figures, "draw_gantt", lambda row, path: path)
    derived = [rows[0, "nccl"], rows[0, "deepep"]]
    written = {p.name for p in figures.plot_results(derived, tmp_path)}
    assert {"a2a-nccl_regime_map.png", "a2a-deepep_regime_map.png"} <= written
    assert "moe-a2a deepep" in figures.series_title(rows[0, "deepep"])
    assert "moe-a2a" not in figures.series_title(rows[0, "nccl"])  # the default said nothing
    named = {figures._slug(r, ["moe_a2a"]).rstrip("_"): [r] for r in derived}
    fig = draw_series_comparison(named, title="t")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["a2a-nccl, ADP 2 EP 2", "a2a-deepep, ADP 2 EP 2"]
    # beside the deepep series, the nccl one says it is nccl (its titles said nothing)
    index = (tmp_path / "index.html").read_text()
    assert "a2a-nccl_regime_map.png: " in index and "engine vllm, moe-a2a nccl)" in index
    overlaps = [rows[0, "nccl"] | {"overlap": o} for o in ("none", "chunked")]
    assert "overlap none" in figures.series_title(overlaps[0], varying=["overlap"])
    assert "overlap" not in figures.series_title(overlaps[0])
    given = [rows[0, "nccl"], rows[1, "nccl"]]  # moe_tp derived, and given
    fig = draw_throughput_vs_tp(given, title="t")
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["batch 8, ADP 2 EP 2", "batch 8, ADP 2 EP 2 MoE-TP 1"]
    cols = [t.get_text() for t in draw_regime_map(given, title="t").axes[0].get_xticklabels()]
    assert cols == ["TP 1 x ADP 2 EP 2", "TP 1 x ADP 2 EP 2\nMoE-TP 1"]


def test_compare_results_and_report_carry_the_axes(
    rows: dict[tuple[int, str], Row], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nccl, deepep = rows[0, "nccl"], rows[1, "deepep"]
    config = summary_from_row(deepep)["config"]
    assert config["layout"]["moe_tp"] == 1 and config["options"]["moe_a2a"] == "deepep"
    assert summary_from_row(nccl)["config"]["layout"]["moe_tp"] == 1  # derived: 2 / ep 2
    assert layout_label(deepep) == "TP 1 x ADP 2 EP 2 MoE-TP 1 moe-a2a deepep"
    assert layout_label(nccl) == "TP 1 x ADP 2 EP 2"
    out = tmp_path / "s.csv"
    out.write_text(results_text([nccl, deepep], "csv"))
    ids = f"{nccl['point_id']},{deepep['point_id']}"
    assert main(["compare", "--results", str(out), "--rows", ids]) == 0
    assert "TP 1 x ADP 2 EP 2 MoE-TP 1 moe-a2a deepep" in capsys.readouterr().out
    fig = sweep_figure([nccl, rows[0, "deepep"]])
    assert sorted(t.name for t in fig.data) == ["moe-a2a deepep", "moe-a2a nccl"]


def test_columns_are_documented() -> None:
    guide = (Path(__file__).parents[2] / "docs" / "guide.md").read_text()
    assert "`moe_tp`, `moe_a2a`" in guide and "--moe-tp" in guide and "--moe-a2a" in guide
