"""The modules a quantised checkpoint's skip list leaves 16-bit, read into
``ModelSpec.kept_16bit`` in each syntax (exact and per-layer names, ``re:`` regexes,
ModelOpt patterns), and the entries that stay refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tpsim.cli import main
from tpsim.models import ModelError
from tpsim.models.catalog import CONFIGS
from tpsim.models.hf_config import load_hf_config, spec_from_hf_dict

DATA = Path(__file__).parents[1] / "data" / "models"
ILLUSTRATIVE = json.loads((DATA / "illustrative.json").read_text())  # 32 llama layers
#: Meta's Llama-3.1-405B-Instruct-FP8 config.json (fbgemm_fp8): its modules_to_not_convert
#: names every layer's q/k/v/o_proj and layers 0 and 125's gate/up/down_proj, one module
#: each, and lm_head (Llama 3 paper, arXiv:2407.21783 sec. 6.2: attention and the first and
#: last layers stay bf16; https://huggingface.co/meta-llama/Llama-3.1-405B-Instruct-FP8)
META_405B_FP8 = DATA / "llama-3.1-405b-instruct-fp8.json"
ALL = tuple(range(126))


def _quantised(base: dict, quant: dict) -> dict:
    return {**base, "quantization_config": quant}


def _fp8(skip: dict) -> dict:
    return {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, **skip}


def _compressed(ignore: list[str]) -> dict:
    return {"quant_method": "compressed-tensors", "ignore": ignore,
            "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}  # fmt: skip


def test_meta_405b_fp8_keeps_attention_and_its_first_and_last_mlp() -> None:
    """The one-module-a-line list (508 entries) reads as attention on every layer and the
    MLP of layers 0 and 125; transformers' conversion script's whole-layer form (``model.
    layers.0``, ``model.layers.N.self_attn``) reads the same."""
    spec = load_hf_config(META_405B_FP8)
    assert spec.dtype == "fp8" and spec.num_layers == 126
    assert spec.kept_16bit == (("qkv_proj", ALL), ("o_proj", ALL), ("mlp_up", (0, 125)),
                               ("mlp_down", (0, 125)))  # fmt: skip
    assert spec.kept.describe() == "attention on every layer; MLP on layers 0, 125"
    cfg = json.loads(META_405B_FP8.read_text())
    whole = ["model.layers.0", "model.layers.125", "lm_head"]
    whole += [f"model.layers.{i}.self_attn" for i in range(1, 125)]
    again = spec_from_hf_dict(_quantised(cfg, _fp8({"modules_to_not_convert": whole})), "w")
    assert again.kept_16bit == spec.kept_16bit
    # its JSON: the groups and their layers
    assert spec.to_dict()["kept_16bit"]["mlp_down"] == [0, 125]


def test_a_compressed_tensors_ignore_list_of_regexes() -> None:
    """llm-compressor's ``re:`` entries match each linear layer's name from its start
    (Kimi-K2's form on DeepSeek-V3: attention, shared experts and the dense layers' MLP
    16-bit, routed experts quantised; ``re:.*mlp.gate$`` is the router)."""
    ds3 = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    ignore = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
              r"re:.*mlp\.(gate|up|gate_up|down)_proj.*", "re:.*mlp.gate$"]  # fmt: skip
    spec = spec_from_hf_dict(_quantised(ds3, _compressed(ignore)), "k")
    moe = tuple(range(3, 61))
    assert spec.kept_16bit == (
        ("qkv_proj", tuple(range(61))), ("o_proj", tuple(range(61))), ("mlp_up", (0, 1, 2)),
        ("mlp_down", (0, 1, 2)), ("shared_up", moe), ("shared_down", moe),
    )  # fmt: skip
    # per-layer regexes: the routed experts of the first and last MoE layers
    qwen = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    ends = _compressed([r"re:model\.layers\.(0|47)\.mlp\.experts.*", "lm_head"])
    assert spec_from_hf_dict(_quantised(qwen, ends), "q").kept_16bit == (("experts", (0, 47)),)


def test_modelopt_patterns_and_bare_module_names() -> None:
    """ModelOpt's ``exclude_modules`` patterns (``*`` across dots) and AWQ's bare names
    (``self_attn`` anywhere); Mixtral's experts by their own names."""
    qwen = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4",
             "exclude_modules": ["lm_head", "model.layers.*.self_attn*",
                                 "model.layers.*.mlp.gate"]}  # fmt: skip
    spec = spec_from_hf_dict(_quantised(qwen, nvfp4), "n")
    assert spec.dtype == "fp4" and spec.kept.describe() == "attention on every layer"
    # "model.layers.1*" is layers 1 and 10-19
    tens = {**nvfp4, "exclude_modules": ["model.layers.1*"]}
    kept = dict(spec_from_hf_dict(_quantised(qwen, tens), "n").kept_16bit)
    assert kept["experts"] == (1, *range(10, 20)) == kept["o_proj"]
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128,
           "modules_to_not_convert": ["self_attn", "layers.3.mlp"]}  # fmt: skip
    spec = spec_from_hf_dict(_quantised(ILLUSTRATIVE, awq), "a")
    assert spec.kept.describe() == "attention on every layer; MLP on layer 3"
    mixtral = json.loads((CONFIGS / "mixtral-8x7b.json").read_text())
    skip = _fp8({"modules_to_not_convert": ["model.layers.31.block_sparse_moe.experts"]})
    assert spec_from_hf_dict(_quantised(mixtral, skip), "m").kept_16bit == (("experts", (31,)),)


