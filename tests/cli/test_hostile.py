"""Hostile input: every malformed or adversarial file and flag value is refused with exit
code 2 and one line on stderr naming the field, never a traceback, never an output file.

The file corpus lives in tests/data/hostile/ (one file per case, named after what is wrong
with it); cases too big to keep in the repository are written to a temporary folder here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_corpus import GOOD_MODEL, GOOD_TOPOLOGY, RUN, run_argv, with_flag
from tpsim.cli import main
from tpsim.topologies.errors import TopologyError
from tpsim.topologies.io import load_topology

HOSTILE = Path(__file__).parents[1] / "data" / "hostile"
TOPOLOGIES = HOSTILE / "topologies"
MODELS = HOSTILE / "models"

# file -> what its one-line message must contain (the field, or the file when it is unparsable)
TOPOLOGY_FILES: dict[str, str] = {
    "syntax_error.yaml": "YAML syntax error in",
    "syntax_error.json": "JSON syntax error in",
    "nodes_not_a_list.yaml": "nodes=5",
    "nodes_is_a_string.json": "nodes='gpu0 gpu1'",
    "bandwidth_nan.yaml": "links[0].bandwidth_GBps=nan",
    "bandwidth_inf.yaml": "links[0].bandwidth_GBps=inf",
    "bandwidth_negative.yaml": "links[0].bandwidth_GBps=-300",
    "bandwidth_zero.yaml": "links[0].bandwidth_GBps=0",
    "bandwidth_string.yaml": "links[0].bandwidth_GBps='fast'",
    "bandwidth_huge.yaml": "links[0].bandwidth_GBps=1e+300",
    "bandwidth_5000_digits.yaml": "unreadable number",
    "nan_bandwidth.json": "links[0].bandwidth_GBps=nan",
    "latency_negative.yaml": "links[0].latency_us=-0.5",
    "field_typo.yaml": "links[0].bandwith_GBps",
    "unknown_top_field.yaml": "linkz",
    "duplicate_id.yaml": "nodes[1].id='gpu0'",
    "duplicate_key.yaml": "key 'name'",
    "duplicate_key.json": "key 'name'",
    "self_loop.yaml": "links[0].dst='gpu0'",
    "one_way_link.yaml": "gpu1 cannot reach gpu0",
    "unreachable_gpu.yaml": "cannot reach gpu2",
    "unknown_gpu.yaml": "gpus.g='h100-sxn'",
    "gpu_spec_nan.yaml": "gpus.g.bf16_tflops=nan",
    "gpu_pcie_gen_1.yaml": "gpus.g.pcie_gen=1",
    "rank_duplicate.yaml": "nodes[1].rank=1",
    "id_with_control_chars.yaml": "nodes[1].id=",
    "deeply_nested.yaml": "nested deeper than",
    "deeply_nested.json": "nested deeper than",
    "empty.yaml": "empty document",
    "only_whitespace.yaml": "YAML syntax error",
    "top_level_list.yaml": "top level",
    "billion_laughs_name.yaml": "aliases expand",
    "billion_laughs_links.yaml": "aliases expand",
    "python_object_tag.yaml": "python/object/apply",
    "python_name_tag.yaml": "python/name",
    "not_utf8.yaml": "not UTF-8",
    "binary_garbage.yaml": "not UTF-8",
    "binary_garbage.json": "not UTF-8",
}
MODEL_FILES: dict[str, str] = {
    "syntax_error.json": "not valid JSON",
    "empty.json": "not valid JSON",
    "top_level_list.json": "top level must be a JSON object",
    "hidden_nan.json": "hidden_size=NaN",
    "vocab_infinity.json": "vocab_size=Infinity",
    "overflow_float.json": "hidden_size=inf",
    "layers_negative.json": "num_hidden_layers=-32",
    "heads_zero.json": "num_attention_heads=0",
    "hidden_string.json": "hidden_size='4096'",
    "inner_float.json": "intermediate_size=11008.5",
    "layers_bool.json": "num_hidden_layers=True",
    "hidden_huge.json": "hidden_size=1000000000000000000000000000000",
    "layers_huge.json": "num_hidden_layers=1099511627776",
    "vocab_5000_digits.json": "not valid JSON",
    "kv_heads_not_dividing.json": "num_key_value_heads=5",
    "unknown_model_type.json": "model_type='bert'",
    "dtype_typo.json": "torch_dtype='bfloat61'",
    "deeply_nested.json": "nested too deeply",
    "not_utf8.json": "not UTF-8",
    "binary_garbage.json": "not UTF-8",
}

COLL = ["collective", "--topology", "dgx-h100", "--ranks", "8"]


def _coll_with(flag: str, value: str) -> list[str]:
    return with_flag(COLL, flag, value)


# values no numeric flag accepts; "-inf" parses as an unknown option, also refused
BAD_NUMBERS = ["-1", "nan", "inf", "-inf", "1e30", "99999999999999999999", "abc", ""]
RUN_NUMERIC = {  # flag -> the name its message uses for a value out of range
    "--tp": "tp",
    "--nodes": "nodes",
    "--gpus-per-node": "gpus_per_node",
    "--batch": "batch",
    "--prompt-len": "prompt_len",
    "--context-len": "context_len",
    "--overlap-chunks": "overlap_chunks",
    "--launch-skew-us": "launch_skew_s",
    "--max-records": "max_records",
}
ZERO_IS_BAD = ("--tp", "--nodes", "--batch", "--prompt-len", "--context-len", "--max-records")
COLL_NUMERIC = {"--ranks": "ranks", "--nodes": "nodes"}
COLL_SIZES = ("--min-bytes", "--max-bytes", "--sizes")


def cli_cases(tmp: Path) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(case id, argv, substrings of which the message must hold one)."""
    cases: list[tuple[str, list[str], tuple[str, ...]]] = []
    for flag, field in RUN_NUMERIC.items():
        values = BAD_NUMBERS + (["0"] if flag in ZERO_IS_BAD else [])
        if flag == "--max-records":  # any positive limit is valid, however large
            values.remove("99999999999999999999")
        for v in values:
            cases.append((f"run {flag} {v!r}", run_argv(flag, v), (flag, f"{field}=")))
    for flag, field in COLL_NUMERIC.items():
        for v in [*BAD_NUMBERS, "0", "1.5"]:
            cases.append((f"collective {flag} {v!r}", _coll_with(flag, v), (flag, f"{field}=")))
    for flag in COLL_SIZES:
        for v in [*BAD_NUMBERS, "0", "1.5", "12Q", "0x10", "1K,,x", ","]:
            cases.append((f"collective {flag} {v!r}", _coll_with(flag, v), (flag,)))
    choices = {
        "--phase": "train",
        "--dtype": "int3",
        "--kv-dtype": "fp4",
        "--launch": "lazy",
        "--overlap": "always",
        "--allreduce-algo": "magic",
    }
    for flag, v in choices.items():
        cases.append((f"run {flag} {v}", run_argv(flag, v), (flag,)))
    for flag, v in {"--op": "broadcast", "--algo": "magic", "--launcher": "slurm"}.items():
        cases.append((f"collective {flag} {v}", _coll_with(flag, v), (flag,)))
    cases += [
        ("list widgets", ["list", "widgets"], ("widgets",)),
        ("no command", [], ("command",)),
        ("unknown command", ["simulate"], ("simulate",)),
        ("run without flags", ["run"], ("--model",)),
        ("run without --tp", RUN[:5], ("--tp",)),
        ("run without --topology", ["run", "--model", "llama-2-7b", "--tp", "2"], ("--topology",)),
        ("collective without --ranks", COLL[:3], ("--ranks",)),
        ("unknown flag", [*RUN, "--tpp", "2"], ("--tpp",)),
        ("flag without value", [*RUN, "--batch"], ("--batch",)),
        ("gantt in missing folder", [*RUN, "--gantt", "nope/g.png"], ("--gantt=",)),
        ("gantt bad suffix", [*RUN, "--gantt", "g.pdf"], ("--gantt=",)),
        ("gantt is a folder", [*RUN, "--gantt", str(tmp / "folder.png")], ("--gantt=",)),
        ("trace is a folder", [*RUN, "--trace", str(tmp / "folder.json")], ("--trace=",)),
        ("trace in missing folder", [*RUN, "--trace", "nope/t.json"], ("--trace=",)),
        ("trace bad suffix", [*RUN, "--trace", "t.yaml"], ("--trace=",)),
        ("trace name too long", [*RUN, "--trace", "t" * 300 + ".json"], ("--trace=",)),
        ("gantt-ranks negative", [*RUN, "--gantt-ranks", "-1"], ("--gantt-ranks",)),
        ("gantt-ranks beyond tp", [*RUN, "--gantt-ranks", "0,5"], ("--gantt-ranks",)),
        ("gantt-layers reversed", [*RUN, "--gantt-layers", "5-1"], ("--gantt-layers",)),
        (
            "compare gantt-layers beyond the model",
            [
                "compare",
                *RUN[1:5],
                "--tp",
                "1,2",
                "--gantt",
                str(tmp / "c.png"),
                "--gantt-layers",
                "99",
            ],
            ("--gantt-layers=99-99",),
        ),
        ("model is a topology file", run_argv("--model", str(GOOD_TOPOLOGY)), ("pair.yaml",)),
        ("topology is a model file", run_argv("--topology", str(GOOD_MODEL)), ("model_type",)),
        ("model is a folder", run_argv("--model", str(tmp)), ("config.json",)),
        ("topology is a folder", run_argv("--topology", str(tmp / "folder.json")), ("file",)),
        ("model name too long", run_argv("--model", "m" * 5000), ("model=",)),
        ("topology name too long", run_argv("--topology", "t" * 5000 + ".yaml"), ("file",)),
        ("model unknown", run_argv("--model", "llama-9"), ("model='llama-9'",)),
        ("model hub id", run_argv("--model", "meta-llama/Llama-3.2-1B"), ("model=",)),
        ("model NUL byte", run_argv("--model", "llama\x00"), ("model=",)),
        ("kernel table missing", [*RUN, "--kernel-table", "nope.csv"], ("kernel_table=",)),
        ("kernel table with ideal", [*RUN, "--ideal", "--kernel-table", "k.csv"], ("kernel_",)),
        ("kernel table unknown name", [*RUN, "--kernel-table", "vidur-z9"], ("vidur-z9",)),
        ("kernel table list", [*RUN, "--kernel-table", "vidur-a100,nope.csv"], ("nope.csv",)),
        ("tp not dividing heads", run_argv("--tp", "3"), ("tp=3",)),
        ("tp beyond the GPUs", run_argv("--tp", "16"), ("tp=16",)),
        ("microbatch of one", [*RUN, "--overlap", "microbatch"], ("batch",)),
        (
            "does not fit",
            ["run", "--model", "llama-3.1-405b", "--topology", "dgx-h100", "--tp", "1"],
            ("fit",),
        ),
        (
            "algorithm the group cannot run",
            [*run_argv("--topology", "pcie-l40s"), "--allreduce-algo", "nvls"],
            ("nvls",),
        ),
        ("min above max", [*COLL, "--min-bytes", "1M", "--max-bytes", "1K"], ("--min-bytes",)),
        ("ranks beyond the GPUs", _coll_with("--ranks", "16"), ("16",)),
        ("too many records", [*RUN, "--max-records", "100"], ("max_records=100",)),
    ]
    return cases


