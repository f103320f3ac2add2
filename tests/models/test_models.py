"""Tests of the models package: counts derivable by hand, the HF loader, its errors."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tpsim.models import DTYPE_BYTES, MODELS, ModelError, ModelSpec, get_model, load_hf_config
from tpsim.models.hf_config import spec_from_hf_dict

DATA = Path(__file__).parents[1] / "data" / "models"

# -- catalog: published parameter counts ---------------------------------------------------

PUBLISHED_PARAMS = {
    "gpt3-175b": 175e9,
    "llama-2-7b": 6.74e9,
    "llama-2-13b": 13.0e9,
    "llama-2-70b": 68.98e9,
    "llama-3.1-8b": 8.03e9,
    "llama-3.1-70b": 70.55e9,
    "llama-3.1-405b": 405.8e9,
    "mistral-7b": 7.24e9,
    "qwen2.5-72b": 72.7e9,
    "codellama-34b": 33.7e9,
    "llama-33b": 32.5e9,  # LLaMA paper, table 2
    # the config.json entries (model cards; active counts in tests/models/test_moe.py)
    "mixtral-8x7b": 46.7e9,
    "mixtral-8x22b": 141e9,
    "qwen3-32b": 32.8e9,
    "qwen3-30b-a3b": 30.5e9,
    "qwen3-235b-a22b": 235e9,
    "deepseek-v3": 671e9,  # README_WEIGHTS.md: main model 671 B (the MTP module apart)
    "gpt-oss-120b": 116.83e9,  # model card (its biases, 0.04 B, are not counted)
    "gpt-oss-20b": 20.91e9,
}


def test_catalog_holds_exactly_the_listed_models() -> None:
    assert sorted(MODELS) == sorted(PUBLISHED_PARAMS)
    for key, spec in MODELS.items():
        assert spec.name == key


@pytest.mark.parametrize(("name", "expected"), sorted(PUBLISHED_PARAMS.items()))
def test_catalog_param_counts_match_published(name: str, expected: float) -> None:
    assert MODELS[name].num_params() == pytest.approx(expected, rel=0.01)


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
    spec = MODELS["llama-3.1-8b"]
    for dtype, nbytes in DTYPE_BYTES.items():
        assert spec.weight_bytes(dtype) == nbytes * spec.num_params()
    assert spec.with_dtype("fp8").weight_bytes() == spec.num_params()
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
    with pytest.raises(ModelError, match="dtype='int4'"):
        spec.with_dtype("int4")
    with pytest.raises(ModelError, match="dtype='fp64'"):
        spec.weight_bytes("fp64")


# -- HF loader on hand-written configs -------------------------------------------------------


def test_illustrative_llama_config_loads() -> None:
    spec = load_hf_config(DATA / "illustrative.json")
    assert (spec.hidden_size, spec.num_layers, spec.num_heads, spec.num_kv_heads) == (
        4096,
        32,
        32,
        32,
    )
    assert (spec.head_dim, spec.intermediate_size, spec.vocab_size) == (128, 11008, 32000)
    assert spec.gated_mlp and not spec.tied_embeddings and spec.dtype == "bf16"
    assert spec.name == "illustrative"
    assert spec.num_params() == MODELS["llama-2-7b"].num_params()


def test_llama_without_kv_heads_is_mha_and_directory_path_works() -> None:
    spec = get_model(str(DATA / "tiny-llama"))
    assert spec == load_hf_config(DATA / "tiny-llama" / "config.json")
    assert spec.name == "tiny-llama"  # the folder holding config.json
    assert spec.num_kv_heads == spec.num_heads == 2
    assert spec.head_dim == 4
    assert spec.dtype == "fp16"
    assert spec.max_position_embeddings == 64
    # per layer: attn 8*24 + 64 = 256, mlp 3*8*16 = 384, norms 2*8 = 16 -> 656
    assert spec.num_params() == 2 * 656 + 80 + 80 + 8


def test_mistral_config_matches_catalog() -> None:
    spec = load_hf_config(DATA / "mistral.json")
    assert spec.name == "Mistral-7B-v0.1"  # last component of _name_or_path
    assert spec.num_params() == MODELS["mistral-7b"].num_params() == 7_241_732_096


def test_qwen2_has_qkv_bias_only() -> None:
    spec = load_hf_config(DATA / "qwen2.json")
    assert spec.qkv_bias and not spec.mlp_bias and spec.tied_embeddings
    assert (spec.num_kv_heads, spec.head_dim) == (2, 4)
    # d=16, q 16, kv 8: attn 16*32 + 32 + 16*16 = 800; mlp 3*16*32 = 1536; norms 32
    assert spec.params_per_layer() == 800 + 1536 + 32
    assert spec.num_params() == 2368 + 16 * 100 + 16


def test_gpt_neox_is_plain_mlp_layernorm_with_biases() -> None:
    spec = load_hf_config(DATA / "gpt_neox.json")
    assert not spec.gated_mlp and spec.norm == "layernorm"
    assert spec.qkv_bias and spec.mlp_bias and not spec.tied_embeddings
    assert not spec.learned_position_embeddings
    # attn 8*24 + 24 + 64 + 8 = 288; mlp 2*8*32 + 32 + 8 = 552; norms 2*2*8 = 32
    assert spec.params_per_layer() == 288 + 552 + 32
    assert spec.num_params() == 872 + 80 + 80 + 16


def test_gpt2_small_has_its_published_124m_params() -> None:
    spec = load_hf_config(DATA / "gpt2.json")
    assert spec.intermediate_size == 4 * 768  # n_inner null -> 4 * n_embd
    assert spec.tied_embeddings and spec.learned_position_embeddings
    assert spec.max_position_embeddings == 1024
    assert spec.num_params() == 124_439_808  # sum(p.numel()) of HF's gpt2


def test_opt_125m() -> None:
    spec = load_hf_config(DATA / "opt.json")
    assert spec.name == "opt-125m"
    assert (spec.hidden_size, spec.intermediate_size, spec.vocab_size) == (768, 3072, 50272)
    assert spec.tied_embeddings and spec.learned_position_embeddings
    assert spec.dtype == "fp16"
    # same layers as gpt2 small; embeddings (50272 + 2048) * 768. HF's table has 2 more
    # position rows (OPT's offset): 125,239,296 there.
    assert spec.num_params() == 12 * 7_087_872 + (50272 + 2048) * 768 + 2 * 768


def test_explicit_head_dim_wins() -> None:
    spec = load_hf_config(DATA / "head_dim.json")
    assert (spec.head_dim, spec.q_size, spec.kv_size) == (16, 32, 16)
    # attn 8*(32+32) + 32*8 = 768; mlp 3*8*8 = 192; norms 16; tied
    assert spec.num_params() == 768 + 192 + 16 + 80 + 8


def test_an_unknown_model_type_is_refused_even_with_llama_keys() -> None:
    """A family tpsim does not know (jamba, a custom llama) is never run as a llama."""
    cfg = json.loads((DATA / "illustrative.json").read_text())
    for model_type in ("jamba", "my_llama"):
        with pytest.raises(
            ModelError, match=f"model_type='{model_type}'.*supported: deepseek_v2, .*gpt_oss, llama"
        ):
            spec_from_hf_dict({**cfg, "model_type": model_type}, "mine")
    cfg.pop("model_type", None)  # no model_type and the llama keys: read as a llama
    assert spec_from_hf_dict(cfg, "mine").gated_mlp


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_local_experts", 8),
        ("num_experts", 128),
        ("n_routed_experts", 256),
        ("num_experts_per_tok", 2),
        ("moe_intermediate_size", 768),
        ("kv_lora_rank", 512),
        ("q_lora_rank", 1536),
    ],
)
def test_a_moe_or_mla_field_is_refused_not_read_as_dense(field: str, value: int) -> None:
    """A Mixtral config.json is a llama's keys plus num_local_experts: never a dense 7B."""
    cfg = {**json.loads((DATA / "illustrative.json").read_text()), field: value}
    with pytest.raises(ModelError, match=f"^{field}={value} in .*not modelled"):
        spec_from_hf_dict(cfg, "mine")
    assert spec_from_hf_dict({**cfg, field: None}, "mine").gated_mlp  # unset: dense


