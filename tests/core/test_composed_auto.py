"""tpsim's own composition of collective phases (the hierarchical all-reduce across hosts)
is the ideal engine's to choose: a serving engine calls NCCL across hosts, which runs its
own algorithms; named, it runs for any engine."""

from __future__ import annotations

import pytest
from tpsim.calibration.profiles import profile
from tpsim.core.comm.collectives import make_planner
from tpsim.core.comm.group import tp_group
from tpsim.core.program import CollectiveCall
from tpsim.topologies.io import get_topology

MiB = 1 << 20


def _plan(engine: str, algo: str = "auto"):  # type: ignore[no-untyped-def]
    group = tp_group(get_topology("dgx-h100", 2), 16, 0)
    fab = group.fabric(profile(engine))
    return make_planner(fab, group.ring, algo=algo)


def test_the_ideal_engine_composes_across_hosts() -> None:
    assert _plan("ideal")(CollectiveCall("all_reduce", 2 * MiB)).algorithm == "hierarchical"


@pytest.mark.parametrize("engine", ["vllm", "vllm-v0", "sglang", "trtllm"])
def test_a_serving_engine_runs_nccls_own_across_hosts(engine: str) -> None:
    assert profile(engine).collectives.auto_composed is False
    for n in (64 * 1024, 2 * MiB, 64 * MiB):
        got = _plan(engine)(CollectiveCall("all_reduce", n))
        assert got.algorithm != "hierarchical", (engine, n)


def test_named_it_still_runs() -> None:
    got = _plan("vllm", "hierarchical")(CollectiveCall("all_reduce", 2 * MiB))
    assert got.algorithm == "hierarchical"
