"""Sweeps: grids, the results file, parallel runs, errors, dying workers, bad input."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from tpsim.cli import main
from tpsim.experiments.sweep.grid import GridPoint, grid_from_flags, grid_from_yaml, point_from_row
from tpsim.experiments.sweep.reading import read_rows
from tpsim.experiments.sweep.results import WORKER_DIED, open_results
from tpsim.experiments.sweep.rows import COLUMNS
from tpsim.experiments.sweep.run import run_point, run_sweep

CHEAP = {"model": "llama-3.1-8b", "topology": "dgx-h100", "phase": "decode", "context_len": "256"}


def cheap(**axes: str) -> list[GridPoint]:
    return grid_from_flags(CHEAP | axes)


def test_grid_is_the_cartesian_product_in_axis_order() -> None:
    points = grid_from_flags(CHEAP | {"tp": "1,2", "batch": "1,8,64", "phase": "decode,prefill"})
    assert len(points) == 2 * 3 * 2
    assert [(p.tp, p.batch, p.phase) for p in points[:4]] == [
        (1, 1, "decode"),
        (1, 1, "prefill"),
        (1, 8, "decode"),
        (1, 8, "prefill"),
    ]
    # the length a phase does not use is dropped, so it cannot make duplicate points
    assert all(p.prompt_len is None for p in points if p.phase == "decode")
    assert all(p.context_len is None for p in points if p.phase == "prefill")
    assert len({p.point_id for p in points}) == len(points)


def test_point_id_depends_on_the_parameters_only() -> None:
    (a,) = cheap(tp="2", batch="4")
    (b,) = grid_from_flags({**CHEAP, "model": "LLAMA-3.1-8B", "tp": "2", "batch": "4"})
    assert a == b and a.point_id == b.point_id and len(a.point_id) == 16
    assert point_from_row(run_point(a)) == a


def test_yaml_grid_list_of_grids(tmp_path: Path) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text(
        "- {model: llama-3.1-8b, topology: dgx-h100, tp: [1, 2], batch: [1, 8]}\n"
        "- {model: llama-3.1-8b, topology: dgx-h100, nodes: 2, tp: 16, phase: prefill,"
        " prompt_len: 128, launch: [eager, graph]}\n"
    )
    points = grid_from_yaml(grid)
    assert len(points) == 4 + 2
    assert {p.launch for p in points[4:]} == {"eager", "graph"}
    assert points[4].nodes == 2 and points[4].prompt_len == 128


def test_rows_have_every_column_and_non_fitting_points_still_run() -> None:
    row = run_point(grid_from_flags({**CHEAP, "model": "llama-2-70b", "tp": "1"})[0])
    assert list(row) == list(COLUMNS[: len(row)]) or set(row) <= set(COLUMNS)
    assert row["fits"] is False and row["latency_s"] > 0 and not row.get("error")
    assert row["total_bytes_per_gpu"] > row["capacity_bytes_per_gpu"]


def test_invalid_combinations_are_error_rows(tmp_path: Path) -> None:
    # tp=3 does not divide 32 heads; tp=16 needs two nodes: rows with an error, no crash
    out = tmp_path / "s.csv"
    report = run_sweep(cheap(tp="1,3,16"), out, jobs=1, progress=False)
    rows = {r["tp"]: r for r in read_rows(out)}
    assert report.errors == 2 and len(rows) == 3
    assert "tp=3" in rows[3]["error"] and rows[3]["latency_s"] is None
    assert "tp=16" in rows[16]["error"] and "--nodes" in rows[16]["error"]
    assert rows[1]["error"] is None and rows[1]["fits"] is True


def _sorted_lines(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    if path.suffix == ".jsonl":  # no header: every line is a row
        return sorted(lines)
    header, *rows = lines
    return [header, *sorted(rows)]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_jobs_1_and_jobs_2_write_the_same_rows(tmp_path: Path, suffix: str) -> None:
    points = cheap(tp="1,2,4", batch="1,8")
    one, two = tmp_path / f"one{suffix}", tmp_path / f"two{suffix}"
    run_sweep(points, one, jobs=1, progress=False)
    run_sweep(points, two, jobs=2, progress=False)
    assert _sorted_lines(one) == _sorted_lines(two)
    assert len(one.read_text().splitlines()) == 6 + (suffix == ".csv")
    rows = read_rows(two)
    assert {r["point_id"] for r in rows} == {p.point_id for p in points}
    assert all(isinstance(r["tp"], int) and isinstance(r["fits"], bool) for r in rows)


def test_resume_skips_done_points_and_cuts_a_partial_line(tmp_path: Path) -> None:
    points = cheap(tp="1,2", batch="1,2,4")
    out = tmp_path / "s.csv"
    run_sweep(points[:3], out, jobs=1, progress=False)
    with out.open("a") as f:
        f.write("deadbeef,llama-3.1-8b,dgx-h1")  # a row torn by a kill: no newline
    report = run_sweep(points, out, jobs=1, resume=True, progress=False)
    assert (report.skipped, report.ran) == (3, 3)
    rows = read_rows(out)
    assert sorted(r["point_id"] for r in rows) == sorted(p.point_id for p in points)
    with pytest.raises(Exception, match="already exists"):
        open_results(out, resume=False)


def crash_on_batch_3(point: GridPoint) -> dict[str, Any]:
    """An evaluate function whose worker process dies on batch 3 (runs in the worker)."""
    if point.batch == 3:
        os._exit(3)
    if point.batch == 5:
        raise RuntimeError("a bug for this point")
    return run_point(point)


@pytest.mark.slow
def test_a_dying_worker_costs_only_its_point_which_stays_not_done(tmp_path: Path) -> None:
    points = cheap(tp="1,2", batch="1,2,3,4,5,6")
    out = tmp_path / "s.jsonl"
    report = run_sweep(points, out, jobs=2, progress=False, evaluate=crash_on_batch_3)
    rows = read_rows(out)
    killers = {p.point_id for p in points if p.batch == 3}
    # a worker death is the machinery's failure: retried, then left out (not done)
    assert sorted(r["point_id"] for r in rows) == sorted(p.point_id for p in points if p.batch != 3)
    errors = {(r["tp"], r["batch"]): r["error"] for r in rows if r["error"]}
    assert errors == {
        (1, 5): "RuntimeError: a bug for this point",
        (2, 5): "RuntimeError: a bug for this point",
    }
    assert (report.ran, report.errors, report.remaining) == (10, 2, 2)
    assert WORKER_DIED in report.why
    # --resume runs exactly the points not done
    again = run_sweep(points, out, jobs=1, resume=True, progress=False)
    assert (again.skipped, again.ran, again.remaining) == (10, 2, 0)
    assert {r["point_id"] for r in read_rows(out)} >= killers


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "llama-3.1-8b,llama-9", "--tp", "1"], "model='llama-9'"),
        (["--model", "llama-3.1-8b", "--tp", "1", "--batch", "1,0"], "batch=0"),
        (["--model", "llama-3.1-8b", "--tp", "1", "--batch", "1,x"], "batch='x'"),
        (["--model", "llama-3.1-8b", "--tp", "1", "--phase", "train"], "phase='train'"),
        (["--model", "llama-3.1-8b"], "tp is required"),
        (["--model", "llama-3.1-8b", "--tp", "1", "--jobs", "0"], "--jobs=0"),
    ],
)
def test_bad_flags_exit_2_without_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    out = tmp_path / "s.csv"
    rc = main(["sweep", "--topology", "dgx-h100", *args, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not out.exists()
    assert len([line for line in err if line.startswith("tpsim: error")]) == 1
    assert needle in err[-1] and "Traceback" not in "\n".join(err)


def test_a_folder_it_cannot_write_is_one_line_before_the_banner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # as `run --trace` refuses it; root may write anywhere, so the folder's answer is given
    real = os.access
    denied = tmp_path / "ro"
    denied.mkdir()

    def access(path: Any, mode: int, **kw: Any) -> bool:
        return False if Path(path) == denied and mode & os.W_OK else real(path, mode, **kw)

    monkeypatch.setattr(os, "access", access)
    out = denied / "s.csv"
    args = ["sweep", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"]
    assert main([*args, "--out", str(out), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"tpsim: error: --out={out}: folder {denied} is not writable\n"
    assert captured.out == "" and list(denied.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("model: llama-3.1-8b\ntopology: dgx-h100\ntp: [1, 2\n", "malformed YAML at line"),
        ("model: llama-3.1-8b\ntopology: dgx-h100\ntp: 1\nbatches: [1]\n", "unknown key 'batches'"),
        ("model: llama-3.1-8b\ntopology: dgx-h100\ntp: 1\nbatch: [1, -4]\n", "batch=-4"),
        ("model: [llama-3.1-8b, gpt5]\ntopology: dgx-h100\ntp: 1\n", "model='gpt5'"),
        ("model: llama-3.1-8b\ntopology: dgx-h100\ntp: 1\ntp: 2\n", "key 'tp' appears twice"),
        ("- 3\n", "must be a mapping"),
        ("model: llama-3.1-8b\ntopology: dgx-h100\ntp: {a: 1}\n", "tp={'a': 1}"),
    ],
)
def test_bad_yaml_grids_exit_2_without_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str
) -> None:
    grid, out = tmp_path / "grid.yaml", tmp_path / "s.jsonl"
    grid.write_text(text)
    rc = main(["sweep", "--grid", str(grid), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists()
    assert needle in err and "grid.yaml" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_cli_sweep_then_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, plots = tmp_path / "s.csv", tmp_path / "plots"
    args = ["sweep", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1,2,4"]
    args += ["--batch", "1,16", "--context-len", "256", "--out", str(out), "--quiet"]
    assert main([*args, "--jobs", "1", "--plots", str(plots)]) == 0
    assert len(read_rows(out)) == 6
    names = sorted(p.name for p in plots.glob("*.png"))
    assert names == ["breakdown.png", "gantt_best.png", "regime_map.png", "throughput_vs_tp.png"]
    assert main(args) == 2  # the file exists: --resume or --overwrite
    assert "already exists" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0
    assert "0 points simulated (6 already in the file)" in capsys.readouterr().out
    pid = read_rows(out)[0]["point_id"]
    assert main(["plot", str(out), "--out", str(tmp_path / "p2"), "--gantt", pid]) == 0
    assert (tmp_path / "p2" / f"gantt_{pid}.png").stat().st_size > 10_000
