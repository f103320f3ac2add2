"""One host standing for identical hosts gives exactly the full simulation's records."""

from __future__ import annotations

import dataclasses

import pytest
from tpsim import Options, Workload, simulate
from tpsim.models.catalog import get_model


@pytest.mark.parametrize(
    ("options", "gpus_per_node"),
    [
        (Options(allreduce_algo="ring"), 0),  # the ring crosses the network twice
        (Options(), 0),  # auto: hierarchical / multi-ring
        # eager launches of an engine without host jitter (with it, ranks differ:
        # tests/core/test_host_jitter.py)
        (Options(overlap="microbatch", launch="eager", engine="ideal"), 0),
        (Options(allreduce_algo="tree"), 4),  # TP 8 as 4 + 4
    ],
)
def test_collapsed_run_equals_the_full_one(options: Options, gpus_per_node: int) -> None:
    model = dataclasses.replace(get_model("llama-3.1-70b"), num_layers=3)
    tp = 16 if not gpus_per_node else 8
    from tpsim.core.config import Layout

    layout = Layout(tp, gpus_per_node)
    wl = Workload(8, "decode", context_len=512)
    fast = simulate(model, "dgx-h100", layout, wl, options, nodes=2)
    full = simulate(model, "dgx-h100", layout, wl, options, nodes=2, use_symmetry=False)
    assert fast.summary["engine"]["ranks_simulated"] == tp // 2
    assert full.summary["engine"]["ranks_simulated"] == tp
    assert fast.records == full.records
    assert fast.critical_path == full.critical_path
    a, b = dict(fast.summary), dict(full.summary)
    a.pop("engine")
    b.pop("engine")
    assert a == b


@pytest.mark.parametrize(
    ("topology", "tp", "options", "simulated"),
    [
        ("dgx-h100", 8, Options(), 1),  # one-shot / two-shot / NVLS: GPUs on one switch
        ("dgx-h100", 8, Options(allreduce_algo="nvls", overlap="chunked"), 1),
        ("dgx-a100", 8, Options(allreduce_algo="ring"), 1),
        ("dgx-h100", 4, Options(overlap="microbatch", sequence_parallel=True), 1),
        ("mi300x", 8, Options(allreduce_algo="ring"), 1),  # one ring over a full mesh
        # seven rings over every link of the mesh: no rotation maps that set onto itself
        ("mi300x", 8, Options(allreduce_algo="multiring"), 8),
        ("pcie-l40s", 8, Options(), 8),  # PCIe switches: GPUs are not interchangeable
        ("dgx-h100", 8, Options(allreduce_algo="tree"), 8),  # a tree is not a rotation
    ],
)
def test_one_host_collapses_when_its_gpus_are_alike(
    topology: str, tp: int, options: Options, simulated: int
) -> None:
    model = dataclasses.replace(get_model("llama-3.1-8b"), num_layers=2)
    wl = Workload(8, "prefill", prompt_len=64)
    fast = simulate(model, topology, tp, wl, options)
    full = simulate(model, topology, tp, wl, options, use_symmetry=False)
    assert fast.summary["engine"]["ranks_simulated"] == simulated
    assert fast.records == full.records


def test_skew_is_not_collapsed() -> None:
    model = dataclasses.replace(get_model("llama-3.1-8b"), num_layers=2)
    wl = Workload(4, "decode", context_len=128)
    skew = simulate(model, "dgx-h100", 16, wl, Options(launch_skew_s=1e-5), nodes=2)
    assert skew.summary["engine"]["ranks_simulated"] == 16


def test_a_step_that_waited_for_a_late_peer_says_so() -> None:
    """A ring step whose record starts at the late peer's send (the critical path runs
    through it) says when its own rank posted and how long it waited."""
    model = dataclasses.replace(get_model("llama-3.1-8b"), num_layers=2)
    run = simulate(model, "dgx-h100", 4, Workload(8), Options(launch_skew_s=5e-5,
                   allreduce_algo="ring"))  # fmt: skip
    waited = [r for r in run.records if "waited" in r.detail]
    assert waited
    for r in waited:
        posted = float(r.detail.split("posted at ")[1].split(" us")[0]) * 1e-6
        assert posted < r.start_s and run.records[r.cause].rank != r.rank
