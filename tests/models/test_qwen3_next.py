"""Qwen3-Next read from its config.json: the hybrid layout (Gated DeltaNet linear attention on
3 of every 4 layers, gated full attention on the others), the published sizes, the state
each sequence keeps per linear layer, the costs of the linear layers (decode independent of
the context, prefill linear in the prompt), the memory at long context, the refusals.

models/configs/qwen3-next-80b-a3b.json is Qwen/Qwen3-Next-80B-A3B-Instruct's config.json
(https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json; its
attention and MoE fields as tests/models/test_hf_unmodelled.py quotes them, the rest
transformers' Qwen3NextConfig defaults where they agree).
"""

from __future__ import annotations

import json

import pytest
from tpsim import Layout, Options, Workload, simulate
from tpsim.cli import main
from tpsim.core.config import Options as Opts
from tpsim.core.kernels import linear_attention as gdn
from tpsim.core.kernels.costs import hardware_for
from tpsim.core.lowering.lower import lower
from tpsim.core.memory import memory_per_gpu, state_bytes_per_rank, weight_params_per_gpu
from tpsim.core.precision import precision
from tpsim.models import ModelError, ModelSpec, spec_from_hf_dict
from tpsim.models.catalog import CONFIGS, get_model
from tpsim.topologies.gpus import GPUS

TOPO = "dgx-h100"
LINEAR = tuple(i for i in range(48) if (i + 1) % 4)


def _cfg() -> dict:
    return json.loads((CONFIGS / "qwen3-next-80b-a3b.json").read_text())


def test_reads_the_published_config() -> None:
    m = get_model("qwen3-next-80b-a3b")
    assert (m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim) == (
        2048, 48, 16, 2, 256)  # fmt: skip
    assert m.linear_layers == LINEAR and len(m.linear_layers) == 36
    assert (m.linear_key_heads, m.linear_value_heads) == (16, 32)
    assert (m.linear_key_head_dim, m.linear_value_head_dim, m.linear_conv_kernel) == (128, 128, 4)
    assert m.attn_output_gate and m.qk_norm and not m.qk_norm_whole and m.rotary_dim == 64
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (512, 10, 512)
    assert m.shared_intermediate_size == 512 and m.dense_layers == () and not m.qkv_bias
    assert m.mtp_layers == 1 and not m.tied_embeddings and m.dtype == "bf16"
    assert get_model("Qwen/Qwen3-Next-80B-A3B-Thinking") is m


def test_layer_types_given_or_from_the_interval() -> None:
    """transformers' Qwen3NextConfig: layer_types wins; absent, every
    full_attention_interval-th layer (4) is full attention."""
    cfg = _cfg()
    del cfg["full_attention_interval"]
    assert spec_from_hf_dict(cfg, "x").linear_layers == LINEAR
    cfg["full_attention_interval"] = 2
    assert spec_from_hf_dict(cfg, "x").linear_layers == tuple(range(0, 48, 2))
    cfg["layer_types"] = ["full_attention"] * 47 + ["linear_attention"]
    assert spec_from_hf_dict(cfg, "x").linear_layers == (47,)


def test_counts_by_hand_and_against_qwens() -> None:
    """36 linear layers: in_proj_qkvz [2048, 2 x 2048 + 2 x 4096], in_proj_ba [2048, 64],
    the conv [8192, 4], A_log and dt_bias [32], the gated norm [128], out_proj [4096, 2048];
    12 full ones: q (doubled for the gate), k, v and o, q/k norms [256] each; every layer two
    norms, a router [2048, 512], 512 experts of 512 and a shared one. The total is the
    checkpoint's 79,674,391,296 less the shared expert's [1, 2048] sigmoid gate a layer
    (not counted, as qwen2_moe's): Qwen's card says 80 B total, 3 B activated."""
    m = get_model("qwen3-next-80b-a3b")
    d, v = 2048, 151936
    linear = d * (2 * 2048 + 2 * 4096) + d * 64 + 8192 * 4 + 2 * 32 + 128 + 4096 * d
    full = d * (2 * 4096 + 2 * 512) + 4096 * d + 2 * 256
    expert = 3 * d * 512
    moe = d * 512 + expert  # router and the shared expert
    per_layer = 2 * d + moe
    total = 36 * linear + 12 * full + 48 * (per_layer + 512 * expert) + 2 * v * d + d
    assert m.linear_params_per_layer() + 0 == linear
    assert m.num_params() == total == 79_674_391_296 - 48 * d
    assert m.active_params() == total - 48 * (512 - 10) * expert
    assert m.num_params() / 1e9 == pytest.approx(80, rel=0.005)
    assert 3.0 < m.active_params(embedding=False) / 1e9 < 4.0  # "A3B": 3.56 B
    # the MTP layer: a full-attention layer with its MoE, fc [2d, d] and three norms
    assert m.mtp_params() == full + per_layer + 512 * expert + 2 * d * d + 3 * d


