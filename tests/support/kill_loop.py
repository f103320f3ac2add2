"""Robustness run: real ``tpsim sweep`` processes killed at random times, then resumed.

    python -m tpsim.experiments.kill_loop --iterations 10 --seed 0

Four scenarios, each run ``iterations`` times with a random kill time:

- ``pool-workers``: pool worker processes (``--jobs 2``) SIGKILLed from outside, several
  times during the sweep;
- ``parent``: the sweep process itself SIGKILLed (its workers must be gone within seconds);
- ``dask-scheduler``: the scheduler of a local Dask cluster SIGKILLed (then restarted);
- ``dask-workers``: every worker of the cluster SIGKILLed (then a new one started).

After each kill the sweep is resumed (``--resume``, the cluster back) until it exits 0, and
the file's rows must equal, as a set of lines, those of an uninterrupted run: nothing lost,
nothing twice. The tests (``tests/experiments/test_sweep_ledger.py``,
``tests/experiments/test_sweep_dask_kill.py``)
run the same scenarios once or twice each; this script is the longer loop.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: A grid of 32 cheap points (about 5 s on one core).
GRID = {
    "model": "llama-3.1-8b,llama-2-7b",
    "topology": "dgx-h100",
    "tp": "1,2,4,8",
    "batch": "1,8,64,256",
    "context_len": "256",
}
DEADLINE_S = 120.0


def sweep_cmd(out: Path, *extra: str, grid: dict[str, str] | None = None) -> list[str]:
    flags = [x for k, v in (grid or GRID).items() for x in (f"--{k.replace('_', '-')}", v)]
    return [sys.executable, "-m", "tpsim", "sweep", *flags, "--out", str(out), "--quiet", *extra]


def row_lines(path: Path) -> list[str]:
    """The row lines of a results file, sorted (the CSV header left out)."""
    return sorted(path.read_text(encoding="utf-8").splitlines()[1:])


def rows_in(path: Path) -> int:
    return max(0, path.read_bytes().count(b"\n") - 1) if path.exists() else 0


def reference(folder: Path, grid: dict[str, str] | None = None) -> list[str]:
    """Row lines of an uninterrupted run (one process)."""
    out = folder / "reference.csv"
    subprocess.run(sweep_cmd(out, "--jobs", "1", grid=grid), check=True, capture_output=True)
    return row_lines(out)


def wait_rows(path: Path, rows: int, proc: subprocess.Popen[str], timeout_s: float = 60) -> bool:
    """Wait until ``path`` has ``rows`` rows; False if the sweep ended first."""
    deadline = time.monotonic() + timeout_s
    while rows_in(path) < rows and time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return proc.poll() is None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) from /proc, None if the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def descendants(pid: int) -> dict[int, int]:
    """Every living descendant of ``pid``: {pid: depth} (1: a child)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[0] not in ("Z", "X"):
                parents[int(entry)] = stat[1]
    found: dict[int, int] = {}
    frontier = {pid: 0}
    while frontier:
        nxt = {c: d + 1 for c, p in parents.items() for q, d in frontier.items() if p == q}
        nxt = {c: d for c, d in nxt.items() if c not in found}
        found |= nxt
        frontier = nxt
    return found


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def finish(proc: subprocess.Popen[str], timeout_s: float = DEADLINE_S) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill(proc.pid)
        _, err = proc.communicate()
        return -1, f"hung for {timeout_s:g} s\n{err}"
    return proc.returncode, err


