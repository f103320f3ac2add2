"""Hostile input, part two (issue #15, "nothing lost, nothing hangs"): the files a sweep, a
plot and a calibration read (grid files, results files, measurement CSVs) when they are
endless, huge, blocking or absurd are refused with exit 2 and one short line, quickly and in
bounded memory, and leave no output.

Cases run in-process through ``tpsim.cli.main``; what the hostile-input tests share is in
hostile_corpus.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from hostile_corpus import (
    BIG,
    HUGE,
    Case,
    HostileFiles,
    case_ids,
    refusal_tests,
    results_row,
)
from tpsim.experiments.sweep.grid import grid_from_yaml


def build_cases(tmp: Path) -> list[Case]:
    """(case id, argv, substrings of which the message must hold one): the grid files of
    ``sweep``, the results files of ``plot`` and ``sweep --resume``, and the measurements of
    ``calibrate``."""
    hostile = HostileFiles(tmp)
    put = hostile.put
    cases: list[Case] = []

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
        "FIFO": (str(hostile.fifo), "pipe"),
        "/dev/zero": ("/dev/zero", "not a regular file"),
        "symlink to /dev/zero": (str(hostile.zero_yaml), "not a regular file"),
        "sparse 8 GB": (hostile.sparse_yaml, "larger than"),
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

    # --- results files: plot and sweep --resume ------------------------------------------------
    results = {
        "FIFO": (str(hostile.fifo_json), "pipe", "not a regular file"),
        "symlink to /dev/zero": (str(hostile.zero_jsonl), "not a regular file"),
        "sparse 6 GB": (hostile.sparse_jsonl, "larger than"),
        "not UTF-8": (
            put("r_latin1.jsonl", results_row().replace("llama", "ll\xe9ma").encode("latin-1")),
            "not UTF-8",
        ),
        "100k-deep JSON": (put("r_deep.jsonl", "[" * 100_000 + "]" * 100_000 + "\n"), "not a row"),
        "point_id a list": (put("r_pid.jsonl", '{"point_id": [1]}\n'), "point_id="),
        "tokens_per_s NaN (CSV)": (None, "tokens_per_s="),
        "tp 10**30": (put("r_tp_big.jsonl", results_row(tp=10**30)), "tp="),
        "tp 0": (put("r_tp0.jsonl", results_row(tp=0)), "tp="),
        "tp a string": (put("r_tp_str.jsonl", results_row(tp="8")), "tp="),
        "latency a list": (put("r_lat_list.jsonl", results_row(latency_s=[1])), "latency_s="),
        "fits a number": (put("r_fits.jsonl", results_row(fits=1)), "fits="),
        "a simulated row without tokens/s per GPU": (
            put("r_partial.jsonl", results_row()),
            "tokens_per_s_per_gpu=",
        ),
        "a simulated row with tokens/s 0": (
            put(
                "r_zero.jsonl",
                results_row(tokens_per_s=0.0, tokens_per_s_per_gpu=0.0, hosts=1, regime="x"),
            ),
            "tokens_per_s=",
        ),
        "a row of 5000-digit number": (
            put("r_huge.jsonl", results_row().replace('"tp": 1', f'"tp": {HUGE}')),
            "not a row",
        ),
    }
    header = None
    for what, (path, *needle) in results.items():
        if path is None:  # a CSV with the real header and one row whose tokens_per_s is nan
            from tpsim.experiments.sweep.rows import csv_header, format_row, full_row

            header = csv_header()
            row = full_row(json.loads(results_row()))
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

    # --- measurements CSVs (calibrate) ------------------------------------------------------------
    mhead = "model,topology,nodes,tp,batch,phase,prompt_len,context_len,dtype,measured_ms\n"
    meas = {
        "FIFO": (str(hostile.fifo_csv), "pipe"),
        "/dev/zero as a .csv": (str(hostile.zero_csv), "not a regular file"),
        "sparse 8 GB": (hostile.sparse_csv, "larger than"),
        "batch of 400 digits": (
            put("m_batch.csv", mhead + f"llama-2-7b,dgx-h100,1,2,{BIG},decode,,1024,,5\n"),
            "batch=",
        ),
        "time of 400 digits": (
            put("m_time.csv", mhead + f"llama-2-7b,dgx-h100,1,2,1,decode,,1024,,{BIG}\n"),
            "measured_ms=",
        ),
        "denormal time": (
            put("m_denormal.csv", mhead + "llama-2-7b,dgx-h100,1,2,1,decode,,1024,,1e-320\n"),
            "measured_ms=",
        ),
        "smallest denormal time": (
            put("m_tiny.csv", mhead + "llama-2-7b,dgx-h100,1,2,1,decode,,1024,,5e-324\n"),
            "measured_ms=",
        ),
        "a nanosecond step": (
            put("m_ns.csv", mhead + "llama-2-7b,dgx-h100,1,2,1,decode,,1024,,1e-6\n"),
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

    hostile.write()
    return cases


IDS = case_ids(build_cases)
corpus, test_refused_in_one_short_line = refusal_tests(build_cases, IDS)


def test_grid_files_accept_merge_keys_as_topology_files_do(tmp_path: Path) -> None:
    g = tmp_path / "g.yaml"
    g.write_text(
        "- &base {model: llama-2-7b, topology: dgx-h100, tp: 1}\n- {<<: *base, tp: 2}\n",
        encoding="utf-8",
    )
    assert [p.tp for p in grid_from_yaml(g)] == [1, 2]
