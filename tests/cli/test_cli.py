"""The command line as users and scripts see it: outputs, the JSON contract, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tpsim.cli import main, parse_size
from tracecheck import check_trace_structure

DATA = Path(__file__).parents[1] / "data"
RUN = [
    "run",
    "--model",
    "llama-3.1-8b",
    "--topology",
    "dgx-h100",
    "--tp",
    "4",
    "--batch",
    "8",
    "--phase",
    "decode",
    "--context-len",
    "1024",
]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_run_json_has_the_contract_keys(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, *RUN, "--json")
    assert rc == 0
    j = json.loads(out)
    for key in (
        "config",
        "latency_s",
        "tokens_per_s",
        "regime",
        "breakdown_s",
        "memory",
        "communication",
        "model_split",
        "engine",
    ):
        assert key in j
    assert set(j["breakdown_s"]) == {
        "compute",
        "memory",
        "communication",
        "launch_overhead",
        "host",
        "idle",
    }
    assert set(j["memory"]) == {
        "weights_bytes_per_gpu",
        "kv_cache_bytes_per_gpu",
        "activation_bytes_per_gpu",
        "total_bytes_per_gpu",
        "capacity_bytes_per_gpu",
        "fits",
    }
    assert set(j["communication"]["by_site"]) == {"attn_out", "mlp_out", "embedding", "lm_head"}
    for site in j["communication"]["by_site"].values():
        assert set(site) == {"count", "bytes_sent_per_gpu", "time_s"}
    assert set(j["model_split"]) == {"heads_per_gpu", "kv_heads_per_gpu", "kv_replication"}
    assert {"events", "wall_s"} <= set(j["engine"])
    assert j["tokens_per_s"] == pytest.approx(8 / j["latency_s"])
    assert sum(j["breakdown_s"].values()) == pytest.approx(j["latency_s"], rel=1e-12)
    assert j["regime"] in ("compute-bound", "memory-bound", "communication-bound", "overhead-bound")


def test_prefill_tokens_per_s(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(
        capsys,
        "run",
        "--model",
        "llama-2-7b",
        "--topology",
        "dgx-a100",
        "--tp",
        "2",
        "--batch",
        "2",
        "--phase",
        "prefill",
        "--prompt-len",
        "256",
        "--json",
    )
    assert rc == 0
    j = json.loads(out)
    assert j["tokens_per_s"] == pytest.approx(2 * 256 / j["latency_s"])


def test_run_text_summary(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, *RUN)
    assert rc == 0
    assert "tokens/s" in out and "regime" in out and "attn_out" in out


def test_same_input_same_output(capsys: pytest.CaptureFixture[str]) -> None:
    outs = []
    for _ in range(2):
        _, out, _ = cli(capsys, *RUN, "--json")
        j = json.loads(out)
        j.pop("engine")
        outs.append(json.dumps(j))
    assert outs[0] == outs[1]


def test_gantt_and_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png, trace = tmp_path / "g.png", tmp_path / "t.json"
    rc, _out, _ = cli(capsys, *RUN, "--gantt", str(png), "--trace", str(trace))
    assert rc == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    t = json.loads(trace.read_text())
    assert check_trace_structure(t) == []
    pids = {e["pid"] for e in t["traceEvents"] if e["ph"] == "X"}
    assert len(pids) == 4
    svg = tmp_path / "g.svg"
    assert main([*RUN, "--gantt", str(svg)]) == 0
    assert svg.read_text().lstrip().startswith("<?xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.png", "g.svg", "t.json"]


def test_compare_gantt_draws_a_gpu_of_each_pipeline_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """compare --gantt drew each configuration's GPU 0 alone, so a PP 2 layout's stage 1
    never appeared; it now adds the GPUs the critical path runs longest on, as run --gantt
    does (GPU 2 here, stage 1's first), and a zoom keeps the GPUs that hold its layers."""
    argv = ["compare", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "2"]
    argv += ["--pp", "1,2", "--batch", "4"]
    a, b, zoom = tmp_path / "a.svg", tmp_path / "b.svg", tmp_path / "zoom.svg"
    for path in (a, b):
        assert cli(capsys, *argv, "--gantt", str(path))[0] == 0
    svg = a.read_text()
    assert "PP 2 · GPU 0 · compute" in svg and "PP 2 · GPU 2 · compute" in svg
    assert "PP 2 · GPU 2 · p2p" in svg  # stage 1's receive, on its p2p row
    assert "PP 1 · compute" in svg and "PP 1 · GPU" not in svg  # one lane, named as before
    assert a.read_bytes() == b.read_bytes()
    # layers 20-21 live on stage 1 (layers 16-31): its GPU alone, named by its GPU
    assert cli(capsys, *argv, "--gantt", str(zoom), "--gantt-layers", "20-21")[0] == 0
    svg = zoom.read_text()
    assert "PP 2 · GPU 2 · compute" in svg and "PP 2 · GPU 0" not in svg


def test_a_trace_ending_in_gz_is_the_same_json_compressed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Perfetto opens gzipped JSON; a large run's link counters make hundreds of MB of it.
    The same run gives the same bytes (no time stamp in the gzip header)."""
    import gzip

    plain, packed, again = tmp_path / "t.json", tmp_path / "t.json.gz", tmp_path / "u.json.gz"
    for path in (plain, packed, again):
        assert cli(capsys, *RUN, "--trace", str(path))[0] == 0
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    assert packed.read_bytes() == again.read_bytes()
    assert packed.stat().st_size < plain.stat().st_size / 4
    rc, _, err = cli(capsys, *RUN, "--trace", str(tmp_path / "t.gz"))
    assert rc == 2 and "must end in .json or .json.gz" in err


def test_collective_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(
        capsys,
        "collective",
        "--topology",
        "dgx-h100",
        "--ranks",
        "8",
        "--min-bytes",
        "8K",
        "--max-bytes",
        "1M",
    )
    assert rc == 0
    lines = [x for x in out.splitlines() if x and not x.startswith("#")]
    assert "busbw" in lines[0]
    assert len(lines) == 1 + 8  # 8K, 16K, ..., 1M
    rc, out, _ = cli(
        capsys,
        "collective",
        "--topology",
        str(DATA / "topologies" / "pair.yaml"),
        "--ranks",
        "2",
        "--sizes",
        "1M,64M",
        "--json",
    )
    rows = json.loads(out)["results"]
    assert [r["bytes"] for r in rows] == [2**20, 2**26]
    for r in rows:
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"])  # 2(p-1)/p = 1 at p = 2
        assert set(r) == {"bytes", "time_s", "algbw_GBps", "busbw_GBps", "algorithm", "protocol",
                          "host_s", "bound"}  # fmt: skip
        assert r["bound"] == "device" and r["host_s"] < r["time_s"]  # mpi: one enqueue each


@pytest.mark.parametrize("what", ["models", "topologies", "gpus"])
def test_list(capsys: pytest.CaptureFixture[str], what: str) -> None:
    rc, out, _ = cli(capsys, "list", what)
    assert rc == 0
    expect = {"models": "llama-3.1-405b", "topologies": "pcie-rtx4090", "gpus": "mi300x"}[what]
    assert expect in out


def test_parse_size() -> None:
    assert [parse_size(s) for s in ("8", "8K", "1M", "16G", "2kb")] == [
        8,
        8192,
        2**20,
        16 * 2**30,
        2048,
    ]


BAD = [
    (["run", "--model", "llama-9", "--topology", "dgx-h100", "--tp", "1"], "llama-9"),
    (["run", "--model", "llama-2-7b", "--topology", "dgx-z", "--tp", "1"], "dgx-z"),
    (["run", "--model", "/nope/config.json", "--topology", "dgx-h100", "--tp", "1"], "/nope"),
    (["run", "--model", "llama-2-7b", "--topology", "/nope.yaml", "--tp", "1"], "/nope.yaml"),
    (["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "3"], "valid: 1, 2, 4, 8"),
    (["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "16"], "tp=16"),
    (["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "0"], "tp=0"),
    (["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "x"], "--tp"),
    (
        ["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "2", "--batch", "0"],
        "batch=0",
    ),
    (
        [
            "run",
            "--model",
            "llama-2-7b",
            "--topology",
            "dgx-h100",
            "--tp",
            "2",
            "--context-len",
            "-5",
        ],
        "--context-len: '-5'",
    ),
    (
        ["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "2", "--nodes", "0"],
        "nodes=0",
    ),
    (
        ["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "2", "--phase", "x"],
        "--phase",
    ),
    (
        ["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "2", "--gantt", "g.pdf"],
        "--gantt=g.pdf",
    ),
    (
        [
            "run",
            "--model",
            "llama-2-7b",
            "--topology",
            "dgx-h100",
            "--tp",
            "2",
            "--trace",
            "/nope/t.json",
        ],
        "/nope",
    ),
    (["run", "--model", "llama-3.1-405b", "--topology", "dgx-h100", "--tp", "1"], "fit"),
    (["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--tp", "2", "--bogus"], "--bogus"),
    (["collective", "--topology", "dgx-h100", "--ranks", "1"], "ranks=1"),
    (["collective", "--topology", "dgx-h100", "--ranks", "16"], "16"),
    (["collective", "--topology", "dgx-h100", "--ranks", "8", "--sizes", "12Q"], "12Q"),
    (
        [
            "collective",
            "--topology",
            "dgx-h100",
            "--ranks",
            "8",
            "--min-bytes",
            "1M",
            "--max-bytes",
            "1K",
        ],
        "min-bytes",
    ),
    (["list", "widgets"], "widgets"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[" ".join(a[-2:]) for a, _ in BAD])
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, *args)
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert needle in err
    assert list(tmp_path.iterdir()) == []  # no partial output


def test_malformed_topology_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnodes: [\n")
    rc, _, err = cli(capsys, "run", "--model", "llama-2-7b", "--topology", str(bad), "--tp", "1")
    assert rc == 2 and "bad.yaml" in err and err.count("\n") == 1


@pytest.mark.slow
def test_python_dash_m(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "tpsim", "list", "gpus"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0 and "h100-sxm" in p.stdout
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpsim",
            "run",
            "--model",
            "x",
            "--topology",
            "dgx-h100",
            "--tp",
            "1",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    # in the repository's root the source folder answers to its own name too (DESIGN.md)
    root = Path(__file__).parents[2]
    p = subprocess.run([sys.executable, "-m", "simulator", "list", "gpus"], cwd=root,
                       capture_output=True, text=True, check=False)  # fmt: skip
    assert p.returncode == 0 and "h100-sxm" in p.stdout


@pytest.mark.parametrize(
    ("text", "layers"), [("0-1", (0, 1)), ("3", (3, 3)), ("emb-0", (-1, 0)), ("-1-0", (-1, 0)),
                         ("EMB", (-1, -1)), ("-1", (-1, -1))],
)  # fmt: skip
def test_gantt_layers_reach_the_embedding(text: str, layers: tuple[int, int]) -> None:
    """The Gantt labels the embedding 'emb' (layer -1); --gantt-layers=-1-0 was refused."""
    from tpsim.cli.types import parse_gantt_layers

    assert parse_gantt_layers(text) == layers


def test_gantt_options_without_gantt_warn(capsys) -> None:  # type: ignore[no-untyped-def]
    """--gantt-layers (or --gantt-ranks) without --gantt drew nothing and said nothing."""
    base = ["--model", "llama-3.1-8b", "--topology", "dgx-h100"]
    assert main(["run", *base, "--tp", "2", "--gantt-layers", "3-4"]) == 0
    assert "--gantt-layers: it shapes the --gantt chart, not given: ignored" in (
        capsys.readouterr().err
    )
    assert main(["compare", *base, "--tp", "1,2", "--gantt-layers", "3-4"]) == 0
    assert "--gantt-layers: it shapes the --gantt chart" in capsys.readouterr().err
