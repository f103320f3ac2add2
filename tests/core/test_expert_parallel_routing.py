"""Expert parallelism under uneven routing (tpsim.core.lowering.experts): routing histograms
(--routing), each rank's share of the routed pairs, and the uneven all-to-all traffic they
move."""

from __future__ import annotations

import math
import re

import pytest
from tpsim.core.api import simulate
from tpsim.core.config import ConfigError, Layout, Options, Workload
from tpsim.core.lowering.experts import expert_split, read_histogram
from tpsim.models import MODELS

MIXTRAL = MODELS["mixtral-8x7b"]  # 8 experts, top 2
QWEN = MODELS["qwen3-30b-a3b"]  # 128 experts, top 8


# -- routing histograms ----------------------------------------------------------------------


def test_a_histogram_gives_each_rank_its_experts_share(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "hist.csv"
    path.write_text("# tokens per expert\n40, 10, 10, 10, 10, 10, 5, 5\n")
    hist = read_histogram(str(path), 8, 32)
    assert hist == ((0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05),)
    xs = expert_split(MIXTRAL, 8, 1, 8, 1, histogram=hist)
    tokens = 1000
    loads = [xs.load(tokens, e, 0) for e in range(8)]
    assert [x.pairs for x in loads] == [800, 200, 200, 200, 200, 200, 100, 100]
    # expert 0 is picked by a token with probability k * 0.4 = 0.8
    assert xs.load(1, 0, 0).experts_read == pytest.approx(0.8)
    # the hot rank gates every layer: the step is slower than balanced routing
    lay, wl = Layout(8, ep=8), Workload(256, "prefill", prompt_len=64)
    even = simulate("mixtral-8x7b", "dgx-h100", lay, wl, Options(expert_skew=1.0))
    hot = simulate("mixtral-8x7b", "dgx-h100", lay, wl, Options(routing=str(path)))
    assert hot.summary["latency_s"] > 1.3 * even.summary["latency_s"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1,2,3\n", "3 values, the model has 8 experts"),
        ("1,2,3,4,5,6,7,x\n", "not a list of numbers"),
        ("0,0,0,0,0,0,0,0\n", "every count is 0"),
        ("1,1,1,1,1,1,1,-1\n", "expert 7's count is -1; needs non-negative"),
        ("1,nan,1,1,1,1,1,1\n", "expert 1's count is nan"),
        ("# nothing\n", "no histogram in it"),
        ("1,1,1,1,1,1,1,1\n" * 3, "3 lines; give one, or one per MoE layer (32)"),
    ],
)
def test_bad_histograms_are_refused_naming_the_line(tmp_path: object, text: str, says: str) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "h.txt"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        simulate("mixtral-8x7b", "dgx-h100", Layout(8, ep=8), options=Options(routing=str(path)))


def test_a_histogram_top_k_routing_cannot_make_is_refused(tmp_path: object) -> None:
    """Top-2: a token picks an expert at most once, so no expert takes over half the pairs
    (one hot expert alone would read one expert's weights, under the step's floor)."""
    from pathlib import Path

    path = Path(str(tmp_path)) / "one.txt"
    path.write_text("100,0,0,0,0,0,0,0\n")
    with pytest.raises(ConfigError, match=r"line 1: expert 0 takes 100.0% .* at most 50.0%"):
        read_histogram(str(path), 8, 32, top_k=2)
    path.write_text("50,50,0,0,0,0,0,0\n")
    assert read_histogram(str(path), 8, 32, top_k=2) == ((0.5, 0.5, 0, 0, 0, 0, 0, 0),)


def test_one_histogram_line_per_moe_layer_skips_the_dense_ones(tmp_path: object) -> None:
    from dataclasses import replace
    from pathlib import Path

    model = replace(MIXTRAL, dense_layers=(0,))
    rows = [[1] * 8 for _ in range(31)]
    rows[0] = [8, 0, 0, 0, 0, 0, 0, 0]  # the first MoE layer (layer 1): all on expert 0
    path = Path(str(tmp_path)) / "h.txt"
    path.write_text("\n".join(",".join(map(str, r)) for r in rows) + "\n")
    xs = expert_split(model, 8, 1, 8, 1, histogram=read_histogram(str(path), 8, 31))
    assert xs.load(64, 0, 1).pairs == 128 and xs.load(64, 1, 1).pairs == 0
    assert xs.load(64, 0, 2).pairs == 16


# -- uneven routing moves uneven traffic ------------------------------------------------------


def test_rank_shares_follow_the_load() -> None:
    """Each rank's share of the dispatched bytes is its experts' share of the pairs (over
    its width slices); uniform routing has none (every rank alike)."""
    assert expert_split(QWEN, 1, 8, 8, 1).rank_shares(0) == ()
    xs = expert_split(QWEN, 1, 8, 8, 1, 16.0)
    shares = xs.rank_shares(3)
    assert math.fsum(shares) == pytest.approx(1.0)
    tokens = 4096
    for r in range(8):  # the loads of the compute side, as the shares of the traffic
        assert xs.load(tokens, r, 3).pairs == pytest.approx(tokens * 8 * shares[r], abs=1)
    assert max(range(8), key=lambda r: shares[r]) == 3  # the hot rank rotates with the layer
    halves = expert_split(QWEN, 2, 4, 4, 2, 16.0).rank_shares(1)  # two width slices each
    assert halves[2] == halves[3] == pytest.approx(max(halves)) and len(halves) == 8


@pytest.mark.parametrize("a2a", ["nccl", "deepep"])
def test_a_hot_rank_receives_every_rank_s_tokens(tmp_path: object, a2a: str) -> None:
    """All of a layer's pairs to the last GPU's 16 experts (each a sixteenth, under the
    eighth top-8 routing allows): every rank sends its whole dispatch to the last GPU, whose
    port takes 7 ranks' bytes, and the combine sends them all back from it; the exchange is
    slower than under uniform routing, by about that port's load."""
    from pathlib import Path

    path = Path(str(tmp_path)) / "hot.txt"
    path.write_text(",".join(["0"] * 112 + ["1"] * 16) + "\n")
    lay, wl = Layout(1, attention_dp=8, ep=8), Workload(64)
    opts = {"moe_a2a": a2a}
    even = simulate("qwen3-30b-a3b", "dgx-h100", lay, wl, Options(**opts))
    hot = simulate("qwen3-30b-a3b", "dgx-h100", lay, wl, Options(**opts, routing=str(path)))

    def sent(r: object, site: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for rec in r.records:  # type: ignore[attr-defined]
            if rec.site == site and rec.layer == 0:
                out[rec.rank] = out.get(rec.rank, 0) + rec.bytes
        return out

    dispatch = sent(hot, "moe_dispatch")
    assert dispatch[7] == 0 and len({dispatch[r] for r in range(7)}) == 1  # all to GPU 7
    combine = sent(hot, "moe_combine")
    d = 2048  # DeepEP: fp8 out (a scale per 128 values, a header), bf16 back
    back = 2 * d / (d + 4 * (d // 128) + 16) if a2a == "deepep" else 1.0
    assert combine[7] == pytest.approx(7 * dispatch[0] * back, rel=1e-3)  # GPU 7 returns all
    assert all(combine[r] == 0 for r in range(7))
    t_even = even.summary["communication"]["by_site"]["moe_dispatch"]["time_s"]
    t_hot = hot.summary["communication"]["by_site"]["moe_dispatch"]["time_s"]
    assert t_hot > 2 * t_even
