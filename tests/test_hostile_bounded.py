"""Hostile input, part two (issue #15, "nothing lost, nothing hangs"): inputs that are
endless, huge, blocking or absurd are refused with exit 2 and one short line, quickly and
in bounded memory; outputs that cannot be written, and Ctrl-C, end in one line too.

Cases run in-process through ``tpsim.cli.main`` (a FIFO never blocks: files are opened
non-blocking and refused unless regular); a subprocess only where a signal, /dev/full,
process substitution or a memory limit needs one.
"""

from __future__ import annotations

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
import yaml
from tpsim.calibration.bounded import ReadRefused, read_text, show, yaml_load
from tpsim.cli import main
from tpsim.experiments.grid import grid_from_yaml

DATA = Path(__file__).parent / "data"
GOOD_TOPOLOGY = DATA / "topologies" / "pair.yaml"
GOOD_MODEL = DATA / "models" / "illustrative.json"
RUN = ["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "2"]
GEMM_HEADER = "gpu,op,dtype,m,n,k,time_us\n"
GEMM_ROW = "h100-sxm,gemm,bf16,{m},4096,4096,{t}\n"
BIG = "1" + "0" * 400  # an integer too large for a float
HUGE = "9" * 5000  # past Python's 4300-digit limit for int()


def _run(flag: str, value: str) -> list[str]:
    args = list(RUN)
    if flag in args:
        args[args.index(flag) + 1] = value
        return args
    return [*args, flag, value]


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as f:
        f.truncate(size)
    return path


def _topology(links: str = "", gpus: str = "  g: h100-sxm\n") -> str:
    return (
        "name: t\ngpus:\n" + gpus + "nodes:\n  - {id: gpu0, kind: gpu, type: g}\n"
        "  - {id: gpu1, kind: gpu, type: g}\nlinks:\n"
        + (
            links
            or "  - {src: gpu0, dst: gpu1, bandwidth_GBps: 300, latency_us: 0.5, duplex: true}\n"
        )
    )


def _link(bw: str = "300", lat: str = "0.5") -> str:
    return f"  - {{src: gpu0, dst: gpu1, bandwidth_GBps: {bw}, latency_us: {lat}, duplex: true}}\n"


def _gpu(field: str, value: str) -> str:
    return f"  g: {{name: x, hbm_GB: 80, hbm_TBps: 3.35, bf16_tflops: 989, {field}: {value}}}\n"


def _row(**over: object) -> str:
    row = {"point_id": "f3d4d8c2f3a5534e", "model": "llama-2-7b", "topology": "dgx-h100"}
    row |= {"nodes": 1, "gpus_per_node": 0, "tp": 1, "batch": 1, "phase": "decode"}
    row |= {"context_len": 1024, "launch": "graph", "overlap": "none", "engine": "vllm"}
    row |= {"allreduce_algo": "auto", "sequence_parallel": False, "ideal": False}
    row |= {"latency_s": 0.0066, "tokens_per_s": 150.0, "fits": True}
    return json.dumps(row | over) + "\n"


Case = tuple[str, list[str], tuple[str, ...]]


def build_cases(tmp: Path) -> list[Case]:
    """(case id, argv, substrings of which the message must hold one)."""
    files: dict[str, str | bytes] = {}
    cases: list[Case] = []

    def put(name: str, content: str | bytes) -> str:
        files[name] = content
        return str(tmp / name)

    fifo = tmp / "fifo.yaml"
    os.mkfifo(fifo)
    fifo_csv = tmp / "fifo.csv"
    os.mkfifo(fifo_csv)
    fifo_json = tmp / "fifo.jsonl"
    os.mkfifo(fifo_json)
    sparse_yaml = str(_sparse(tmp / "sparse8g.yaml", 8 << 30))
    sparse_json = str(_sparse(tmp / "sparse8g.json", 8 << 30))
    sparse_csv = str(_sparse(tmp / "sparse8g.csv", 8 << 30))
    sparse_jsonl = str(_sparse(tmp / "sparse6g.jsonl", 6 << 30))
    zero_jsonl = tmp / "zero.jsonl"
    zero_jsonl.symlink_to("/dev/zero")
    zero_csv = tmp / "zero.csv"
    zero_csv.symlink_to("/dev/zero")
    zero_yaml = tmp / "zero.yaml"
    zero_yaml.symlink_to("/dev/zero")
    a_file = put("a_file.txt", "not a folder\n")
    (tmp / "folder.yaml").mkdir()

    # --- topology files: blocking, endless, huge, numbers no device has -------------------
    topo = {
        "FIFO": (str(fifo), "pipe"),
        "/dev/zero": ("/dev/zero", "not a regular file"),
        "symlink to /dev/zero": (str(zero_yaml), "not a regular file"),
        "sparse 8 GB yaml": (sparse_yaml, "larger than"),
        "sparse 8 GB json": (sparse_json, "larger than"),
        "a folder": (str(tmp / "folder.yaml"), "folder"),
        "bandwidth 10**400": (put("bw_big.yaml", _topology(_link(BIG))), "bandwidth_GBps="),
        "bandwidth 10**400 json": (
            put("bw_big.json", json.dumps(yaml.safe_load(_topology())).replace("300", BIG)),
            "bandwidth_GBps=",
        ),
        "bandwidth 5000 digits json": (
            put("bw_huge.json", json.dumps(yaml.safe_load(_topology())).replace("300", HUGE)),
            "unreadable number",
        ),
        "bandwidth denormal": (put("bw_denormal.yaml", _topology(_link("5.0e-324"))), "bandwidth"),
        "bandwidth 1e-30": (put("bw_tiny.yaml", _topology(_link("1.0e-30"))), "bandwidth"),
        "latency 10**400": (put("lat_big.yaml", _topology(_link(lat=BIG))), "latency_us="),
        "latency denormal": (put("lat_dn.yaml", _topology(_link(lat="5.0e-324"))), "latency_us="),
        "latency inf": (put("lat_inf.yaml", _topology(_link(lat=".inf"))), "latency_us="),
        "latency nan": (put("lat_nan.yaml", _topology(_link(lat=".nan"))), "latency_us="),
        "tflops 400 digits": (
            put("tflops.yaml", _topology(gpus=_gpu("fp8_tflops", BIG))),
            "tflops",
        ),
        "tflops denormal": (
            put("tflops_dn.yaml", _topology(gpus=_gpu("fp8_tflops", "5.0e-324"))),
            "tflops",
        ),
        "HBM TB/s inf": (
            put("hbm_inf.yaml", _topology(gpus=_gpu("kernel_overhead_us", ".inf"))),
            "kernel_overhead_us",
        ),
        "scale-up GB/s 10**400": (
            put("bf16.yaml", _topology(gpus=_gpu("scaleup_GBps", BIG))),
            "scaleup_GBps",
        ),
        "aliases past the bound": (
            put(
                "laughs.yaml",
                "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                "name: *f\n",
            ),
            "aliases expand",
        ),
        "control characters in the name": (
            put("ctrl.yaml", _topology().replace("name: t", 'name: "t\\e[31m\\x07"')),
            "name=",
        ),
        "name of 200,000 characters": (
            put("longname.yaml", _topology().replace("name: t", "name: [" + "x" * 200_000 + "]")),
            "name=",
        ),
    }
    for what, (path, needle) in topo.items():
        cases.append((f"topology {what}", _run("--topology", path), (needle,)))

    # --- model configs ----------------------------------------------------------------------
    cfg = json.loads(GOOD_MODEL.read_text())
    model = {
        "FIFO": (str(fifo), "pipe"),
        "/dev/zero": ("/dev/zero", "not a regular file"),
        "sparse 8 GB": (sparse_json, "larger than"),
        "hidden_size 400 digits": (
            put("hidden_big.json", json.dumps(cfg).replace("4096", BIG, 1)),
            "hidden_size=",
        ),
        "vocab 5000 digits": (
            put("vocab_huge.json", json.dumps(cfg).replace("32000", HUGE)),
            "not valid JSON",
        ),
        "100k-deep list": (put("deep.json", "[" * 100_000 + "]" * 100_000), "nested too deeply"),
        "latin-1": (
            put("latin1.json", json.dumps(cfg).replace("llama", "ll\xe9").encode("latin-1")),
            "not UTF-8",
        ),
        "layers 10**400": (
            put(
                "layers.json",
                json.dumps(cfg).replace('"num_hidden_layers": 32', f'"num_hidden_layers": {BIG}'),
            ),
            "num_hidden_layers=",
        ),
        "_name_or_path of 200,000 characters": (
            put(
                "longname.json",
                json.dumps(cfg | {"_name_or_path": "x" * 200_000, "vocab_size": -1}),
            ),
            "vocab_size=",
        ),
    }
    for what, (path, needle) in model.items():
        cases.append((f"model {what}", _run("--model", path), (needle,)))

    # --- grid files (sweep --grid) -----------------------------------------------------------
    out = str(tmp / "never.csv")
    base = "model: llama-2-7b\ntopology: dgx-h100\ntp: 1\n"
    wide = (
        "model: llama-2-7b\ntopology: dgx-h100\ntp: 1\nbatch: &b ["
        + ",".join(str(i) for i in range(1, 448))
        + "]\nprompt_len: ["
        + ",".join(str(i) for i in range(1, 448))
        + "]\nphase: prefill\n"
    )
    grid = {
        "FIFO": (str(fifo), "pipe"),
        "/dev/zero": ("/dev/zero", "not a regular file"),
        "symlink to /dev/zero": (str(zero_yaml), "not a regular file"),
        "sparse 8 GB": (sparse_yaml, "larger than"),
        "a folder": (str(tmp / "folder.yaml"), "folder"),
        "missing": (str(tmp / "missing.yaml"), "no such file"),
        "not UTF-8": (
            put("g_latin1.yaml", (base + "engine: v\xe9\n").encode("latin-1")),
            "not UTF-8",
        ),
        "billion laughs": (
            put(
                "g_laughs.yaml",
                base + "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nbatch: *g\n",
            ),
            "aliases expand",
        ),
        "40 alias copies of a 447 x 447 grid": (
            put(
                "g_copies.yaml",
                "- &w\n" + "".join(f"  {ln}\n" for ln in wide.splitlines()) + "- *w\n" * 39,
            ),
            "points: at most",
        ),
        "batch of 5000 digits": (put("g_batch_huge.yaml", base + f"batch: {HUGE}\n"), "number"),
        "batch of 400 digits": (put("g_batch_big.yaml", base + f"batch: {BIG}\n"), "batch="),
        "batch 10**400 as a list item": (
            put("g_batch_list.yaml", base + f"batch: [1, {BIG}]\n"),
            "batch=",
        ),
        "tp .inf": (put("g_tp_inf.yaml", base.replace("tp: 1", "tp: .inf")), "tp="),
        "tp .nan": (put("g_tp_nan.yaml", base.replace("tp: 1", "tp: .nan")), "tp="),
        "5000-deep list": (
            put("g_deep.yaml", base + "batch: " + "[" * 5000 + "]" * 5000 + "\n"),
            "nested deeper",
        ),
        "5000-deep flow mapping": (
            put("g_deep_map.yaml", "{a: " * 5000 + "1" + "}" * 5000 + "\n"),
            "nested deeper",
        ),
        "unknown key of 200,000 characters": (
            put("g_longkey.yaml", base + "k" * 200_000 + ": 1\n"),
            "malformed YAML",
        ),
        "unknown key of 1,000 characters": (
            put("g_key1000.yaml", base + "k" * 1000 + ": 1\n"),
            "unknown key",
        ),
        "value of 200,000 characters": (
            put("g_longvalue.yaml", base + "engine: " + "v" * 200_000 + "\n"),
            "engine=",
        ),
        "python tag": (
            put("g_tag.yaml", base + "batch: !!python/object/apply:os.system [touch pwned]\n"),
            "python/object",
        ),
        "syntax error on a 100,000-character line": (
            put("g_syntax.yaml", base + "batch: [" + "1," * 50_000 + "\n: :\n"),
            "malformed YAML",
        ),
        "duplicate key after a merge": (
            put("g_dup.yaml", "b: &b {batch: 1}\n" + base + "tp: 2\n"),
            "twice",
        ),
    }
    for what, (path, needle) in grid.items():
        cases.append(
            (f"grid {what}", ["sweep", "--grid", path, "--out", out, "--quiet"], (needle,))
        )

    # --- kernel tables (run --kernel-table) ---------------------------------------------------
    ktab = {
        "FIFO": (str(fifo_csv), "pipe"),
        "/dev/zero": ("/dev/zero", "not a regular file"),
        "symlink to /dev/zero": (str(zero_csv), "not a regular file"),
        "sparse 8 GB": (sparse_csv, "larger than"),
        "latin-1": (
            put(
                "k_latin1.csv",
                (
                    GEMM_HEADER
                    + GEMM_ROW.format(m=1, t=5)
                    + "h100-sxm,gemm,bf16,2,4096,4096,5 # caf\xe9\n"
                ).encode("latin-1"),
            ),
            "not UTF-8",
        ),
        "unterminated quote": (
            put("k_quote.csv", GEMM_HEADER + 'h100-sxm,"gemm,bf16,1,4096,4096,5\n'),
            "not a CSV line",
        ),
        "field of 200,000 characters": (
            put("k_field.csv", GEMM_HEADER + GEMM_ROW.format(m="9" * 200_000, t=5)),
            "kernel table",
        ),
        "quoted field of 200,000 characters": (
            put("k_qfield.csv", GEMM_HEADER + GEMM_ROW.format(m='"' + "1" * 200_000 + '"', t=5)),
            "kernel table",
        ),
        "m of 400 digits": (put("k_m_big.csv", GEMM_HEADER + GEMM_ROW.format(m=BIG, t=5)), "m="),
        "m of 5000 digits": (put("k_m_huge.csv", GEMM_HEADER + GEMM_ROW.format(m=HUGE, t=5)), "m="),
        "time denormal": (
            put("k_t_denormal.csv", GEMM_HEADER + GEMM_ROW.format(m=1, t="5e-324")),
            "time_us=",
        ),
        "time 10**400": (put("k_t_big.csv", GEMM_HEADER + GEMM_ROW.format(m=1, t=BIG)), "time_us="),
        "time inf": (put("k_t_inf.csv", GEMM_HEADER + GEMM_ROW.format(m=1, t="inf")), "time_us="),
        "time nan": (put("k_t_nan.csv", GEMM_HEADER + GEMM_ROW.format(m=1, t="nan")), "time_us="),
        "a folder": (str(tmp), "folder"),
    }
    for what, (path, needle) in ktab.items():
        cases.append((f"kernel table {what}", [*RUN, "--kernel-table", path], (needle,)))

    # --- results files: plot and sweep --resume ------------------------------------------------
    results = {
        "FIFO": (str(fifo_json), "pipe", "not a regular file"),
        "symlink to /dev/zero": (str(zero_jsonl), "not a regular file"),
        "sparse 6 GB": (sparse_jsonl, "larger than"),
        "not UTF-8": (
            put("r_latin1.jsonl", _row().replace("llama", "ll\xe9ma").encode("latin-1")),
            "not UTF-8",
        ),
        "100k-deep JSON": (put("r_deep.jsonl", "[" * 100_000 + "]" * 100_000 + "\n"), "not a row"),
        "point_id a list": (put("r_pid.jsonl", '{"point_id": [1]}\n'), "point_id="),
        "tokens_per_s NaN (CSV)": (None, "tokens_per_s="),
        "tp 10**30": (put("r_tp_big.jsonl", _row(tp=10**30)), "tp="),
        "tp 0": (put("r_tp0.jsonl", _row(tp=0)), "tp="),
        "tp a string": (put("r_tp_str.jsonl", _row(tp="8")), "tp="),
        "latency a list": (put("r_lat_list.jsonl", _row(latency_s=[1])), "latency_s="),
        "fits a number": (put("r_fits.jsonl", _row(fits=1)), "fits="),
        "a simulated row without tokens/s per GPU": (
            put("r_partial.jsonl", _row()),
            "tokens_per_s_per_gpu=",
        ),
        "a simulated row with tokens/s 0": (
            put(
                "r_zero.jsonl",
                _row(tokens_per_s=0.0, tokens_per_s_per_gpu=0.0, hosts=1, regime="x"),
            ),
            "tokens_per_s=",
        ),
        "a row of 5000-digit number": (
            put("r_huge.jsonl", _row().replace('"tp": 1', f'"tp": {HUGE}')),
            "not a row",
        ),
    }
    header = None
    for what, (path, *needle) in results.items():
        if path is None:  # a CSV with the real header and one row whose tokens_per_s is nan
            from tpsim.experiments.results import csv_header, format_row, full_row

            header = csv_header()
            row = full_row(json.loads(_row()))
            line = format_row(row, "csv").replace(",150.0,", ",nan,")
            path = put("r_nan.csv", header + "\n" + line + "\n")
        cases.append(
            (f"plot, results {what}", ["plot", path, "--out", str(tmp / "plots")], tuple(needle))
        )
        if what in (
            "FIFO",
            "symlink to /dev/zero",
            "sparse 6 GB",
            "100k-deep JSON",
            "point_id a list",
            "not UTF-8",
        ):
            argv = ["sweep", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "1"]
            cases.append(
                (
                    f"sweep --resume, results {what}",
                    [*argv, "--out", path, "--resume", "--quiet"],
                    tuple(needle),
                )
            )

    # --- engine profiles and measurements CSVs ---------------------------------------------------
    prof = "name: p\nabout: x\nextends: vllm\noverrides:\n  engine:\n"
    engine = {
        "FIFO": (str(fifo), "pipe"),
        "/dev/zero as a .yaml": (str(zero_yaml), "not a regular file"),
        "sparse 8 GB": (sparse_yaml, "larger than"),
        "a value of 10**400": (
            put(
                "p_big.yaml",
                prof + f"    step_host_us: {{value: {{schedule: [{BIG}, 2]}}, source: x}}\n",
            ),
            "step_host_us",
        ),
        "an alias bomb": (
            put(
                "p_laughs.yaml",
                "x: &a [1,1,1,1,1,1,1,1,1,1]\n"
                + "".join(
                    f"{c}: &{c} [{','.join(['*' + q] * 10)}]\n"
                    for q, c in zip("abcdef", "bcdefg", strict=True)
                ),
            ),
            "aliases expand",
        ),
    }
    for what, (path, needle) in engine.items():
        cases.append((f"engine profile {what}", _run("--engine", path), (needle,)))
    mhead = "model,topology,nodes,tp,batch,phase,prompt_len,context_len,dtype,measured_ms\n"
    meas = {
        "FIFO": (str(fifo_csv), "pipe"),
        "/dev/zero as a .csv": (str(zero_csv), "not a regular file"),
        "sparse 8 GB": (sparse_csv, "larger than"),
        "batch of 400 digits": (
            put("m_batch.csv", mhead + f"llama-2-7b,dgx-h100,1,2,{BIG},decode,,1024,,5\n"),
            "batch=",
        ),
        "time of 400 digits": (
            put("m_time.csv", mhead + f"llama-2-7b,dgx-h100,1,2,1,decode,,1024,,{BIG}\n"),
            "measured_ms=",
        ),
        "not UTF-8": (
            put(
                "m_latin1.csv",
                (mhead + "ll\xe9ma,dgx-h100,1,2,1,decode,,1024,,5\n").encode("latin-1"),
            ),
            "not UTF-8",
        ),
    }
    for what, (path, needle) in meas.items():
        argv = ["calibrate", path, "--engine", "vllm", "--out", str(tmp / "fit.yaml")]
        cases.append((f"calibrate, measurements {what}", argv, (needle,)))

    # --- outputs that are files, or places that cannot be written ------------------------------
    for cmd in (["demo"], ["study", "worked_examples"], ["bench", "--quick"]):
        cases.append((f"{cmd[0]} --out a file", [*cmd, "--out", a_file], ("is a file",)))
        cases.append(
            (f"{cmd[0]} --out under a file", [*cmd, "--out", a_file + "/x"], ("does not exist",))
        )
        cases.append(
            (
                f"{cmd[0]} --out in a missing folder",
                [*cmd, "--out", str(tmp / "no/such/x")],
                ("does not exist",),
            )
        )
    cases.append(("plot --out a file", ["plot", str(GOOD_MODEL), "--out", a_file], ("is a file",)))
    sweep = ["sweep", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "1", "--quiet"]
    cases.append(
        ("sweep --plots a file", [*sweep, "--out", out, "--plots", a_file], ("is a file",))
    )
    cases.append(
        (
            "sweep --plots under a file",
            [*sweep, "--out", out, "--plots", a_file + "/p"],
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
    cases.append(("run --tp of 5000 digits", _run("--tp", HUGE), ("--tp",)))
    cases.append(("run --batch of 400 digits", _run("--batch", BIG), ("batch=",)))
    cases.append(("run --launch-skew-us 10**400", _run("--launch-skew-us", BIG), ("launch_skew",)))
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

    for name, content in files.items():
        p = tmp / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    return cases


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Case]]:
    tmp = tmp_path_factory.mktemp("bounded")
    return tmp, build_cases(tmp)


def _ids() -> list[str]:
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    try:
        return [c[0] for c in build_cases(tmp)]
    finally:
        shutil.rmtree(tmp)


IDS = _ids()


def test_the_corpus_is_large() -> None:
    assert len(IDS) >= 80 and len(set(IDS)) == len(IDS), len(IDS)


@pytest.mark.parametrize("case", IDS)
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


def test_endless_and_huge_inputs_in_1_gib_and_a_fifo_with_no_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "t.yaml"
    os.mkfifo(fifo)
    huge = _sparse(tmp_path / "r.jsonl", 8 << 30)
    cases = [
        (["sweep", "--grid", "/dev/zero", "--out", "o.csv"], "not a regular file"),
        (["plot", str(huge)], "larger than"),
        ([*RUN, "--kernel-table", "/dev/zero"], "not a regular file"),
        (_run("--topology", str(fifo)), "pipe"),
        (["sweep", "--grid", str(fifo), "--out", "o.csv"], "pipe"),
        (_run("--model", "/dev/urandom"), "not a regular file"),
    ]
    for argv, needle in cases:
        assert needle in _one_line(_tpsim(argv, tmp_path)), argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "t.yaml"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_stdout_on_a_full_disk(tmp_path: Path) -> None:
    py = f"{sys.executable} -m tpsim"
    for cmd in ("list models", "run --model llama-2-7b --topology dgx-h100 --tp 2 --json"):
        err = _one_line(_tpsim(f"{py} {cmd} > /dev/full", tmp_path))
        assert err == "tpsim: error: stdout: cannot write (No space left on device)\n", err


def test_a_reader_that_stops_early_is_no_error(tmp_path: Path) -> None:
    p = _tpsim(f"{sys.executable} -m tpsim list models | head -1", tmp_path)
    assert p.returncode == 0 and p.stderr == "" and p.stdout.startswith("name")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
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


@pytest.mark.parametrize(
    ("argv", "wait_s"),
    [
        (
            [*SLOW_RUN, "--trace", "t.json", "--gantt", "g.png"],
            3.0,
        ),
        (["demo", "--out", "d"], 3.0),
    ],
    ids=["run", "demo"],
)
def test_ctrl_c_is_one_line_and_leaves_no_output(
    tmp_path: Path, argv: list[str], wait_s: float
) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "tpsim", *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # Ctrl-C reaches the whole process group, workers included
    )
    time.sleep(wait_s)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=60)
    if p.returncode == 0:  # finished before the signal (a very fast machine): nothing to see
        pytest.skip("the command finished before Ctrl-C")
    assert p.returncode == 130 and err == "tpsim: interrupted; no output written\n", err
    assert [f for f in tmp_path.rglob("*") if f.is_file()] == []


