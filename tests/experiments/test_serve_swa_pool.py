"""A sliding-window model's KV cache as SGLang holds it (``sliding_window_kv: pool``): the
full layers in one pool, the sliding layers in a second one of ``swa_full_tokens_ratio``
its tokens, a sequence keeping there only its window, the tokens decoded between two frees
of those past it, and a page; a request runs only when both pools have its tokens."""

from __future__ import annotations

from dataclasses import replace

from tpsim.calibration.scheduler import SchedulerSpec, scheduler
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.plan import RunPlan, resolve
from tpsim.experiments.plan import PlanRequest, engine_sequences
from tpsim.experiments.serve.disagg import Disagg, PrefillInstance
from tpsim.experiments.serve.engine import EngineInstance
from tpsim.experiments.serve.kvblocks import BlockLayout
from tpsim.experiments.serve.kvcache import KVCache
from tpsim.experiments.serve.report import text
from tpsim.experiments.serve.run import ServeResult, ServeSetup, kv_cache, serve
from tpsim.experiments.serve.workload import parse_lengths, synthetic
from tpsim.models.catalog import get_model


def _sglang(model: str) -> tuple[RunPlan, SchedulerSpec]:
    plan = resolve(model, "dgx-h100", Layout(1), Workload(1, "decode", 1, 1),
                   Options(engine="sglang"), oom_flag=False)  # fmt: skip
    return plan, scheduler("sglang", plan.gpu.hbm_bytes)


def _run(e: EngineInstance, n: int) -> int:
    """Admit ``n`` requests at once, run them out at 10 ms a step; the most that ran at once."""
    for i in range(n):
        e.admit(i, 0.0)
    t = 0.0
    while (s := e.step(t)) is not None:
        t += s
        e.finish(t)
    assert len(e.finished) == n
    return max(step.running for step in e.steps)


