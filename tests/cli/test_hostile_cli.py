"""Hostile input, part two (issue #15, "nothing lost, nothing hangs"): outputs that cannot be
written and absurd numbers on the command line are refused with exit 2 and one short line;
endless inputs stay within 1 GiB, a full disk, a reader that stops early, process
substitution and Ctrl-C each end in one line (or none); JSON output parses strictly.

Refusals run in-process through ``tpsim.cli.main``; a subprocess only where a signal,
/dev/full, process substitution or a memory limit needs one. What the hostile-input tests
share is in hostile_corpus.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ctrl_c import sigint_default
from hostile_corpus import (
    BIG,
    GOOD_MODEL,
    GOOD_TOPOLOGY,
    HUGE,
    RUN,
    Case,
    HostileFiles,
    case_ids,
    refusal_tests,
    run_argv,
    sparse_file,
)
from tpsim.cli import main


def build_cases(tmp: Path) -> list[Case]:
    """(case id, argv, substrings of which the message must hold one): outputs that are files
    or under one, and numbers no run can have, on the command line."""
    hostile = HostileFiles(tmp)
    put = hostile.put
    cases: list[Case] = []

    out = str(tmp / "never.csv")
    cfg = json.loads(GOOD_MODEL.read_text())

    # --- outputs that are files, or places that cannot be written ------------------------------
    for cmd in (["demo"], ["study", "worked_examples"], ["bench", "--quick"]):
        cases.append((f"{cmd[0]} --out a file", [*cmd, "--out", hostile.a_file], ("is a file",)))
        cases.append(
            (
                f"{cmd[0]} --out under a file",
                [*cmd, "--out", hostile.a_file + "/x"],
                ("does not exist",),
            )
        )
        cases.append(
            (
                f"{cmd[0]} --out in a missing folder",
                [*cmd, "--out", str(tmp / "no/such/x")],
                ("does not exist",),
            )
        )
    cases.append(
        ("plot --out a file", ["plot", str(GOOD_MODEL), "--out", hostile.a_file], ("is a file",))
    )
    sweep = ["sweep", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "1", "--quiet"]
    cases.append(
        ("sweep --plots a file", [*sweep, "--out", out, "--plots", hostile.a_file], ("is a file",))
    )
    cases.append(
        (
            "sweep --plots under a file",
            [*sweep, "--out", out, "--plots", hostile.a_file + "/p"],
            ("does not exist",),
        )
    )

    # --- numbers on the command line -------------------------------------------------------------
    claim = ["check-claim", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "1"]
    for v in ("inf", "-inf", "nan", "1e-320", "1e300", "0", BIG):
        cases.append(
            (
                f"check-claim --tokens-per-s {v[:8]} --json",
                [*claim, "--tokens-per-s", v, "--json"],
                ("tokens",),
            )
        )
    cases.append(("run --tp of 5000 digits", run_argv("--tp", HUGE), ("--tp",)))
    cases.append(("run --batch of 400 digits", run_argv("--batch", BIG), ("batch=",)))
    cases.append(
        ("run --launch-skew-us 10**400", run_argv("--launch-skew-us", BIG), ("launch-skew",))
    )
    # numbers at the limits of float: every float flag through the one checked reader
    two_nodes = [*run_argv("--tp", "16"), "--nodes", "2"]
    plan = ["plan", "--model", "llama-2-7b", "--topology", "dgx-h100", "--json"]
    float_flags = [
        ("run", two_nodes, "--nic-gbps"),
        ("compare", ["compare", *RUN[1:5], "--tp", "8,16", "--nodes", "2"], "--nic-gbps"),
        ("collective", ["collective", "--topology", "dgx-h100", "--ranks", "8"], "--nic-gbps"),
        ("run", RUN, "--launch-skew-us"),
        ("plan", plan, "--slo-ttft-ms"),
        ("plan", plan, "--slo-tpot-ms"),
        ("plan", plan, "--gpu-hour-usd"),
        ("sweep", [*sweep, "--out", out], "--wait-workers"),
    ]
    for command, argv, flag in float_flags:
        for v in ("1e-320", "-1e-320", "1e308", "inf", "nan", "-5", BIG, "4e5x"):
            cases.append((f"{command} {flag} {v[:8]}", [*argv, flag, v], (flag,)))
    cases.append(
        (
            "collective --ranks 8000",
            ["collective", "--topology", "dgx-h100", "--nodes", "1000", "--ranks", "8000"],
            ("ranks=8000",),
        )
    )
    cases.append(
        (
            "collective --ranks 512",
            ["collective", "--topology", "dgx-h100", "--nodes", "64", "--ranks", "512"],
            ("ranks=512",),
        )
    )
    star = tmp / "star.json"
    star.write_text(
        json.dumps(
            {
                "name": "star1024",
                "nodes": [{"id": f"g{i}", "kind": "gpu", "type": "h100-sxm"} for i in range(1024)]
                + [{"id": "sw", "kind": "switch"}],
                "links": [
                    {
                        "src": f"g{i}",
                        "dst": "sw",
                        "bandwidth_GBps": 50,
                        "latency_us": 2,
                        "duplex": True,
                    }
                    for i in range(1024)
                ],
            }
        )
    )
    wide_cfg = dict(
        cfg,
        hidden_size=16384,
        num_attention_heads=1024,
        num_key_value_heads=1024,
        num_hidden_layers=1,
        intermediate_size=16384,
    )
    wide_model = put("wide.json", json.dumps(wide_cfg))
    cases.append(
        (
            "run --tp 1024 on a 1024-GPU star",
            ["run", "--model", wide_model, "--topology", str(star), "--tp", "1024", "--allow-oom"],
            ("ranks=1024", "records"),
        )
    )
    cases.append(
        (
            "collective --ranks 256 on a 1024-GPU star",
            ["collective", "--topology", str(star), "--ranks", "256", "--sizes", "1M"],
            ("ranks=256",),
        )
    )
    cases.append(
        (
            "a message of 100,000 characters",
            ["run", "--model", "m" * 100_000, "--topology", "dgx-h100", "--tp", "1"],
            ("model=",),
        )
    )

    hostile.write()
    return cases


IDS = case_ids(build_cases)
corpus, test_refused_in_one_short_line = refusal_tests(build_cases, IDS)


def _tpsim(argv: list[str] | str, cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    """``python -m tpsim`` in a subprocess limited to 1 GiB of address space and 60 s."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    shell = isinstance(argv, str)
    cmd = argv if shell or argv[0] == "bash" else [sys.executable, "-m", "tpsim", *argv]
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        cmd,
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=60,
        preexec_fn=limit,
        shell=shell,
        **kw,
    )