def test_kv_cache_only_on_the_full_layers_and_the_state() -> None:
    """vLLM's gated_delta_net_state_shape: conv state (K - 1) x (2 nk dk + nv dv) / tp, the
    recurrent state [nv / tp, dv, dk]; in the model's dtype (mamba_cache_dtype auto)."""
    m = get_model("qwen3-next-80b-a3b")
    assert m.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 2
    assert m.linear_state_elements() == 3 * 8192 + 32 * 128 * 128 == 548_864
    assert m.linear_state_elements(4) == 3 * 2048 + 8 * 128 * 128
    assert state_bytes_per_rank(m, 4, range(48), 2) == 36 * (3 * 2048 + 8 * 128 * 128) * 2
    assert state_bytes_per_rank(m, 4, range(3, 4), 2) == 0  # a full layer keeps none
    assert [m.held(i, 100) for i in (0, 3)] == [0, 100]


def test_weights_per_gpu_by_hand() -> None:
    """At TP 4 a rank holds a quarter of every GEMM, the conv, A_log and dt_bias, the norms
    and router whole, and one of the 2 KV heads (replicated: k and v [d, 256], not 128)."""
    m = get_model("qwen3-next-80b-a3b")
    d = 2048
    norms = 48 * 2 * d + 12 * 2 * 256 + 36 * 128 + d
    routers = 48 * d * 512
    split = m.num_params() - norms - routers
    replicated = 12 * 2 * d * (256 - 128)
    assert weight_params_per_gpu(m, 4) == split // 4 + norms + routers + replicated


def _ops(model: ModelSpec, tp: int, batch: int, phase: str, length: int) -> list:
    opts = Opts(ideal=True)
    gpu = GPUS["h100-sxm"]
    prec = precision(opts, model.dtype, gpu.fp8_flops is not None)
    hw = hardware_for(gpu, prec.math, opts.calibration.kernels, kv_dtype=prec.kv)
    wl = Workload(batch=batch, phase=phase, prompt_len=length, context_len=length)
    return list(lower(model, tp, wl, opts, hw).per_rank[0].ops)


def test_linear_and_full_layers_lowered_as_vllm_runs_them() -> None:
    m = get_model("qwen3-next-80b-a3b")
    ops = _ops(m, 4, 8, "decode", 4096)
    names = [o.name for o in ops if o.layer == 0]
    for name in ("in_proj_qkvz", "in_proj_ba", "conv1d", "gdn", "gated_norm", "out_proj"):
        assert name in names
    assert "qkv_proj" not in names and "attn" not in names
    full = [o for o in ops if o.layer == 3]
    assert {"qkv_proj", "attn", "attn_gate", "o_proj"} <= {o.name for o in full}
    qkv = next(o for o in full if o.name == "qkv_proj")
    assert qkv.flops == 2 * 8 * (2 * 4 + 2 * 1) * 256 * 2048  # q and gate 4 heads, kv 1
    qkvz = next(o for o in ops if o.layer == 0 and o.name == "in_proj_qkvz")
    assert qkvz.flops == 2 * 8 * (2 * 512 + 2 * 1024) * 2048
    assert len([o for o in ops if o.name == "gdn"]) == 36
    assert len([o for o in ops if o.name == "attn"]) == 12


def _gdn(ops: list) -> object:
    return next(o for o in ops if o.name == "gdn" and o.layer == 0)


