"""Mixture-of-experts models: parameter counts of the catalog's MoE entries against the
published ones, the config.json families, and the closed forms of the MoE lowering
(tensor-parallel experts, uniform routing) under the ideal calibration."""

from __future__ import annotations

import json

import pytest
from tpsim.core.config import Options, Workload
from tpsim.core.kernels.costs import hardware_for
from tpsim.core.lowering.lower import lower
from tpsim.core.memory import memory_per_gpu
from tpsim.core.precision import precision
from tpsim.models import MODELS, ModelError, ModelSpec, spec_from_hf_dict
from tpsim.models.catalog import CONFIGS
from tpsim.models.spec import LATER_FIELDS
from tpsim.topologies.gpus import GPUS

# published total / active parameters (model cards), billions
PUBLISHED = {
    "mixtral-8x7b": (46.7, 12.9),
    "mixtral-8x22b": (141, 39),
    "qwen3-30b-a3b": (30.5, 3.3),
    "qwen3-235b-a22b": (235, 22),
    "qwen3-32b": (32.8, 32.8),
    # DeepSeek-V3 (README_WEIGHTS.md: 671 B, 36.6 B activated, MTP apart), gpt-oss (model
    # card: 116.83 B / 5.13 B, 20.91 B / 3.61 B): active counts without the embedding table
    "deepseek-v3": (671, 37),
    "gpt-oss-120b": (117, 5.1),
    "gpt-oss-20b": (20.9, 3.61),
    # Llama 4's model cards: 17B active of 109B / 400B, the vision encoder (about 0.87 B,
    # not counted by tpsim) in the totals
    "llama-4-scout": (109, 17),
    "llama-4-maverick": (400, 17),
    # MiniMax-AI/MiniMax-M2 README: "230 billion total parameters with 10 billion active"
    "minimax-m2": (230, 10),
    # Qwen/Qwen3-Next-80B-A3B-Instruct's card: "80B total parameters and 3B activated"
    "qwen3-next-80b-a3b": (80, 3),
}
#: Published active counts rounded to a whole 10 B: within half of it (MiniMax-M2's 10.42 B);
#: Qwen3-Next's "A3B" rounded down to the B (3.56 B without the embedding table).
ROUNDED = {"minimax-m2": 0.05, "qwen3-next-80b-a3b": 0.2}
#: Whose published active count leaves the embedding table out (the row a token reads only).
NO_EMBEDDING = ("deepseek-v3", "gpt-oss-120b", "gpt-oss-20b", "minimax-m2", "qwen3-next-80b-a3b")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_and_active_parameters_match_the_published_ones(name: str) -> None:
    total, active = PUBLISHED[name]
    m = MODELS[name]
    assert m.num_params() / 1e9 == pytest.approx(total, rel=0.02)
    counted = m.active_params(embedding=name not in NO_EMBEDDING)
    assert counted / 1e9 == pytest.approx(active, rel=ROUNDED.get(name, 0.02))


def test_mixtral_8x7b_counts_by_hand() -> None:
    m = MODELS["mixtral-8x7b"]
    d, layers, inner = 4096, 32, 14336
    attention = d * (4096 + 2 * 1024) + 4096 * d
    expert = 3 * d * inner
    rest = 2 * 32000 * d + d + layers * 2 * d  # embedding, head, final norm, two norms
    assert m.num_params() == layers * (attention + d * 8 + 8 * expert) + rest
    assert m.active_params() == layers * (attention + d * 8 + 2 * expert) + rest


def test_a_dense_model_is_its_own_active_model() -> None:
    for m in MODELS.values():
        if not m.is_moe:
            assert m.active_params() == m.num_params()
            assert set(m.to_dict()) == {
                f for f in m.__dataclass_fields__ if f not in LATER_FIELDS
            } | ({"qk_norm"} if m.qk_norm else set()) | (
                {"sliding_window", "sliding_layers"} if m.sliding_window else set())  # fmt: skip


def test_every_shipped_config_is_a_catalog_entry() -> None:
    names = {f.stem for f in CONFIGS.glob("*.json")}
    assert names == set(PUBLISHED)
    assert MODELS["qwen3-32b"].qk_norm and MODELS["qwen3-30b-a3b"].qk_norm


