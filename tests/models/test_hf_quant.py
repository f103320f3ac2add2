"""Quantised checkpoints whose config.json says more than one weight format: the modules a
quantisation leaves 16-bit, and block-scaled fp8 written by llm-compressor."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tpsim.models import ModelError
from tpsim.models.catalog import CONFIGS
from tpsim.models.hf_config import spec_from_hf_dict

DATA = Path(__file__).parents[1] / "data" / "models"
ILLUSTRATIVE = json.loads((DATA / "illustrative.json").read_text())


def _quantised(base: dict, quant: dict) -> dict:
    return {**base, "quantization_config": quant}


@pytest.mark.parametrize(
    ("quant", "key", "entry"),
    [
        # Meta's Llama-3.1-405B-Instruct-FP8 (fbgemm_fp8) keeps attention and the first and
        # last layers in bf16 (Llama 3 paper, arXiv:2407.21783 sec. 6.2; its config.json
        # lists them in modules_to_not_convert:
        # https://huggingface.co/meta-llama/Llama-3.1-405B-Instruct-FP8/blob/main/config.json)
        (
            {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
             "modules_to_not_convert": ["model.layers.0.mlp.down_proj",
                                        "model.layers.0.self_attn.q_proj"]},
            "modules_to_not_convert",
            "model.layers.0.mlp.down_proj",
        ),
        # Kimi-K2-Thinking's compressed-tensors int4 experts leave attention and the shared
        # experts bf16 (https://huggingface.co/moonshotai/Kimi-K2-Thinking/blob/main/config.json)
        (
            {"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:.*self_attn.*"],
             "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int",
                                                       "group_size": 32}}}},
            "ignore",
            "re:.*self_attn.*",
        ),
        # ModelOpt's exclude_modules (nvidia/*-FP4 hf_quant_config.json's key)
        (
            {"quant_method": "modelopt", "quant_algo": "NVFP4",
             "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]},
            "exclude_modules",
            "model.layers.*.self_attn*",
        ),
    ],
)  # fmt: skip
def test_a_checkpoint_leaving_linear_layers_16_bit_is_refused_naming_them(
    quant: dict, key: str, entry: str
) -> None:
    """Sized as all-quantised, Llama-3.1-405B-FP8's 72 B attention parameters took 1 byte
    each instead of 2: its weights came out 410 GB, not 487 (16 % short), and the KV-cache
    room on 8x H100 60 % too large. A mixed checkpoint is refused, naming the entry."""
    with pytest.raises(
        ModelError, match=rf"^quantization_config\.{key}='{re.escape(entry)}'.*16-bit"
    ):
        spec_from_hf_dict(_quantised(ILLUSTRATIVE, quant), "q")


def test_skip_lists_of_modules_kept_16_bit_anyway_still_load() -> None:
    """The LM head, embedding, routers (llm-compressor's ``re:.*mlp.gate$``, AutoAWQ's
    Mixtral ``gate``, Qwen2-MoE's shared-expert gate) and layers past num_hidden_layers
    (DeepSeek's MTP layer 61) are 16-bit in tpsim already, or not loaded."""
    ds3 = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    quant = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
        "ignore": ["lm_head", "re:.*mlp.gate$", "model.embed_tokens", "*shared_expert_gate",
                   "model.layers.61*", "model.layers.3.mlp.gate"],
    }  # fmt: skip
    assert spec_from_hf_dict(_quantised(ds3, quant), "ds").dtype == "fp8"
    mixtral = json.loads((CONFIGS / "mixtral-8x7b.json").read_text())
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["gate"]}
    assert spec_from_hf_dict(_quantised(mixtral, awq), "m").dtype == "int4"
    # gpt-oss's own reader: attention, router, embedding and head bf16 beside MXFP4 experts
    oss = json.loads((CONFIGS / "gpt-oss-20b.json").read_text())
    assert "self_attn" in str(oss["quantization_config"]["modules_to_not_convert"])
    assert spec_from_hf_dict(oss, "oss").expert_dtype == "mxfp4"
    with pytest.raises(ModelError, match=r"^quantization_config\.ignore=.*list of module names"):
        spec_from_hf_dict(_quantised(ds3, {**quant, "ignore": "lm_head"}), "ds")


def _fp8_block_group(block: object) -> dict:
    """llm-compressor's FP8_BLOCK scheme (compressed-tensors' preset: e4m3 weights scaled
    per [128, 128] block, activations per group of 128), as its checkpoints' config.json
    write it (https://github.com/vllm-project/compressed-tensors, quantization/quant_scheme.py)."""
    return {
        "weights": {"num_bits": 8, "type": "float", "strategy": "block",
                    "block_structure": block, "symmetric": True, "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "group",
                              "group_size": 128, "dynamic": True, "symmetric": True},
        "targets": ["Linear"],
    }  # fmt: skip


def test_a_compressed_tensors_block_fp8_checkpoint_keeps_its_blocks(tmp_path: Path) -> None:
    """Its blocks were dropped (only ``weight_block_size`` was read): Qwen3-30B-A3B's
    768-wide experts split 4 ways (192 rows a GPU, not whole 128-row blocks) were simulated,
    a layout vLLM refuses to load; now refused naming moe_tp as the fp8-method checkpoint."""
    from tpsim.core.api import simulate
    from tpsim.core.config import ConfigError, Layout, Workload

    base = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    quant = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"group_0": _fp8_block_group([128, 128])},
        "ignore": ["lm_head", "re:.*mlp.gate$"],
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_quantised(base, quant)))
    assert spec_from_hf_dict(_quantised(base, quant), "q").weight_block == (128, 128)
    with pytest.raises(ConfigError, match=r"^moe_tp=4: .* 768, splits to 192 a GPU"):
        simulate(str(path), "dgx-h100", Layout(4), Workload(8))
    bad = {**quant, "config_groups": {"g": _fp8_block_group(None)}}
    with pytest.raises(ModelError, match=r"^quantization_config\.config_groups\.g\.weights"):
        spec_from_hf_dict(_quantised(base, bad), "q")
