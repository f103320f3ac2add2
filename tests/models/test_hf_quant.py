"""Quantised checkpoints whose config.json says more than one thing about their weights:
block-scaled fp8 written by llm-compressor (the modules a quantisation leaves 16-bit:
test_hf_skiplist.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpsim.models import ModelError
from tpsim.models.catalog import CONFIGS
from tpsim.models.hf_config import spec_from_hf_dict

DATA = Path(__file__).parents[1] / "data" / "models"
ILLUSTRATIVE = json.loads((DATA / "illustrative.json").read_text())


def _quantised(base: dict, quant: dict) -> dict:
    return {**base, "quantization_config": quant}


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
