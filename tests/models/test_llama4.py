"""Llama 4 (Scout, Maverick) read from their config.json: the wrapper and the bare text
config, the MoE and dense layers, the chunked and full attention layers, the published
sizes, chunked attention's keys, prefill cost and cache, and malformed fields refused.

The catalog's models/configs/llama-4-scout.json and llama-4-maverick.json are rebuilt from
sources the search tools held (no verbatim copy of either was found): Maverick's is
TensorRT-LLM's tests/unittest/_torch/modeling/test_modeling_llama_min_latency.py
LLAMA_4_MAVERICK_TWO_LAYER_CONFIG with its two changes undone (num_hidden_layers 2 -> 48,
the added no_rope_layer_interval 2 removed); Scout's shares its fields but for 16 experts,
interleave_moe_layer_step 1, use_qk_norm true (transformers' modeling_llama4.py: "the 128E
model does not use qk_norm"), max_position_embeddings 10485760 and its llama3 rope_scaling
(factor 16), as neuronx-distributed-inference's LLAMA4_SCOUT_MINIMAL_MOCK_CONFIG and other
projects' copies of its config give them.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
from tpsim import Layout, Options, Workload, simulate
from tpsim.cli import main
from tpsim.core.kernels.attention import attention_prefill, causal_pairs, chunked_pairs
from tpsim.core.memory import kv_elements_per_rank
from tpsim.models import ModelError, spec_from_hf_dict
from tpsim.models.catalog import CONFIGS, get_model

TOPO = "dgx-h100"


def _cfg(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_scout_and_maverick_layers() -> None:
    scout, mav = get_model("llama-4-scout"), get_model("llama-4-maverick")
    # NoPE (full attention) on every 4th layer, chunked on the RoPE ones
    full = tuple(range(3, 48, 4))
    for m in (scout, mav):
        assert m.attention_chunk_size == 8192
        assert m.chunked_layers == tuple(i for i in range(48) if i not in full)
        assert (m.num_heads, m.num_kv_heads, m.head_dim, m.hidden_size) == (40, 8, 128, 5120)
        assert m.moe_intermediate_size == m.shared_intermediate_size == 8192
        assert m.experts_per_token == 1 and not m.tied_embeddings and not m.qk_norm
    assert scout.num_experts == 16 and scout.dense_layers == ()
    # Maverick: MoE where (i + 1) % 2 == 0, dense MLPs of 16384 between
    assert mav.num_experts == 128 and mav.dense_layers == tuple(range(0, 48, 2))
    assert mav.intermediate_size == 16384 and mav.num_moe_layers == 24


def test_counts_match_metas() -> None:
    """Meta's model cards: Scout 17B active / 109B total, Maverick 17B / 400B. tpsim counts
    the language model; the vision encoder (34 layers of 1408, its adapter and projector,
    about 0.87 B) is not in the total, so the total is within 1.2 % below Meta's."""
    scout, mav = get_model("llama-4-scout"), get_model("llama-4-maverick")
    d, experts_w = 5120, 3 * 5120 * 8192
    attention = d * (5120 + 2 * 1024) + 5120 * d
    embed = 2 * 202048 * d
    moe_layer = 16 * experts_w + experts_w + d * 16
    assert scout.num_params() == 48 * (attention + moe_layer + 2 * d) + embed + d
    assert scout.num_params() == pytest.approx(109e9, rel=0.012)
    assert scout.num_params() < 109e9
    assert mav.num_params() == pytest.approx(400e9, rel=0.01)
    for m in (scout, mav):
        assert m.active_params() == pytest.approx(17e9, rel=0.02)
    # the vision tower, said in the notes: with it, the totals are Meta's within 0.4 %
    vision = 34 * (4 * (1408**2 + 1408) + 2 * 1408 * 5632 + 5632 + 1408 + 4 * 1408)
    vision += 588 * 1408 + 1408 + 577 * 1408 + 4 * 1408 + 5632 * 4096 + 4096**2 + 4096 * d
    assert scout.vision_params == mav.vision_params == vision == 871_932_416
    assert scout.num_params() + vision == pytest.approx(109e9, rel=0.004)
    assert mav.num_params() + vision == pytest.approx(400e9, rel=0.004)
    assert any(n.startswith("vision encoder: about 0.87 B") for n in scout.notes())


def test_wrapper_and_bare_text_config_read_alike() -> None:
    cfg = _cfg("llama-4-maverick")
    wrapped = spec_from_hf_dict(cfg, "x")
    bare = spec_from_hf_dict(cfg["text_config"], "x")
    assert dataclasses.replace(wrapped, vision_params=0) == bare and not bare.vision_params
    # absent fields take Llama4TextConfig's defaults: chunks of 8192, NoPE every 4th layer
    text = {k: v for k, v in cfg["text_config"].items() if k != "attention_chunk_size"}
    assert spec_from_hf_dict(text, "x") == bare
    # an explicit null: no chunking, every layer attends fully
    plain = spec_from_hf_dict({**text, "attention_chunk_size": None}, "x")
    assert plain.chunked_layers == () and plain.attention_chunk_size == 0
    # no_rope_layers and moe_layers given as transformers fills them
    rope = [int((i + 1) % 4 != 0) for i in range(48)]
    given = {**text, "no_rope_layers": rope, "moe_layers": list(range(1, 48, 2))}
    assert spec_from_hf_dict(given, "x") == bare
    kinds = ["chunked_attention" if f else "full_attention" for f in rope]
    assert spec_from_hf_dict({**text, "layer_types": kinds}, "x") == bare