def test_decode_linear_layer_independent_of_the_context() -> None:
    """The recurrent delta rule reads and writes each sequence's state [nv, dk, dv], what
    ever the tokens before: the same cost at 1K and 128K of context (the full layers'
    attention grows)."""
    m = get_model("qwen3-next-80b-a3b")
    short, long = _ops(m, 4, 8, "decode", 1024), _ops(m, 4, 8, "decode", 131072)
    a, b = _gdn(short), _gdn(long)
    assert (a.seconds, a.flops, a.bytes) == (b.seconds, b.flops, b.bytes)
    assert a.flops == 7 * 8 * 8 * 128 * 128
    assert a.bytes >= 2 * 8 * 8 * 128 * 128 * 2  # the state, read and written
    attn = [next(o for o in ops if o.name == "attn") for ops in (short, long)]
    assert attn[1].bytes > 100 * attn[0].bytes / 2
    conv = [next(o for o in ops if o.name == "conv1d") for ops in (short, long)]
    assert (conv[0].seconds, conv[0].bytes) == (conv[1].seconds, conv[1].bytes)


@pytest.mark.parametrize("prompt", [1024, 4096, 16384])
def test_prefill_linear_layer_flops_linear_in_the_prompt(prompt: int) -> None:
    """The chunked delta rule: per token and value head 6 dk dv + 6 C dk + 4 C dv + 2 C^2 / 3
    (C = 64), so twice the prompt is twice the FLOPs (attention's causal FLOPs grow as its
    square)."""
    m = get_model("qwen3-next-80b-a3b")
    one, two = _gdn(_ops(m, 4, 2, "prefill", prompt)), _gdn(_ops(m, 4, 2, "prefill", 2 * prompt))
    per = 6 * 128 * 128 + 6 * 64 * 128 + 4 * 64 * 128 + 2 * 64 * 64 / 3
    assert one.flops == pytest.approx(2 * prompt * 8 * per)
    assert two.flops == pytest.approx(2 * one.flops)
    assert two.bytes == pytest.approx(2 * one.bytes, rel=0.01)


def test_chunk_flops_pad_the_last_chunk() -> None:
    assert gdn.chunk_flops(1, 65, 1, 128, 128) == gdn.chunk_flops(1, 128, 1, 128, 128)
    assert gdn.chunk_flops(3, 64, 2, 128, 128) == 3 * 2 * gdn.chunk_flops(1, 64, 1, 128, 128)


def test_memory_at_128k_against_a_same_size_full_attention_model() -> None:
    """At 128K of context the 36 linear layers hold a state of 9.9 MB a sequence on a TP 4
    rank; the same model with every layer full attention holds 4x the KV cache."""
    m = get_model("qwen3-next-80b-a3b")
    full = ModelSpec(**{**m.__dict__, "linear_layers": (), "linear_key_heads": 0,
                        "linear_value_heads": 0, "linear_key_head_dim": 0,
                        "linear_value_head_dim": 0, "linear_conv_kernel": 0})  # fmt: skip
    wl = Workload(8, "decode", 512, 131072)
    gpu = GPUS["h100-sxm"]
    hybrid = memory_per_gpu(m, 4, wl, Options(), gpu)
    dense = memory_per_gpu(full, 4, wl, Options(), gpu)
    kv = 8 * 131072 * 2 * 256 * 2  # one KV head a rank (2 heads, TP 4: replicated)
    state = 8 * 36 * (3 * 2048 + 8 * 128 * 128) * 2
    assert hybrid.kv_cache_bytes_per_gpu == 12 * kv + state
    assert dense.kv_cache_bytes_per_gpu == 48 * kv
    assert dense.kv_cache_bytes_per_gpu > 3.9 * hybrid.kv_cache_bytes_per_gpu


def test_run_counts_the_state_in_the_fit_check() -> None:
    """A batch whose states alone pass a GPU is refused: 4,000 sequences at TP 4 hold
    4000 x 9.9 MB = 40 GB of state beside 40 GB of weights."""
    few = simulate("qwen3-next-80b-a3b", TOPO, Layout(4), Workload(8, "decode", 512, 1024),
                   Options())  # fmt: skip
    assert few.summary["memory"]["fits"]
    with pytest.raises(Exception, match="does not fit"):
        simulate("qwen3-next-80b-a3b", TOPO, Layout(4), Workload(4000, "decode", 512, 16),
                 Options())  # fmt: skip


