"""Limits: large inputs load in seconds; a run too big for memory is refused before it starts."""

from __future__ import annotations

import dataclasses
import gc
import pickle
import tracemalloc
from pathlib import Path

import pytest
from tpsim import Options, Workload, simulate
from tpsim.cli import main
from tpsim.core import api
from tpsim.core.comm.group import tp_group
from tpsim.core.config import Layout
from tpsim.core.engine import simulation as engine
from tpsim.core.errors import ConfigError
from tpsim.core.kernels.costs import hardware_for
from tpsim.core.lowering.lower import lower
from tpsim.core.precision import precision
from tpsim.core.result import RECORD_BYTES, estimate_records, records_lower_bound
from tpsim.models.catalog import get_model
from tpsim.models.spec import ModelSpec
from tpsim.topologies.graph import validate
from tpsim.topologies.io import get_topology
from tpsim.topologies.routing import Routes, ring_order


class _Reached(Exception):
    """Raised in place of the engine: every check before the run has passed."""


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(*_args: object, **_kwargs: object) -> None:
        raise _Reached

    monkeypatch.setattr(engine, "run", stop)


def test_1024_gpus_and_126_layers_load_and_validate() -> None:
    g = get_topology("dgx-h100", 128)
    validate(g, "dgx-h100 x128")
    routes = Routes(g)
    assert routes.num_ranks == 1024
    assert sorted(ring_order(routes, range(0, 1024, 8))) == list(range(0, 1024, 8))
    spec = get_model("llama-3.1-405b")
    assert spec.num_layers == 126
    assert tp_group(g, 64).gpu_ranks == tuple(range(64))


@pytest.mark.slow
def test_the_speed_benchmark_is_not_refused(no_engine: None) -> None:
    """llama-3.1-405b at TP 64 over 8 DGX H100s, decode: the speed issue's benchmark."""
    with pytest.raises(_Reached):
        simulate("llama-3.1-405b", "dgx-h100", 64, Workload(1, "decode"), nodes=8)


def test_an_absurd_run_is_refused_with_the_size_and_the_way_out() -> None:
    wl, opts = Workload(1, "prefill"), Options(overlap="chunked")
    with pytest.raises(ConfigError) as e:
        simulate("llama-3.1-405b", "dgx-h100", 128, wl, opts, nodes=16)
    msg = str(e.value)
    assert msg.startswith("max_records=20000000: this run would make ")
    assert "GB" in msg and "--tp" in msg and "--max-records" in msg and "\n" not in msg


def test_tp_1024_over_128_nodes_is_refused_before_lowering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_lowering(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("lowered a program the lower bound already refuses")

    monkeypatch.setattr(api, "lower", no_lowering)
    wide = dataclasses.replace(get_model("llama-3.1-405b"), num_heads=1024, num_kv_heads=1024)
    wide = dataclasses.replace(wide, head_dim=16)
    wl, opts = Workload(1, "prefill"), Options(overlap="chunked", allow_oom=True)
    with pytest.raises(ConfigError, match=r"would make at least [\d,]+ records"):
        simulate(wide, "dgx-h100", 1024, wl, opts, nodes=128)


def test_max_records_is_the_limit(no_engine: None) -> None:
    with pytest.raises(ConfigError, match="max_records=1000: this run would make up to"):
        simulate("llama-2-7b", "dgx-h100", 2, options=Options(max_records=1000))
    with pytest.raises(_Reached):
        simulate("llama-2-7b", "dgx-h100", 2, options=Options(max_records=10**6))
    wl = Workload(1, "prefill")  # refused by default, let through when the limit is raised
    with pytest.raises(ConfigError, match="max_records=20000000"):
        simulate(
            "llama-3.1-405b",
            "dgx-h100",
            8,
            wl,
            Options(overlap="chunked", overlap_chunks=64, allow_oom=True, sequence_parallel=True),
        )
    with pytest.raises(_Reached):
        opts = Options(
            overlap="chunked",
            overlap_chunks=64,
            allow_oom=True,
            max_records=10**9,
            sequence_parallel=True,
        )
        simulate("llama-3.1-405b", "dgx-h100", 8, wl, opts)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "many"])
def test_max_records_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_records="):
        Options(max_records=bad)  # type: ignore[arg-type]


def test_cli_refuses_the_absurd_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json"
    argv = ["run", "--model", "llama-3.1-405b", "--topology", "dgx-h100", "--nodes", "16"]
    argv += ["--tp", "128", "--phase", "prefill", "--overlap", "chunked", "--trace", str(trace)]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("tpsim: error: max_records=") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def _program_estimates(
    spec: ModelSpec, topology: str, tp: int, wl: Workload, opts: Options
) -> tuple[int, int]:
    group = tp_group(get_topology(topology), tp)
    prec = precision(opts, spec.dtype, group.gpu.fp8_flops is not None)
    hw = hardware_for(group.gpu, prec.math, opts.calibration.kernels, kv_dtype=prec.kv)
    programs = lower(spec, tp, wl, opts, hw, None)
    return records_lower_bound(spec, tp, wl, opts), estimate_records(programs, opts.allreduce_algo)


@pytest.mark.parametrize(
    ("topology", "tp", "phase", "overlap", "launch", "algo", "sp"),
    [
        ("dgx-h100", 1, "decode", "none", "eager", "auto", False),
        ("dgx-h100", 8, "decode", "none", "eager", "ring", False),
        ("dgx-h100", 8, "prefill", "chunked", "graph", "tree", True),
        ("dgx-a100", 4, "decode", "microbatch", "compiled", "auto", False),
        ("pcie-l40s", 4, "prefill", "chunked", "eager", "nccl", True),
    ],
)
def test_estimate_brackets_the_records(
    topology: str, tp: int, phase: str, overlap: str, launch: str, algo: str, sp: bool
) -> None:
    spec = dataclasses.replace(get_model("llama-3.1-8b"), num_layers=2)
    wl = Workload(4, phase, prompt_len=64, context_len=256)
    opts = Options(launch=launch, overlap=overlap, allreduce_algo=algo, sequence_parallel=sp)
    low, high = _program_estimates(spec, topology, tp, wl, opts)
    made = len(simulate(spec, topology, Layout(tp), wl, opts).records)
    assert low <= made <= high


def test_record_bytes_is_what_a_record_holds() -> None:
    spec = dataclasses.replace(get_model("llama-3.1-8b"), num_layers=2)
    records = list(simulate(spec, "dgx-h100", 4, Workload(8), Options(launch="eager")).records)
    blob = pickle.dumps(records)  # reloaded: each record with its own floats, ints and text
    del records
    gc.collect()
    tracemalloc.start()
    try:
        loaded = pickle.loads(blob)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    per_record = held / len(loaded)
    assert RECORD_BYTES / 2 < per_record < RECORD_BYTES * 2, per_record


def test_a_pipeline_of_many_micro_batches_is_refused_before_it_is_lowered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue #27: --pp 8 --micro-batches 4096 built its whole program before any check; the
    lower bound counts every micro-batch's pass through the layers and refuses at once."""
    import time

    from tpsim.cli import main

    argv = ["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "1"]
    argv += ["--pp", "8", "--micro-batches", "4096", "--batch", "4096", "--context-len", "16"]
    start = time.perf_counter()
    assert main([*argv, "--max-records", "200000"]) == 2
    assert time.perf_counter() - start < 5
    err = capsys.readouterr().err
    assert "at least 655,360 records" in err and "--micro-batches" in err