def test_chunked_decode_reads_its_chunk() -> None:
    """A query at context L reads ((L - 1) mod 8192) + 1 keys on a chunked layer, L on a
    full one."""
    m = get_model("llama-4-scout")
    assert [m.attended(0, n) for n in (8192, 8193, 20000)] == [8192, 1, 20000 - 16384]
    assert [m.attended(3, n) for n in (8192, 8193, 20000)] == [8192, 8193, 20000]
    per_key = 2 * 40 * 256
    keys = 36 * (20000 - 16384) + 12 * 20000
    assert m.flops_per_token(20000) == 2 * m.matmul_params() + per_key * keys


def test_chunked_prefill_pairs() -> None:
    assert chunked_pairs(16384, 8192) == 2 * causal_pairs(8192)
    assert chunked_pairs(100, 8192) == causal_pairs(100)
    # a prompt of 1000 after 8000 cached: 192 queries in the first chunk, 808 in the next
    pairs = sum(8000 + i + 1 for i in range(192)) + causal_pairs(808)
    assert chunked_pairs(9000, 8192) - chunked_pairs(8000, 8192) == pairs


def test_chunked_prefill_cheaper_than_full() -> None:
    """A 16K prompt on a chunked layer is two 8K causal blocks: half the pairs of full
    causal attention, and a prefill of the model costs less than with every layer full."""
    m = get_model("llama-4-scout")
    full = m.__class__(**{**m.__dict__, "attention_chunk_size": 0, "chunked_layers": ()})
    work = Workload(1, "prefill", 16384, 16384)
    lay = Layout(4)
    chunked_s = simulate(m, TOPO, lay, work, Options()).summary["latency_s"]
    full_s = simulate(full, TOPO, lay, work, Options()).summary["latency_s"]
    assert chunked_s < full_s
    # one layer's kernel: half the FLOPs
    kw = {"act_bytes": 2, "kv_bytes": 2}
    hw = _hardware()
    one = attention_prefill(1, 16384, 10, 2, 128, hw, chunk=8192, **kw)
    whole = attention_prefill(1, 16384, 10, 2, 128, hw, **kw)
    assert one.flops * 2 == pytest.approx(whole.flops, rel=1e-3)
    # a prefill chunk after a cached prefix reads only the cached keys of its chunk
    after = attention_prefill(1, 1000, 10, 2, 128, hw, cached=8192 + 100, chunk=8192, **kw)
    plain = attention_prefill(1, 1000, 10, 2, 128, hw, cached=100, **kw)
    assert after.flops == plain.flops and after.bytes == plain.bytes


def _hardware():  # type: ignore[no-untyped-def]
    from tpsim.core.plan import resolve

    plan = resolve("llama-4-scout", TOPO, Layout(4), Workload(1, "decode", 1, 1), Options())
    return plan.hardware


def test_kv_held_at_100k() -> None:
    """At 100K tokens a chunked layer holds one 8192-token chunk, a full one all 100K: 36
    chunked and 12 full layers hold 12 x 100000 + 36 x 8192 tokens, 0.35 of full attention."""
    m = get_model("llama-4-scout")
    full = m.__class__(**{**m.__dict__, "attention_chunk_size": 0, "chunked_layers": ()})
    held = kv_elements_per_rank(m, 4, 100_000, range(48))
    whole = kv_elements_per_rank(full, 4, 100_000, range(48))
    assert held * 48 * 100_000 == whole * (12 * 100_000 + 36 * 8192)
    assert m.held(0, 100_000) == 8192 and m.held(0, 5000) == 5000


def test_prefill_pass_holds_every_new_token() -> None:
    """A prefill pass writes each new token's K and V into the cache before attending, and
    vLLM frees a chunked layer's earlier chunks only before the next step
    (ChunkedLocalAttentionSpec.max_memory_usage_bytes: a chunk's computed tokens plus the
    newly scheduled ones): a 32K prompt in one pass holds all 32K tokens on every layer,
    as full attention does; after 10,000 cached tokens, 2,000 new ones hold 1,808 + 2,000."""
    m = get_model("llama-4-scout")
    assert m.held(0, 32_768, 32_768) == 32_768
    assert m.held(0, 12_000, 2_000) == 1_808 + 2_000
    assert m.held(3, 12_000, 2_000) == 12_000  # a NoPE layer: all of them
    hw = Workload(1, "prefill", 32_768, 1)
    one = kv_elements_per_rank(m, 4, 1, range(48))
    memory = simulate("llama-4-scout", TOPO, Layout(4), hw, Options()).summary["memory"]
    assert memory["kv_cache_bytes_per_gpu"] == 32_768 * one * 2  # bf16, all 48 layers


