"""A model with linear-attention layers (Qwen3-Next's Gated DeltaNet) served as vLLM V1
holds it: the linear layers in groups of their own (MambaSpec), each request one state block
in each whatever its length, the attention block size raised so that an attention page holds
a state page (HybridAttentionMambaModelConfig), prefix caching off; other engines refused;
a mixed step's linear layers priced per part."""

from __future__ import annotations

import numpy as np
import pytest
from tpsim.calibration.scheduler import scheduler
from tpsim.cli import main
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.errors import ConfigError
from tpsim.core.lowering.mixed import MixedStep
from tpsim.core.plan import resolve
from tpsim.core.step_timer import IterationTimer
from tpsim.experiments.serve.kvblocks import BlockLayout, hybrid_layout
from tpsim.experiments.serve.kvcache import kv_cache, state_block_size
from tpsim.models.catalog import get_model

MODEL, TOPO = "qwen3-next-80b-a3b", "dgx-h100"


def _plan(tp: int = 4, engine: str = "vllm"):  # type: ignore[no-untyped-def]
    return resolve(MODEL, TOPO, Layout(tp), Workload(1, "decode", 1, 1), Options(engine=engine),
                   oom_flag=False)  # fmt: skip


def test_block_size_as_vllm_picks_it() -> None:
    """TP 4 on an H100, bf16: one layer's state page is the conv state, 8192 / 4 channels x 3
    inputs, and the recurrent state, 32 / 4 value heads x 128 x 128, 137,216 elements or
    274,432 bytes; an attention token of one layer is K and V of one KV head (2 over 4
    ranks, at least one) of 256, 1,024 bytes; 16 x ceil(274,432 / (16 x 1,024)) = 272."""
    plan = _plan()
    assert get_model(MODEL).linear_state_elements(4) == 2048 * 3 + 8 * 128 * 128
    assert state_block_size(plan, scheduler("vllm", plan.gpu.hbm_bytes)) == 272
    # TP 8: half the state a rank, 137,216 bytes, the same attention token (one KV head):
    # 16 x ceil(8.4) = 144
    plan8 = _plan(8)
    assert state_block_size(plan8, scheduler("vllm", plan8.gpu.hbm_bytes)) == 144


def test_the_groups_and_a_request_s_blocks() -> None:
    """12 full and 36 linear layers: groups of 12, one full and three linear, a block
    holding 12 layers (6 at PP 2); a request holds its tokens' full blocks and one state
    block in each linear group, whatever its length or what it has computed."""
    model = get_model(MODEL)
    assert hybrid_layout(model, range(48), 272) == (BlockLayout(272, linear=3), 12)
    assert hybrid_layout(model, range(24), 272) == (BlockLayout(272, linear=3), 6)
    layout = BlockLayout(272, linear=3)
    assert layout.groups == 4
    tokens = [1, 272, 273, 8192, 100_000]
    assert [layout.blocks_for(t) for t in tokens] == [1 + 3, 1 + 3, 2 + 3, 31 + 3, 368 + 3]
    assert [layout.blocks_for(t, t - 1) for t in tokens] == [layout.blocks_for(t) for t in tokens]
    got = layout.blocks_of(np.array(tokens), np.array([0] * len(tokens)))
    assert got.tolist() == [layout.blocks_for(t) for t in tokens]


def test_the_pool_s_blocks_and_tokens() -> None:
    """The pool's blocks are pages of 272 tokens x 12 layers x 1,024 bytes; its tokens, a
    group's share of them (vLLM's report)."""
    plan = _plan()
    spec = scheduler("vllm", plan.gpu.hbm_bytes)
    kv = kv_cache(plan, spec)
    assert kv.block_size == 272 and kv.layout == BlockLayout(272, linear=3)
    assert kv.blocks == int(kv.bytes_per_gpu // (272 * 12 * 1024))
    assert kv.tokens == kv.blocks // 4 * 272
    # a sequence of any length holds 3 state blocks beside its KV blocks
    assert kv.sequences(272) == kv.blocks // 4


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_other_engines_refused(engine: str) -> None:
    plan = _plan(engine=engine)
    with pytest.raises(ConfigError, match=rf"^engine={engine}: serving {MODEL}.*vLLM V1"):
        kv_cache(plan, scheduler(engine, plan.gpu.hbm_bytes))
    # without a KV connector vLLM's hybrid manager is on; with one it is off: refused
    vplan = _plan()
    with pytest.raises(ConfigError, match=r"disaggregated serving .*KV connector"):
        kv_cache(vplan, scheduler("vllm", vplan.gpu.hbm_bytes), hybrid=False)


def test_a_mixed_step_prices_its_decodes_as_decodes() -> None:
    """64 decodes beside a 512-token chunk: the linear layers run the recurrent rule on the
    decodes and the chunked one on the chunk (not 65 prompts of 512), so the mixed step, its
    weights read once, takes less than the chunk's step and the decodes' step apart (24.5
    against 21.1 + 14.9 ms; 40.9 when the decodes were priced as prompts)."""
    it = IterationTimer(MODEL, TOPO, 4, Options(), exact=True)
    chunk = it.seconds(MixedStep.of((), ((512, 0),)))
    decodes = it.seconds(MixedStep.of((1000,) * 64, ()))
    mixed = it.seconds(MixedStep.of((1000,) * 64, ((512, 0),)))
    assert chunk < mixed < chunk + decodes


def test_cli_serve_runs_and_other_engines_refuse(capsys: pytest.CaptureFixture) -> None:
    args = ["serve", "--model", MODEL, "--topology", TOPO, "--tp", "4", "--requests", "4",
            "--concurrency", "2", "--prompt-len", "300", "--output-len", "8"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "blocks of 272)" in out and "Successful requests:                     4" in out
    assert main([*args, "--engine", "sglang"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tpsim: error: engine=sglang: serving")
    rate = ["plan", "--model", MODEL, "--topology", TOPO, "--rate", "2", "--requests", "20",
            "--engine", "trtllm"]  # fmt: skip
    assert main(rate) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "engine=trtllm" in err[0] and "fits" not in err[0]


def test_the_iteration_cache_prices_no_softmax_attention_on_linear_layers() -> None:
    """serve's iteration cache adds attention to the lowered step per layer kind; it had
    priced Qwen3-Next's 36 Gated DeltaNet layers as full attention over each context on top
    of their recurrence (32 decodes at 30K, TP 4, H100: 28.96 ms against the exact 15.10).
    Now within 3 % of the exact iteration, long contexts and mixed steps alike."""
    from tpsim.core.config import Options
    from tpsim.core.lowering.mixed import MixedStep
    from tpsim.core.step_timer import IterationTimer

    cached = IterationTimer("qwen3-next-80b-a3b", "dgx-h100", 4, Options())
    exact = IterationTimer("qwen3-next-80b-a3b", "dgx-h100", 4, Options(), exact=True)
    for step in (MixedStep.of((30_000,) * 32, ()), MixedStep.of((100_000,) * 16, ((512, 0),))):
        assert cached.seconds(step) == pytest.approx(exact.seconds(step), rel=0.03)
