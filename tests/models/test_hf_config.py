"""Tests of the Hugging Face config.json loader: hand-written configs of each family, and
the one-line ModelError of a malformed one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpsim.models import MODELS, ModelError, get_model, load_hf_config
from tpsim.models.catalog import CONFIGS
from tpsim.models.hf_config import spec_from_hf_dict

DATA = Path(__file__).parents[1] / "data" / "models"

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
    # v0.1's sliding window: every layer attends over (and caches) the last 4096 tokens
    assert spec.sliding_window == MODELS["mistral-7b"].sliding_window == 4096
    assert spec.sliding_layers == tuple(range(32))


def test_a_mistral_window_is_read_and_a_null_one_is_full_attention() -> None:
    """Mistral and Mixtral set ``sliding_window`` per checkpoint (v0.1 4096, later null):
    set, every layer's cache and reads stop at it; null, full attention. Qwen's key is off
    unless ``use_sliding_window`` (a llama config's is not a field of its family)."""
    cfg = json.loads((DATA / "mistral.json").read_text())
    full = spec_from_hf_dict({**cfg, "sliding_window": None}, "m")
    assert full.sliding_window == 0 and full.attended(0, 16384) == 16384
    windowed = spec_from_hf_dict({**cfg, "sliding_window": 4096}, "m")
    assert windowed.attended(5, 16384) == 4096 and windowed.attended(5, 1000) == 1000
    qwen = json.loads((DATA / "qwen2.json").read_text())
    assert spec_from_hf_dict({**qwen, "sliding_window": 64}, "q").sliding_window == 0


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
    assert spec.rotary_dim == 2  # rotary_pct 0.5 of the 4-wide heads


def test_gpt_neox_turns_rotary_pct_of_each_head() -> None:
    """vLLM's gpt_neox.py: rotary_dim = head_size * rotary_pct (transformers' default 0.25):
    Pythia-70M's 64-wide heads turn 16 dims (it had priced rotary over all 64)."""
    cfg = json.loads((DATA / "gpt_neox.json").read_text())
    cfg.update(hidden_size=512, num_attention_heads=8, intermediate_size=2048, rotary_pct=0.25)
    assert spec_from_hf_dict(cfg, "pythia").rotary_dim == 16
    del cfg["rotary_pct"]
    assert spec_from_hf_dict(cfg, "pythia").rotary_dim == 16  # the default
    assert spec_from_hf_dict({**cfg, "rotary_pct": 1.0}, "p").rotary_dim == 0  # all of it


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
            ModelError,
            match=f"model_type='{model_type}'.*supported: deepseek_v2, .*kimi_k2, llama",
        ):
            spec_from_hf_dict({**cfg, "model_type": model_type}, "mine")
    cfg.pop("model_type", None)  # no model_type and the llama keys: read as a llama
    assert spec_from_hf_dict(cfg, "mine").gated_mlp


def test_an_unknown_type_built_as_a_known_one_is_refused_naming_it() -> None:
    """A config whose model_type tpsim does not know but whose architectures class is one a
    family it reads is built as: the refusal names the family to set, before its expert
    fields are taken for a dense model."""
    cfg = {**_deepseek_like(), "model_type": "my_moe", "architectures": ["DeepseekV3ForCausalLM"]}
    with pytest.raises(ModelError, match=r"^model_type='my_moe'.*set model_type to 'deepseek_v3'"):
        spec_from_hf_dict(cfg, "mine")
    assert spec_from_hf_dict({**cfg, "model_type": "deepseek_v3"}, "mine").num_experts == 256


def _deepseek_like() -> dict:
    return json.loads((CONFIGS / "deepseek-v3.json").read_text())


def test_dbrx_nested_experts_are_refused_not_read_as_dense() -> None:
    cfg = json.loads((DATA / "illustrative.json").read_text())
    cfg.pop("model_type", None)
    cfg["ffn_config"] = {"moe_num_experts": 16, "moe_top_k": 4}
    with pytest.raises(ModelError, match=r"^ffn_config=.*not modelled"):
        spec_from_hf_dict(cfg, "dbrx")


_ILLUSTRATIVE = DATA / "illustrative.json"


