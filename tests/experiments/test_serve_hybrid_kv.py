"""A sliding-window model's KV cache as vLLM V1's hybrid KV cache manager holds it: the
layers grouped by kind, a block of the pool holding one group's layers, and a sequence
keeping only the window's blocks in a sliding group (``sliding_window_kv: hybrid``); engines
without it hold every layer at the sequence's length."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from tpsim.calibration.scheduler import scheduler
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.plan import resolve
from tpsim.experiments.plan import PlanRequest, engine_sequences
from tpsim.experiments.serve.engine import EngineInstance
from tpsim.experiments.serve.kvblocks import BlockLayout, hybrid_layout
from tpsim.experiments.serve.run import kv_cache
from tpsim.models.catalog import get_model


def test_the_groups_are_vllm_s() -> None:
    """gpt-oss-120b: 18 full and 18 sliding layers (window 128) make two groups of 18, a
    block holding 18 layers; Mistral-7B (every layer sliding, window 4096) one group of 32;
    a model of full layers one group of all of them. At PP 2 a stage's block holds 9."""
    oss = get_model("gpt-oss-120b")
    assert hybrid_layout(oss, range(36), 16) == (BlockLayout(16, 1, 1, 128), 18)
    assert hybrid_layout(oss, range(18), 16) == (BlockLayout(16, 1, 1, 128), 9)
    assert hybrid_layout(get_model("mistral-7b"), range(32), 16) == (
        BlockLayout(16, 0, 1, 4096),
        32,
    )
    assert hybrid_layout(get_model("llama-3.1-8b"), range(32), 16) == (BlockLayout(16), 32)


def test_a_sliding_group_keeps_the_window_s_blocks() -> None:
    """A window of 128 tokens in blocks of 16: at most ceil(127 / 16) + 1 = 9 blocks; a
    1024-token sequence of gpt-oss holds 64 full blocks and 9 sliding ones, 73 in all."""
    layout = BlockLayout(16, 1, 1, 128)
    assert layout.window_blocks == 9
    assert [layout.blocks_for(t) for t in (1, 16, 17, 128, 144, 1024)] == [2, 2, 4, 16, 18, 73]
    assert layout.blocks_of(np.array([1, 1024])).tolist() == [2, 73]
    assert BlockLayout(16).blocks_for(1024) == 64


def test_an_engine_instance_holds_the_window_only() -> None:
    """A 1024-token prompt and its decodes on a hybrid layout: its prefill step holds all
    128 blocks (each new token's K and V is written before attention, and vLLM's
    SlidingWindowManager frees the blocks before the window only before the next
    allocation); from the next step on, 73 (64 a full group's, 9 the sliding group's), not
    128 (both groups at full length). tpsim had held the window only from the prefill on."""
    spec = replace(scheduler("vllm", 80 * 2**30), async_scheduling=False)
    e = EngineInstance(spec, 1000, lambda step: 0.01, lambda i: (1024, 3, -1, 0),
                       layout=BlockLayout(16, 1, 1, 128))  # fmt: skip
    e.admit(0, 0.0)
    e.finish(e.step(0.0) or 0.0)
    assert e.total_blocks - e.free == 128
    e.finish(e.step(0.01) or 0.0)
    assert e.total_blocks - e.free == 65 + 9  # 1025 tokens: a full group's 65 blocks