def test_cli_run_and_serve(capsys: pytest.CaptureFixture) -> None:
    """tpsim run prices it; tpsim serve runs it under vLLM (its state blocks:
    tests/experiments/test_serve_linear.py); the planner under traffic on an engine without
    vLLM's hybrid manager refuses it once, not that no unit fits in memory."""
    assert main(["run", "--model", "qwen3-next-80b-a3b", "--topology", TOPO, "--tp", "4"]) == 0
    assert "(fits)" in capsys.readouterr().out
    args = ["serve", "--model", "qwen3-next-80b-a3b", "--topology", TOPO, "--tp", "4",
            "--requests", "4", "--concurrency", "2"]  # fmt: skip
    assert main(args) == 0
    assert "blocks of 272)" in capsys.readouterr().out
    args = ["plan", "--model", "qwen3-next-80b-a3b", "--topology", TOPO, "--rate", "2",
            "--requests", "20", "--engine", "sglang"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "linear-attention" in err[0] and "fits" not in err[0]


@pytest.mark.parametrize(("change", "says"), [
    ({"layer_types": ["linear_attention"] * 47}, r"^layer_types=.*at least 48"),
    ({"layer_types": ["linear_attention"] * 47 + ["sliding_attention"]},
     r"^layer_types\[47\]='sliding_attention' "),
    ({"linear_num_value_heads": 24}, r"^linear_num_value_heads=24 .*multiple of"),
    ({"linear_num_key_heads": 0}, r"^linear_num_key_heads=0 "),
    ({"linear_conv_kernel_dim": 1}, r"^linear_conv_kernel_dim=1 .*at least 2"),
    ({"full_attention_interval": 0}, r"^full_attention_interval=0 "),
    ({"attention_bias": True}, r"^attention_bias=True .*Qwen3-Next"),
    ({"attn_output_gate": "yes"}, r"^attn_output_gate='yes' .*true or false"),
    ({"partial_rotary_factor": 0.3}, r"^partial_rotary_factor=0.3 "),
    ({"num_experts_per_tok": 600}, r"^num_experts_per_tok=600 .*at most the 512"),
])  # fmt: skip
def test_malformed_refused(change: dict, says: str) -> None:
    cfg = {**_cfg(), **change}
    if "layer_types" not in change and "full_attention_interval" in change:
        cfg.pop("layer_types", None)
    with pytest.raises(ModelError, match=says) as info:
        spec_from_hf_dict(cfg, "x")
    assert "\n" not in str(info.value)


def test_cli_refuses_a_malformed_config_in_one_line(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**_cfg(), "linear_num_value_heads": 24}))
    assert main(["run", "--model", str(path), "--topology", TOPO, "--tp", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "linear_num_value_heads=24" in err[0]


def test_linear_fields_checked_in_the_spec() -> None:
    m = get_model("qwen3-next-80b-a3b")
    with pytest.raises(ModelError, match=r"^linear_layers=.*distinct layer indices"):
        ModelSpec(**{**m.__dict__, "linear_layers": (0, 0)})
    with pytest.raises(ModelError, match=r"^linear_key_heads=16 .*needs linear_layers"):
        ModelSpec(**{**m.__dict__, "linear_layers": ()})
    with pytest.raises(ModelError, match=r"^linear_key_heads=0 .*positive"):
        ModelSpec(**{**m.__dict__, "linear_key_heads": 0})


def test_tp_must_divide_the_linear_key_heads(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """16 attention heads and 2 KV heads allow TP 8; 4 linear key heads do not (vLLM's
    divide() of the heads in GatedDeltaNetAttention)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**_cfg(), "linear_num_key_heads": 4}))
    assert main(["run", "--model", str(path), "--topology", TOPO, "--tp", "4"]) == 0
    capsys.readouterr()
    assert main(["run", "--model", str(path), "--topology", TOPO, "--tp", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "linear_num_key_heads=4" in err[0]


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5"])
def test_qwen3_5_refused_naming_what_is_missing(model_type: str) -> None:
    """Qwen3.5 wraps the same layers in a multimodal config whose SSM state dtype
    (mamba_ssm_dtype) and vision tower tpsim does not read: refused, not read as Qwen3-Next."""
    cfg = {**_cfg(), "model_type": model_type, "mamba_ssm_dtype": "float32"}
    with pytest.raises(ModelError, match=rf"^model_type='{model_type}' .*Qwen3.5 .*not read"):
        spec_from_hf_dict(cfg, "x")