@pytest.mark.parametrize(("change", "says"), [
    ({"attention_chunk_size": 0}, r"^attention_chunk_size=0 .*positive"),
    ({"attention_chunk_size": "8k"}, r"^attention_chunk_size='8k' .*integer"),
    ({"interleave_moe_layer_step": 0}, r"^interleave_moe_layer_step=0 .*positive"),
    ({"interleave_moe_layer_step": 64}, r"^interleave_moe_layer_step=64 .*none of the 48"),
    ({"moe_layers": [0, 2]}, r"^moe_layers=\[0, 2\] .*interleave_moe_layer_step=2"),
    ({"no_rope_layers": [1, 0]}, r"^no_rope_layers=\[1, 0\] .*at least 48 flags"),
    ({"no_rope_layers": [2] * 48}, r"^no_rope_layers=.*0 or 1"),
    ({"layer_types": ["full_attention"] * 48}, r"^layer_types=.*chunked_attention on the RoPE"),
    ({"attention_bias": True}, r"^attention_bias=True .*not modelled"),
    ({"intermediate_size_mlp": -1}, r"^intermediate_size_mlp=-1 .*positive"),
    ({"model_type": "llama"}, r"^text_config.model_type='llama' .*llama4_text"),
])  # fmt: skip
def test_malformed_fields_refused(change: dict, says: str) -> None:
    cfg = copy.deepcopy(_cfg("llama-4-maverick"))
    cfg["text_config"].update(change)
    with pytest.raises(ModelError, match=says):
        spec_from_hf_dict(cfg, "x")


def test_wrapper_without_text_config_refused() -> None:
    cfg = _cfg("llama-4-scout")
    del cfg["text_config"]
    with pytest.raises(ModelError, match=r"^text_config=None .*must be an object"):
        spec_from_hf_dict(cfg, "x")


def test_cli_refuses_a_malformed_config(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = _cfg("llama-4-scout")
    cfg["text_config"]["attention_chunk_size"] = -8
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code = main(["run", "--model", str(path), "--topology", TOPO, "--tp", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "attention_chunk_size=-8" in err[0]


def test_run_scout_tp4() -> None:
    out = simulate("llama-4-scout", TOPO, Layout(4), Workload(8, "decode", 512, 20000), Options())
    assert out.summary["latency_s"] > 0
    assert out.summary["memory"]["fits"]


def _fp8_rule() -> dict:
    """Maverick with an fbgemm_fp8 quantization_config following Meta's fp8_mixed rule
    (meta-llama/llama-models models/llama4/quantization/loader.py convert_to_quantized_model:
    only the routed experts of MoE layers, not those of the first and last layer; the
    shared experts, dense MLPs, attention and vision tower bf16), listed by module name as
    transformers' fbgemm_fp8 modules_to_not_convert does. Built here: the published
    checkpoint's own list was not found."""
    cfg = _cfg("llama-4-maverick")
    skip = ["vision_model", "multi_modal_projector"]
    for i in range(48):
        skip.append(f"language_model.model.layers.{i}.self_attn")
        ffn = f"language_model.model.layers.{i}.feed_forward"
        skip.append(ffn if i % 2 == 0 else f"{ffn}.shared_expert")
    skip.append("language_model.model.layers.47.feed_forward.experts")
    q = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}
    cfg["quantization_config"] = {**q, "modules_to_not_convert": skip}
    return cfg


def test_maverick_fp8_keeps_all_but_the_routed_experts_16bit() -> None:
    m = spec_from_hf_dict(_fp8_rule(), "x")
    kept = dict(m.kept_16bit)
    assert m.dtype == "fp8" and kept["experts"] == (47,)
    assert kept["qkv_proj"] == kept["o_proj"] == tuple(range(48))
    assert kept["mlp_up"] == kept["mlp_down"] == tuple(range(0, 48, 2))
    assert kept["shared_up"] == kept["shared_down"] == tuple(range(1, 48, 2))
    # 23 layers of 128 routed experts in one byte, the rest (and the 16-bit ones) in two
    routed = 23 * 128 * 3 * 5120 * 8192
    assert m.weight_bytes() == 2 * m.num_params() - routed
    # a layer's experts kept in part is refused
    cfg = _fp8_rule()
    cfg["quantization_config"]["modules_to_not_convert"].append(
        "language_model.model.layers.45.feed_forward.experts.3"
    )
    with pytest.raises(ModelError, match=r"modules_to_not_convert=.*experts\.3.*one routed"):
        spec_from_hf_dict(cfg, "x")


def test_serve_maverick_fp8_tp8_ep(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_fp8_rule()))
    args = ["serve", "--model", str(tmp_path), "--topology", TOPO, "--tp", "8", "--ep", "8"]
    args += ["--requests", "6", "--rate", "4", "--prompt-len", "9000", "--output-len", "8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Successful requests:                     6" in out


def test_bare_text_config_with_a_nested_one_refused() -> None:
    text = {**_cfg("llama-4-scout")["text_config"], "text_config": {"hidden_size": 1}}
    with pytest.raises(ModelError, match=r"^text_config=.*text_config tpsim reads: llama4$"):
        spec_from_hf_dict(text, "x")