@pytest.mark.parametrize(
    ("quant", "dtype"),
    [
        ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8"),
        ({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}, "fp8"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            "fp8",
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}
                },
            },
            "fp4",
        ),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "fp4"),
        (
            {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm",
             "zero_point": True},
            "int4",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
             "sym": True},
            "int4",
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "group_0": {
                        "weights": {"num_bits": 4, "type": "int", "group_size": 128},
                        "input_activations": None,
                    }
                },
            },
            "int4",
        ),
    ],
)  # fmt: skip
def test_a_quantised_checkpoint_is_sized_in_its_format(quant: dict, dtype: str) -> None:
    """Qwen3-FP8, Llama-3.1-405B-FP8, llm-compressor and ModelOpt checkpoints: their linear
    layers in fp8 or NVFP4, in every family (they were sized at 16 bits, 2-4x too large)."""
    cfg = {**json.loads(_ILLUSTRATIVE.read_text()), "quantization_config": quant}
    spec = spec_from_hf_dict(cfg, "q")
    assert spec.dtype == dtype
    plain = spec_from_hf_dict(json.loads(_ILLUSTRATIVE.read_text()), "plain")
    assert spec.num_params() == plain.num_params()


@pytest.mark.parametrize(
    ("quant", "says"),
    [
        (
            {"quant_method": "awq", "bits": 4},
            r"^quantization_config.group_size=None.*groups of 128 \(int4\)",
        ),
        (
            {"quant_method": "gptq", "bits": 8, "group_size": 128},
            r"^quantization_config.bits=8.*not modelled; modelled: fp8",
        ),
        ({"quant_method": "gptq", "bits": 4, "group_size": -1}, r"group_size=-1"),
        ({"quant_method": "awq", "bits": 4, "group_size": 64}, r"group_size=64"),
        ({"quant_method": "bitsandbytes"}, r"quant_method='bitsandbytes'"),
        ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, r"quant_algo='W4A8_AWQ'"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int"}}},
            },
            r"config_groups.g.weights='int 8-bit'.*not modelled",
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "g": {
                        "weights": {"num_bits": 4, "type": "int", "group_size": 128},
                        "input_activations": {"num_bits": 8, "type": "int"},
                    }
                },
            },
            r"config_groups.g.input_activations=.*integer activations \(W4A8\) not modelled",
        ),
        ({"quant_method": "compressed-tensors"}, r"config_groups=None.*must be an object"),
        ([1, 2], r"^quantization_config=\[1, 2\].*quant_method string"),
    ],
)
def test_an_unmodelled_quantisation_is_refused_naming_it(quant: object, says: str) -> None:
    """bitsandbytes, 8-bit integers, W4A8, AWQ/GPTQ scales not per 128: refused, never sized
    as the 16-bit model (Mixtral-8x7B-AWQ is 24.7 GB, not 93.5)."""
    cfg = {**json.loads(_ILLUSTRATIVE.read_text()), "quantization_config": quant}
    with pytest.raises(ModelError, match=says):
        spec_from_hf_dict(cfg, "q")


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
        ("moe_num_experts", 16),
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


def test_a_block_fp8_checkpoint_keeps_its_blocks_and_refuses_splits_that_cut_them(
    tmp_path: Path,
) -> None:
    """Qwen3-30B-A3B with [128, 128] fp8 blocks: each expert's 768 rows split 4 ways leave
    192 a GPU, not whole blocks, which vLLM refuses to load ("not divisible by weight
    quantization block_n = 128"); 2 ways (384) and expert parallelism load; --dtype bf16
    runs other weights, without the blocks."""
    from tpsim.core.api import simulate
    from tpsim.core.config import ConfigError, Layout, Options, Workload

    cfg = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = load_hf_config(str(path))
    assert spec.weight_block == (128, 128) and spec.to_dict()["weight_block"] == [128, 128]
    assert "weight_block" not in load_hf_config(str(CONFIGS / "qwen3-30b-a3b.json")).to_dict()
    with pytest.raises(ConfigError, match=r"moe_tp=4: .* 768, splits to 192 a GPU"):
        simulate(str(path), "dgx-h100", Layout(4), Workload(8))
    simulate(str(path), "dgx-h100", Layout(2), Workload(8))
    simulate(str(path), "dgx-h100", Layout(1, attention_dp=4, ep=4), Workload(8))
    simulate(str(path), "dgx-h100", Layout(4), Workload(8), Options(dtype="bf16"))
    cfg["quantization_config"]["weight_block_size"] = [128]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="weight_block_size"):
        load_hf_config(str(path))