def test_the_bounded_reader_directly(tmp_path: Path) -> None:
    f = tmp_path / "f.txt"
    f.write_bytes(b"\xef\xbb\xbfabc")
    assert read_text(f, 10) == "abc" and read_text(f, 10, bom=False) == "\ufeffabc"
    with pytest.raises(ReadRefused, match="larger than 5 bytes"):
        read_text(f, 5)
    with pytest.raises(ReadRefused, match="a folder"):
        read_text(tmp_path, 10)
    assert show(10**5000).startswith("<int of 16610 bits")
    assert show("a\x1b[31mb") == repr("a\\x1b[31mb")[1:-1] or "\\x1b" in show("a\x1b[31mb")


def test_yaml_aliases_are_counted_before_building() -> None:
    laughs = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{c}: &{c} [{','.join(['*' + p] * 10)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    start = time.perf_counter()
    with pytest.raises(ReadRefused, match="aliases expand"):
        yaml_load(laughs)
    assert time.perf_counter() - start < 1
    assert yaml_load("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}


def test_grid_files_accept_merge_keys_as_topology_files_do(tmp_path: Path) -> None:
    g = tmp_path / "g.yaml"
    g.write_text(
        "- &base {model: llama-2-7b, topology: dgx-h100, tp: 1}\n- {<<: *base, tp: 2}\n",
        encoding="utf-8",
    )
    assert [p.tp for p in grid_from_yaml(g)] == [1, 2]


def test_control_characters_in_a_config_name_are_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = json.loads(GOOD_MODEL.read_text()) | {"_name_or_path": "org/evil\x1b[2J\x07name"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert (
        main(
            [
                "run",
                "--model",
                str(tmp_path / "config.json"),
                "--topology",
                "dgx-h100",
                "--tp",
                "2",
                "--json",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert json.loads(out)["config"]["model"]["name"] == "evil\\x1b[2J\\x07name"


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
