"""tpsim serve with pipeline stages (``--pp P``): P virtual engines whose batches share the
stages, each stage working on one batch at a time."""

from __future__ import annotations

import pytest
from tpsim.core.config import Options
from tpsim.core.stage_sends import StageSends
from tpsim.core.step_timer import IterationTimer
from tpsim.experiments.serve.pipeline import Stages
from tpsim.experiments.serve.run import ServeSetup, serve
from tpsim.experiments.serve.workload import Lengths

MODEL, TOPO = "llama-3.1-8b", "dgx-h100"


def test_batches_cross_the_stages_in_order() -> None:
    """Two stages of 5 s and a 1 s send: a batch alone takes 11 s; a second entering with
    it waits for the first stage (5-10), then for the second (11-16): 16 s; the first's next
    pass, entering at 11, finds both stages free when it reaches them (11-16, 17-22): 11 s,
    so with both in flight each comes round every pass."""
    st = Stages(2)
    assert st.cross(0.0, 5.0, (1.0,)) == 11.0
    assert st.cross(0.0, 5.0, (1.0,)) == 16.0
    assert st.cross(11.0, 5.0, (1.0,)) == 11.0
    assert st.free_s == [16.0, 22.0]


def test_the_sends_between_stages() -> None:
    """One send per boundary: within a host over NVLink, tiny for a decode token; across
    hosts over the NIC, the larger; none with one stage."""
    it = IterationTimer("llama-3.1-70b", "dgx-h100", 8, Options(allow_oom=True), nodes=2)
    sends = StageSends(it.plan)
    assert sends.seconds(64, 1) == ()
    (across,) = sends.seconds(2048, 2)
    inside = IterationTimer("llama-3.1-70b", "dgx-h100", 4, Options(allow_oom=True))
    (near,) = StageSends(inside.plan).seconds(2048, 2)
    assert 0 < near < across
    # 2 x 2048 x 8192 x 2 B = 64 MiB, 1/8 per rank over a 400 Gb/s NIC: at least 170 us
    assert across > 2 * 2048 * 8192 * 2 / 8 / 50e9


def _pass(step: object) -> float:
    return 0.010  # every pass 10 ms: the pipeline's effect alone


def test_a_pipeline_of_two_carries_two_batches_at_once() -> None:
    """A 10 ms pass over 2 stages: one client's tokens come every pass (the pipeline does not
    make a batch faster); two clients, one per virtual engine, each still every pass (plus
    the sends), so twice the tokens per second."""
    work = (0, Lengths("fixed", 16), Lengths("fixed", 200))
    setup = ServeSetup(MODEL, TOPO, 1, pp=2)
    one = serve(setup, lengths=work, concurrency=1, count=2, timer=_pass).summary()
    two = serve(setup, lengths=work, concurrency=2, count=4, timer=_pass).summary()
    assert one["mean_tpot_ms"] == pytest.approx(10.0, rel=0.01)
    assert two["mean_tpot_ms"] == pytest.approx(10.0, rel=0.01)
    assert two["output_throughput"] == pytest.approx(2 * one["output_throughput"], rel=0.03)
    assert two["littles_law_ratio"] == pytest.approx(1.0, abs=0.01)


def test_each_gpu_holds_its_stage_so_the_cache_grows() -> None:
    """Llama-3.1-8B at TP 1: two stages hold half the layers a GPU, so each virtual engine
    gets about as many tokens as one GPU's whole cache (half the bytes a token, half the
    blocks each), and more than a single GPU holding every layer has for itself / 2."""
    work = (0, Lengths("fixed", 100), Lengths("fixed", 2))
    flat = serve(ServeSetup(MODEL, TOPO, 1), lengths=work, concurrency=1, count=1)
    piped = serve(ServeSetup(MODEL, TOPO, 1, pp=2), lengths=work, concurrency=1, count=1)
    assert piped.kv.bytes_per_token == flat.kv.bytes_per_token // 2
    assert piped.kv.blocks > 0.95 * flat.kv.blocks