def _one_line(p: subprocess.CompletedProcess[str], rc: int = 2) -> str:
    assert p.returncode == rc, (p.returncode, p.stderr[-500:])
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr[-500:]
    assert len(p.stderr) < 300, p.stderr
    return p.stderr


@pytest.mark.slow
def test_endless_and_huge_inputs_in_1_gib_and_a_fifo_with_no_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "t.yaml"
    os.mkfifo(fifo)
    huge = sparse_file(tmp_path / "r.jsonl", 8 << 30)
    cases = [
        (["sweep", "--grid", "/dev/zero", "--out", "o.csv"], "not a regular file"),
        (["plot", str(huge)], "larger than"),
        ([*RUN, "--kernel-table", "/dev/zero"], "not a regular file"),
        (run_argv("--topology", str(fifo)), "pipe"),
        (["sweep", "--grid", str(fifo), "--out", "o.csv"], "pipe"),
        (run_argv("--model", "/dev/urandom"), "not a regular file"),
    ]
    for argv, needle in cases:
        assert needle in _one_line(_tpsim(argv, tmp_path)), argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "t.yaml"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.slow
def test_stdout_on_a_full_disk(tmp_path: Path) -> None:
    py = f"{sys.executable} -m tpsim"
    for cmd in ("list models", "run --model llama-2-7b --topology dgx-h100 --tp 2 --json"):
        err = _one_line(_tpsim(f"{py} {cmd} > /dev/full", tmp_path))
        assert err == "tpsim: error: stdout: cannot write (No space left on device)\n", err


@pytest.mark.slow
def test_a_reader_that_stops_early_is_no_error(tmp_path: Path) -> None:
    p = _tpsim(f"{sys.executable} -m tpsim list models | head -1", tmp_path)
    assert p.returncode == 0 and p.stderr == "" and p.stdout.startswith("name")


