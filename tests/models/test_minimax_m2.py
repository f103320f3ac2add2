"""MiniMax-M2 read from its config.json: the fields, the published sizes, the q/k norm over
all heads and its all-reduce under tensor parallelism, the refusals (lightning attention,
and what vLLM's minimax_m2.py does not build), and runs through the CLI.

models/configs/minimax-m2.json is MiniMaxAI/MiniMax-M2's config.json as the sources the
search tools held reproduce it (no verbatim copy of the hub file was found): its fields as
an Ascend deployment guide lists them (attn_type_list of 62 ones, head_dim 128, rotary_dim
64, 256 experts of 1536, top 8, 3 MTP modules, vocab 200064, max_position_embeddings
196608), with the fp8 quantization_config (block [128, 128], modules_to_not_convert gate,
e_score_correction_bias and lm_head) that several projects' fixtures of the official config
agree on.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from tpsim import Layout, Options, Workload, simulate
from tpsim.cli import main
from tpsim.core.config import Options as Opts
from tpsim.core.kernels.costs import hardware_for
from tpsim.core.lowering.lower import QK_VAR_BYTES, lower
from tpsim.core.memory import weight_params_per_gpu
from tpsim.core.precision import precision
from tpsim.models import ModelError, ModelSpec, spec_from_hf_dict
from tpsim.models.catalog import CONFIGS, get_model
from tpsim.topologies.gpus import GPUS

TOPO = "hgx-h200"


def _cfg() -> dict:
    return json.loads((CONFIGS / "minimax-m2.json").read_text())


def test_reads_the_published_config() -> None:
    m = get_model("minimax-m2")
    assert (m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim) == (
        3072, 62, 48, 8, 128)  # fmt: skip
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (256, 8, 1536)
    assert m.shared_intermediate_size == 0 and m.dense_layers == () and not m.qkv_bias
    assert m.qk_norm and m.qk_norm_whole and m.rotary_dim == 64
    assert m.dtype == "fp8" and m.weight_block == (128, 128) and m.kept_16bit == ()
    assert not m.tied_embeddings and m.vocab_size == 200064
    assert m.max_position_embeddings == 196608 and m.mtp_layers == 3
    assert get_model("MiniMaxAI/MiniMax-M2.1") is m


def test_counts_by_hand_and_against_minimaxs() -> None:
    """62 layers of GQA attention, a q/k norm over all heads ([48 x 128] and [8 x 128]), two
    norms, a router [3072, 256] and 256 experts; embedding and head untied. MiniMax's README:
    230 B total, 10 B active; tpsim counts 228.69 B and 10.42 B active without the
    embedding table (11.03 B with it)."""
    m = get_model("minimax-m2")
    d, v = 3072, 200064
    attention = d * (48 + 16) * 128 + 48 * 128 * d
    norms = 2 * d + (48 + 8) * 128
    expert = 3 * d * 1536
    layer = attention + norms + d * 256
    assert m.num_params() == 62 * (layer + 256 * expert) + 2 * v * d + d
    assert m.active_params() == 62 * (layer + 8 * expert) + 2 * v * d + d
    assert m.num_params() / 1e9 == pytest.approx(230, rel=0.01)
    assert m.active_params(embedding=False) / 1e9 == pytest.approx(10, rel=0.05)
    assert m.norm_params_per_layer() == norms


def test_norm_weights_are_sharded_with_the_heads() -> None:
    """MiniMaxText01RMSNormTP holds [h hd / tp] of the q norm's weight: at TP 8 a rank holds
    (6 + 1) x 128 of the norms where a per-head norm (qwen3) holds 2 x 128 whole."""
    m = get_model("minimax-m2")
    per_head = ModelSpec(**{**m.__dict__, "qk_norm_whole": False})
    diff = weight_params_per_gpu(m, 8) - weight_params_per_gpu(per_head, 8)
    assert diff == 62 * ((6 + 1) * 128 - 2 * 128)


def _ops(model: ModelSpec, tp: int, batch: int, phase: str = "decode") -> list:
    opts = Opts(ideal=True)
    gpu = GPUS["h200-sxm"]
    prec = precision(opts, model.dtype, gpu.fp8_flops is not None)
    hw = hardware_for(gpu, prec.math, opts.calibration.kernels, kv_dtype=prec.kv)
    wl = Workload(batch=batch, phase=phase, prompt_len=16, context_len=16)
    return list(lower(model, tp, wl, opts, hw).per_rank[0].ops)


@pytest.mark.parametrize(("tp", "batch"), [(1, 4), (2, 4), (8, 4), (8, 1)])
def test_qk_norm_all_reduce_per_layer(tp: int, batch: int) -> None:
    """vLLM's MiniMaxText01RMSNormTP.forward_qk: above TP 1, one all-reduce a layer of the
    q and k variances, [T, 2] fp32 (8 bytes a token), between the variance pass and the
    scaling one; at TP 1 none, and one norm kernel."""
    ops = _ops(get_model("minimax-m2"), tp, batch)
    calls = [o for o in ops if o.site == "qk_norm"]
    norm = [o for o in ops if o.name == "qk_norm"]
    assert len(norm) == 62
    if tp == 1:
        assert calls == [] and not [o for o in ops if o.name == "qk_norm_var"]
        return
    assert len(calls) == 62 and [o.layer for o in calls] == list(range(62))
    assert {o.collective.op for o in calls} == {"all_reduce"}
    assert {o.collective.nbytes for o in calls} == {QK_VAR_BYTES * batch} == {8 * batch}
    for layer in (0, 61):  # variance pass, all-reduce, scaling pass, in that order
        names = [o.name for o in ops if o.layer == layer]
        i = names.index("qk_norm_var")
        assert names[i : i + 3] == ["qk_norm_var", "qk_norm.all_reduce", "qk_norm"]


def test_a_per_head_norm_has_no_collective() -> None:
    ops = _ops(get_model("qwen3-30b-a3b"), 8, 4)
    assert not [o for o in ops if o.site == "qk_norm"]


def test_prefill_all_reduce_grows_with_the_tokens() -> None:
    ops = _ops(get_model("minimax-m2"), 4, 2, "prefill")
    assert {o.collective.nbytes for o in ops if o.site == "qk_norm"} == {8 * 2 * 16}


def test_run_tp8_ep8_fits_and_counts_the_collective() -> None:
    out = simulate("minimax-m2", TOPO, Layout(8, ep=8), Workload(8, "decode", 512, 4096),
                   Options())  # fmt: skip
    s = out.summary
    assert s["memory"]["fits"]
    site = s["communication"]["by_site"]["qk_norm"]
    assert site["count"] == 62 and site["time_s"] > 0


def test_cli_tp8(capsys: pytest.CaptureFixture) -> None:
    """MiniMax's deployment guides run 8 GPUs with expert parallelism (vLLM
    --enable_expert_parallel, SGLang --ep-size 8): each expert's 1536 split 8 ways is 192, not
    whole fp8 blocks of 128, which vLLM and SGLang refuse to load. TP 8 with EP 8 runs; TP 8
    alone is refused in one line."""
    assert main(["run", "--model", "minimax-m2", "--topology", TOPO, "--tp", "8", "--ep", "8"]) == 0
    out = capsys.readouterr().out
    assert "qk_norm        62 calls" in out and "(fits)" in out
    assert main(["run", "--model", "minimax-m2", "--topology", TOPO, "--tp", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "moe_tp=8" in err[0] and "1536" in err[0]


def test_cli_tp4_runs(capsys: pytest.CaptureFixture) -> None:
    """MiniMax's 4-GPU command: plain TP 4 (1536 / 4 = 384, three blocks)."""
    assert main(["run", "--model", "minimax-m2", "--topology", TOPO, "--tp", "4"]) == 0
    assert "qk_norm        62 calls" in capsys.readouterr().out


