"""A serving iteration in the core: MixedStep lowered by lower_mixed reduces to the existing
prefill and decode passes, and the iteration timer's cache stays within 1 % of the exact
simulation."""

from __future__ import annotations

import random

import pytest
from tpsim.core.api import simulate
from tpsim.core.config import ConfigError, Layout, Options, Workload
from tpsim.core.lowering.mixed import MixedStep, lower_mixed
from tpsim.core.step_timer import IterationTimer, grid_above, grid_below, interpolate

MODEL, TOPO = "llama-3.1-8b", "dgx-h100"


@pytest.fixture(scope="module")
def timer() -> IterationTimer:
    return IterationTimer(MODEL, TOPO, 1, Options())


def test_pure_decode_is_the_decode_pass(timer: IterationTimer) -> None:
    """16 decodes over 1024 keys each: the decode step tpsim run simulates, to the bit."""
    step = MixedStep.of((1024,) * 16, ())
    ran = simulate(MODEL, TOPO, Layout(1), Workload(16, "decode", 512, 1024), Options())
    assert timer.exact_seconds(step) == pytest.approx(ran.summary["latency_s"], rel=1e-12)


def test_one_chunk_is_the_prefill_pass(timer: IterationTimer) -> None:
    step = MixedStep.of((), ((1000, 0),))
    ran = simulate(MODEL, TOPO, Layout(1), Workload(1, "prefill", 1000), Options())
    assert timer.exact_seconds(step) == pytest.approx(ran.summary["latency_s"], rel=1e-12)


def test_a_mixed_step_reads_the_weights_once(timer: IterationTimer) -> None:
    """Decodes plus a chunk cost more than either alone and less than both apart (the
    linear layers run once over every token)."""
    decodes, chunk = (2000,) * 64, ((512, 0),)
    both = timer.exact_seconds(MixedStep.of(decodes, chunk))
    alone_d = timer.exact_seconds(MixedStep.of(decodes, ()))
    alone_c = timer.exact_seconds(MixedStep.of((), chunk))
    assert max(alone_d, alone_c) < both < alone_d + alone_c


def test_a_prefix_makes_the_chunk_slower(timer: IterationTimer) -> None:
    """A chunk attends over its cached prefix too."""
    fresh = timer.exact_seconds(MixedStep.of((), ((2048, 0),)))
    later = timer.exact_seconds(MixedStep.of((), ((2048, 6000),)))
    assert later > fresh


def test_steps_are_checked() -> None:
    with pytest.raises(ConfigError, match="step"):
        MixedStep.of((), ())
    with pytest.raises(ConfigError, match="step"):
        MixedStep.of((0,), ())


def test_grid() -> None:
    assert grid_below(50, 16, 64) == 50 and grid_above(50, 16, 64) == 51
    assert grid_below(1000, 16) == 992 and grid_above(1000, 16) == 1024
    assert grid_below(1024, 16) == 1024 and grid_above(1024, 16) == 1088


def test_interpolate_adds_back_the_known_part() -> None:
    """f linear, g a step at 11 (a GEMM's wave): f is read at the bracket's ends and its
    midpoint only, and the step is g's, added back at the asked point."""
    seen: list[int] = []

    def f(x: int) -> float:
        seen.append(x)
        return 2.0 * x + 1

    def g(x: int) -> float:
        return 0.0 if x <= 10 else 5.0

    assert interpolate(13, 8, 16, f, g, lambda x: 100.0) == 2 * 13 + 1 + 5
    assert interpolate(9, 8, 16, f, g, lambda x: 100.0) == 2 * 9 + 1
    assert sorted(set(seen)) == [8, 12, 16]


def test_interpolate_halves_a_bracket_that_is_not_linear() -> None:
    """f steps from 0 to 100 after 10 (what no known part explains): halved towards the
    asked point until its bracket is linear, so either side of the step is exact."""

    def f(x: int) -> float:
        return 0.0 if x <= 10 else 100.0

    def none(x: int) -> float:
        return 0.0

    for x, want in ((9, 0.0), (10, 0.0), (11, 100.0), (15, 100.0)):
        assert interpolate(x, 8, 16, f, none, lambda x: 100.0) == want


