"""Hostile input, issue #27's second adversarial round: limits of the machine and ambiguous
input. A full disk or a file size limit names the output file and leaves nothing partial
(a sweep keeps every row it wrote whole and says what is not done); ``compare --results``
refuses a point_id on two rows and run's flags beside it, and streams the file; a path with
a newline shows escaped, whole; an unwritable ``MPLCONFIGDIR`` prints nothing; a
``MemoryError`` while tpsim is imported is one line; a calibrated profile's ``extends:``
travels with it.

The refusals run in-process through the shared refusal test (hostile_corpus.py); what needs
a file size limit, an environment or an import failure runs in a subprocess.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import yaml
from hostile_corpus import (
    GOOD_MODEL,
    GOOD_TOPOLOGY,
    Case,
    HostileFiles,
    case_ids,
    refusal_tests,
    results_row,
)
from tpsim.calibration import profile
from tpsim.cli import main
from tpsim.experiments.calibrate.knobs import extends_name
from tpsim.experiments.sweep.reading import read_rows

A, B = "f3d4d8c2f3a5534e", "0a1b2c3d4e5f6071"
#: What a simulated row holds beside results_row's fields (as a sweep writes them).
SIMULATED = {"gpu": "h100-sxm", "hosts": 1, "tokens_per_s_per_gpu": 150.0}
SIMULATED |= {"regime": "memory-bound", "memory_s": 0.0065, "compute_s": 0.0}
SIMULATED |= {"weights_bytes_per_gpu": 13476831232, "total_bytes_per_gpu": 14013912576}
SIMULATED |= {"capacity_bytes_per_gpu": 76235669504, "collectives": 0, "comm_bytes_per_gpu": 0}


def row(**over: object) -> str:
    """A results row of a simulated point (JSON Lines)."""
    return results_row(**(SIMULATED | over))


RUN_FLAGS = [
    ["--model", "llama-2-7b"],
    ["--topology", "dgx-h100"],
    ["--tp", "2"],
    ["--batch", "8"],
    ["--nodes", "1"],
    ["--engine", "vllm"],
    ["--phase", "prefill"],
    ["--context-len", "2048"],
    ["--prompt-len", "128"],
    ["--launch", "eager"],
    ["--ideal"],
    ["--dtype", "fp8"],
]


def build_cases(tmp: Path) -> list[Case]:
    """(case id, argv, substrings of which the message must hold one)."""
    hostile = HostileFiles(tmp)
    put = hostile.put
    cases: list[Case] = []
    two = row(point_id=A) + row(point_id=B, tp=2)

    # --- compare --results: a point_id on two rows is ambiguous ---------------------------
    dupes = {
        "the first id twice": two + row(point_id=A, tp=4),
        "the second id twice": two + row(point_id=B, tp=8),
        "an id three times": two + row(point_id=A) + row(point_id=A),
        "both ids twice": two + two,
        "the same row twice": row(point_id=A) + two,
    }
    for name, text in dupes.items():
        for ext in (".jsonl", ".csv"):
            if ext == ".csv":
                rows = [json.loads(line) for line in text.splitlines()]
                from tpsim.experiments.sweep.rows import results_text

                text = results_text(rows, "csv")
            path = put(f"dupes {name}{ext}", text)
            cases.append(
                (
                    f"compare --results {ext}: {name}",
                    ["compare", "--results", path, "--rows", f"{A},{B}"],
                    ("ambiguous",),
                )
            )
    # --- compare --results with run's flags: two modes at once ----------------------------
    good = put("good.jsonl", two)
    for flags in RUN_FLAGS:
        cases.append(
            (
                f"compare --results with {flags[0]}",
                ["compare", "--results", good, "--rows", f"{A},{B}", *flags],
                (f"{flags[0]} simulates",),
            )
        )
        cases.append(
            (
                f"compare --rows first, then {flags[0]}",
                ["compare", *flags, "--rows", f"{A},{B}", "--results", good],
                (f"{flags[0]} simulates",),
            )
        )

    # --- paths with a newline: shown escaped and whole -------------------------------------
    nl = "../line\nbreak"  # tmp's, from the folder the cases run in (short: shown whole)
    newline_cases = [
        ("run --topology", ["run", "--model", "llama-2-7b", "--tp", "1", "--topology", nl]),
        ("run --model", ["run", "--topology", "dgx-h100", "--tp", "2", "--model", nl + ".json"]),
        ("run --kernel-table", [*_run(), "--kernel-table", nl + ".csv"]),
        ("run --engine", [*_run(), "--engine", nl + ".yaml"]),
        ("run --trace", [*_run(), "--trace", nl + "/t.json"]),
        ("run --gantt", [*_run(), "--gantt", nl + "/g.png"]),
        ("compare --results", ["compare", "--results", nl + ".csv", "--rows", f"{A},{B}"]),
        ("report results", ["report", nl + ".csv", "--out", str(tmp / "r.html")]),
        ("report --out", ["report", good, "--out", nl + "/r.html"]),
        ("plot results", ["plot", nl + ".csv", "--out", str(tmp / "plots")]),
        ("plot --out", ["plot", good, "--out", nl + "/x/y"]),
        ("sweep --grid", ["sweep", "--grid", nl + ".yaml", "--out", str(tmp / "s.csv")]),
        ("sweep --out", [*_sweep(), "--out", nl + "/s.csv"]),
        ("calibrate csv", ["calibrate", nl + ".csv", "--engine", "vllm", "--out", "p.yml"]),
        ("demo --out", ["demo", "--out", nl + "/x/y"]),
        ("study --out", ["study", "worked_examples", "--out", nl + "/x/y"]),
    ]  # fmt: skip
    for name, argv in newline_cases:
        cases.append((f"a newline in the path: {name}", argv, ("line\\nbreak",)))
    bad = put("bad\nname.yaml", "name: [\n")
    cases.append(
        (
            "a newline in the name of a bad topology file",
            ["run", "--model", "llama-2-7b", "--tp", "2", "--topology", bad],
            ("bad\\nname.yaml",),
        )
    )
    bad_json = put("bad\nmodel.json", "{")
    cases.append(
        (
            "a newline in the name of a bad model file",
            ["run", "--topology", "dgx-h100", "--tp", "2", "--model", bad_json],
            ("bad\\nmodel.json",),
        )
    )
    hostile.write()
    return cases


def _run() -> list[str]:
    return ["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "2"]


def _sweep() -> list[str]:
    return ["sweep", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "1", "--quiet"]


corpus, test_refused_in_one_short_line = refusal_tests(build_cases, case_ids(build_cases))


# --- a full disk, a file size limit ------------------------------------------------------------


def _limited(limit: int):  # type: ignore[no-untyped-def]
    def set_limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write raises EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return set_limit


def _tpsim(
    argv: list[str], cwd: Path, limit: int | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tpsim", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limited(limit) if limit is not None else None,
        env={**os.environ, **(env or {})},
    )


RUN = _run()
TOO_LARGE = {  # command, the output the file size limit stops (relative to the folder)
    "report": (["report", *RUN[1:], "--out", "r.html"], "r.html"),
    "run --trace": ([*RUN, "--trace", "t.json"], "t.json"),
    "run --gantt .png": ([*RUN, "--gantt", "g.png"], "g.png"),
    "run --gantt .svg": ([*RUN, "--gantt", "g.svg"], "g.svg"),
    "compare --gantt": (["compare", *RUN[1:5], "--tp", "1,2", "--gantt", "c.png"], "c.png"),
    "plan --plots": (["plan", *RUN[1:5], "--plots", "pl"], "pl"),
    "demo": (["demo", "--out", "demo"], "demo"),
}  # fmt: skip


@pytest.mark.slow  # subprocesses under a file-size limit, or a large file
@pytest.mark.parametrize("case", list(TOO_LARGE))
def test_a_file_too_large_names_the_output_and_leaves_nothing(case: str, tmp_path: Path) -> None:
    argv, output = TOO_LARGE[case]
    done = _tpsim(argv, tmp_path, limit=2000)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("tpsim: error: "), done.stderr
    assert "stdout" not in done.stderr and "File too large" in done.stderr, done.stderr
    assert output in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())


@pytest.mark.slow  # subprocesses under a file-size limit, or a large file
@pytest.mark.parametrize("ext", [".csv", ".jsonl"])
def test_a_sweep_stopped_by_a_full_disk_keeps_whole_rows_and_resume_finishes(
    tmp_path: Path, ext: str
) -> None:
    out = tmp_path / f"s{ext}"
    grid = ["sweep", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "1,2,4,8"]
    argv = [*grid, "--batch", "1,2,4", "--out", out.name, "--quiet", "--jobs", "2"]
    done = _tpsim(argv, tmp_path, limit=3000)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert f"cannot write {out.name}" in done.stderr and "File too large" in done.stderr
    assert "--resume" in done.stderr
    written = read_rows(out)  # every line whole (a partial one would be refused or cut)
    assert out.read_bytes().endswith(b"\n")
    not_done = int(done.stderr.split("sweep incomplete: ")[1].split()[0])
    assert len(written) + not_done == 12 and not_done > 0  # none lost silently
    again = _tpsim([*argv, "--resume"], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    rows = read_rows(out)
    assert len(rows) == 12 and len({r["point_id"] for r in rows}) == 12


# --- messages ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mpl", ["/dev/null/mpl", "a_file", "missing/../../dev/null/x"])
def test_an_unwritable_mplconfigdir_prints_no_warning(tmp_path: Path, mpl: str) -> None:
    (tmp_path / "a_file").write_text("x")
    done = _tpsim([*RUN, "--gantt", "g.png"], tmp_path, env={"MPLCONFIGDIR": mpl})
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    assert (tmp_path / "g.png").stat().st_size > 0


# --- memory -----------------------------------------------------------------------------------

BOOM = """import sys
class _Boom:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise MemoryError()
sys.meta_path.insert(0, _Boom())
"""


@pytest.mark.slow  # a fresh interpreter per case
@pytest.mark.parametrize(
    "module", ["tpsim.core.engine.simulation", "tpsim.cli.run", "tpsim.calibration.loader"]
)
@pytest.mark.parametrize("how", [["-m", "tpsim"], ["-c", "from tpsim.cli import main; main()"]])
def test_a_memory_error_while_importing_is_one_line(
    tmp_path: Path, module: str, how: list[str]
) -> None:
    (tmp_path / "sitecustomize.py").write_text(BOOM.format(module=module))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, *how, "list", "models"], capture_output=True, text=True, env=env
    )
    assert done.returncode in (1, 2)
    assert done.stderr.count("\n") == 1 and "out of memory" in done.stderr, done.stderr
    assert "input" not in done.stderr and "Traceback" not in done.stderr


def test_a_memory_error_in_a_command_does_not_blame_the_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tpsim.cli

    def boom(_: object) -> int:
        raise MemoryError

    monkeypatch.setitem(tpsim.cli.COMMANDS, "list", boom)
    assert main(["list", "models"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out of memory" in err and "input" not in err


@pytest.mark.slow
def test_compare_results_streams_a_large_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.jsonl"
    line = row(point_id="X" * 16)
    with path.open("w") as f:
        for i in range(40_000):
            f.write(line.replace("X" * 16, f"{i:016x}"))
    size = path.stat().st_size
    tracemalloc.start()
    try:
        rc = main(["compare", "--results", str(path), "--rows", f"{5:016x},{39_999:016x}"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rc == 0, capsys.readouterr().err
    assert peak < size / 4, (peak, size)  # the file is never held whole


# --- profiles that travel ---------------------------------------------------------------------


def test_extends_names_a_shipped_base_by_name(tmp_path: Path) -> None:
    shipped = Path(profile.__module__.replace(".", "/"))  # not used: names only
    del shipped
    assert extends_name("vllm-v0", tmp_path) == "vllm-v0"
    assert extends_name("vLLM", tmp_path) == "vllm"
    from importlib import resources

    file = resources.files("tpsim.calibration").joinpath("engines/vllm.yaml")
    assert extends_name(str(file), tmp_path) == "vllm"


@pytest.mark.slow
def test_a_calibrated_profile_travels_with_its_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tpsim import Options, Workload, simulate

    work = tmp_path / "work"
    (work / "bases").mkdir(parents=True)
    (work / "out").mkdir()
    base = work / "bases" / "base.yaml"
    base.write_text("name: base\nabout: test\nextends: vllm-v0\n")
    rows = ["model,topology,nodes,tp,batch,phase,prompt_len,context_len,dtype,measured_ms"]
    for tp in (1, 2):
        ms = simulate("llama-3.1-8b", "dgx-h100", tp, Workload(1), Options(engine="vllm-v0"))
        rows.append(f"llama-3.1-8b,dgx-h100,1,{tp},1,decode,,1024,,{ms.latency_s * 1e3 * 1.1!r}")
    (work / "m.csv").write_text("\n".join(rows) + "\n")
    monkeypatch.chdir(work)
    argv = ["calibrate", "m.csv", "--engine", "bases/base.yaml", "--out", "out/fit.yaml"]
    assert main([*argv, "--jobs", "1"]) == 0, capsys.readouterr().err
    doc = yaml.safe_load((work / "out" / "fit.yaml").read_text())
    assert doc["extends"] == "../bases/base.yaml"
    expected = profile(str(work / "out" / "fit.yaml"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # another working folder
    profile.cache_clear()
    assert profile(str(work / "out" / "fit.yaml")) == expected
    assert profile("../work/out/fit.yaml") == expected
    moved = tmp_path / "moved"
    shutil.move(work, moved)  # both files, together, to another folder
    profile.cache_clear()
    assert profile(str(moved / "out" / "fit.yaml")) == expected
    monkeypatch.chdir(moved / "out")
    profile.cache_clear()
    assert profile("fit.yaml") == expected


def test_a_model_and_a_topology_from_files_still_run(tmp_path: Path) -> None:
    argv = ["run", "--model", str(GOOD_MODEL), "--topology", str(GOOD_TOPOLOGY), "--tp", "2"]
    assert main(argv) == 0
