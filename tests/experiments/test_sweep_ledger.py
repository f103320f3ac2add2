"""The results file is a ledger: only done points are rows, one writer at a time, rows read
back exactly; killed workers, a killed parent and bad scheduler addresses end cleanly."""

from __future__ import annotations

import http.server
import os
import random
import signal
import threading
import time
from pathlib import Path

import kill_loop
import pytest
from tpsim.cli import main
from tpsim.experiments.sweep.grid import grid_from_flags
from tpsim.experiments.sweep.reading import read_rows
from tpsim.experiments.sweep.results import open_results
from tpsim.experiments.sweep.rows import format_row
from tpsim.experiments.sweep.run import run_point, run_sweep

CHEAP = {"model": "llama-3.1-8b", "topology": "dgx-h100", "phase": "decode", "context_len": "256"}


def test_resume_reruns_rows_of_lost_workers_and_tasks(tmp_path: Path) -> None:
    points = grid_from_flags(CHEAP | {"tp": "1,2", "batch": "1,8"})
    whole, old = tmp_path / "whole.csv", tmp_path / "old.csv"
    run_sweep(points, whole, jobs=1, progress=False)
    lines = whole.read_text().splitlines()
    # an older version wrote infrastructure failures as rows, and a row twice
    lost = [
        format_row(points[1].params() | {"error": "worker process died while simulating"}, "csv"),
        format_row(
            points[2].params() | {"error": "dask task failed: FutureCancelledError()"}, "csv"
        ),
    ]
    old.write_text("\n".join([lines[0], lines[1], lines[1], *lost]) + "\n")
    report = run_sweep(points, old, jobs=1, resume=True, progress=False)
    assert (report.skipped, report.ran, report.remaining) == (1, 3, 0)
    assert kill_loop.row_lines(old) == kill_loop.row_lines(whole)


@pytest.mark.parametrize("mode", ["--overwrite", "--resume"])
def test_a_second_writer_is_refused_and_the_file_left_intact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    out = tmp_path / "s.csv"
    args = ["sweep", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1,2"]
    args += ["--context-len", "256", "--out", str(out), "--quiet", "--jobs", "1"]
    assert main(args) == 0
    before = out.read_bytes()
    writer, _ = open_results(out, resume=True)  # another sweep holds the file
    try:
        assert main([*args, mode]) == 2
    finally:
        writer.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert "another sweep is writing" in err[-1] and "Traceback" not in "\n".join(err)
    assert out.read_bytes() == before
    assert main([*args, mode]) == 0  # the lock went with its holder


@pytest.mark.slow
def test_two_real_sweeps_on_one_file(tmp_path: Path, kill_reference: list[str]) -> None:
    out = tmp_path / "s.csv"
    first = kill_loop.start(kill_loop.sweep_cmd(out, "--jobs", "1"))
    assert kill_loop.wait_rows(out, 1, first)
    # the first is paused (holding its lock) while the second tries, so the two overlap
    # however fast the first would otherwise finish on a loaded machine
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = kill_loop.start(kill_loop.sweep_cmd(out, "--jobs", "1", "--overwrite"))
        rc2, err2 = kill_loop.finish(second)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    rc1, _ = kill_loop.finish(first)
    assert (rc1, rc2) == (0, 2) and "another sweep is writing" in err2
    assert kill_loop.row_lines(out) == kill_reference


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "llama-3.1-8b,/tmp/x\r\nconfig.json"],
        ["--model", "llama-3.1-8b", "--topology", "dgx-h100,/tmp/t\x1b.yaml"],
    ],
)
def test_line_breaks_in_grid_values_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    out = tmp_path / "s.csv"
    flags = ["--topology", "dgx-h100", *args] if "--topology" not in args else args
    assert main(["sweep", *flags, "--tp", "1", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "line break or control character" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_a_quoted_carriage_return_reads_back_exactly(tmp_path: Path) -> None:
    row = run_point(grid_from_flags(CHEAP | {"tp": "1"})[0]) | {"model": "a\rb"}
    out = tmp_path / "s.csv"
    writer, _ = open_results(out, resume=False)
    with writer:
        writer.write(row)
        writer.write(row | {"point_id": "0" * 16})
    rows = read_rows(out)
    assert [r["model"] for r in rows] == ["a\rb", "a\rb"] and rows[0]["latency_s"] > 0


def test_plot_refuses_too_many_series(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = run_point(grid_from_flags(CHEAP | {"tp": "1"})[0])
    out = tmp_path / "s.jsonl"
    writer, _ = open_results(out, resume=False)
    with writer:
        for i in range(60):
            writer.write(row | {"point_id": f"{i:016x}", "topology": f"t{i}"})
    assert main(["plot", str(out), "--out", str(tmp_path / "p")]) == 2
    assert "60 series" in capsys.readouterr().err
    assert not list((tmp_path / "p").glob("*.png")) if (tmp_path / "p").exists() else True


class _Http(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_bad_scheduler_addresses_exit_2_within_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Http)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    http_address = f"tcp://127.0.0.1:{server.server_address[1]}"
    out = tmp_path / "s.csv"
    args = ["sweep", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"]
    try:
        for address, needle in [
            ("bogus", "must be tcp://HOST:PORT"),
            (f"tcp://127.0.0.1:{kill_loop.free_port()}", "cannot connect"),
            (http_address, "not a Dask scheduler"),
        ]:
            t0 = time.monotonic()
            rc = main([*args, "--out", str(out), "--quiet", "--scheduler", address])
            err = capsys.readouterr().err.strip().splitlines()
            assert rc == 2 and time.monotonic() - t0 < 8 and not out.exists()
            assert needle in err[-1] and err[-1].startswith("tpsim: error: --scheduler=")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.slow
def test_pool_workers_killed_from_outside(
    tmp_path: Path, kill_reference: list[str], seed: int
) -> None:
    outcome = kill_loop.pool_workers_killed(tmp_path, kill_reference, random.Random(seed))
    assert outcome.ok, outcome.detail


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.slow
def test_parent_killed_its_workers_go_too(
    tmp_path: Path, kill_reference: list[str], seed: int
) -> None:
    outcome = kill_loop.parent_killed(tmp_path, kill_reference, random.Random(seed))
    assert outcome.ok, outcome.detail