def test_the_kernels_steps_are_the_steps_of_the_step(timer: IterationTimer) -> None:
    """Where a GEMM's wave count steps a GPU-bound step up, the kernels' priced seconds
    (the step lowered, not run) step up by the same: what the cache interpolates, the step
    less them, moves by under 0.1 % of the step there while the step itself moves more."""
    jumps = []
    for t in range(1020, 1300):
        a, b = timer._base_at(t, 1, True), timer._base_at(t + 1, 1, True)
        if b - a > 1e-3 * a:
            jumps.append(t)
            ka, kb = timer._kernels_at(t, 1, True), timer._kernels_at(t + 1, 1, True)
            assert abs((b - kb) - (a - ka)) < 1e-3 * a
        if len(jumps) == 2:
            break
    assert jumps  # the range holds a wave step (else the test shows nothing)


def test_extrapolated_layers_equal_the_whole_model(timer: IterationTimer) -> None:
    """The step of 32 layers from a run of 2 (attention at zero) equals the whole
    model's, prefill and decode, host-bound or not."""
    for step in (MixedStep.of((1,) * 8, ()), MixedStep.of((1,) * 300, ()),
                 MixedStep.of((1,) * 40, ((2000, 0),))):  # fmt: skip
        whole = timer._run(timer.model, step, True)
        assert timer._extrapolated(step) == pytest.approx(whole, rel=1e-9)


def _cases(n: int, seed: int) -> list[MixedStep]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        b = rng.choice([rng.randint(1, 64), rng.randint(1, 512)])
        decodes = tuple(rng.randint(16, 4000) for _ in range(b))
        chunk = () if rng.random() < 0.4 else ((rng.randint(1, 8192), rng.randint(0, 4000)),)
        out.append(MixedStep.of(decodes, chunk))
    return out


@pytest.mark.parametrize(("model", "tp", "engine"), [
    ("llama-3.1-8b", 1, "vllm"), ("llama-3.1-8b", 2, "trtllm"), ("llama-3.1-8b", 1, "sglang"),
    ("gpt-oss-20b", 1, "vllm"),  # sliding-window layers and MoE
    # the speed benchmark's (tpsim.experiments.serve.bench): eager steps, 8 jittered ranks
    pytest.param("llama-3.1-70b", 8, "vllm", marks=pytest.mark.benchmark),
])  # fmt: skip
def test_cache_within_one_percent_of_exact(model: str, tp: int, engine: str) -> None:
    """Random iterations (1-512 decodes over 16-4000 keys, a chunk of up to 8192 tokens
    after up to 4000 cached): the cache's answer is within 1 % of the exact simulation."""
    t = IterationTimer(model, TOPO, tp, Options(engine=engine))
    worst = max(abs(t.seconds(s) - t.exact_seconds(s)) / t.exact_seconds(s) for s in _cases(40, 5))
    assert worst <= 0.01


def test_sliding_layers_decode_is_the_decode_pass() -> None:
    """gpt-oss: every other layer attends over its last 128 keys; 16 decodes over 4096 keys
    each are the decode step tpsim run simulates, attention per layer included."""
    t = IterationTimer("gpt-oss-20b", TOPO, 1, Options())
    step = MixedStep.of((4096,) * 16, ())
    ran = simulate("gpt-oss-20b", TOPO, Layout(1), Workload(16, "decode", 512, 4096), Options())
    assert t.exact_seconds(step) == pytest.approx(ran.summary["latency_s"], rel=1e-12)
    assert t.seconds(step) == pytest.approx(ran.summary["latency_s"], rel=0.01)


