"""The all-to-all of expert parallelism's dispatched tokens (tpsim.core.lowering.experts):
the hosts a grouped-routing token reaches, DeepEP's fp8 dispatch and bf16 combine, the run
text over two hosts, and --moe-a2a without attention DP refused."""

from __future__ import annotations

import math

import pytest
from tpsim.core.api import simulate
from tpsim.core.config import ConfigError, Layout, Options, Workload
from tpsim.core.lowering.experts import expert_split
from tpsim.models import MODELS

QWEN = MODELS["qwen3-30b-a3b"]  # 128 experts, top 8


# -- the all-to-all kernels of dispatched tokens -----------------------------------------------


def test_grouped_routing_bounds_the_hosts_a_token_reaches() -> None:
    """DeepSeek-V3: 256 experts in 8 groups, each token within 4 groups. Over 8 hosts (a
    group per host) a token reaches 8 (1 - C(7,4)/C(8,4)) = 4 hosts: half its 8 pairs cross
    to a host another of its pairs already crosses to."""
    from dataclasses import replace

    xs = replace(expert_split(MODELS["deepseek-v3"], 1, 64, 64, 1), nodes=8)
    assert xs.nodes_hit() == pytest.approx(4.0)
    assert xs.node_dedup() == pytest.approx(0.5)
    plain = replace(expert_split(QWEN, 1, 16, 16, 1), nodes=2)  # 128 experts, top 8, 2 hosts
    miss = 1 - math.comb(64, 8) / math.comb(128, 8)
    assert plain.nodes_hit() == pytest.approx(2 * miss)


@pytest.mark.parametrize(("phase", "algo"), [("decode", "deepep_ll"), ("prefill", "deepep_normal")])
def test_deepep_dispatches_fp8_and_combines_bf16(phase: str, algo: str) -> None:
    wl = Workload(8, phase, prompt_len=64)
    r = simulate("deepseek-v3", "hgx-h200", Layout(1, attention_dp=8, ep=8), wl,
                 Options(dtype="fp8", moe_a2a="deepep"))  # fmt: skip
    ops = {
        rec.name.split(".")[0]: rec
        for rec in r.records
        if rec.site in ("moe_dispatch", "moe_combine")
    }
    pairs = wl.tokens * 8  # TP 1: each GPU dispatches its own tokens' 8 pairs
    assert f"all_to_all {pairs * (7168 + 4 * 56 + 16)} B" in ops["moe_dispatch"].detail
    assert f"all_to_all {pairs * 2 * 7168} B" in ops["moe_combine"].detail
    assert algo in ops["moe_dispatch"].detail


def test_attention_dp_over_two_hosts_says_so_in_the_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tpsim.cli import main

    argv = ["run", "--model", "mixtral-8x7b", "--topology", "dgx-h100", "--nodes", "2",
            "--tp", "1", "--attention-dp", "16", "--ep", "8", "--batch", "8",
            "--engine", "sglang"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "TP 1 x attention-DP 16, EP 8 x MoE-TP 2" in out
    assert "engine sglang" in out
    assert "network 8 NICs per host" in out
    assert "dp 0 pp 0: n0.gpu0-7, n1.gpu0-7" in out
    assert "per replica" not in out
    assert "1 of 8 routed experts per GPU, 1/2 of each one's width" in out
    assert "tokens dispatched by all-to-all (NCCL, --moe-a2a nccl)" in out  # which kernels


def test_deepep_without_attention_dp_is_refused_naming_it() -> None:
    """--moe-a2a picks the dispatch kernels of attention DP; without it there is no
    dispatch, and the choice ran as a silent no-op."""
    with pytest.raises(ConfigError, match=r"^moe_a2a=deepep: .*attention_dp > 1"):
        simulate("qwen3-30b-a3b", "dgx-h100", Layout(8, ep=8), Workload(4),
                 Options(moe_a2a="deepep"))  # fmt: skip
