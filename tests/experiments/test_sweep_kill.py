"""A real ``tpsim sweep`` process killed halfway (SIGINT, SIGKILL) and resumed loses nothing:
every point ends up in the file exactly once, and the file holds whole rows only."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ctrl_c import sigint_default
from tpsim.experiments.sweep.grid import grid_from_flags
from tpsim.experiments.sweep.reading import read_rows

pytestmark = pytest.mark.slow  # real sweep processes, signalled and resumed

GRID = {
    "model": "llama-3.1-8b,llama-2-7b",
    "topology": "dgx-h100",
    "tp": "1,2,4,8",
    "batch": "1,8,64,256,512",
    "context_len": "512",
}  # 40 points, about 7 s on 2 workers


def sweep_args(out: Path, *extra: str) -> list[str]:
    flags = [x for k, v in GRID.items() for x in (f"--{k.replace('_', '-')}", v)]
    return [sys.executable, "-m", "tpsim", "sweep", *flags, "--out", str(out), *extra]


def rows_in(path: Path) -> int:
    return max(0, path.read_bytes().count(b"\n") - 1) if path.exists() else 0


def start_and_wait_for_rows(out: Path, rows: int) -> subprocess.Popen[str]:
    """The sweep started, once ``rows`` rows are in ``out`` (or once it has ended)."""
    proc = subprocess.Popen(
        sweep_args(out, "--jobs", "2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the test can end it and its workers
        preexec_fn=sigint_default,  # SIGINT not ignored, also when pytest runs in background
    )
    deadline = time.monotonic() + 60
    while rows_in(out) < rows and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def end_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def interrupt_at_first_rows(folder: Path, how: str, tries: int = 3) -> tuple[Path, int, str]:
    """A sweep interrupted by ``how`` once its first rows are in the file: the file, the
    sweep's exit status and what it printed to stderr.

    On a loaded machine the sweep can get through all its points between the test's last look
    at the file and the signal, and exit 0: then nothing was interrupted, so the run (whose
    file must then be complete) is discarded and a fresh sweep, on a fresh file, is tried.
    (The sweep cannot ignore the SIGINT: see ctrl_c.py.)
    """
    for attempt in range(tries):
        out = folder / f"s{attempt}.csv"
        proc = start_and_wait_for_rows(out, 1)  # interrupt at the first rows: most to go
        try:
            if proc.poll() is None and how == "SIGINT":
                proc.send_signal(signal.SIGINT)
            elif proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers, mid-write perhaps
            _, err = proc.communicate(timeout=30)
        finally:
            end_group(proc)
        if proc.returncode != 0:
            return out, proc.returncode, err
        assert rows_in(out) == 40, err[-500:]  # it finished first, and finished whole
    pytest.fail(f"the sweep finished before it could be interrupted, {tries} times")


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_killed_sweep_resumes_with_every_point_once(tmp_path: Path, how: str) -> None:
    out, returncode, err = interrupt_at_first_rows(tmp_path, how)
    if how == "SIGINT":
        assert returncode == 130
        assert "interrupted" in err and "--resume" in err and "Traceback" not in err
    else:
        assert returncode == -signal.SIGKILL
        with out.open("a") as f:
            f.write("0123456789abcdef,llama-3.1-8b,dgx-")  # a torn last row
    before = rows_in(out)
    assert 1 <= before < 40
    assert out.read_bytes().endswith(b"\n") or how == "SIGKILL"

    done = subprocess.run(
        sweep_args(out, "--jobs", "2", "--resume"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert "already in the file" in done.stdout and "40/40" in done.stderr  # the progress bar
    rows = read_rows(out)
    ids = [r["point_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 40
    assert set(ids) == {p.point_id for p in grid_from_flags(GRID)}
    assert out.read_text().count("\n") == 41 and not any(r["error"] for r in rows)


def test_stopping_a_pool_drops_only_its_managers_cancel_race() -> None:
    # CPython 3.11's pool manager thread raises InvalidStateError setting BrokenProcessPool
    # on a future the interrupted sweep cancelled: that one is dropped, nothing else is
    import threading
    import types
    from concurrent.futures import InvalidStateError

    from tpsim.experiments.sweep.pool import quiet_cancel_race

    def raise_(exc: BaseException) -> None:
        raise exc

    seen: list[type[BaseException]] = []
    old = threading.excepthook
    threading.excepthook = lambda a: seen.append(a.exc_type)
    try:
        manager = threading.Thread(target=raise_, args=(InvalidStateError("CANCELLED"),))
        quiet_cancel_race(types.SimpleNamespace(_executor_manager_thread=manager))  # type: ignore[arg-type]
        for t in (manager, threading.Thread(target=raise_, args=(InvalidStateError("x"),)),
                  threading.Thread(target=raise_, args=(ValueError("y"),))):  # fmt: skip
            t.start()
            t.join()
    finally:
        threading.excepthook = old
    assert seen == [InvalidStateError, ValueError]
