"""Tests of ModelSpec: counts, bytes and FLOPs derivable by hand, its checks of its fields,
and the invariants of its parameter count."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tpsim.models import DTYPE_BYTES, MODELS, ModelError, ModelSpec, load_hf_config

DATA = Path(__file__).parents[1] / "data" / "models"

# -- counts by hand -----------------------------------------------------------------------


def test_llama_2_7b_count_is_exact() -> None:
    # per layer: attn 4*4096^2 = 67,108,864; mlp 3*4096*11008 = 135,266,304; norms 8192
    # 32 layers + embed 131,072,000 + lm_head 131,072,000 + final norm 4096
    per_layer = 67_108_864 + 135_266_304 + 8_192
    assert MODELS["llama-2-7b"].params_per_layer() == per_layer
    assert MODELS["llama-2-7b"].num_params() == 32 * per_layer + 2 * 131_072_000 + 4_096


def test_gpt3_layer_is_12d2_plus_13d() -> None:
    gpt3 = MODELS["gpt3-175b"]
    d = 12288
    # attn 4d^2 + 4d (qkv bias 3d, o bias d); mlp 8d^2 + 5d; two layernorms 4d
    assert gpt3.params_per_layer() == 12 * d * d + 13 * d
    assert gpt3.embedding_params() == (50257 + 2048) * d
    assert gpt3.lm_head_params() == 0


def test_worked_example_70b_bf16_is_140gb_and_35gb_per_gpu_at_tp4() -> None:
    spec = MODELS["llama-2-70b"].with_dtype("bf16")
    assert spec.weight_bytes() == 2 * spec.num_params()
    assert spec.weight_bytes() == pytest.approx(140e9, rel=0.02)
    assert 33e9 <= spec.weight_bytes() / 4 <= 36.5e9
    assert MODELS["llama-2-70b"].weight_bytes() / 4 == pytest.approx(34.5e9, rel=0.01)


def test_weight_bytes_scales_with_dtype() -> None:
    """The GEMMs' weights take the dtype; under one of fewer than two bytes the embedding,
    the head, the norms and the routers stay 16-bit (they were counted at one byte in fp8)."""
    spec = MODELS["llama-3.1-8b"]
    sixteen = spec.sixteen_bit_params()
    assert sixteen == 2 * 128256 * 4096 + 4096 + 32 * 2 * 4096  # untied head, 65 norms
    for dtype, nbytes in DTYPE_BYTES.items():
        if nbytes >= 2:
            assert spec.weight_bytes(dtype) == nbytes * spec.num_params()
        else:
            expected = nbytes * (spec.num_params() - sixteen) + 2 * sixteen
            assert spec.weight_bytes(dtype) == round(expected)
    fp8 = spec.with_dtype("fp8")
    assert fp8.weight_bytes() == spec.num_params() + sixteen
    assert spec.with_dtype("fp8").dtype == "fp8"
    assert spec.dtype == "bf16"  # frozen: with_dtype returns a new spec


def test_kv_bytes_per_token() -> None:
    # llama-2-7b: 2 (K, V) * 32 layers * 4096 * 2 bytes = 512 KiB
    assert MODELS["llama-2-7b"].kv_bytes_per_token() == 512 * 1024
    # llama-2-70b, GQA: 2 * 80 * (8 * 128) * 2 = 320 KiB; fp8 halves it
    assert MODELS["llama-2-70b"].kv_bytes_per_token("bf16") == 320 * 1024
    assert MODELS["llama-2-70b"].kv_bytes_per_token("fp8") == 160 * 1024


def test_flops_per_token_on_a_tiny_model() -> None:
    spec = load_hf_config(DATA / "tiny-llama")
    # d=8, 2 layers, 2 heads (head_dim 4), MHA, I=16, vocab 10
    # matmul weights per layer: qkv 8*24 + o 8*8 + mlp 3*8*16 = 192 + 64 + 384 = 640
    # plus lm_head 10*8 = 80  ->  2*640 + 80 = 1360
    assert spec.matmul_params() == 1360
    assert spec.flops_per_token(0) == 2 * 1360
    # attention: 4 * layers * q_size * context = 4 * 2 * 8 * 5 = 320
    assert spec.flops_per_token(5) == 2 * 1360 + 320


def test_flops_count_the_lm_head_even_when_tied() -> None:
    gpt3 = MODELS["gpt3-175b"]
    assert gpt3.matmul_params() == 96 * 12 * 12288**2 + 50257 * 12288
    with pytest.raises(ModelError, match="context_len=-1"):
        gpt3.flops_per_token(-1)


# -- ModelSpec validation --------------------------------------------------------------------

TINY = {
    "name": "tiny",
    "hidden_size": 8,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 2,
    "head_dim": 4,
    "intermediate_size": 16,
    "vocab_size": 10,
}


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"num_heads": 0}, "num_heads=0 in ModelSpec 'tiny': must be a positive integer"),
        ({"hidden_size": -8}, "hidden_size=-8"),
        ({"num_layers": True}, "num_layers=True"),
        ({"vocab_size": 10.0}, "vocab_size=10.0"),
        ({"num_kv_heads": 3, "num_heads": 4}, "num_kv_heads=3 in ModelSpec 'tiny': must divide"),
        ({"dtype": "int8"}, "dtype='int8'"),
        ({"norm": "batchnorm"}, "norm='batchnorm'"),
        ({"gated_mlp": "yes"}, "gated_mlp='yes'"),
        ({"max_position_embeddings": -1}, "max_position_embeddings=-1"),
        ({"learned_position_embeddings": True}, "max_position_embeddings=0"),
        ({"name": ""}, "name=''"),
    ],
)
def test_modelspec_rejects_bad_fields(override: dict[str, object], expected: str) -> None:
    with pytest.raises(ModelError) as info:
        ModelSpec(**{**TINY, **override})  # type: ignore[arg-type]
    message = str(info.value)
    assert expected in message
    assert "\n" not in message


def test_with_dtype_and_weight_bytes_reject_unknown_dtype() -> None:
    spec = ModelSpec(**TINY)  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="dtype='int3'"):
        spec.with_dtype("int3")
    with pytest.raises(ModelError, match="dtype='fp64'"):
        spec.weight_bytes("fp64")


# -- invariants ------------------------------------------------------------------------------


@st.composite
def specs(draw: st.DrawFn) -> ModelSpec:
    kv_heads = draw(st.integers(1, 8))
    return ModelSpec(
        name="h",
        hidden_size=draw(st.integers(1, 4096)),
        num_layers=draw(st.integers(1, 128)),
        num_heads=kv_heads * draw(st.integers(1, 8)),
        num_kv_heads=kv_heads,
        head_dim=draw(st.integers(1, 256)),
        intermediate_size=draw(st.integers(1, 16384)),
        vocab_size=draw(st.integers(1, 200_000)),
        gated_mlp=draw(st.booleans()),
        tied_embeddings=draw(st.booleans()),
        norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
        qkv_bias=draw(st.booleans()),
        mlp_bias=draw(st.booleans()),
        max_position_embeddings=draw(st.integers(1, 8192)),
        learned_position_embeddings=draw(st.booleans()),
    )


@given(
    spec=specs(),
    field=st.sampled_from(["num_layers", "hidden_size", "intermediate_size"]),
    delta=st.integers(1, 1024),
)
def test_num_params_is_monotone(spec: ModelSpec, field: str, delta: int) -> None:
    bigger = dataclasses.replace(spec, **{field: getattr(spec, field) + delta})
    assert bigger.num_params() > spec.num_params()
    assert bigger.flops_per_token(16) > spec.flops_per_token(16)


@given(spec=specs())
def test_num_params_is_the_sum_of_its_parts(spec: ModelSpec) -> None:
    parts = (
        spec.num_layers
        * (
            spec.attention_params_per_layer()
            + spec.mlp_params_per_layer()
            + spec.norm_params_per_layer()
        )
        + spec.embedding_params()
        + spec.lm_head_params()
        + spec.final_norm_params()
    )
    assert spec.num_params() == parts
    assert spec.params_per_layer() * spec.num_layers <= spec.num_params()


@pytest.mark.parametrize(
    ("name", "dtype"),
    [("llama-3.1-8b", "fp8"), ("qwen3-30b-a3b", "fp8"), ("qwen3-30b-a3b", "fp4"),
     ("deepseek-v3", None), ("gpt-oss-20b", None), ("mixtral-8x7b", None)],
)  # fmt: skip
def test_weight_bytes_is_what_one_gpu_holds_at_tp_1(name: str, dtype: str | None) -> None:
    """ModelSpec.weight_bytes() and the memory model count the same bytes: DeepSeek-V3's fp8
    checkpoint is 673.0 GB (its embedding and head 16-bit; weight_bytes had 671.0)."""
    from tpsim import Layout, Options, Workload, simulate

    spec = MODELS[name] if dtype is None else MODELS[name].with_dtype(dtype)
    opts = Options(dtype=dtype, allow_oom=True)
    held = simulate(name, "hgx-h200", Layout(1), Workload(1), opts).typed.memory
    assert spec.weight_bytes() == held.weights_bytes_per_gpu
