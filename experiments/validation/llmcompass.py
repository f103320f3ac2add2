"""tpsim's kernel and collective models on LLMCompass's real-hardware operator times: one
GPT-3 175B layer at TP 4 on four A100s (``measured/llmcompass_gpt3_layer_a100_tp4.csv``,
the ground truth of LLMCompass's simulator validation, ISCA 2024).

    python -m tpsim.experiments.validation.llmcompass

LLMCompass ran each operator of the layer alone in PyTorch on fp16 tensors and took the
median wall time of ``op(); torch.cuda.synchronize()`` (``software_model/*.py``
``run_on_gpu``): Q, K and V as three GEMMs ``[b s, d] @ [d, d/4]``, attention unfused (a
batched ``Q K^T``, a softmax over the whole score matrix, a batched ``A V``), the output
projection, the two MLP GEMMs, LayerNorm, GeLU and the all-reduce. Its prefill (8 sequences
of 2048 tokens) runs every operator for 0.5-17 ms, so the wall time is the kernel's; each
is priced here with the function a run prices it with (the lowering of one GPT-3 layer on
the A100 for the projections, norms and GeLU; :func:`~tpsim.core.kernels.costs.gemm` for
the three Q, K, V GEMMs; a batched matmul as
:func:`~tpsim.core.kernels.costs.grouped_gemm`, one group per head and sequence; the
softmax as a row kernel reading each score row twice; the all-reduce of 8 x 2048 x 12288
fp16 over four ranks of a DGX A100, NCCL's choice, called from Python and synchronised),
with the default calibration's kernels (cuBLAS and PyTorch's own kernels at these sizes
are the achievable ones tpsim's default prices).

Its decode rows (8 sequences, one token, 3072 keys) are not compared: each is 5-200 us, in
which the harness's own time (Python, launch and the synchronise's return: 13-25 us a
call, and about 45 us for its LayerNorm and GeLU, whose decode kernels are 2-3 us) is
as large as the kernel, so they measure the harness, not the kernels tpsim prices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from tpsim.calibration import csv_rows, measured
from tpsim.calibration import default as default_calibration
from tpsim.core.collective_bench import collective_sweep
from tpsim.core.kernels import costs
from tpsim.core.kernels.costs import RowKernel, hardware_for
from tpsim.experiments.calibrate.vidur_cases import layer_kernels
from tpsim.models.catalog import get_model
from tpsim.topologies.gpus import get_gpu

FILE = "llmcompass_gpt3_layer_a100_tp4.csv"
GPU = "a100-sxm-80gb"
TOPOLOGY = "dgx-a100"
MODEL = "gpt3-175b"
#: The layer's shape and the prefill LLMCompass ran (test_transformer.py).
D_MODEL, HEADS, TP, BATCH, SEQ = 12288, 96, 4, 8, 2048
#: The file's operators in its order; the MHA and FFN LayerNorm and all-reduce rows are one
#: measurement each (the source holds the same value twice).
OPS = ("Q_K_V", "Q_mul_K", "A_mul_V", "Wo_proj", "W1_proj", "W2_proj", "Softmax", "LayerNorm",
       "GeLU", "AllReduce")  # fmt: skip


@dataclass(frozen=True)
class LayerOp:
    """One prefill operator of the file and its measured wall time."""

    op: str
    measured_s: float


@cache
def cases() -> tuple[LayerOp, ...]:
    """The prefill rows, one per operator (the MHA/FFN duplicates once)."""
    found: dict[str, float] = {}
    for r in csv_rows(measured(FILE)):
        if r["phase"].startswith("prefill"):
            found.setdefault(r["op"].removesuffix("_MHA").removesuffix("_FFN"), float(r["time_us"]))
    return tuple(LayerOp(op, found[op] / 1e6) for op in OPS)


def price(op: str) -> float:
    """What tpsim prices ``op`` of the prefill at, in seconds."""
    kernels = default_calibration().kernels
    hw = hardware_for(get_gpu(GPU), "fp16", kernels, kv_dtype="fp16")
    tokens, d, heads = BATCH * SEQ, D_MODEL, HEADS // TP
    head_dim = D_MODEL // HEADS
    groups = BATCH * heads  # one [SEQ, ...] matrix per sequence and head
    if op == "Q_K_V":
        return 3 * costs.gemm(tokens, d // TP, d, hw, act_bytes=2, w_bytes=2).seconds
    if op in ("Q_mul_K", "A_mul_V"):
        n, k = (SEQ, head_dim) if op == "Q_mul_K" else (head_dim, SEQ)
        return costs.grouped_gemm(groups * SEQ, n, k, hw, experts_read=groups, act_bytes=2,
                                  w_bytes=2).seconds  # fmt: skip
    if op == "Softmax":  # a row of SEQ scores per query: reduced (max, sum), then normalised
        scores = groups * SEQ * SEQ
        row = RowKernel(groups * SEQ, SEQ, passes=2, tensor_bytes=2 * scores)
        return costs.elementwise(4 * scores, 5 * scores, hw, row=row).seconds
    if op == "AllReduce":
        (run,) = collective_sweep(TOPOLOGY, TP, [tokens * d * 2], op="all_reduce", algo="nccl",
                                  launcher="torch-sync")  # fmt: skip
        return float(run["time_s"])
    lowered = _lowered()
    name = {"Wo_proj": "o_proj", "W1_proj": "mlp_up", "W2_proj": "mlp_down",
            "LayerNorm": "input_norm", "GeLU": "act"}[op]  # fmt: skip
    return lowered[name]


@cache
def _lowered() -> dict[str, float]:
    """Kernel seconds of one GPT-3 layer's prefill on the A100 at TP 4, by kernel name."""
    kernels = default_calibration().kernels
    return layer_kernels(get_model(MODEL), GPU, TP, BATCH * SEQ, kernels, None, "fp16")


@cache
def predict() -> tuple[float, ...]:
    """tpsim's price of every case, in :func:`cases` order."""
    return tuple(price(c.op) for c in cases())


def geomean_error() -> float:
    """``exp(mean |ln(simulated / measured)|) - 1`` over the operators."""
    logs = [abs(math.log(s / c.measured_s)) for c, s in zip(cases(), predict(), strict=True)]
    return math.exp(sum(logs) / len(logs)) - 1


def main() -> None:
    for c, s in zip(cases(), predict(), strict=True):
        print(f"{c.op:10s} {c.measured_s * 1e6:10.1f} us {s * 1e6:10.1f} us "
              f"{s / c.measured_s - 1:+7.1%}")  # fmt: skip
    print(f"geomean error {geomean_error():.1%}")


if __name__ == "__main__":
    main()
