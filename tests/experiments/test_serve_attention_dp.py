"""tpsim serve with attention data parallelism (``--attention-dp D``): D attention groups of a
MoE model, each with its own queue, KV cache and batch, stepping together, their iteration
as long as the slowest group's with the experts computing every group's tokens."""

from __future__ import annotations

import random

import pytest
from tpsim.core.config import Options
from tpsim.core.lowering.mixed import MixedStep
from tpsim.core.step_timer import IterationTimer
from tpsim.experiments.serve.run import ServeSetup, serve
from tpsim.experiments.serve.workload import Lengths, arrival_times, streams, synthetic

MOE, TOPO = "qwen3-30b-a3b", "dgx-h100"


@pytest.fixture(scope="module")
def timer() -> IterationTimer:
    return IterationTimer(MOE, TOPO, 1, Options(), ep=4, attention_dp=4)


def test_groups_running_the_same_step_price_as_that_step(timer: IterationTimer) -> None:
    """Four groups of the same step route four times its tokens: what a step of every
    group prices without a routed count of its own (the layout of ``tpsim run``)."""
    step = MixedStep.of((1200,) * 32, ())
    assert timer.group_seconds([step] * 4) == timer.seconds(step)
    assert timer.seconds(MixedStep.of((1200,) * 32, (), routed=128)) == timer.seconds(step)


def test_the_experts_compute_the_tokens_routed(timer: IterationTimer) -> None:
    """One group with a prefill chunk and three idle: its experts see its tokens alone, so
    the iteration is shorter than four groups of that step, and longer than one of decodes."""
    chunk = MixedStep.of((1000,) * 8, ((2048, 0),))
    alone, all_four = timer.group_seconds([chunk]), timer.group_seconds([chunk] * 4)
    assert alone < all_four
    decodes = MixedStep.of((1000,) * 8, ())
    assert timer.group_seconds([decodes]) < alone
    # the slowest group gates: adding an idle-ish group's decodes changes only the routing
    both = timer.group_seconds([chunk, decodes])
    assert alone < both < all_four


def test_the_cache_agrees_with_exact_simulation(timer: IterationTimer) -> None:
    """Random iterations of four groups (decodes at their contexts, some with a prefill
    chunk), each priced from the cache and by simulating the whole model: within 1 %."""
    exact = IterationTimer(MOE, TOPO, 1, Options(), ep=4, attention_dp=4, exact=True)
    rng = random.Random(7)
    for _ in range(4):
        steps = []
        for _ in range(4):
            decodes = tuple(rng.randint(100, 4000) for _ in range(rng.randint(1, 64)))
            chunks = ((rng.randint(16, 2048), rng.randint(0, 2000)),) if rng.random() < 0.5 else ()
            steps.append(MixedStep.of(decodes, chunks))
        assert timer.group_seconds(steps) == pytest.approx(exact.group_seconds(steps), rel=0.01)


def _run(setup: ServeSetup, rate: float = 16.0, n: int = 160) -> tuple[dict[str, object], object]:
    t = arrival_times(streams(3)[0], rate, "poisson", 1.0, requests=n)
    reqs = synthetic(3, Lengths("uniform", 200, 1500), Lengths("uniform", 20, 200), count=n,
                     arrival_s=t)  # fmt: skip
    r = serve(setup, requests=reqs)
    return r.summary(), r


def test_the_groups_step_together_and_share_the_load() -> None:
    s, r = _run(ServeSetup(MOE, TOPO, 1, options=Options(), ep=2, attention_dp=2))
    assert s["completed"] == 160 and s["littles_law_ratio"] == pytest.approx(1.0, abs=0.01)
    a, b = r.steps  # one record list per attention group
    starts_a, starts_b = {x.start_s: x.seconds for x in a}, {x.start_s: x.seconds for x in b}
    # one clock: every iteration starts once, each group's record of it has its length
    assert len(set(starts_a) | set(starts_b)) == r.iterations
    shared = set(starts_a) & set(starts_b)
    assert shared and all(starts_a[t] == starts_b[t] for t in shared)
    # the router (fewest requests first) keeps both groups busy
    assert min(len(a), len(b)) > 0.5 * r.iterations


def test_same_seed_same_result() -> None:
    one = _run(ServeSetup(MOE, TOPO, 1, options=Options(), ep=2, attention_dp=2))[0]
    two = _run(ServeSetup(MOE, TOPO, 1, options=Options(), ep=2, attention_dp=2))[0]
    one.pop("wall_s", None), two.pop("wall_s", None)
    assert one == two


def test_plan_prices_one_request_s_prefill_as_serve_runs_it_alone() -> None:
    """plan's TTFT is one request's prefill. With attention DP 8 it had priced a batch of 1
    in every group, eight prompts through the experts at once (Qwen3-30B-A3B TP 1 x ADP 8,
    1,024-token prompt: 25.4 ms), where one request alone (serve --concurrency 1, the other
    groups joining the all-to-alls empty) takes 20.7 ms; a layout without attention DP is
    priced as before."""
    from tpsim.experiments.plan import PlanRequest, evaluate

    req = PlanRequest(MOE, TOPO, prompt_len=1024, context_len=2048)
    one = synthetic(5, Lengths("fixed", 1024, 0), Lengths("fixed", 2, 0), count=1,
                    arrival_s=[0.0])  # fmt: skip
    for tp, adp in ((1, 8), (2, 1)):
        setup = ServeSetup(MOE, TOPO, tp, options=Options(), ep=tp * adp, attention_dp=adp)
        served = serve(setup, requests=one).summary()
        row = evaluate(req, tp, 1, 1, ep=tp * adp, adp=adp)
        assert row is not None
        assert row.ttft_s * 1e3 == pytest.approx(served["mean_ttft_ms"], rel=1e-6), (tp, adp)
