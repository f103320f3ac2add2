"""Hostile input, part two (issue #15, "nothing lost, nothing hangs"): the files that describe
what ``run`` simulates (topology files, model configs, kernel tables, engine profiles) when
they are endless, huge, blocking or absurd are refused with exit 2 and one short line,
quickly and in bounded memory; and the bounded reader itself.

Cases run in-process through ``tpsim.cli.main`` (a FIFO never blocks: files are opened
non-blocking and refused unless regular). The other hostile inputs: grid, results and
measurement files in test_hostile_sweep_files.py; outputs, numbers on the command line,
signals and subprocesses in test_hostile_cli.py; what they share in hostile_corpus.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from hostile_corpus import (
    BIG,
    GEMM_HEADER,
    GEMM_ROW,
    GOOD_MODEL,
    HUGE,
    RUN,
    Case,
    HostileFiles,
    case_ids,
    gpu_yaml,
    link_yaml,
    refusal_tests,
    run_argv,
    topology_yaml,
)
from tpsim.calibration.bounded import ReadRefused, read_text, show, yaml_load
from tpsim.cli import main


def build_cases(tmp: Path) -> list[Case]:
    """(case id, argv, substrings of which the message must hold one): the topology files,
    model configs, kernel tables and engine profiles ``run`` is given."""
    hostile = HostileFiles(tmp)
    put = hostile.put
    cases: list[Case] = []

    # --- topology files: blocking, endless, huge, numbers no device has -------------------
    topo = {
        "FIFO": (str(hostile.fifo), "pipe"),
        "/dev/zero": ("/dev/zero", "not a regular file"),
        "symlink to /dev/zero": (str(hostile.zero_yaml), "not a regular file"),
        "sparse 8 GB yaml": (hostile.sparse_yaml, "larger than"),
        "sparse 8 GB json": (hostile.sparse_json, "larger than"),
        "a folder": (str(tmp / "folder.yaml"), "folder"),
        "bandwidth 10**400": (put("bw_big.yaml", topology_yaml(link_yaml(BIG))), "bandwidth_GBps="),
        "bandwidth 10**400 json": (
            put("bw_big.json", json.dumps(yaml.safe_load(topology_yaml())).replace("300", BIG)),
            "bandwidth_GBps=",
        ),
        "bandwidth 5000 digits json": (
            put("bw_huge.json", json.dumps(yaml.safe_load(topology_yaml())).replace("300", HUGE)),
            "unreadable number",
        ),
        "bandwidth denormal": (
            put("bw_denormal.yaml", topology_yaml(link_yaml("5.0e-324"))),
            "bandwidth",
        ),
        "bandwidth 1e-30": (put("bw_tiny.yaml", topology_yaml(link_yaml("1.0e-30"))), "bandwidth"),
        "latency 10**400": (put("lat_big.yaml", topology_yaml(link_yaml(lat=BIG))), "latency_us="),
        "latency denormal": (
            put("lat_dn.yaml", topology_yaml(link_yaml(lat="5.0e-324"))),
            "latency_us=",
        ),
        "latency inf": (put("lat_inf.yaml", topology_yaml(link_yaml(lat=".inf"))), "latency_us="),
        "latency nan": (put("lat_nan.yaml", topology_yaml(link_yaml(lat=".nan"))), "latency_us="),
        "tflops 400 digits": (
            put("tflops.yaml", topology_yaml(gpus=gpu_yaml("fp8_tflops", BIG))),
            "tflops",
        ),
        "tflops denormal": (
            put("tflops_dn.yaml", topology_yaml(gpus=gpu_yaml("fp8_tflops", "5.0e-324"))),
            "tflops",
        ),
        "HBM TB/s inf": (
            put("hbm_inf.yaml", topology_yaml(gpus=gpu_yaml("kernel_overhead_us", ".inf"))),
            "kernel_overhead_us",
        ),
        "scale-up GB/s 10**400": (
            put("bf16.yaml", topology_yaml(gpus=gpu_yaml("scaleup_GBps", BIG))),
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
            put("ctrl.yaml", topology_yaml().replace("name: t", 'name: "t\\e[31m\\x07"')),
            "name=",
        ),
        "name of 200,000 characters": (
            put(
                "longname.yaml", topology_yaml().replace("name: t", "name: [" + "x" * 200_000 + "]")
            ),
            "name=",
        ),
    }
    for what, (path, needle) in topo.items():
        cases.append((f"topology {what}", run_argv("--topology", path), (needle,)))

    # --- model configs ----------------------------------------------------------------------
    cfg = json.loads(GOOD_MODEL.read_text())
    model = {
        "FIFO": (str(hostile.fifo), "pipe"),
        "/dev/zero": ("/dev/zero", "not a regular file"),
        "sparse 8 GB": (hostile.sparse_json, "larger than"),
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
        cases.append((f"model {what}", run_argv("--model", path), (needle,)))

    # --- kernel tables (run --kernel-table) ---------------------------------------------------
    ktab = {
        "FIFO": (str(hostile.fifo_csv), "pipe"),
        "/dev/zero": ("/dev/zero", "not a regular file"),
        "symlink to /dev/zero": (str(hostile.zero_csv), "not a regular file"),
        "sparse 8 GB": (hostile.sparse_csv, "larger than"),
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

    # --- engine profiles ------------------------------------------------------------------------
    prof = "name: p\nabout: x\nextends: vllm\noverrides:\n  engine:\n"
    engine = {
        "FIFO": (str(hostile.fifo), "pipe"),
        "/dev/zero as a .yaml": (str(hostile.zero_yaml), "not a regular file"),
        "sparse 8 GB": (hostile.sparse_yaml, "larger than"),
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
        cases.append((f"engine profile {what}", run_argv("--engine", path), (needle,)))

    hostile.write()
    return cases


IDS = case_ids(build_cases)
corpus, test_refused_in_one_short_line = refusal_tests(build_cases, IDS)


def test_the_corpus_is_large() -> None:
    """Over the corpora of all three files of hostile inputs."""
    import test_hostile_cli
    import test_hostile_sweep_files

    ids = [*IDS, *test_hostile_sweep_files.IDS, *test_hostile_cli.IDS]
    assert len(ids) >= 80 and len(set(ids)) == len(ids), len(ids)


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