def test_gpt_oss_holds_as_many_sequences_as_vllm() -> None:
    """gpt-oss-120b at TP 1 on an H100 under vLLM: the pool's blocks hold 18 layers each
    (two groups of 18), so it has twice the blocks of a pool whose blocks hold all 36, and a
    1024-token sequence takes 73 of them: 1.75x the sequences of every layer at full length
    (the planner's batch limit)."""
    plan = resolve("gpt-oss-120b", "dgx-h100", Layout(1), Workload(1, "decode", 1, 1),
                   Options(), oom_flag=False)  # fmt: skip
    spec = scheduler("vllm", plan.gpu.hbm_bytes)
    hybrid, full = kv_cache(plan, spec), kv_cache(plan, spec, hybrid=False)
    assert hybrid.layout == BlockLayout(16, 1, 1, 128)
    assert hybrid.blocks // 2 == full.blocks  # 18 layers a block against 36
    assert hybrid.tokens == full.tokens  # vLLM reports a group's share of the blocks
    seqs = engine_sequences(PlanRequest("gpt-oss-120b", "dgx-h100", context_len=1024), 1, 1)
    assert seqs == hybrid.blocks // 73
    assert seqs > 1.7 * (full.blocks // 64)


def test_engines_without_the_hybrid_manager_hold_every_layer() -> None:
    """TensorRT-LLM's profile (gpt-oss runs without per-layer attention windows, one pool)
    keeps every layer at length."""
    plan = resolve("gpt-oss-120b", "dgx-h100", Layout(1), Workload(1, "decode", 1, 1),
                   Options(engine="trtllm"), oom_flag=False)  # fmt: skip
    kv = kv_cache(plan, scheduler("trtllm", plan.gpu.hbm_bytes))
    assert kv.layout is None and kv.blocks_layout == BlockLayout(32)


def test_llama4_chunked_groups() -> None:
    """Llama 4 Scout: 12 full and 36 chunked layers (8192-token chunks) make groups of 12,
    one full and three chunked (vLLM's ChunkedLocalAttentionSpec is a kind of its own); a
    chunked group keeps at most a chunk's 512 blocks of 16, so a 100K-token sequence holds
    6250 + 3 x 512 = 7786 blocks of 12 layers, where every layer at length takes 4 x 6250."""
    scout = get_model("llama-4-scout")
    layout, per_block = hybrid_layout(scout, range(48), 16)
    assert (layout, per_block) == (BlockLayout(16, 1, 0, 0, chunked=3, chunk=8192), 12)
    assert layout.chunk_blocks == 512 and BlockLayout(16, chunked=1, chunk=100).chunk_blocks == 8
    assert [layout.blocks_for(t) for t in (16, 8192, 8193, 100_000)] == [4, 2048, 2049, 7786]
    assert layout.blocks_of(np.array([16, 100_000])).tolist() == [4, 7786]
    # a stage of 24 layers (PP 2): 6 full and 18 chunked, a block holding 6 of them
    assert hybrid_layout(scout, range(24), 16)[1] == 6


def test_llama4_chunked_groups_free_past_chunks() -> None:
    """vLLM frees a chunked group's blocks before the computed tokens' chunk
    (remove_skipped_blocks, before each allocation) and allocates every new token of a step:
    with 9,999 tokens computed and one more, Scout holds 625 full blocks and 3 x (625 - 512)
    chunked ones, 964 (not 625 + 3 x 512); a step of 8,192 new tokens after 4,096 holds all
    768 blocks in each group, 3,072."""
    layout = hybrid_layout(get_model("llama-4-scout"), range(48), 16)[0]
    assert layout.blocks_for(10_000, 9_999) == 625 + 3 * 113
    assert layout.blocks_for(12_288, 4_096) == 4 * 768
    assert layout.blocks_for(8_192, 8_191) == 4 * 512 and layout.blocks_for(8_193, 8_192) == 513 + 3
    got = layout.blocks_of(np.array([10_000, 12_288]), np.array([9_999, 4_096])).tolist()
    assert got == [964, 3072]


def test_an_engine_instance_frees_past_chunks() -> None:
    """A 10,000-token Scout prompt in steps of 8,192 tokens: 2,048 blocks after the first
    (512 in each of four groups); the second step frees the chunked groups' first chunk
    before taking blocks for its 1,808 tokens, 964 held; the first decode 968."""
    spec = replace(scheduler("vllm", 80 * 2**30), async_scheduling=False)
    layout = BlockLayout(16, 1, 0, 0, chunked=3, chunk=8192)
    e = EngineInstance(spec, 100_000, lambda step: 0.01, lambda i: (10_000, 3, -1, 0),
                       layout=layout)  # fmt: skip
    e.admit(0, 0.0)
    held = []
    for _ in range(3):
        e.finish(e.step(0.0) or 0.0)
        held.append(e.total_blocks - e.free)
    assert held == [2048, 964, 968]


def test_llama4_cache_per_engine() -> None:
    """Maverick at TP 8 in fp8: vLLM's hybrid manager gives the chunked groups blocks of a
    quarter of the model's layers (four times the blocks of one pool); SGLang holds the
    chunked layers in its sliding-window pool (test_serve_swa_pool.py); TensorRT-LLM, which
    tpsim holds at full length on chunked layers, one pool."""
    caches = {}
    for engine in ("vllm", "sglang", "trtllm"):
        opts = Options(engine=engine, dtype="fp8")
        plan = resolve(
            "llama-4-maverick", "dgx-h100", Layout(8, ep=8), Workload(1, "decode", 1, 1), opts
        )
        caches[engine] = kv_cache(plan, scheduler(engine, plan.gpu.hbm_bytes))
    vllm = caches["vllm"]
    assert vllm.layout is not None and vllm.layout.chunked == 3
    block = vllm.bytes_per_token * 12 / 48 * 16
    assert abs(vllm.blocks - vllm.bytes_per_gpu // block) <= 1
    trt = caches["trtllm"]
    assert trt.layout is None or trt.layout.chunked == 0
    sglang = caches["sglang"].layout
    assert sglang is not None and sglang.chunked == 0 and sglang.swa_pool > 0