def file_cases() -> list[tuple[str, list[str], tuple[str, ...]]]:
    cases = []
    for name, needle in TOPOLOGY_FILES.items():
        cases.append(
            (f"topology {name}", run_argv("--topology", str(TOPOLOGIES / name)), (needle,))
        )
    for name, needle in MODEL_FILES.items():
        cases.append((f"model {name}", run_argv("--model", str(MODELS / name)), (needle,)))
    return cases


def generated_files(tmp: Path) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """Cases too large (or too machine-specific) to keep in the repository."""
    big = tmp / "oversize.yaml"
    big.write_bytes(b"#" * (10 * 10**6 + 1))
    many = tmp / "too_many_nodes.json"
    nodes = [{"id": f"s{i}", "kind": "switch"} for i in range(100_001)]
    many.write_text(json.dumps({"name": "t", "nodes": nodes, "links": []}))
    huge_model = tmp / "huge_config.json"
    huge_model.write_bytes(b'{"pad": "' + b"x" * (10 * 10**6) + b'"}')
    return [
        ("topology over 10 MB", run_argv("--topology", str(big)), ("larger than",)),
        ("topology with 100,001 nodes", run_argv("--topology", str(many)), ("nodes in",)),
        ("model over 10 MB", run_argv("--model", str(huge_model)), ("larger than",)),
    ]