def test_a_config_with_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "config.json"
    f.write_text((DATA / "illustrative.json").read_text().replace("{", '{"hidden_size": 64, ', 1))
    with pytest.raises(ModelError, match=r"^hidden_size in .*config.json: given twice"):
        load_hf_config(f)


# -- get_model -------------------------------------------------------------------------------


def test_get_model_by_name_is_case_insensitive() -> None:
    assert get_model("LLaMA-2-70B") is MODELS["llama-2-70b"]
    assert get_model(" mistral-7b ") is MODELS["mistral-7b"]


def test_get_model_by_path() -> None:
    assert get_model(str(DATA / "gpt2.json")).num_params() == 124_439_808
    assert get_model(DATA / "gpt2.json").name == "gpt2"


def test_get_model_unknown_name_lists_the_catalog() -> None:
    with pytest.raises(ModelError) as info:
        get_model("foo")
    assert str(info.value) == (
        "model='foo': unknown model; catalog: codellama-34b, deepseek-v3, gpt-oss-120b, "
        "gpt-oss-20b, gpt3-175b, llama-2-13b, "
        "llama-2-70b, llama-2-7b, llama-3.1-405b, llama-3.1-70b, llama-3.1-8b, llama-33b, "
        "mistral-7b, mixtral-8x22b, mixtral-8x7b, qwen2.5-72b, qwen3-235b-a22b, qwen3-30b-a3b, "
        "qwen3-32b or a path to a config.json"
    )


def test_get_model_hub_id_is_not_fetched() -> None:
    """A hub id of a catalog model is its alias; any other is refused, never fetched."""
    refused = re.escape("model='meta-llama/Llama-3.2-1B': no such file")
    with pytest.raises(ModelError, match=refused):
        get_model("meta-llama/Llama-3.2-1B")


# -- malformed configs -----------------------------------------------------------------------

