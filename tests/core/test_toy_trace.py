"""Layer 1 of the tests: a toy case whose whole record list is written out by hand.

Two GPUs of a made-up type with 1e12 FLOP/s and 1e12 B/s (so a kernel takes
``max(flops, bytes)`` picoseconds), one 100 GB/s link with 1 us latency, a one-layer toy
model, a decode step of one sequence at context 4, ideal mode (no launch cost, no fixed
overheads). Every duration below is worked out from the shapes in the comment beside it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim import Options, Workload, simulate
from tpsim.models.spec import ModelSpec
from tpsim.topologies.io import load_topology

PS, US = 1e-12, 1e-6

TOPOLOGY = """\
name: toy-pair
gpus:
  toy: {bf16_tflops: 1, hbm_TBps: 1, hbm_GB: 80, sm_count: 1}
nodes:
  - {id: gpu0, kind: gpu, type: toy}
  - {id: gpu1, kind: gpu, type: toy}
links:
  - {src: gpu0, dst: gpu1, bandwidth_GBps: 100, latency_us: 1, duplex: true}
"""

# d = 8, 2 heads of 4 (one per GPU), MHA, gated MLP of 16 (8 per GPU), vocab 32 (16 per GPU)
TOY = ModelSpec(
    name="toy",
    hidden_size=8,
    num_layers=1,
    num_heads=2,
    num_kv_heads=2,
    head_dim=4,
    intermediate_size=16,
    vocab_size=32,
    dtype="bf16",
)

STEP = 1 * US + 8 / 100e9  # an 8-byte chunk (half of 16 B) over the link
# Per rank: (name, stream, seconds). T = 1 token, bf16 = 2 bytes.
EXPECTED = [
    ("embedding", "compute", 32 * PS),  # read + write [1, 8]: 2 * 16 B
    ("embedding.all_reduce[0]", "comm", STEP),  # 16 B all-reduce: 2 steps of 8 B
    ("embedding.all_reduce[1]", "comm", STEP),
    ("input_norm", "compute", 48 * PS),  # x in, y out (32 B) + weight 16 B
    ("qkv_proj", "compute", 232 * PS),  # [1,8]x[8,12]: (8 + 96 + 12) * 2 B; 192 FLOP
    ("rotary", "compute", 48 * PS),  # q and k [1, 8] in and out: 32 B; 48 FLOP
    ("attn", "compute", 80 * PS),  # K,V cache 4 x 4 x 2 x 2 B = 64 B + q, o 16 B; 64 FLOP
    ("o_proj", "compute", 88 * PS),  # [1,4]x[4,8]: (4 + 32 + 8) * 2 B
    ("attn_out.all_reduce[0]", "comm", STEP),
    ("attn_out.all_reduce[1]", "comm", STEP),
    ("residual", "compute", 48 * PS),  # a + b -> c: 3 * 16 B
    ("post_attn_norm", "compute", 48 * PS),
    ("mlp_up", "compute", 304 * PS),  # [1,8]x[8,16]: (8 + 128 + 16) * 2 B; 256 FLOP
    ("act", "compute", 48 * PS),  # silu(gate) * up: 3 * 8 * 2 B
    ("mlp_down", "compute", 160 * PS),  # [1,8]x[8,8]: (8 + 64 + 8) * 2 B
    ("mlp_out.all_reduce[0]", "comm", STEP),
    ("mlp_out.all_reduce[1]", "comm", STEP),
    ("residual", "compute", 48 * PS),
    ("final_norm", "compute", 48 * PS),
    ("lm_head", "compute", 304 * PS),  # [1,8]x[8,16]: (8 + 128 + 16) * 2 B
    ("lm_head.all_gather[0]", "comm", 1 * US + 32 / 100e9),  # 64 B of logits: one 32 B step
]


@pytest.fixture
def toy_result(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "toy.yaml"
    path.write_text(TOPOLOGY)
    topo = load_topology(path)
    options = Options(ideal=True, allreduce_algo="ring", fused=False)  # unfused op list below
    return simulate(TOY, topo, 2, Workload(1, "decode", context_len=4), options)


def test_whole_record_list(toy_result) -> None:  # type: ignore[no-untyped-def]
    records = toy_result.records
    for rank in (0, 1):
        mine = sorted((r for r in records if r.rank == rank), key=lambda r: r.start_s)
        assert [(r.name, r.stream) for r in mine] == [(n, s) for n, s, _ in EXPECTED]
        t = 0.0
        for rec, (_, _, seconds) in zip(mine, EXPECTED, strict=True):
            assert rec.start_s == pytest.approx(t, abs=1e-18), rec.name
            assert rec.end_s - rec.start_s == pytest.approx(seconds, rel=1e-9), rec.name
            t = rec.end_s
    assert toy_result.latency_s == pytest.approx(sum(s for _, _, s in EXPECTED), rel=1e-12)


def test_toy_bytes_and_causes(toy_result) -> None:  # type: ignore[no-untyped-def]
    records = toy_result.records
    comm = [r for r in records if r.rank == 0 and r.kind == "collective"]
    assert [r.bytes for r in comm] == [8, 8, 8, 8, 8, 8, 32]
    by_id = {r.id: r for r in records}
    for r in records:
        if r.cause >= 0:
            assert by_id[r.cause].end_s <= r.start_s + 1e-18
    # the critical path covers the whole step with no idle time
    parts = toy_result.summary["breakdown_s"]
    assert parts["idle"] == pytest.approx(0.0, abs=1e-15)
    assert sum(parts.values()) == pytest.approx(toy_result.latency_s, rel=1e-12)