def start(cmd: Sequence[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tempfile.gettempdir(),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalDask:
    """A Dask scheduler and workers as separate processes on this machine."""

    folder: Path
    port: int = field(default_factory=free_port)
    scheduler: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.folder / f"{name}-{time.monotonic_ns()}.log"
        with log.open("wb") as f:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dask", *args, "--no-dashboard"],
                stdout=f,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
            )
        return proc, log

    def start_scheduler(self) -> None:
        self.scheduler, _ = self._spawn(
            "scheduler",
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dashboard-address",
            "127.0.0.1:0",  # (--no-dashboard alone still binds 8787)
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as s,
            ):
                s.settimeout(1)
                if len(s.recv(8)) == 8:
                    return
            time.sleep(0.1)
        raise RuntimeError("the Dask scheduler did not start")

    def start_worker(self) -> None:
        args = ("worker", self.address, "--nthreads", "1", "--no-nanny", "--death-timeout", "60")
        proc, log = self._spawn("worker", *args)
        self.workers.append(proc)
        deadline = time.monotonic() + 60
        while b"Registered to" not in log.read_bytes():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the Dask worker did not start: {log.read_text()[-500:]}")
            time.sleep(0.1)

    def kill_scheduler(self) -> None:
        if self.scheduler is not None:
            kill(self.scheduler.pid)
            self.scheduler.wait()

    def kill_workers(self) -> None:
        for w in self.workers:
            kill(w.pid)
        for w in self.workers:
            w.wait()
        self.workers = []

    def close(self) -> None:
        self.kill_workers()
        self.kill_scheduler()


@contextlib.contextmanager
def local_dask(folder: Path, workers: int = 1) -> Iterator[LocalDask]:
    cluster = LocalDask(folder)
    try:
        cluster.start_scheduler()
        for _ in range(workers):
            cluster.start_worker()
        yield cluster
    finally:
        cluster.close()


@dataclass(frozen=True)
class Outcome:
    ok: bool
    detail: str


def resume_until_done(out: Path, extra: Sequence[str], want: list[str], tries: int = 3) -> Outcome:
    """Resume (up to ``tries`` times while it exits 3) and compare with ``want``."""
    for _ in range(tries):
        rc, err = finish(start(sweep_cmd(out, "--resume", *extra)))
        if rc == 0:
            got = row_lines(out)
            same = got == want
            return Outcome(same, "identical" if same else f"{len(got)} rows, {len(want)} wanted")
        if rc != 3:
            return Outcome(False, f"resume exited {rc}: {err.strip()[-300:]}")
    return Outcome(False, "resume still incomplete")


def _check_kill_exit(rc: int, err: str) -> str | None:
    """What is wrong with how a sweep ended after a kill (None: fine)."""
    if rc not in (0, 3):
        return f"exited {rc}: {err.strip()[-300:]}"
    if "Traceback" in err:
        return "printed a traceback"
    if rc == 3 and "--resume" not in err:
        return "exit 3 without saying --resume"
    return None


def pool_workers_killed(
    folder: Path, want: list[str], rng: random.Random, kills: int = 3
) -> Outcome:
    """Kill pool workers ``kills`` times at random moments; the sweep ends 0 or 3."""
    out = folder / "pool.csv"
    proc = start(sweep_cmd(out, "--jobs", "2"))
    if not wait_rows(out, 1, proc):
        return Outcome(False, "ended before the first kill")
    for _ in range(kills):
        time.sleep(rng.uniform(0.05, 0.6))
        workers = [p for p, depth in descendants(proc.pid).items() if depth == 2]
        if workers:
            kill(rng.choice(workers))
    bad = _check_kill_exit(*finish(proc))
    return Outcome(False, bad) if bad else resume_until_done(out, ["--jobs", "2"], want)


def parent_killed(folder: Path, want: list[str], rng: random.Random) -> Outcome:
    """SIGKILL the sweep process alone: its workers must be gone within 10 s."""
    out = folder / "parent.csv"
    proc = start(sweep_cmd(out, "--jobs", "2"))
    if not wait_rows(out, rng.randint(1, len(want) // 2), proc):
        return Outcome(False, "ended before the kill")
    children = descendants(proc.pid)
    kill(proc.pid)
    finish(proc)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in children if alive(p)]
    if left:
        for p in left:
            kill(p)
        return Outcome(False, f"{len(left)} processes outlived the sweep by 10 s")
    return resume_until_done(out, ["--jobs", "2"], want)


def _dask_killed(
    out: Path,
    want: list[str],
    rng: random.Random,
    extra: list[str],
    kill_what: Callable[[], None],
    restart: Callable[[], None],
) -> Outcome:
    """A Dask sweep killed at a random moment by ``kill_what``: it must end 3 with one line,
    then ``restart`` brings the cluster back and ``--resume`` completes the file."""
    proc = start(sweep_cmd(out, *extra))
    if not wait_rows(out, rng.randint(1, len(want) // 2), proc):
        return Outcome(False, "ended before the kill")
    kill_what()
    t0 = time.monotonic()
    rc, err = finish(proc, 60)
    took = time.monotonic() - t0
    bad = _check_kill_exit(rc, err)
    if bad:
        return Outcome(False, bad)
    restart()
    outcome = resume_until_done(out, extra, want)
    return Outcome(outcome.ok, f"{outcome.detail}; exit {rc} {took:.1f} s after the kill")


def dask_scheduler_killed(folder: Path, want: list[str], rng: random.Random) -> Outcome:
    with local_dask(folder) as cluster:

        def restart() -> None:
            cluster.kill_workers()
            cluster.start_scheduler()
            cluster.start_worker()

        return _dask_killed(
            folder / "dask-scheduler.csv", want, rng, ["--scheduler", cluster.address],
            cluster.kill_scheduler, restart,
        )  # fmt: skip


def dask_workers_killed(folder: Path, want: list[str], rng: random.Random) -> Outcome:
    with local_dask(folder) as cluster:
        extra = ["--scheduler", cluster.address, "--wait-workers", "2"]
        return _dask_killed(
            folder / "dask-workers.csv", want, rng, extra, cluster.kill_workers,
            cluster.start_worker,
        )  # fmt: skip


SCENARIOS: dict[str, Callable[[Path, list[str], random.Random], Outcome]] = {
    "pool-workers": pool_workers_killed,
    "parent": parent_killed,
    "dask-scheduler": dask_scheduler_killed,
    "dask-workers": dask_workers_killed,
}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        want = reference(Path(tmp))
        for name in a.only or SCENARIOS:
            for i in range(a.iterations):
                folder = Path(tmp) / f"{name}-{i}"
                folder.mkdir()
                t0 = time.monotonic()
                outcome = SCENARIOS[name](folder, want, rng)
                failed += not outcome.ok
                status = "ok  " if outcome.ok else "FAIL"
                took = time.monotonic() - t0
                print(f"{status} {name:15} {i + 1:2}  {took:5.1f} s  {outcome.detail}")
                sys.stdout.flush()
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