def _cfg(name: str) -> dict[str, object]:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_qwen2_moe_shared_expert_and_sparse_step() -> None:
    cfg = {**_cfg("qwen3-30b-a3b"), "model_type": "qwen2_moe", "num_hidden_layers": 4}
    cfg.update(shared_expert_intermediate_size=5632, decoder_sparse_step=2, mlp_only_layers=[1])
    del cfg["attention_bias"]  # absent in qwen2_moe configs: q, k, v biases as qwen2
    m = spec_from_hf_dict(cfg, "q2")
    assert m.shared_intermediate_size == 5632 and m.qkv_bias and not m.qk_norm
    assert m.dense_layers == (0, 1, 2) and m.num_moe_layers == 1  # layer 3 alone is sparse
    assert m.num_params() - m.active_params() == (128 - 8) * m.expert_params()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"experts_per_token": 9}, "experts_per_token=9 .*from 1 to num_experts=8"),
        ({"experts_per_token": 0}, "experts_per_token=0"),
        ({"moe_intermediate_size": 0}, "moe_intermediate_size=0"),
        ({"dense_layers": (40,)}, "dense_layers=\\(40,\\)"),
        ({"num_experts": -1}, "num_experts=-1"),
        ({"gated_mlp": False}, "gated, bias-free"),
    ],
)
def test_moe_fields_are_checked(change: dict[str, object], says: str) -> None:
    fields = {**MODELS["mixtral-8x7b"].__dict__, **change}
    with pytest.raises(ModelError, match=says):
        ModelSpec(**fields)  # type: ignore[arg-type]


def test_dense_models_refuse_expert_fields() -> None:
    fields = {**MODELS["mistral-7b"].__dict__, "experts_per_token": 2}
    with pytest.raises(ModelError, match=r"experts_per_token=2 .*needs num_experts \> 0"):
        ModelSpec(**fields)  # type: ignore[arg-type]


def test_distinct_experts_read_pencil_values() -> None:
    m = MODELS["mixtral-8x7b"]  # E = 8, k = 2
    assert m.experts_read(1) == pytest.approx(2.0)
    assert m.experts_read(2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert m.experts_read(256) == pytest.approx(8.0)
    assert m.experts_read(0) == 0.0


def _ideal_ops(model: ModelSpec, tp: int, batch: int) -> list:
    opts = Options(ideal=True)
    gpu = GPUS["h100-sxm"]
    prec = precision(opts, model.dtype, gpu.fp8_flops is not None)
    hw = hardware_for(gpu, prec.math, opts.calibration.kernels, kv_dtype=prec.kv)
    wl = Workload(batch=batch, phase="decode", prompt_len=8, context_len=8)
    return list(lower(model, tp, wl, opts, hw).per_rank[0].ops)


@pytest.mark.parametrize("tp", [1, 2])
def test_mixtral_decode_reads_the_picked_experts_only(tp: int) -> None:
    """Batch 1: two experts' weights per layer; batch 256: all eight (bf16, 1/tp each)."""
    m = MODELS["mixtral-8x7b"]
    per_expert = 3 * 4096 * 14336 // tp * 2  # bytes of one expert on one rank
    for batch, experts in ((1, 2.0), (256, m.experts_read(256))):
        ops = [o for o in _ideal_ops(m, tp, batch) if o.layer == 0]
        weights = sum(o.bytes for o in ops if o.name in ("experts_up", "experts_down"))
        rows = batch * 2  # token-expert pairs
        activations = rows * (4096 + 2 * 14336 // tp) * 2 + rows * (14336 // tp + 4096) * 2
        assert weights == pytest.approx(experts * per_expert + activations, abs=2)


def test_moe_flops_per_token_are_twice_the_active_linear_params() -> None:
    """Every linear of every layer and the head: 2 FLOPs per active weight per token."""
    for name in ("mixtral-8x7b", "qwen3-30b-a3b"):
        m = MODELS[name]
        batch = 3
        gemms = [o for o in _ideal_ops(m, 1, batch) if o.kind == "gemm"]
        assert sum(o.flops for o in gemms) == pytest.approx(2 * batch * m.matmul_params())


def test_mixtral_tp2_weights_per_gpu() -> None:
    m = MODELS["mixtral-8x7b"]
    wl = Workload(batch=1, phase="decode", prompt_len=8, context_len=8)
    mem = memory_per_gpu(m, 2, wl, Options(), GPUS["h100-sxm"])
    assert mem.weights_bytes_per_gpu / 1e9 == pytest.approx(46.7, rel=0.01)
    assert mem.weights_bytes_per_gpu == pytest.approx(m.num_params(), rel=1e-4)  # x 2 B / 2
