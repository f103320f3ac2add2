"""The MoE layer as the serving engines run it: DeepEP's low-latency buffer holds a fixed
number of tokens a rank (vLLM chunks above it, SGLang fails), and the routed experts are
built at the width and hidden size the engine pads them to (gpt-oss's MXFP4 kernels, vLLM's
DeepEP hidden size): tpsim.core.lowering.moe_block, tpsim.core.expert_shapes."""

from __future__ import annotations

import pytest
from tpsim.cli import main
from tpsim.core.api import simulate
from tpsim.core.config import ConfigError, Layout, Options, Workload

ADP8 = Layout(1, attention_dp=8, ep=8)  # 8 GPUs of TP 1 sharing the experts, EP 8


def _calls(model: str, wl: Workload, engine: str, site: str) -> list[str]:
    """Rank 0's ``site`` collectives of layer 0 (their step records), in order."""
    r = simulate(model, "dgx-h100", ADP8, wl, Options(moe_a2a="deepep", engine=engine))
    return [x.detail for x in r.records
            if x.site == site and x.layer == 0 and x.rank == 0 and "step" in x.detail]  # fmt: skip


def test_vllm_runs_a_decode_step_above_its_buffer_in_chunks() -> None:
    """vLLM's buffer holds 256 tokens a rank (VLLM_MOE_DP_CHUNK_SIZE): 300 tokens a rank go
    as a chunk of 256 and one of 44, each its own dispatch and combine (qwen3-30b-a3b: top
    8, hidden 2048, fp8 dispatch of 2048 + 4 x 16 scales + 16 bytes a pair, bf16 combine);
    256 go at once, and prefill's normal kernels are not chunked."""
    wl = Workload(300, "decode", context_len=512)
    out = 2048 + 4 * 16 + 16
    dispatch = _calls("qwen3-30b-a3b", wl, "vllm", "moe_dispatch")
    assert [d.split(" B ")[0] for d in dispatch] == [
        f"all_to_all {256 * 8 * out}",
        f"all_to_all {44 * 8 * out}",
    ]
    combine = _calls("qwen3-30b-a3b", wl, "vllm", "moe_combine")
    assert [d.split(" B ")[0] for d in combine] == [
        f"all_to_all {256 * 8 * 2 * 2048}",
        f"all_to_all {44 * 8 * 2 * 2048}",
    ]
    assert len(_calls("qwen3-30b-a3b", Workload(256, "decode", context_len=512), "vllm",
                      "moe_dispatch")) == 1  # fmt: skip
    prefill = Workload(1, "prefill", prompt_len=300)
    assert len(_calls("qwen3-30b-a3b", prefill, "vllm", "moe_dispatch")) == 1


@pytest.mark.parametrize("engine", ["sglang", "ideal"])
def test_an_engine_that_does_not_chunk_is_refused_above_its_buffer(engine: str) -> None:
    """SGLang hands a layer's tokens to DeepEP at once and its buffer holds 128 a rank
    (SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK): 129 fail DeepEP's assertion."""
    assert _calls("qwen3-30b-a3b", Workload(128, "decode", context_len=512), engine,
                  "moe_dispatch")  # fmt: skip
    refusal = r"129 tokens a rank .*holds 128 \(profile key deepep_ll_tokens\)"
    with pytest.raises(ConfigError, match=refusal):
        _calls("qwen3-30b-a3b", Workload(129, "decode", context_len=512), engine, "moe_dispatch")


def test_the_refusal_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--model", "qwen3-30b-a3b", "--topology", "dgx-h100", "--tp", "2",
            "--attention-dp", "4", "--ep", "8", "--moe-a2a", "deepep", "--engine", "sglang",
            "--batch", "300", "--context-len", "512"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "150 tokens a rank" in err and "batch 256" in err
