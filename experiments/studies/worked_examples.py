"""Every worked number of the design, recomputed by the simulator (``tpsim study worked_examples``).

1. 8e6 bytes all-reduced over one 300 GB/s link (2 GPUs, ring, ideal): 8e6 / 300e9 = 26.67 us;
   against 20 us of compute per layer, that layer is communication-bound.
2. 32 layers, d = 4096, bf16, TP 4, decode batch 32: each all-reduce carries 32 x 4096 x 2 B
   = 256 KiB; a ring sends 2(p-1)/p x 256 KiB = 384 KiB per GPU; 2 per layer: 64 all-reduces,
   24 MiB per GPU. At batch 1 the payload is 4096 x 2 B = 8 KiB.
3. 70e9 parameters x 2 bytes = 140 GB; TP 4 -> about 35 GB per GPU (Llama-2-70B: 69e9).
4. More TP can lower tokens/s when communication-bound (Llama-2-7B prefill on 8 L40S over
   PCIe: TP 8 below TP 4); TP across nodes is much worse than in a node (Llama-3.1-8B
   decode at TP 8 in one 8x H100 node against TP 8 as 4 + 4 GPUs over InfiniBand).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpsim import Options, Workload, collective_sweep, simulate
from tpsim.core.memory import memory_per_gpu
from tpsim.experiments.studies.base import Study, StudyEntry, points, save
from tpsim.experiments.sweep.run import run_points
from tpsim.models.catalog import get_model
from tpsim.models.spec import ModelSpec
from tpsim.topologies.builders import two_gpus
from tpsim.topologies.gpus import get_gpu

KiB, MiB = 1024, 1024**2

#: The illustrative model of the design: 32 layers, d = 4096, 32 heads (MHA), bf16.
ILLUSTRATIVE = ModelSpec(
    name="illustrative-32l-4096",
    hidden_size=4096,
    num_layers=32,
    num_heads=32,
    num_kv_heads=32,
    head_dim=128,
    intermediate_size=11008,
    vocab_size=32000,
)


#: The design's worked examples are napkin figures: the ideal engine, no serving-engine work.
NAPKIN = "ideal"


def _illustrative(batch: int) -> dict[str, int]:
    r = simulate(
        ILLUSTRATIVE,
        "dgx-h100",
        4,
        Workload(batch, "decode", context_len=128),
        Options(allreduce_algo="ring", engine=NAPKIN),
    )
    attn, mlp = (r.typed.communication.site(k) for k in ("attn_out", "mlp_out"))
    assert attn is not None and mlp is not None
    count = attn.count + mlp.count
    sent = attn.bytes_sent_per_gpu + mlp.bytes_sent_per_gpu
    per_allreduce = sent // count
    return {
        "allreduces": count,
        "bytes_sent_per_gpu": sent,
        "sent_per_allreduce": per_allreduce,
        "payload_bytes": per_allreduce * 4 // (2 * 3),  # sent = 2(p-1)/p x payload, p = 4
    }


def worked_examples(out: Path | None = None, *, jobs: int = 1) -> Study:
    # 1. the napkin all-reduce
    (row,) = collective_sweep(two_gpus(300e9), 2, [8_000_000], algo="ring", ideal=True)
    napkin_s = row["time_s"]
    # 2. the illustrative model's traffic
    b32, b1 = _illustrative(32), _illustrative(1)
    # 3. 70B weights
    l70 = get_model("llama-2-70b")
    per_gpu = memory_per_gpu(
        l70, 4, Workload(1, "decode", context_len=128), Options(engine=NAPKIN), get_gpu("h100-sxm")
    )
    # 4. more TP, and TP across nodes
    tp_rows = run_points(
        points(
            {
                "model": "llama-2-7b",
                "topology": "pcie-l40s",
                "tp": [4, 8],
                "phase": "prefill",
                "prompt_len": 2048,
                "engine": NAPKIN,
            },
            {"model": "llama-3.1-8b", "topology": "dgx-h100", "tp": 8, "engine": NAPKIN},
            {
                "model": "llama-3.1-8b",
                "topology": "dgx-h100",
                "tp": 8,
                "nodes": 2,
                "gpus_per_node": 4,
                "engine": NAPKIN,
            },
        ),
        jobs=jobs,
    )
    pcie4, pcie8, in_node, cross = tp_rows
    summary: dict[str, Any] = {
        "allreduce_8e6_over_300GBps_us": napkin_s * 1e6,
        "layer_with_20us_compute_is_communication_bound": napkin_s > 20e-6,
        "tp4_batch32": b32,
        "tp4_batch1_payload_bytes": b1["payload_bytes"],
        "napkin_70b_bf16_weights_GB": 70e9 * 2 / 1e9,
        "llama_2_70b_weights_GB": l70.num_params() * 2 / 1e9,
        "llama_2_70b_tp4_weights_per_gpu_GB": per_gpu.weights_bytes_per_gpu / 1e9,
        "pcie_tp8_below_tp4": pcie8["tokens_per_s"] < pcie4["tokens_per_s"],
        "pcie_tp8_regime": pcie8["regime"],
        "cross_node_over_in_node_latency": cross["latency_s"] / in_node["latency_s"],
    }
    s = summary
    us, gb = s["allreduce_8e6_over_300GBps_us"], "llama_2_70b_tp4_weights_per_gpu_GB"
    lines = [
        "worked examples of the design:",
        f"  8e6 B all-reduce over 300 GB/s (2 GPUs, ring, ideal): {us:.2f} us "
        "(8e6 / 300e9 = 26.67 us) > 20 us of compute: communication-bound",
        f"  32 layers, d 4096, TP 4, decode batch 32: {b32['allreduces']} all-reduces of "
        f"{b32['payload_bytes'] // KiB} KiB, {b32['sent_per_allreduce'] // KiB} KiB sent per "
        f"GPU each, {b32['bytes_sent_per_gpu'] / MiB:g} MiB per GPU (expect 64, 256, 384, 24)",
        f"  at batch 1 the payload is {s['tp4_batch1_payload_bytes'] // KiB} KiB (expect 8)",
        f"  70e9 params x 2 B = {s['napkin_70b_bf16_weights_GB']:.0f} GB; Llama-2-70B "
        f"{s['llama_2_70b_weights_GB']:.0f} GB, {s[gb]:.1f} GB per GPU at TP 4 (expect ~35)",
        f"  Llama-2-7B prefill on pcie-l40s: TP 4 {pcie4['tokens_per_s']:,.0f} tokens/s, TP 8 "
        f"{pcie8['tokens_per_s']:,.0f} ({pcie8['regime']}): more TP, fewer tokens/s",
        f"  Llama-3.1-8B decode TP 8: one node {in_node['latency_s'] * 1e3:.2f} ms, two nodes x 4 "
        f"{cross['latency_s'] * 1e3:.2f} ms ({s['cross_node_over_in_node_latency']:.2f}x)",
    ]
    save("worked_examples", out, tp_rows, summary)
    return Study("worked_examples", lines, summary, tp_rows, [])


STUDY = StudyEntry(
    "worked_examples",
    0,
    "every worked number of the design, reproduced by the simulator",
    worked_examples,
)
