"""Multi-head latent attention, sliding-window attention and 4-bit weights in the lowering,
the memory model and the precision (closed forms under the ideal calibration), and whole
runs of DeepSeek-V3 and gpt-oss."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim import simulate
from tpsim.core.config import Options, Workload
from tpsim.core.errors import ConfigError
from tpsim.core.kernels.attention import causal_pairs
from tpsim.core.kernels.costs import hardware_for
from tpsim.core.kernels.kernel_table import load
from tpsim.core.kernels.pricing import Pricing
from tpsim.core.lowering.lower import lower
from tpsim.core.memory import memory_per_gpu
from tpsim.core.precision import run_precision
from tpsim.models import MODELS, ModelSpec
from tpsim.topologies.gpus import GPUS

DS, OSS = MODELS["deepseek-v3"], MODELS["gpt-oss-120b"]


def _ops(model: ModelSpec, tp: int, wl: Workload, opts: Options, gpu: str = "h200-sxm") -> list:
    g = GPUS[gpu]
    prec = run_precision(opts, model, g)
    hw = hardware_for(g, prec.math, opts.calibration.kernels, kv_dtype=prec.kv)
    return list(lower(model, tp, wl, opts, hw).per_rank[0].ops)


def _layer(ops: list, layer: int) -> dict:
    return {o.name: o for o in ops if o.layer == layer}


@pytest.mark.parametrize("tp", [1, 4, 8])
def test_mla_kv_cache_is_the_whole_latent_on_every_rank(tp: int) -> None:
    """(kv_lora_rank + qk_rope_head_dim) x bytes per token and layer, not divided by tp."""
    wl = Workload(batch=8, phase="decode", context_len=4096)
    opts = Options(dtype="fp8", kv_dtype="fp8", allow_oom=True)
    mem = memory_per_gpu(DS, tp, wl, opts, GPUS["h200-sxm"])
    assert mem.kv_cache_bytes_per_gpu == 8 * 4096 * (512 + 64) * 61 * 1  # fp8 cache
    bf16 = memory_per_gpu(DS, tp, wl, Options(dtype="bf16", allow_oom=True), GPUS["h200-sxm"])
    assert bf16.kv_cache_bytes_per_gpu == 2 * mem.kv_cache_bytes_per_gpu


def test_mla_weights_per_rank_replicate_the_latent_projections() -> None:
    """TP 8 in fp8: 1/8 of the model plus the replicated q_a, kv_a and router per layer."""
    wl = Workload(batch=1, phase="decode", context_len=128)
    mem = memory_per_gpu(DS, 8, wl, Options(dtype="fp8"), GPUS["h200-sxm"])
    replicated = 61 * 7168 * (1536 + 576) + 58 * 7168 * 256  # q_a | kv_a, routers
    embed = 2 * 129280 * 7168  # embedding and head stay 16-bit: 2 bytes over 8 ranks = 2/8
    approx = (DS.num_params() - replicated - embed) / 8 + replicated + embed * 2 / 8
    assert mem.weights_bytes_per_gpu == pytest.approx(approx, rel=0.002)


@pytest.mark.parametrize("tp", [1, 8])
def test_mla_decode_is_absorbed(tp: int) -> None:
    """Decode: q into the latent, one pass over the compressed cache for all the rank's
    heads (scores over R + r, values R), v back out; no kv_b expansion."""
    b, ctx, h = 4, 2048, 128 // tp
    wl = Workload(batch=b, phase="decode", context_len=ctx)
    ops = _layer(_ops(DS, tp, wl, Options(ideal=True, dtype="bf16")), 5)
    assert "kv_b_proj" not in ops and {"q_absorb", "v_up", "qkv_a_proj"} <= set(ops)
    attn = ops["attn"]
    assert attn.flops == 2 * b * h * (576 + 512) * ctx
    assert attn.bytes == b * ctx * 576 * 2 + b * h * (576 + 512) * 2  # cache + q in, o out
    # per head [T, nope] x [nope, R] and [T, R] x [R, v], 16-bit weights
    assert ops["q_absorb"].flops == 2 * b * h * 128 * 512
    assert ops["v_up"].flops == 2 * b * h * 512 * 128
    assert ops["q_absorb"].bytes == pytest.approx(h * 128 * 512 * 2 + b * h * (128 + 512) * 2)


def test_mla_prefill_expands_the_latent() -> None:
    """Prefill: kv_b up-projects every token's latent to k_nope and v; causal attention with
    q/k head width 192 and v 128; the latent (576 per token) written to the cache."""
    b, s, h = 2, 1024, 16
    wl = Workload(batch=b, phase="prefill", prompt_len=s)
    ops = _layer(_ops(DS, 8, wl, Options(ideal=True, dtype="bf16")), 3)
    assert "q_absorb" not in ops and "v_up" not in ops
    assert ops["kv_b_proj"].flops == 2 * b * s * 512 * h * (128 + 128)
    attn = ops["attn"]
    assert attn.flops == 2 * b * h * (192 + 128) * s * (s + 1) / 2
    qkvo = b * s * (h + h) * (192 + 128) * 2
    assert attn.bytes == qkvo + b * s * 576 * 2


def test_sliding_window_attention_is_bounded_by_the_window() -> None:
    """gpt-oss: the sliding layers (even) read 128 keys per query, the full ones every key."""
    b, ctx = 8, 4096
    wl = Workload(batch=b, phase="decode", context_len=ctx)
    ops = _ops(OSS, 1, wl, Options(ideal=True), "h100-sxm")
    sliding, full = _layer(ops, 0)["attn"], _layer(ops, 1)["attn"]
    q_o = b * 64 * 2 * 64 * 2
    assert sliding.bytes == b * 128 * 2 * 8 * 64 * 2 + q_o
    assert full.bytes == b * ctx * 2 * 8 * 64 * 2 + q_o
    assert sliding.flops == 4 * b * 64 * 64 * 128
    s = 2048
    pre = _ops(OSS, 1, Workload(batch=1, phase="prefill", prompt_len=s), Options(ideal=True),
               "h100-sxm")  # fmt: skip
    win, whole = _layer(pre, 0)["attn"], _layer(pre, 1)["attn"]
    assert win.flops == 4 * 64 * 64 * causal_pairs(s, 128)
    assert causal_pairs(s, 128) == 128 * 129 / 2 + (s - 128) * 128
    assert win.flops < whole.flops == 4 * 64 * 64 * s * (s + 1) / 2
    short = _ops(OSS, 1, Workload(batch=1, phase="prefill", prompt_len=100), Options(ideal=True),
                 "h100-sxm")  # fmt: skip
    assert _layer(short, 0)["attn"].flops == _layer(short, 1)["attn"].flops  # within the window


def test_sliding_layers_cache_only_the_window() -> None:
    wl = Workload(batch=4, phase="decode", context_len=8192)
    mem = memory_per_gpu(OSS, 1, wl, Options(allow_oom=True), GPUS["h100-sxm"])
    tokens = 18 * 8192 + 18 * 128  # full layers hold the context, sliding ones the window
    assert mem.kv_cache_bytes_per_gpu == 4 * tokens * 2 * 8 * 64 * 2


@pytest.mark.parametrize(
    ("gpu", "gemm_in", "math", "kv"),
    [
        ("b200", "fp4", "fp4", "fp8"),  # fp4 tensor cores (W4A4)
        ("h100-sxm", "fp8", "fp8", "fp8"),  # dequantised to fp8 (W4A8)
        ("a100-sxm-80gb", "bf16", "bf16", "bf16"),  # dequantised to 16 bits (W4A16)
    ],
)
def test_fp4_runs_on_fp4_tensor_cores_only_on_blackwell(
    gpu: str, gemm_in: str, math: str, kv: str
) -> None:
    """``kv``: TensorRT-LLM's cache (its ModelOpt NVFP4 checkpoints declare an fp8 one),
    fp8 where the GPU has fp8 tensor cores; vLLM's stays bf16 (``auto``)."""
    prec = run_precision(Options(dtype="fp4", engine="trtllm"), MODELS["llama-3.1-8b"], GPUS[gpu])
    assert (prec.weights, prec.gemm_in, prec.math, prec.kv) == ("fp4", gemm_in, math, kv)
    assert run_precision(Options(dtype="fp4"), MODELS["llama-3.1-8b"], GPUS[gpu]).kv == "bf16"
    word = {"fp4": "fp4 tensor cores", "fp8": "dequantised to fp8"}.get(math, "W4A16")
    assert word in prec.note(gpu)