GOOD = json.loads((DATA / "illustrative.json").read_text())


_DROP = object()


def _with(**changes: object) -> str:
    """The illustrative config with some keys changed (or dropped), as JSON text."""
    cfg = {**GOOD, **changes}
    return json.dumps({k: v for k, v in cfg.items() if v is not _DROP})


BAD_CONFIGS = [
    ("not-utf8", b'{"hidden_size": "\xff"}', "not UTF-8"),
    ("not-json", '{"hidden_size": 4096,,}', "line 1 column"),
    ("empty", "", "not valid JSON"),
    (
        "nested-nan",
        _with(rope_scaling={"factor": 0}).replace(": 0}", ": Infinity}"),
        "rope_scaling.factor=Infinity",
    ),
    ("top-level-list", "[1, 2]", "top level must be a JSON object, got list"),
    ("nan", _with(intermediate_size=0).replace(": 0,", ": NaN,"), "intermediate_size=NaN"),
    ("infinity", _with(vocab_size=0).replace(": 0,", ": -Infinity,"), "vocab_size=-Infinity"),
    ("overflow-float", _with(hidden_size=0).replace(": 0,", ": 1e400,"), "hidden_size=inf"),
    ("missing-field", _with(hidden_size=_DROP), "hidden_size missing"),
    ("string-int", _with(hidden_size="4096"), "hidden_size='4096'"),
    ("bool-int", _with(num_hidden_layers=True), "num_hidden_layers=True"),
    ("float-int", _with(intermediate_size=11008.0), "intermediate_size=11008.0"),
    ("zero", _with(num_attention_heads=0), "num_attention_heads=0"),
    ("negative", _with(num_hidden_layers=-32), "num_hidden_layers=-32"),
    ("kv-not-dividing", _with(num_key_value_heads=5), "num_key_value_heads=5"),
    ("hidden-not-dividing", _with(hidden_size=4095), "hidden_size=4095"),
    ("bad-head-dim", _with(head_dim=0), "head_dim=0"),
    ("bad-dtype", _with(torch_dtype="int4"), "torch_dtype='int4'"),
    ("bad-bool", _with(tie_word_embeddings="false"), "tie_word_embeddings='false'"),
    ("bad-model-type", json.dumps({"model_type": "bert", "hidden_size": 8}), "model_type='bert'"),
    ("model-type-not-str", _with(model_type=7), "model_type=7"),
    ("no-model-type", json.dumps({"hidden_size": 8}), "model_type missing"),
    ("gpt2-missing", json.dumps({"model_type": "gpt2", "n_head": 2}), "n_embd missing"),
    (
        "gpt2-n-inner",
        json.dumps(
            {
                "model_type": "gpt2",
                "n_embd": 8,
                "n_head": 2,
                "n_layer": 1,
                "vocab_size": 10,
                "n_positions": 8,
                "n_inner": -1,
            }
        ),
        "n_inner=-1",
    ),
    (
        "opt-missing",
        json.dumps(
            {
                "model_type": "opt",
                "hidden_size": 8,
                "num_attention_heads": 2,
                "num_hidden_layers": 1,
                "vocab_size": 10,
            }
        ),
        "ffn_dim missing",
    ),
]


@pytest.mark.parametrize(
    ("content", "expected"), [case[1:] for case in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS]
)
def test_bad_config_is_a_one_line_model_error(
    tmp_path: Path, content: str | bytes, expected: str
) -> None:
    path = tmp_path / "config.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ModelError) as info:
        get_model(str(path))
    message = str(info.value)
    assert expected in message
    assert "\n" not in message
    assert str(path) in message


def test_missing_file_and_empty_directory_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no such file"):
        load_hf_config(tmp_path / "nope.json")
    with pytest.raises(ModelError, match=r"directory has no config\.json"):
        load_hf_config(tmp_path)
    with pytest.raises(ModelError, match="top level must be a JSON object, got str"):
        spec_from_hf_dict("hidden_size", "x")  # type: ignore[arg-type]


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
    ("given", "name"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
    ],
)
def test_hugging_face_ids_are_aliases_of_their_catalog_entry(given: str, name: str) -> None:
    assert get_model(given) is MODELS[name]


@pytest.mark.parametrize(
    ("given", "hint"),
    [
        ("llama3.1-70b", "did you mean 'llama-3.1-70b'?"),
        ("lama-2-70b", "did you mean 'llama-2-70b'?"),
        ("Llama_3.1_8B", "did you mean 'llama-3.1-8b'?"),
    ],
)
def test_a_near_miss_model_name_says_did_you_mean(given: str, hint: str) -> None:
    with pytest.raises(ModelError, match=re.escape(hint)):
        get_model(given)


@pytest.mark.parametrize("given", ["llama-2-8b", "meta-llama/Llama-3.2-1B", "mixtral"])
def test_no_suggestion_of_a_model_with_other_numbers(given: str) -> None:
    """llama-3.2-1b is no typo of llama-3.1-8b: a planner must not be steered to it."""
    with pytest.raises(ModelError) as info:
        get_model(given)
    assert "did you mean" not in str(info.value)
