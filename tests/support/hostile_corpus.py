"""What the hostile-input tests share (issue #15, "nothing lost, nothing hangs"): the inputs
they start from, the makers of hostile file contents, the files every corpus of cases draws
on (FIFOs, links to /dev/zero, sparse 8 GB files, a folder), and the refusal test each
corpus runs: exit 2 and one short line, quickly, with no output left behind.

Used by test_hostile_bounded.py (topology files, model configs, kernel tables, engine
profiles), test_hostile_sweep_files.py (grid, results and measurement files) and
test_hostile_cli.py (outputs, numbers on the command line, signals, subprocesses); part
one, test_hostile.py, takes its inputs and ``run_argv`` from here too.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tpsim.calibration.bounded import show
from tpsim.cli import main

DATA = Path(__file__).parents[1] / "data"
GOOD_TOPOLOGY = DATA / "topologies" / "pair.yaml"
GOOD_MODEL = DATA / "models" / "illustrative.json"
RUN = ["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "2"]
GEMM_HEADER = "gpu,op,dtype,m,n,k,time_us\n"
GEMM_ROW = "h100-sxm,gemm,bf16,{m},4096,4096,{t}\n"
BIG = "1" + "0" * 400  # an integer too large for a float
HUGE = "9" * 5000  # past Python's 4300-digit limit for int()


def with_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag`` set to ``value`` (replaced where ``argv`` has it, else added)."""
    args = list(argv)
    if flag in args:
        args[args.index(flag) + 1] = value
        return args
    return [*args, flag, value]


def run_argv(flag: str, value: str) -> list[str]:
    """:data:`RUN` with ``flag`` set to ``value``."""
    return with_flag(RUN, flag, value)


def sparse_file(path: Path, size: int) -> Path:
    with path.open("wb") as f:
        f.truncate(size)
    return path


def topology_yaml(links: str = "", gpus: str = "  g: h100-sxm\n") -> str:
    return (
        "name: t\ngpus:\n" + gpus + "nodes:\n  - {id: gpu0, kind: gpu, type: g}\n"
        "  - {id: gpu1, kind: gpu, type: g}\nlinks:\n"
        + (
            links
            or "  - {src: gpu0, dst: gpu1, bandwidth_GBps: 300, latency_us: 0.5, duplex: true}\n"
        )
    )


def link_yaml(bw: str = "300", lat: str = "0.5") -> str:
    return f"  - {{src: gpu0, dst: gpu1, bandwidth_GBps: {bw}, latency_us: {lat}, duplex: true}}\n"


def gpu_yaml(field: str, value: str) -> str:
    return f"  g: {{name: x, hbm_GB: 80, hbm_TBps: 3.35, bf16_tflops: 989, {field}: {value}}}\n"


def results_row(**over: object) -> str:
    row = {"point_id": "f3d4d8c2f3a5534e", "model": "llama-2-7b", "topology": "dgx-h100"}
    row |= {"nodes": 1, "gpus_per_node": 0, "tp": 1, "batch": 1, "phase": "decode"}
    row |= {"context_len": 1024, "launch": "graph", "overlap": "none", "engine": "vllm"}
    row |= {"allreduce_algo": "auto", "sequence_parallel": False, "ideal": False}
    row |= {"latency_s": 0.0066, "tokens_per_s": 150.0, "fits": True}
    return json.dumps(row | over) + "\n"


Case = tuple[str, list[str], tuple[str, ...]]


class HostileFiles:
    """The files of one corpus of cases in ``tmp``: those every corpus may draw on, made
    here (FIFOs, links to /dev/zero, sparse files, a folder, a plain file), and those its
    cases :meth:`put`, written at once by :meth:`write` after the cases are built."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.files: dict[str, str | bytes] = {}
        self.fifo = tmp / "fifo.yaml"
        os.mkfifo(self.fifo)
        self.fifo_csv = tmp / "fifo.csv"
        os.mkfifo(self.fifo_csv)
        self.fifo_json = tmp / "fifo.jsonl"
        os.mkfifo(self.fifo_json)
        self.sparse_yaml = str(sparse_file(tmp / "sparse8g.yaml", 8 << 30))
        self.sparse_json = str(sparse_file(tmp / "sparse8g.json", 8 << 30))
        self.sparse_csv = str(sparse_file(tmp / "sparse8g.csv", 8 << 30))
        self.sparse_jsonl = str(sparse_file(tmp / "sparse6g.jsonl", 6 << 30))
        self.zero_jsonl = tmp / "zero.jsonl"
        self.zero_jsonl.symlink_to("/dev/zero")
        self.zero_csv = tmp / "zero.csv"
        self.zero_csv.symlink_to("/dev/zero")
        self.zero_yaml = tmp / "zero.yaml"
        self.zero_yaml.symlink_to("/dev/zero")
        self.a_file = self.put("a_file.txt", "not a folder\n")
        (tmp / "folder.yaml").mkdir()

    def put(self, name: str, content: str | bytes) -> str:
        """The path ``name`` will have, with ``content`` once :meth:`write` runs."""
        self.files[name] = content
        return str(self.tmp / name)

    def write(self) -> None:
        """Write every file the cases put."""
        tmp = self.tmp
        for name, content in self.files.items():
            p = tmp / name
            if isinstance(content, bytes):
                p.write_bytes(content)
            else:
                p.write_text(content, encoding="utf-8")


def case_ids(build: Callable[[Path], list[Case]]) -> list[str]:
    """The ids of the cases ``build`` makes (in a folder of its own, removed after)."""
    tmp = Path(tempfile.mkdtemp())
    try:
        return [c[0] for c in build(tmp)]
    finally:
        shutil.rmtree(tmp)


def refusal_tests(build: Callable[[Path], list[Case]], ids: list[str]) -> tuple[Any, Any]:
    """The module's ``corpus`` fixture (its cases, built once in a folder of the module's)
    and ``test_refused_in_one_short_line`` over ``ids``: each case exits 2 with one short
    line naming what it refuses, within 30 s, and leaves no output."""

    @pytest.fixture(scope="module", name="corpus")
    def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Case]]:
        tmp = tmp_path_factory.mktemp("bounded")
        return tmp, build(tmp)

    @pytest.mark.parametrize("case", ids)
    def test_refused_in_one_short_line(
        case: str,
        corpus: tuple[Path, list[Case]],
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        tmp, cases = corpus
        (argv, needles) = next((a, n) for c, a, n in cases if c == case)
        work = tmp / "work"
        work.mkdir(exist_ok=True)
        monkeypatch.chdir(work)
        before = sorted(tmp.rglob("*"))
        start = time.perf_counter()
        try:
            rc = main(argv)
        except BaseException as e:  # a traceback reaching the user is the failure we hunt
            rc = f"raised {type(e).__name__}: {show(str(e))}"
        seconds = time.perf_counter() - start
        out, err = capsys.readouterr()
        assert rc == 2, (rc, err[:300])
        assert out == ""
        assert err.startswith("tpsim: error: ") and err.count("\n") == 1, err[:300]
        assert len(err) < 300, err
        assert err.isprintable() or err[:-1].isprintable(), err
        assert any(n in err for n in needles), err
        assert seconds < 30, seconds
        assert sorted(tmp.rglob("*")) == before  # no output, not even a partial one
        assert not (work / "pwned").exists()

    return corpus, test_refused_in_one_short_line