def test_fp4_peak_and_weight_bytes() -> None:
    assert GPUS["b200"].fp4_flops == 9e15 and GPUS["h100-sxm"].fp4_flops is None
    assert hardware_for(GPUS["b200"], "fp4").peak_flops == 9e15
    wl = Workload(batch=1, phase="decode", context_len=128)
    ops = _layer(_ops(MODELS["llama-3.1-8b"], 1, wl, Options(ideal=True, dtype="fp4"), "b200"), 0)
    mlp = ops["mlp_down"]  # [1, 14336] x [14336, 4096]: NVFP4 weights, fp4 inputs
    weights = 14336 * 4096 * (0.5 + 1 / 16)
    assert mlp.bytes == round(14336 * (0.5 + 1 / 16) + weights + 4096 * 2)


def test_gpt_oss_experts_stay_mxfp4_as_stored() -> None:
    """No --dtype: the experts' weights are read in MXFP4 (0.53125 B), the rest in bf16."""
    prec = run_precision(Options(), OSS, GPUS["h100-sxm"])
    assert (prec.weights, prec.expert_weights, prec.math) == ("bf16", "mxfp4", "bf16")
    assert "routed experts mxfp4" in prec.note("h100-sxm")
    wl = Workload(batch=1, phase="decode", context_len=128)
    mem = memory_per_gpu(OSS, 1, wl, Options(), GPUS["h100-sxm"])
    assert mem.weights_bytes_per_gpu == pytest.approx(OSS.weight_bytes(), rel=1e-3)
    up = _layer(_ops(OSS, 1, wl, Options(ideal=True), "h100-sxm"), 0)["experts_up"]
    assert up.bytes == pytest.approx(4 * 2880 * 5760 * (0.5 + 1 / 32), rel=0.01)