def test_serve_tp8_ep8(capsys: pytest.CaptureFixture) -> None:
    args = ["serve", "--model", "minimax-m2", "--topology", TOPO, "--tp", "8", "--ep", "8"]
    args += ["--requests", "6", "--rate", "4", "--prompt-len", "2000", "--output-len", "8"]
    assert main(args) == 0
    assert "Successful requests:                     6" in capsys.readouterr().out


@pytest.mark.parametrize(("change", "says"), [
    ({"attn_type_list": [1] * 5 + [0] + [1] * 56},
     r"^attn_type_list\[5\]=0 .*lightning \(linear\) attention"),
    ({"attn_type_list": [1] * 61}, r"^attn_type_list=.*at least 62"),
    ({"attn_type_list": [1] * 61 + [True]}, r"^attn_type_list\[61\]=True "),
    ({"use_qk_norm": False}, r"^use_qk_norm=False .*whatever it says"),
    ({"qk_norm_type": "per_head"}, r"^qk_norm_type='per_head' .*per_layer"),
    ({"shared_intermediate_size": 1536}, r"^shared_intermediate_size=1536 .*shared expert"),
    ({"rotary_dim": 65}, r"^rotary_dim=65 .*even"),
    ({"rotary_dim": 256}, r"^rotary_dim=256 .*at most"),
    ({"num_experts_per_tok": 300}, r"^num_experts_per_tok=300 .*at most the 256"),
])  # fmt: skip
def test_malformed_refused(change: dict, says: str) -> None:
    cfg = {**_cfg(), **change}
    with pytest.raises(ModelError, match=says) as info:
        spec_from_hf_dict(cfg, "x")
    assert "\n" not in str(info.value)


def test_rotary_from_partial_rotary_factor_and_absent() -> None:
    """vLLM's MiniMaxM2Attention: rope_parameters' partial_rotary_factor wins over
    rotary_dim; without either, all of head_dim rotates (0: all)."""
    cfg = _cfg()
    cfg["rope_parameters"] = {"rope_theta": 5e6, "partial_rotary_factor": 0.25}
    assert spec_from_hf_dict(cfg, "x").rotary_dim == 32
    cfg = _cfg()
    del cfg["rotary_dim"]
    assert spec_from_hf_dict(cfg, "x").rotary_dim == 0


def test_lightning_attention_refused_elsewhere_too() -> None:
    """attn_type_list is read only by minimax_m2: in another family (a relabelled
    MiniMax-Text-01) it is still refused, naming the field."""
    cfg = copy.deepcopy(_cfg())
    cfg["model_type"] = "mixtral"
    cfg["attn_type_list"] = [0, 1]
    with pytest.raises(ModelError, match=r"^attn_type_list=\[0, 1\] .*lightning"):
        spec_from_hf_dict(cfg, "x")
    # MiniMax-Text-01's own model_type is an unknown family
    with pytest.raises(ModelError, match=r"^model_type='minimax_text_01' .*unsupported"):
        spec_from_hf_dict({**_cfg(), "model_type": "minimax_text_01",
                           "architectures": ["MiniMaxText01ForCausalLM"]}, "x")  # fmt: skip


def test_architecture_names_the_family() -> None:
    cfg = {**_cfg(), "model_type": "minimax"}
    with pytest.raises(ModelError, match=r"set model_type to 'minimax_m2'"):
        spec_from_hf_dict(cfg, "x")


def test_cli_refuses_lightning_attention(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = _cfg()
    cfg["attn_type_list"] = [0] * 62
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code = main(["run", "--model", str(path), "--topology", TOPO, "--tp", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "attn_type_list[0]=0" in err[0]
