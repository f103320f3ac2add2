"""Host jitter (tpsim.core.engine.jitter): every collective waits for the slowest rank's host."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from tpsim import Options, Workload, simulate
from tpsim.calibration import default as default_calibration
from tpsim.calibration.loader import CalibrationError
from tpsim.calibration.profiles import profile
from tpsim.core.comm.collectives import make_planner
from tpsim.core.comm.group import connect, run_programs, tp_group
from tpsim.core.engine.jitter import HostJitter, expected_order_statistics
from tpsim.core.engine.simulation import run
from tpsim.core.errors import ConfigError
from tpsim.core.program import CollectiveCall, Op, Program, Programs
from tpsim.topologies.builders import build

HOST_S = 1e-3
REPS = 12


def _monte_carlo_max(p: int, cv: float, n: int = 400_000) -> float:
    """E[max of p] of lognormal factors of mean 1 and this cv, sampled (independent of the
    quadrature under test)."""
    sigma = math.sqrt(math.log1p(cv * cv))
    z = np.random.default_rng(12345).standard_normal((n, p))
    return float(np.exp(sigma * z - sigma * sigma / 2).max(axis=1).mean())


@pytest.mark.parametrize(("p", "cv"), [(2, 0.15), (4, 0.15), (8, 0.15), (8, 0.5), (16, 0.3)])
def test_expected_order_statistics_match_sampling(p: int, cv: float) -> None:
    stats = expected_order_statistics(p, cv)
    assert list(stats) == sorted(stats)
    assert sum(stats) / p == pytest.approx(1.0, abs=1e-12)  # mean 1: the profile's time
    assert stats[-1] == pytest.approx(_monte_carlo_max(p, cv), rel=3e-3)


def test_one_rank_or_no_spread_changes_nothing() -> None:
    assert expected_order_statistics(1, 0.5) == (1.0,)
    assert expected_order_statistics(4, 0.0) == (1.0,) * 4
    assert not HostJitter(0.5, 1).active and not HostJitter(0.0, 8).active


def _toy(p: int) -> Programs:
    """``REPS`` times: host work of HOST_S (after the previous collective: the thread waits
    for its GPU), then a small all-reduce after it."""
    ops: list[Op] = []
    for k in range(REPS):
        deps = (len(ops) - 1,) if ops else ()
        ops.append(Op(f"host{k}", "host", k, "", "cpu", 0.0, HOST_S, 0.0, 0, "host", "", deps))
        call = CollectiveCall("all_reduce", 1024)
        ops.append(Op(f"ar{k}", "collective", k, "x", "comm", 0.0, 0.0, 0.0, call.nbytes,
                      "communication", "", (len(ops) - 1,), call))  # fmt: skip
    return Programs.same(Program(tuple(ops)), p)


def _collective_ends(p: int, jitter: HostJitter | None) -> list[float]:
    group = tp_group(build("dgx-h100"), p)
    fab = group.fabric(default_calibration())
    recs, _ = run(_toy(p), make_planner(fab, group.ring), fab.capacities, host_jitter=jitter)
    ends = []
    for k in range(REPS):
        mine = [r for r in recs if r.name.split(".")[0] == f"ar{k}"]
        assert {r.rank for r in mine} == set(range(p))
        ends.append(max(r.end_s for r in mine))
    return ends


@pytest.mark.parametrize(("p", "cv"), [(2, 0.3), (4, 0.3), (8, 0.3), (8, 0.1)])
def test_every_collective_waits_for_the_expected_maximum(p: int, cv: float) -> None:
    plain = _collective_ends(p, None)
    jittered = _collective_ends(p, HostJitter(cv, p, seed=7))
    want = _monte_carlo_max(p, cv) * HOST_S  # the slowest of p host threads, on average
    steps = np.diff([0.0, *jittered]) - np.diff([0.0, *plain])  # each rep's wait beyond 1x
    for k, extra in enumerate(steps):
        assert HOST_S + extra == pytest.approx(want, rel=5e-3), f"collective {k}"
    # the mean step over the repetitions is the expected maximum as well
    assert float(np.mean(steps)) + HOST_S == pytest.approx(want, rel=5e-3)


def test_slowest_rank_changes_with_the_segment_and_the_seed() -> None:
    j = HostJitter(0.3, 8, seed=1)
    slowest = {max(range(8), key=lambda r: j.factor(r, s)) for s in range(20)}
    assert len(slowest) > 2  # no rank is always the straggler
    other = HostJitter(0.3, 8, seed=2)
    assert [j.factor(r, 0) for r in range(8)] != [other.factor(r, 0) for r in range(8)]
    assert sorted(j.factor(r, 3) for r in range(8)) == list(expected_order_statistics(8, 0.3))
    # a second group of a layout gets the same statistics in its own order
    assert sorted(j.factor(r, 0) for r in range(8, 16)) == list(expected_order_statistics(8, 0.3))


def _profile_file(tmp_path: Path, engine: str, cv: float) -> str:
    f = tmp_path / f"{engine}-cv.yaml"
    f.write_text(
        f"name: {engine}-cv\nextends: {engine}\noverrides:\n  engine:\n"
        f"    host_jitter_cv: {{value: {cv}, source: test}}\n"
    )
    return str(f)


def test_eager_plateau_from_tp4_to_tp8_on_70b(tmp_path: Path) -> None:
    """TGI-style eager steps (a Python shard per GPU, host-bound at TP 4 and 8): without
    jitter TP 8 is no slower than TP 4; with it every layer's all-reduce waits for the slowest
    of 8 shards instead of 4, and TP 8 comes out slower: the plateau grows with TP."""
    wl = Workload(1, "decode", context_len=256)

    def step(engine: str, tp: int) -> float:
        return simulate("llama-2-70b", "dgx-a100", tp, wl, Options(engine=engine)).latency_s

    flat = _profile_file(tmp_path, "tgi-v1", 0.0)
    assert step(flat, 8) <= step(flat, 4)
    assert profile("tgi-v1").engine.host_jitter_cv > 0
    tp4, tp8 = step("tgi-v1", 4), step("tgi-v1", 8)
    assert tp8 > 1.03 * tp4
    assert tp4 > 1.05 * step(flat, 4)  # jitter slows the host-bound step itself


def test_same_input_same_bytes() -> None:
    wl = Workload(1, "decode", context_len=256)
    opts = Options(engine="tgi-v1", launch="eager", host_jitter_seed=3)
    a = simulate("llama-2-7b", "dgx-h100", 4, wl, opts)
    b = simulate("llama-2-7b", "dgx-h100", 4, wl, opts)
    assert a.records == b.records  # the summary differs only in its wall-clock seconds
    assert a.summary["breakdown_s"] == b.summary["breakdown_s"]
    c = simulate("llama-2-7b", "dgx-h100", 4, wl, Options(engine="tgi-v1", launch="eager"))
    # another seed: other ranks straggle, the same expected step
    assert c.latency_s == pytest.approx(a.latency_s, rel=1e-3)


def test_graph_replays_and_the_ideal_engine_keep_symmetry_and_time(tmp_path: Path) -> None:
    wl = Workload(8, "decode", context_len=1024)
    flat = _profile_file(tmp_path, "vllm", 0.0)
    for engine in ("vllm", "ideal"):
        r = simulate("llama-2-7b", "dgx-h100", 8, wl, Options(engine=engine))
        assert r.summary["engine"]["ranks_simulated"] == 1
    jittered = simulate("llama-2-7b", "dgx-h100", 8, wl, Options(engine="vllm"))
    plain = simulate("llama-2-7b", "dgx-h100", 8, wl, Options(engine=flat))
    assert jittered.latency_s == plain.latency_s
    # eager: every rank runs, and the step is slower
    eager = simulate("llama-2-7b", "dgx-h100", 8, wl, Options(engine="vllm", launch="eager"))
    eager_flat = simulate("llama-2-7b", "dgx-h100", 8, wl, Options(engine=flat, launch="eager"))
    assert eager.summary["engine"]["ranks_simulated"] == 8
    assert eager.latency_s >= eager_flat.latency_s


def test_run_programs_turns_symmetry_off_only_when_jitter_touches_the_programs() -> None:
    comms = connect(build("dgx-h100"), 8)
    programs = _toy(8)
    assert run_programs(comms, programs).ranks_simulated == 1
    assert run_programs(comms, programs, host_jitter=HostJitter(0.2, 8)).ranks_simulated == 8
    assert run_programs(comms, programs, host_jitter=HostJitter(0.0, 8)).ranks_simulated == 1


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="host_jitter_seed"):
        Options(host_jitter_seed=-1)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nextends: vllm\noverrides:\n  engine:\n"
        "    host_jitter_cv: {value: 3, source: test}\n"
    )
    with pytest.raises(CalibrationError, match="host_jitter_cv=3"):
        profile(str(bad))
