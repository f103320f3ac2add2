"""tpsim's kernel prices against kernels measured on a GPU none of its constants were fitted
on: an H200 running today's PyTorch and cuBLAS (``measured/h200_torch_kernels.csv``, written
by ``experiments/measure_kernels.py``), in bf16 and in fp8.

    python -m tpsim.experiments.validation.measured_kernels

Each row of the file is one decoder GEMM of Llama-3.1-70B (QKV, O, gate/up, down) at a TP
degree and token count, or the residual add, timed inside a CUDA graph with cold weights.
tpsim prices the same kernel the way a run does: the lowering of a one-layer model of that
shape on the H200, with the measured-kernel refit that the engine profiles extend
(``engines/_kernels.yaml``, fitted to Vidur's A100 and H100 times in fp16) and CUDA-graph
launches, each kernel with its gap to the next (as the graph timing has it). Per family and
dtype, the geomean error ``exp(mean |ln(simulated / measured)|) - 1`` and the bias
``exp(mean ln(simulated / measured)) - 1`` (positive: tpsim slower).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import cache

from tpsim.calibration import csv_rows, measured
from tpsim.calibration.profiles import profile
from tpsim.experiments.calibrate.vidur_cases import layer_kernels
from tpsim.models.spec import ModelSpec

FILE = "h200_torch_kernels.csv"
#: The file's operators and the family each is reported in.
FAMILY = {"qkv_proj": "QKV", "o_proj": "O", "mlp_up": "gate/up", "mlp_down": "down",
          "residual": "add"}  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One measured kernel of the file."""

    op: str
    dtype: str
    gpu: str
    tp: int
    tokens: int
    model: ModelSpec
    measured_s: float

    @property
    def family(self) -> str:
        """``QKV fp8``, ``add``: the operator family, and the dtype for GEMMs (the add runs
        in 16 bits whatever the weights)."""
        name = FAMILY[self.op]
        return name if self.op == "residual" else f"{name} {self.dtype}"


@cache
def cases() -> tuple[Case, ...]:
    """Every row of the file (the residual add once per token count: the file repeats it
    under every TP and dtype)."""
    out: dict[tuple[object, ...], Case] = {}
    for r in csv_rows(measured(FILE)):
        d, h, kv, inner = (int(r[k]) for k in ("n_embd", "heads", "kv_heads", "intermediate"))
        model = ModelSpec(f"measured-{d}-{h}-{kv}-{inner}", d, 1, h, kv, d // h, inner, 32000,
                          dtype="bf16")  # fmt: skip
        op, dtype, tp, tokens = r["op"], r["dtype"], int(r["tp"]), int(r["tokens"])
        key = (op, tokens) if op == "residual" else (op, dtype, tp, tokens)
        if key not in out:
            out[key] = Case(op, dtype, r["gpu"], tp, tokens, model, float(r["time_us"]) / 1e6)
    return tuple(out.values())


def predict(kernels_of: str = "_kernels") -> list[float]:
    """What tpsim prices each case at, with the kernels of profile ``kernels_of``, in
    :func:`cases` order: the kernel's time and its CUDA-graph gap to the next."""
    kernels = profile(kernels_of).kernels
    lowered: dict[tuple[object, ...], dict[str, float]] = {}
    out = []
    for c in cases():
        key = (c.model, c.gpu, c.dtype, c.tp, c.tokens)
        if key not in lowered:
            lowered[key] = layer_kernels(c.model, c.gpu, c.tp, c.tokens, kernels, None, c.dtype,
                                         with_gap=True)  # fmt: skip
        out.append(lowered[key][c.op])
    return out


def families(simulated: list[float]) -> dict[str, tuple[int, float, float]]:
    """Per family: the cases, the geomean error and the bias, in the file's order."""
    logs: dict[str, list[float]] = defaultdict(list)
    for c, s in zip(cases(), simulated, strict=True):
        logs[c.family].append(math.log(s / c.measured_s))
    return {
        f: (len(v), math.exp(sum(abs(x) for x in v) / len(v)) - 1, math.exp(sum(v) / len(v)) - 1)
        for f, v in logs.items()
    }


def main() -> None:
    for f, (n, err, bias) in families(predict()).items():
        print(f"{f:12s} {n:3d} cases  geomean error {err:6.1%}  bias {bias:+6.1%}")


if __name__ == "__main__":
    main()
