"""The MoE layer as the serving engines run it: DeepEP's low-latency buffer holds a fixed
number of tokens a rank (vLLM chunks above it, SGLang fails), and the routed experts are
built at the width and hidden size the engine pads them to (gpt-oss's MXFP4 kernels, vLLM's
DeepEP hidden size): tpsim.core.lowering.moe_block, tpsim.core.expert_shapes."""

from __future__ import annotations

import pytest
from tpsim.cli import main
from tpsim.core.api import simulate
from tpsim.core.config import ConfigError, Layout, Options, Workload
from tpsim.core.lowering.shard import Shard
from tpsim.core.plan import resolve

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


def _split(model: str, topology: str, engine: str, layout: Layout | None = None,
           **kw: object) -> Shard:  # fmt: skip
    """The plan's shard of ``model`` (TP 8 unless ``layout``) for a decode step of 8 (or
    ``phase=``), ``kw`` the options."""
    wl = Workload(8, str(kw.pop("phase", "decode")), context_len=512, prompt_len=64)
    options = Options(engine=engine, **kw)  # type: ignore[arg-type]
    return resolve(model, topology, layout or Layout(8), wl, options).split


@pytest.mark.parametrize(
    ("engine", "topology", "width", "hidden"),
    [
        ("ideal", "dgx-h100", 360, 2880),  # as stored: 2880 / 8
        ("vllm", "dgx-h100", 384, 2880),  # Triton: the width to 64
        ("vllm", "dgx-b200", 512, 3072),  # TRT-LLM-gen: 256 and 256
        ("vllm", "dgx-a100", 384, 3072),  # Marlin: 128 and 256
        ("sglang", "dgx-h100", 384, 2880),  # triton_kernels: the width to 32
        ("sglang", "dgx-b200", 512, 3072),  # FlashInfer MXFP4: 256 and 256
    ],
)
def test_gpt_oss_experts_as_the_engine_pads_them(
    engine: str, topology: str, width: int, hidden: int
) -> None:
    split = _split("gpt-oss-120b", topology, engine)
    assert (split.expert_width, split.expert_hidden) == (width, hidden)


def test_padded_experts_weigh_and_compute_at_their_padded_shapes() -> None:
    """gpt-oss-120b, TP 8 on H100s under vLLM: 128 experts a GPU of 384 columns (not 360),
    MXFP4 (half a byte and a byte of scale per 32), in 36 layers; the GEMMs take 2 x 384."""
    wl = Workload(64, "decode", context_len=512)
    plans = {e: resolve("gpt-oss-120b", "dgx-h100", 8, wl, Options(engine=e)) for e in
             ("ideal", "vllm")}  # fmt: skip
    grown = (plans["vllm"].memory[0].weights_bytes_per_gpu
             - plans["ideal"].memory[0].weights_bytes_per_gpu)  # fmt: skip
    assert grown == pytest.approx(36 * 128 * 3 * 2880 * (384 - 360) * (0.5 + 1 / 32), abs=2)
    r = simulate("gpt-oss-120b", "dgx-h100", 8, wl, Options(engine="vllm"))
    up = next(x for x in r.records if x.name == "experts_up" and x.layer == 0)
    assert up.detail.endswith("experts [2880, 768]")


def test_vllm_builds_the_experts_at_deepep_s_hidden_size() -> None:
    """vLLM pads gpt-oss's 2880 to 3072 for DeepEP, and FusedMoE's experts with it (bf16
    experts: no MXFP4 rounding): 16 experts a GPU of [3072, 2 x 2880] and [2880, 3072]; the
    router and the rest stay at 2880."""
    layout = Layout(1, attention_dp=8, ep=8)
    for phase in ("decode", "prefill"):  # low-latency: 3072 listed; normal: 512 bytes
        deepep = _split("gpt-oss-120b", "dgx-h100", "vllm", layout, dtype="bf16",
                        moe_a2a="deepep", phase=phase)  # fmt: skip
        assert (deepep.expert_width, deepep.expert_hidden) == (2880, 3072)
    assert _split("gpt-oss-120b", "dgx-h100", "vllm", layout, dtype="bf16").expert_hidden == 2880
    wl = Workload(8, "decode", context_len=512)
    plans = {a: resolve("gpt-oss-120b", "dgx-h100", layout, wl,
                        Options(engine="vllm", dtype="bf16", moe_a2a=a)) for a in
             ("nccl", "deepep")}  # fmt: skip
    grown = (plans["deepep"].memory[0].weights_bytes_per_gpu
             - plans["nccl"].memory[0].weights_bytes_per_gpu)  # fmt: skip
    assert grown == 36 * 16 * 3 * (3072 - 2880) * 2880 * 2
    r = simulate("gpt-oss-120b", "dgx-h100", layout, wl,
                 Options(engine="vllm", dtype="bf16", moe_a2a="deepep"))  # fmt: skip
    up = next(x for x in r.records if x.name == "experts_up" and x.layer == 0)
    assert up.detail.split(" x ", 1)[0].endswith(", 3072]") and "[3072, 5760]" in up.detail
    router = next(x for x in r.records if x.name == "router" and x.layer == 0)
    assert "2880" in router.detail


def test_vllm_under_deepep_low_latency_pads_mxfp4_experts_for_batched_marlin() -> None:
    """DeepEP's low-latency kernels hand vLLM's experts batched tokens, which only Marlin's
    batched MXFP4 experts take: the width to 128 (2880 -> 2944) and the hidden size to 256,
    after DeepEP's 3072; prefill's normal kernels keep Triton's 64 on Hopper."""
    layout = Layout(1, attention_dp=8, ep=8)
    ll = _split("gpt-oss-120b", "dgx-h100", "vllm", layout, moe_a2a="deepep")
    ht = _split("gpt-oss-120b", "dgx-h100", "vllm", layout, moe_a2a="deepep", phase="prefill")
    assert (ll.expert_width, ll.expert_hidden) == (2944, 3072)
    assert (ht.expert_width, ht.expert_hidden) == (2880, 3072)


@pytest.mark.parametrize("layout", [Layout(8, ep=4), Layout(1, attention_dp=8, ep=4)])
def test_vllm_splits_the_experts_one_way(layout: Layout) -> None:
    """vLLM's expert parallelism is the whole MoE group or none (FusedMoEParallelConfig:
    ep_size = tp_size x dp_size, tp_size 1): EP 4 x MoE-TP 2 of 8 GPUs is refused, naming
    the two splits it has; SGLang (moe_tp_size = tp_size / ep_size) runs it."""
    wl = Workload(1, "decode", 1, 1)
    with pytest.raises(ConfigError, match=r"^ep=4: engine vllm splits the experts one way.*"
                       r"ep=8 \(whole experts.*not ep=4 with moe_tp 2$"):  # fmt: skip
        resolve("qwen3-30b-a3b", "dgx-h100", layout, wl, Options())
    plan = resolve("qwen3-30b-a3b", "dgx-h100", layout, wl, Options(engine="sglang"))
    assert (plan.experts.ep, plan.experts.moe_tp) == (4, 2)