def test_gpt_oss_pools_are_sglang_s() -> None:
    """gpt-oss-120b at TP 1 on an H100: a layer's token is 8 KV heads x 64 x K and V x 2
    bytes = 2048 B, and 18 of its 36 layers are sliding (window 128). SGLang's
    HybridSWAPoolConfigurator gives the full pool room // (2048 x 18 + 0.8 x 2048 x 18)
    = room x 5 // 331776 tokens, the sliding pool 0.8 of them, a sequence keeping there
    127 + 128 + 1 = 256 tokens (its runner's sliding_window_size is 128 - 1); every layer
    at full length would hold room // 73728."""
    oss = get_model("gpt-oss-120b")
    assert (len(oss.sliding_layers), oss.num_layers, oss.sliding_window) == (18, 36, 128)
    plan, spec = _sglang("gpt-oss-120b")
    kv, whole = kv_cache(plan, spec), kv_cache(plan, spec, hybrid=False)
    room = kv.bytes_per_gpu
    assert kv.blocks == room * 5 // 331776
    assert kv.layout == BlockLayout(1, swa_pool=kv.blocks * 4 // 5, swa_keep=256)
    assert kv.tokens == kv.blocks  # SGLang reports the full pool's tokens
    assert whole.blocks == room // 73728 and whole.layout is None
    assert kv.blocks * 324 // 360 in (whole.blocks - 1, whole.blocks)  # 1.11x the tokens


def test_llama_4_s_chunked_layers_are_in_the_sliding_pool() -> None:
    """Llama 4 Scout at TP 4: SGLang's is_hybrid_swa_model lists Llama4ForConditionalGeneration
    and get_hybrid_layer_ids puts its chunked layers ((i + 1) % 4 != 0: 36 of 48) in the
    sliding pool, a sequence keeping there its last attention_chunk_size tokens (the
    model runner's sliding_window_size falls back to it): the full pool holds 48 / (12 +
    0.8 x 36) = 1.18x the tokens one pool of every layer would, and a transfer sends the
    chunked layers' last 8,192 tokens."""
    scout = get_model("llama-4-scout")
    assert (len(scout.chunked_layers), scout.attention_chunk_size) == (36, 8192)
    plan = resolve("llama-4-scout", "dgx-h100", Layout(4), Workload(1, "decode", 1, 1),
                   Options(engine="sglang"), oom_flag=False)  # fmt: skip
    spec = scheduler("sglang", plan.gpu.hbm_bytes)
    kv, whole = kv_cache(plan, spec), kv_cache(plan, spec, hybrid=False)
    layer = kv.bytes_per_token / 48
    assert kv.blocks == int(kv.bytes_per_gpu // (layer * (12 + 0.8 * 36)))
    assert kv.layout == BlockLayout(1, swa_pool=int(kv.blocks * 0.8), swa_keep=8192 + 128 + 1)
    assert whole.layout is None and 1.17 < kv.blocks / whole.blocks < 1.18
    assert kv.sent_bytes(20_000) == 20_000 * 12 * layer + 8192 * 36 * layer
    assert kv.sent_bytes(5_000) == 5_000 * kv.bytes_per_token  # within one window: all


def test_a_pipeline_s_virtual_engines_each_need_a_window_in_the_sliding_pool() -> None:
    """SGLang at PP 2 runs two virtual engines, each with half of each pool: Scout's 8,321
    tokens a sequence keeps in the sliding pool must fit in a half (serve's run splits the
    pools after kv_cache sized them; it had checked the whole pool, then refused every
    request as longer than the cache)."""
    import pytest
    from tpsim.core.errors import ConfigError

    plan = resolve("llama-4-scout", "dgx-h100", Layout(2, pp=2), Workload(1, "decode", 1, 1),
                   Options(engine="sglang"), oom_flag=False)  # fmt: skip
    spec = scheduler("sglang", plan.gpu.hbm_bytes)
    kv = kv_cache(plan, spec, 2)  # at the default share, a half holds several windows
    assert kv.layout is not None and kv.layout.swa_pool // 2 >= 4 * kv.layout.keep_blocks
    low = replace(spec, gpu_memory_utilization=0.7036)
    pools = kv_cache(plan, replace(low, gpu_memory_utilization=0.72), 2).layout
    assert pools is not None and pools.keep_blocks <= pools.swa_pool // 2  # just fits
    with pytest.raises(ConfigError, match="each of the 2 virtual engines' share"):
        kv_cache(plan, low, 2)  # the whole pool holds a window, a half does not


def test_a_model_without_sliding_layers_is_unchanged() -> None:
    """Llama-3.1-8B under SGLang: one pool of every layer, as before."""
    plan, spec = _sglang("llama-3.1-8b")
    kv = kv_cache(plan, spec)
    assert kv.layout is None and kv == kv_cache(plan, spec, hybrid=False)


def test_a_sequence_holds_its_window_in_the_sliding_pool() -> None:
    """A 1024-token prompt and one output token: 1025 tokens of the full pool (then freed),
    257 of the sliding one; a 100-token sequence holds 101 of each."""
    spec = replace(scheduler("sglang", 80 * 2**30), async_scheduling=False)
    layout = BlockLayout(1, swa_pool=5000, swa_keep=257)
    assert [layout.swa_held(t) for t in (1, 257, 258, 1025)] == [1, 257, 257, 257]
    e = EngineInstance(spec, 10000, lambda step: 0.01, lambda i: (1024, 3, -1, 0),
                       layout=layout)  # fmt: skip
    e.admit(0, 0.0)
    e.finish(e.step(0.0) or 0.0)
    assert (e.total_blocks - e.free, e.kv.swa_free) == (1024, 5000 - 257)
    e.finish(0.02 + (e.step(0.01) or 0.0))
    assert (e.total_blocks - e.free, e.kv.swa_free) == (1025, 5000 - 257)
    e.finish(0.04 + (e.step(0.03) or 0.0))
    assert (e.total_blocks - e.free, e.kv.swa_free) == (0, 5000)  # done: both given back


def test_either_pool_running_out_holds_requests_back() -> None:
    """300-token prompts, 10 output tokens, admitted on demand with their prompt's blocks:
    the full pool of 10000 takes 10000 // 300 = 33 of them, but a sliding pool of 600 only
    two (257 each), so two run at once; with a sliding pool of 10000, the full pool's 33."""
    spec = replace(scheduler("sglang", 80 * 2**30), async_scheduling=False)
    for swa, most in ((600, 2), (10000, 33)):
        e = EngineInstance(spec, 10000, lambda step: 0.01, lambda i: (300, 10, -1, 0),
                           layout=BlockLayout(1, swa_pool=swa, swa_keep=257))  # fmt: skip
        assert _run(e, 40) == most
        assert (e.free, e.kv.swa_free) == (10000, swa)


def test_sglang_runs_more_gpt_oss_sequences_than_every_layer_at_length() -> None:
    """8192-token prompts and 256 output tokens on gpt-oss-120b at TP 1 (KV-bound): the
    full pool of 1.11x the tokens holds 9 such sequences of 8448 tokens, the sliding pool
    hundreds; every layer at length held 8. Twenty requests at once run 9 at a time, not
    8, and the planner's batch limit follows."""
    plan, spec = _sglang("gpt-oss-120b")
    spec = replace(spec, async_scheduling=False)
    ran = []
    for kv in (kv_cache(plan, spec), kv_cache(plan, spec, hybrid=False)):
        e = EngineInstance(spec, kv.blocks, lambda step: 0.01, lambda i: (8192, 256, -1, 0),
                           layout=kv.layout)  # fmt: skip
        ran.append(_run(e, 20))
    assert ran == [9, 8]
    req = PlanRequest("gpt-oss-120b", "dgx-h100", context_len=8448, engine="sglang")
    assert engine_sequences(req, 1, 1) == 9


def _disagg(engine: str, prompt: int = 2000) -> ServeResult:
    """gpt-oss-120b, one TP-1 prefill worker and one TP-1 decode worker on an H100 host,
    two requests of ``prompt`` tokens and 4 output tokens at once."""
    setup = ServeSetup("gpt-oss-120b", "dgx-h100", 1, disagg=Disagg(1, 1, 1, 1),
                       options=Options(engine=engine))  # fmt: skip
    reqs = synthetic(0, parse_lengths("p", str(prompt)), parse_lengths("o", "4"), count=2,
                     arrival_s=(0.0, 0.0))  # fmt: skip
    return serve(setup, requests=reqs)


def test_disaggregated_sglang_keeps_both_pools_and_sends_the_window() -> None:
    """SGLang's prefill and decode servers keep their SWAKVPool under PD disaggregation:
    each worker's cache is the two pools of the aggregated instance (81,238 full-pool
    tokens and a sliding pool of 0.8 of them at TP 1 on an H100, where one pool of every
    layer held 73,114), and a 2000-token prompt's transfer carries its 18 full layers'
    2048 B of every token and its 18 sliding layers' of the last 127 only
    (send_kv_chunk's _swa_payload: sliding_window_size = 128 - 1): 78.4 MB, not every
    layer's 147.5 MB."""
    r = _disagg("sglang")
    plan, spec = _sglang("gpt-oss-120b")
    pools, whole = kv_cache(plan, spec), kv_cache(plan, spec, hybrid=False)
    assert r.prefill_kv is not None and r.kv.layout is not None
    assert r.kv.blocks == r.prefill_kv.blocks == pools.blocks == pools.bytes_per_gpu * 5 // 331776
    assert r.kv.layout == r.prefill_kv.layout == BlockLayout(1, swa_pool=pools.blocks * 4 // 5,
                                                             swa_keep=256)  # fmt: skip
    assert (whole.tokens, r.kv.tokens) == (73114, 81238)  # one pool, as the workers had it
    assert r.transfer_bytes == (2000 * 18 * 2048 + 127 * 18 * 2048,) * 2
    assert r.transfer_bytes[0] < 2000 * r.kv.bytes_per_token == 2000 * 36 * 2048
    assert r.summary()["completed"] == 2
    shown = text(r.summary(), r, "")
    assert f"KV cache per decode worker (tokens):     {r.kv.tokens} " in shown
    assert f"Sliding-window pool (tokens):            {r.kv.layout.swa_pool}" in shown


def test_disaggregated_vllm_still_turns_its_hybrid_manager_off() -> None:
    """vLLM turns its hybrid KV cache manager off with a KV transfer connector: both
    workers hold every layer at length, and the transfer is every layer's."""
    r = _disagg("vllm")
    assert r.prefill_kv is not None
    plan = resolve("gpt-oss-120b", "dgx-h100", Layout(1), Workload(1, "decode", 1, 1),
                   Options(engine="vllm"), oom_flag=False)  # fmt: skip
    whole = kv_cache(plan, r.spec, hybrid=False)
    assert r.kv == r.prefill_kv == whole and whole.layout is None
    assert kv_cache(plan, r.spec).layout is not None  # the manager, aggregated
    assert r.transfer_bytes == (2000 * 36 * 2048,) * 2 == (2000 * whole.bytes_per_token,) * 2


def test_a_short_prompt_sends_every_sliding_token_and_pages_round_the_window() -> None:
    """A prompt within the window sends all of its tokens at every layer; with pages of
    64, the sliding layers' send starts at the page holding the window's first token
    (2000 - 127 = 1873 -> 1856: 144 tokens)."""
    kv = KVCache(10, 1, 36.0, 0, None, 18.0, 127)
    assert kv.sent_bytes(100) == 100 * 36.0
    assert kv.sent_bytes(2000) == 2000 * 18.0 + 127 * 18.0
    paged = replace(kv, block_size=64)
    assert paged.sent_bytes(2000) == 2000 * 18.0 + 144 * 18.0
    assert replace(kv, sliding_bytes_per_token=0.0).sent_bytes(2000) == 2000 * 36.0


def test_a_prefill_worker_holds_the_sliding_pool_until_the_transfer_ends() -> None:
    """A prefill worker with SGLang's pools keeps a handed-on request's sliding-pool
    tokens (its window and the eviction interval: 257 of a 1000-token prompt) with its
    full-pool ones until its KV cache reaches the decode worker."""
    spec = replace(scheduler("sglang", 80 * 2**30), async_scheduling=False)
    layout = BlockLayout(1, swa_pool=5000, swa_keep=257)
    p = PrefillInstance(spec, 10000, lambda step: 0.01, lambda i: (1000, 8, -1, 0), layout)
    p.admit(0, 0.0)
    p.finish(p.step(0.0) or 0.0)
    assert [r.id for r in p.finished] == [0]
    assert (p.free, p.kv.swa_free) == (10000 - 1000, 5000 - 257)
    p.sent(0)
    assert (p.free, p.kv.swa_free) == (10000, 5000)