def _snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_hostile_corpus_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "folder.png").mkdir()
    (work / "folder.json").mkdir()
    monkeypatch.chdir(work)  # relative output paths land here
    cases = cli_cases(work) + file_cases() + generated_files(tmp_path)
    before = _snapshot(work)
    failures = []
    for case, argv, needles in cases:
        start = time.perf_counter()
        try:
            rc = main(argv)
        except BaseException as e:  # a traceback reaching the user is the failure we hunt
            rc = f"raised {type(e).__name__}: {e}"
        out, err = capsys.readouterr()
        seconds = time.perf_counter() - start
        problems = []
        if rc != 2:
            problems.append(f"exit {rc}")
        if out:
            problems.append(f"stdout {out[:80]!r}")
        if err.count("\n") != 1 or not err.startswith("tpsim: error: "):
            problems.append(f"stderr not one 'tpsim: error:' line: {err[:200]!r}")
        if not any(n in err for n in needles):
            problems.append(f"message names none of {needles}: {err.strip()[:200]!r}")
        if seconds > 10:
            problems.append(f"took {seconds:.1f} s")
        if _snapshot(work) != before:
            problems.append(f"left files: {sorted(_snapshot(work) - before)}")
        if problems:
            failures.append(f"{case}: {'; '.join(problems)}")
    print(f"hostile cases tried: {len(cases)}, refused cleanly: {len(cases) - len(failures)}")
    assert len(cases) >= 40
    assert not failures, "\n".join(failures)
    assert not (work / "pwned").exists()  # the !!python/object tag was never evaluated