def test_latent_attention_runs_both_forms_in_one_iteration() -> None:
    """DeepSeek-V3: all-decode and one-chunk iterations are run's decode and prefill passes
    (absorbed and expanded), a mixed one runs both, and the cache stays within 1 %."""
    opts = Options(dtype="fp8")
    t = IterationTimer("deepseek-v3", "hgx-h200", 8, opts)
    decode = simulate("deepseek-v3", "hgx-h200", Layout(8), Workload(16, "decode", 512, 2048), opts)
    assert t.exact_seconds(MixedStep.of((2048,) * 16, ())) == pytest.approx(
        decode.summary["latency_s"], rel=1e-12
    )
    prefill = simulate("deepseek-v3", "hgx-h200", Layout(8), Workload(1, "prefill", 1000), opts)
    assert t.exact_seconds(MixedStep.of((), ((1000, 0),))) == pytest.approx(
        prefill.summary["latency_s"], rel=1e-12
    )
    mixed = MixedStep.of((2048,) * 16, ((1000, 0),))
    both = t.exact_seconds(mixed)
    assert max(decode.summary["latency_s"], prefill.summary["latency_s"]) < both
    assert t.seconds(mixed) == pytest.approx(both, rel=0.01)


@pytest.mark.parametrize("skew", [0.0, 2.0])
def test_expert_parallel_decode_is_the_decode_pass(skew: float) -> None:
    """--ep reaches the iteration: a MoE model at TP 2 x EP 2 times its decode step as tpsim
    run does (uneven expert ranks included), and differently from EP 1."""
    model, opts = "qwen3-30b-a3b", Options(expert_skew=skew)
    ep2 = IterationTimer(model, TOPO, 2, opts, ep=2)
    step = MixedStep.of((1024,) * 32, ())
    ran = simulate(model, TOPO, Layout(2, ep=2), Workload(32, "decode", 512, 1024), opts)
    assert ep2.exact_seconds(step) == pytest.approx(ran.summary["latency_s"], rel=1e-12)
    ep1 = IterationTimer(model, TOPO, 2, opts)
    assert ep1.exact_seconds(step) != ep2.exact_seconds(step)
    mixed = MixedStep.of((800,) * 20, ((300, 100),))
    assert ep2.seconds(mixed) == pytest.approx(ep2.exact_seconds(mixed), rel=0.01)


def test_kept_prices_are_the_prices(timer: IterationTimer) -> None:
    """The timer's lowerings share one pricing that keeps each kernel's price
    (:attr:`Pricing.memo`): the programs they build are those of a fresh pricing, op for op,
    whichever steps were lowered before."""
    plan = timer.plan
    for step in (MixedStep.of((700,) * 96, ()), MixedStep.of((1,) * 3, ((900, 64),))):
        timer._kernels_at(step.tokens, step.batch, bool(step.chunks))  # fills the memo
        kept = timer._lower(timer.model, step, no_attention=False)
        fresh = lower_mixed(timer.model, 1, step, plan.options, plan.hardware, plan.table)
        assert kept.per_rank[0].ops == fresh.per_rank[0].ops
    assert next(iter(timer._prices.values())).memo  # prices were kept


def test_chunked_layers_steps_are_run_s_passes() -> None:
    """Llama 4 Scout (36 chunked layers of 8192-token chunks, 12 full): 8 decodes at 9000
    tokens (a chunked layer reads 808 keys) and a 16K prompt are the decode and prefill
    steps tpsim run simulates, and the cache (its layers extrapolated, attention added per
    kind) stays within 0.1 % of the exact iteration with a chunk after a cached prefix."""
    t = IterationTimer("llama-4-scout", TOPO, 4, Options())
    lay = Layout(4)
    ran = simulate("llama-4-scout", TOPO, lay, Workload(8, "decode", 512, 9000), Options())
    assert t.exact_seconds(MixedStep.of((9000,) * 8, ())) == pytest.approx(
        ran.summary["latency_s"], rel=1e-12
    )
    pre = simulate("llama-4-scout", TOPO, lay, Workload(1, "prefill", 16384, 16384), Options())
    one = MixedStep.of((), ((16384, 0),))
    assert t.exact_seconds(one) == pytest.approx(pre.summary["latency_s"], rel=1e-3)
    for step in (
        MixedStep.of((20000,) * 4, ((3000, 7000),)),
        MixedStep.of((100,) * 64, ((8192, 8192),)),
    ):
        assert t.seconds(step) == pytest.approx(t.exact_seconds(step), rel=1e-3)