def test_deepseek_v3_runs_on_8_h200_in_fp8() -> None:
    for wl in (Workload(batch=8, phase="decode"), Workload(batch=1, phase="prefill")):
        r = simulate("deepseek-v3", "hgx-h200", 8, wl, Options(dtype="fp8"))
        s = r.typed_summary
        assert s.memory.fits and s.latency_s > 0
        assert s.model_split.kv_heads_per_gpu == 1 and s.model_split.kv_replication == 8
        # vLLM keeps the cache bf16 under --dtype fp8 (kv_cache_dtype "auto")
        assert s.memory.kv_cache_bytes_per_gpu == wl.batch * wl.kv_len * 576 * 61 * 2
        assert "W8A8" in s.config.precision_note


def test_gpt_oss_120b_fits_one_h100_in_fp4() -> None:
    r = simulate("gpt-oss-120b", "dgx-h100", 1, Workload(batch=8), Options(dtype="fp4"))
    s = r.typed_summary
    assert s.memory.fits
    assert s.memory.weights_bytes_per_gpu / 1e9 == pytest.approx(67.4, rel=0.02)
    assert "W4A8" in s.config.precision_note
    with pytest.raises(ConfigError, match="does not fit"):
        simulate("gpt-oss-120b", "dgx-h100", 1, Workload(batch=8), Options(dtype="bf16"))


def test_a_gemm_table_measures_fp4_gemms(tmp_path: Path) -> None:
    """A ``gemm`` table's fp4 rows price the GEMMs whose weights are NVFP4, and only them."""
    f = tmp_path / "fp4.csv"
    f.write_text("gpu,op,dtype,m,n,k,time_us\nb200,mlp_down,fp4,1,4096,14336,9.0\n"
                 "b200,mlp_down,fp4,64,4096,14336,11.0\n")  # fmt: skip
    table = load(str(f))
    m, g = MODELS["llama-3.1-8b"], GPUS["b200"]
    for dtype, measured in (("fp4", True), ("fp8", False)):
        prec = run_precision(Options(dtype=dtype), m, g)
        price = Pricing.of(hardware_for(g, prec.math), prec, table)
        cost, detail = price.gemm("mlp_down", 1, 4096, 14336)
        assert cost.measured is measured and ("kernel table" in detail) is measured
        if measured:
            assert cost.seconds == pytest.approx(9e-6)


def test_an_fp8_checkpoint_run_as_stored_keeps_a_16_bit_cache() -> None:
    """DeepSeek-V3 is stored in fp8: run as is, its cache is bf16 (every engine's "auto");
    asked for fp8 (--kv-dtype), or quantised under an engine whose checkpoints quantise the
    cache (trtllm), fp8; --dtype fp8 under vLLM keeps it bf16."""
    h200 = GPUS["h200-sxm"]
    assert (run_precision(Options(), DS, h200).weights, run_precision(Options(), DS, h200).kv) == (
        "fp8",
        "bf16",
    )
    assert run_precision(Options(engine="trtllm"), DS, h200).kv == "bf16"
    assert run_precision(Options(dtype="fp8"), DS, h200).kv == "bf16"
    assert run_precision(Options(dtype="fp8", engine="trtllm"), DS, h200).kv == "fp8"
    assert run_precision(Options(kv_dtype="fp8"), DS, h200).kv == "fp8"