SUBPROCESS_CASES = [
    run_argv("--topology", str(TOPOLOGIES / "billion_laughs_name.yaml")),
    run_argv("--topology", str(TOPOLOGIES / "python_object_tag.yaml")),
    run_argv("--model", str(MODELS / "vocab_5000_digits.json")),
    run_argv("--tp", "nan"),
    _coll_with("--sizes", "inf"),
    [*RUN, "--trace", "t" * 300 + ".json"],
]


@pytest.mark.slow
def test_no_traceback_reaches_the_user_of_python_dash_m(tmp_path: Path) -> None:
    for argv in SUBPROCESS_CASES:
        p = subprocess.run(
            [sys.executable, "-m", "tpsim", *argv],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
            timeout=120,
        )
        assert p.returncode == 2, (argv, p.stderr)
        assert p.stdout == "" and p.stderr.startswith("tpsim: error: "), (argv, p.stderr)
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, (argv, p.stderr)
    assert list(tmp_path.iterdir()) == []


def test_yaml_tags_are_never_evaluated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("python_object_tag.yaml", "python_name_tag.yaml"):
        with pytest.raises(TopologyError, match="could not determine a constructor"):
            load_topology(TOPOLOGIES / name)
    assert not (tmp_path / "pwned").exists()


def test_billion_laughs_is_refused_quickly() -> None:
    start = time.perf_counter()
    for name in ("billion_laughs_name.yaml", "billion_laughs_links.yaml"):
        with pytest.raises(TopologyError) as e:
            load_topology(TOPOLOGIES / name)
        assert len(str(e.value)) < 300 and "\n" not in str(e.value)
    assert time.perf_counter() - start < 5  # 9**9 strings if the aliases were expanded