def test_a_reader_that_left_ends_the_text_not_the_files(tmp_path: Path) -> None:
    # `tpsim run ... --trace t.json | head -3`: the trace is written all the same (it was
    # not, and the exit was 0); here the reader left before the first line
    trace = tmp_path / "t.json"
    argv = [*RUN, "--batch", "1", "--trace", str(trace)]
    with subprocess.Popen(
        [sys.executable, "-m", "tpsim", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as p:
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        err = p.stderr.read().decode()
    assert (p.returncode, err) == (0, "")
    assert json.loads(trace.read_text())["traceEvents"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.slow
def test_process_substitution_is_refused_with_the_way_out(tmp_path: Path) -> None:
    """``<(...)`` is a pipe: refused (never read in part or blocked on), naming the fix."""
    py = f"{sys.executable} -m tpsim"
    for flag in ("--model", "--topology", "--kernel-table"):
        src = GOOD_MODEL if flag == "--model" else GOOD_TOPOLOGY
        cmd = f"{py} run --model llama-2-7b --topology dgx-h100 --tp 2 {flag} <(cat {src})"
        err = _one_line(_tpsim(["bash", "-c", cmd], tmp_path))
        assert "process substitution" in err and "save it to a file" in err, err


SLOW_RUN = ["run", "--model", "llama-3.1-70b", "--topology", "dgx-h100", "--tp", "8"]
SLOW_RUN += ["--phase", "prefill", "--overlap", "chunked", "--batch", "4"]
# some 7 s here with its trace and Gantt (the 3 s wait is well inside it: with 4 pieces a
# GEMM it finished in 2.6 s, and the signal could land while the interpreter was exiting)
SLOW_RUN += ["--overlap-chunks", "16"]


# two configurations, one over two nodes and launched eagerly: some 18 s, long past the signal
SLOW_REPORT = ["report", *SLOW_RUN[1:], "--out", "r.html"]
SLOW_REPORT[SLOW_REPORT.index("--tp") + 1] = "8,16"
SLOW_REPORT += ["--nodes", "1,2", "--launch", "eager"]
#: Each signal as it arrives: Ctrl-C at the terminal's whole process group; SIGTERM as
#: ``timeout``, a scheduler or a container sends it, and SIGHUP, to the process alone.
SIGNALS = {
    "SIGINT": (signal.SIGINT, True, 130, "interrupted"),
    "SIGTERM": (signal.SIGTERM, False, 143, "terminated (SIGTERM)"),
    "SIGHUP": (signal.SIGHUP, False, 129, "terminated (SIGHUP)"),
}


@pytest.mark.parametrize("how", list(SIGNALS))
@pytest.mark.parametrize(
    ("argv", "wait_s"),
    [
        ([*SLOW_RUN, "--trace", "t.json", "--gantt", "g.png"], 3.0),
        (["demo", "--out", "d"], 3.0),
        (SLOW_REPORT, 3.0),
    ],
    ids=["run", "demo", "report"],
)
@pytest.mark.slow
def test_a_signal_is_one_line_and_leaves_no_output(
    tmp_path: Path, argv: list[str], wait_s: float, how: str
) -> None:
    """Ctrl-C, SIGTERM and SIGHUP alike: one line, 128 + the signal, no file left behind
    (no hidden temporary, no finished-looking trace, no partial folder)."""
    signum, to_group, code, said = SIGNALS[how]
    p = subprocess.Popen(
        [sys.executable, "-m", "tpsim", *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=sigint_default,  # also when pytest runs with SIGINT ignored (in background)
    )
    time.sleep(wait_s)
    if to_group:
        os.killpg(p.pid, signum)
    else:
        p.send_signal(signum)
    _, err = p.communicate(timeout=60)
    if p.returncode == 0:  # finished before the signal (a very fast machine): nothing to see
        pytest.skip(f"the command finished before {how}")
    assert p.returncode == code and err == f"tpsim: {said}; no output written\n", err
    assert [f for f in tmp_path.rglob("*") if f.is_file()] == []
    assert list(tmp_path.iterdir()) == []


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


PLAN_4_NODES = ["plan", "--model", "llama-3.1-70b", "--topology", "dgx-h100", "--nodes", "4"]


def _start_plan(tmp_path: Path) -> subprocess.Popen[str]:
    """A plan of 4 nodes on 2 workers, in its own process group, that Ctrl-C can reach."""
    return subprocess.Popen(
        [sys.executable, "-m", "tpsim", *PLAN_4_NODES, "--jobs", "2"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_default,
    )


def _group_ends(pgid: int) -> bool:
    """Whether every process of the group (the plan's workers) has ended within 10 s."""
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _group_alive(pgid)


@pytest.mark.slow
def test_ctrl_c_twice_stops_plan_and_its_workers_at_once(tmp_path: Path) -> None:
    """plan's workers leave Ctrl-C to it and die with it; it stops them, never waits on them
    (a second Ctrl-C found it joining busy workers, and they outlived a killed plan)."""
    p = _start_plan(tmp_path)
    time.sleep(4.0)
    os.killpg(p.pid, signal.SIGINT)
    time.sleep(0.3)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGINT)
    start = time.monotonic()
    _, err = p.communicate(timeout=30)
    if p.returncode == 0:
        pytest.skip("plan finished before Ctrl-C")
    assert time.monotonic() - start < 15
    assert p.returncode == 130 and "Traceback" not in err, err
    assert _group_ends(p.pid)  # the workers follow their parent


@pytest.mark.slow
def test_plan_workers_die_with_a_killed_plan(tmp_path: Path) -> None:
    p = _start_plan(tmp_path)
    time.sleep(4.0)
    p.kill()  # SIGKILL to the plan alone: no clean-up of its own
    p.communicate(timeout=10)
    assert _group_ends(p.pid)


def _strict(text: str) -> object:
    """JSON as RFC 8259 has it: NaN, Infinity and -Infinity are no JSON."""

    def refuse(token: str) -> object:
        raise AssertionError(f"{token} in JSON output")

    return json.loads(text, parse_constant=refuse)


CLAIM = ["check-claim", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "1"]


def test_every_json_output_parses_strictly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    commands = [
        [*RUN, "--json", "--trace", "t.json"],
        ["collective", "--topology", "dgx-h100", "--ranks", "8", "--sizes", "8,1M", "--json"],
        [*CLAIM, "--tokens-per-s", "1e9", "--json"],
        ["study", "worked_examples", "--json", "--out", "s"],
    ]
    for argv in commands:
        assert main(argv) == 0, argv
        _strict(capsys.readouterr().out)
    files = [*tmp_path.rglob("*.json")]
    assert len(files) >= 2, files
    for f in files:
        _strict(f.read_text(encoding="utf-8"))