@pytest.mark.parametrize(
    ("cfg", "quant", "key", "entry", "why"),
    [
        # vLLM refuses a fused layer whose shards differ (quant_utils.is_layer_skipped)
        (ILLUSTRATIVE, _fp8({"modules_to_not_convert": ["model.layers.0.self_attn.q_proj"]}),
         "modules_to_not_convert", "model.layers.0.self_attn.q_proj",
         "part of layer 0's attention QKV"),
        (ILLUSTRATIVE, _compressed(["re:.*gate_proj$"]), "ignore", "re:.*gate_proj$",
         "part of layer 0's MLP gate/up"),
        # one FusedMoE holds a layer's experts in one format
        ("qwen3-30b-a3b", _compressed(["model.layers.3.mlp.experts.0"]), "ignore",
         "model.layers.3.mlp.experts.0", "some of layer 3's routed experts"),
        # a module tpsim does not price (a GPT-2-style name on a llama)
        (ILLUSTRATIVE, _fp8({"ignored_layers": ["model.layers.0.mlp.c_fc"]}), "ignored_layers",
         "model.layers.0.mlp.c_fc", "names no attention, MLP or expert projection"),
        ("qwen3-30b-a3b", _compressed(["model.layers.3.mlp.experts.17.down_proj"]), "ignore",
         "model.layers.3.mlp.experts.17.down_proj", "keeps one routed expert 16-bit"),
        (ILLUSTRATIVE, _compressed(["re:(self_attn"]), "ignore", "re:(self_attn",
         "not a regular expression"),
        # Python's re backtracks: a repeated group takes exponential time (this one hung
        # on a 32-character name), so does a long chain of .*
        (ILLUSTRATIVE, _compressed(["re:(.*)*x"]), "ignore", "re:(.*)*x", "does not run"),
        (ILLUSTRATIVE, _compressed(["re:.*a.*b.*c"]), "ignore", "re:.*a.*b.*c", "at most 2"),
    ],
)  # fmt: skip
def test_what_a_skip_list_cannot_express_is_refused_naming_the_entry(
    cfg: dict | str, quant: dict, key: str, entry: str, why: str
) -> None:
    base = json.loads((CONFIGS / f"{cfg}.json").read_text()) if isinstance(cfg, str) else cfg
    with pytest.raises(
        ModelError, match=rf"^quantization_config\.{key}='{re.escape(entry)}'.*{re.escape(why)}"
    ):
        spec_from_hf_dict(_quantised(base, quant), "q")


def test_a_refused_entry_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_quantised(ILLUSTRATIVE, _fp8(
        {"modules_to_not_convert": ["model.layers.7.mlp.up_proj"]}))))  # fmt: skip
    rc = main(["run", "--model", str(path), "--topology", "dgx-h100", "--tp", "2"])
    out, err = capsys.readouterr()
    assert rc == 2 and not out and err.count("\n") == 1
    assert "'model.layers.7.mlp.up_proj'" in err and "MLP gate/up" in err


def test_skip_lists_of_modules_kept_16_bit_anyway_still_load() -> None:
    """The LM head, embedding, norms, routers (llm-compressor's ``re:.*mlp.gate$``,
    AutoAWQ's Mixtral ``gate``, Qwen2-MoE's shared-expert gate) and layers past
    num_hidden_layers (DeepSeek's MTP layer 61) are 16-bit in tpsim already, or not loaded:
    nothing kept."""
    ds3 = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    quant = _compressed(["lm_head", "re:.*mlp.gate$", "model.embed_tokens", "*shared_expert_gate",
                         "model.layers.61*", "model.layers.3.mlp.gate", "model.norm"])  # fmt: skip
    spec = spec_from_hf_dict(_quantised(ds3, quant), "ds")
    assert spec.dtype == "fp8" and spec.kept_16bit == ()
    mixtral = json.loads((CONFIGS / "mixtral-8x7b.json").read_text())
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["gate"]}
    assert spec_from_hf_dict(_quantised(mixtral, awq), "m").kept_16bit == ()
    # gpt-oss's own reader: attention, router, embedding and head bf16 beside MXFP4 experts
    oss = json.loads((CONFIGS / "gpt-oss-20b.json").read_text())
    assert "self_attn" in str(oss["quantization_config"]["modules_to_not_convert"])
    spec = spec_from_hf_dict(oss, "oss")
    assert spec.expert_dtype == "mxfp4" and spec.kept_16bit == ()
    with pytest.raises(ModelError, match=r"^quantization_config\.ignore=.*list of module names"):
        spec_from_hf_dict(_quantised(ds3, {**quant, "ignore": "lm_head"}), "ds")
