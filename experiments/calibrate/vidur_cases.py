"""Vidur's per-operator measurements as cases, and what tpsim predicts for each.

The measurements ship in ``tpsim/calibration/measured`` (``vidur_mlp_per_op.csv``,
``vidur_attention_a100_tp2.csv``; their ``#`` headers say what was measured). Each row and
operator is one :class:`KernelCase`: a family (QKV, O, gate/up, down, norms, act, rotary, add,
embedding, attention decode, attention prefill), the GPU, the model shape at its TP, the
tokens (attention: the decode batch or the prefill chunk), the KV length, and the measured
kernel time (Vidur's median; repeated points keep their median, as the table reader does).

:func:`predict` prices a case the way a run does: the lowering of a one-layer model of the
case's shape (``fused=False``: Vidur measured the norm and the residual add apart) on one
GPU, priced with a calibration's kernels and optionally a kernel table; attention through
:class:`~tpsim.core.kernels.pricing.Pricing` (a prefill chunk after cached tokens has no workload of
its own).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from statistics import median

from tpsim import Options, Workload
from tpsim.calibration import Kernels, csv_rows, measured
from tpsim.core.kernels import attention
from tpsim.core.kernels.costs import hardware_for
from tpsim.core.kernels.kernel_table import KernelTable
from tpsim.core.kernels.pricing import Pricing
from tpsim.core.kernels.table_formats import VIDUR_GPUS, VIDUR_OPS
from tpsim.core.lowering.lower import lower
from tpsim.core.precision import precision
from tpsim.models.spec import ModelSpec
from tpsim.topologies.gpus import get_gpu

MLP_FILE = "vidur_mlp_per_op.csv"
ATTENTION_FILE = "vidur_attention_a100_tp2.csv"
#: Operator families, in report order, and the lowering's kernel behind each Vidur column.
FAMILIES = ("QKV", "O", "gate/up", "down", "attention decode", "attention prefill", "norms",
            "act", "rotary", "add")  # fmt: skip
EXTRA = ("embedding",)  # reported, outside the acceptance families
FAMILY = {
    "qkv_proj": "QKV",
    "o_proj": "O",
    "mlp_up": "gate/up",
    "mlp_down": "down",
    "input_norm": "norms",
    "post_attn_norm": "norms",
    "act": "act",
    "rotary": "rotary",
    "residual": "add",
    "embedding": "embedding",
    "attn_decode": "attention decode",
    "attn_prefill": "attention prefill",
}


@dataclass(frozen=True)
class KernelCase:
    """One measured operator: ``op`` the lowering's kernel name (attention by phase)."""

    family: str
    op: str
    gpu: str  # catalog name
    n_embd: int
    heads: int
    kv_heads: int
    intermediate: int  # 0 for attention rows (not measured with a model's MLP)
    tp: int
    tokens: int  # attention: the decode batch or the prefill chunk
    kv_len: int
    measured_s: float


def _rows(name: str) -> list[dict[str, str]]:
    return csv_rows(measured(name))


#: (op, gpu, n_embd, heads, kv_heads, intermediate, tp, tokens, kv_len)
_Key = tuple[str, str, int, int, int, int, int, int, int]


@cache
def cases() -> tuple[KernelCase, ...]:
    """Every (row, operator) of Vidur's two files, repeated points as their median."""
    found: dict[_Key, list[float]] = {}
    for r in _rows(MLP_FILE):
        gpu = VIDUR_GPUS[r["gpu"].lower()]
        d, h, kv = int(r["n_embd"]), int(r["n_head"]), int(r["n_kv_head"])
        inner, tp, tokens = int(r["n_expanded_embd"]), int(r["tp"]), int(r["num_tokens"])
        for col, op in VIDUR_OPS.items():
            key = (op, gpu, d, h, kv, inner, tp, tokens, 0)
            found.setdefault(key, []).append(float(r[f"{col}_median_ms"]) / 1e3)
    for r in _rows(ATTENTION_FILE):
        gpu = VIDUR_GPUS[r["gpu"].lower()]
        shape = dict(kv.split("=") for kv in r["shape"].split(" ")[0].split(","))
        decode = r["phase"] == "decode"
        op = "attn_decode" if decode else "attn_prefill"
        x = int(r["batch_size"] if decode else r["prefill_chunk_size"])
        key = (op, gpu, int(shape["n_embd"]), int(shape["n_q_head"]), int(shape["n_kv_head"]),
               0, int(r["tp"]), x, int(r["kv_cache_size"]))  # fmt: skip
        found.setdefault(key, []).append(float(r["time_median_ms"]) / 1e3)
    return tuple(KernelCase(FAMILY[k[0]], *k, float(median(v))) for k, v in sorted(found.items()))


def _model(c: KernelCase) -> ModelSpec:
    inner = c.intermediate or 4 * c.n_embd  # attention rows: any MLP width
    return ModelSpec(f"vidur-{c.n_embd}-{c.heads}-{c.kv_heads}-{inner}", c.n_embd, 1, c.heads,
                     c.kv_heads, c.n_embd // c.heads, inner, 32000, dtype="fp16")  # fmt: skip


def layer_kernels(model: ModelSpec, gpu: str, tp: int, tokens: int, kernels: Kernels,
                  table: KernelTable | None, dtype: str = "fp16",
                  with_gap: bool = False) -> dict[str, float]:  # fmt: skip
    """Kernel seconds by name of one layer lowered at ``tokens`` decode tokens (unfused, CUDA
    graph launches): each kernel alone, as a profiler times it, or ``with_gap`` with its
    graph gap to the next, as a graph replay times it."""
    options = Options(fused=False, dtype=dtype)
    hw = hardware_for(get_gpu(gpu), dtype, kernels, kv_dtype=dtype if dtype == "fp16" else "bf16")
    wl = Workload(tokens, "decode", context_len=1)
    program = lower(model, tp, wl, options, hw, table)[0]
    gap = 0.0 if with_gap else options.calibration.launch[options.launch].gpu_gap_s
    return {op.name: op.seconds - gap for op in program.ops if op.stream == "compute"}


def _attention(c: KernelCase, kernels: Kernels, table: KernelTable | None) -> float:
    model = _model(c)
    hw = hardware_for(get_gpu(c.gpu), "fp16", kernels, kv_dtype="fp16")
    bound = None if table is None else table.bind(model, c.tp)
    price = Pricing.of(hw, precision(Options(dtype="fp16"), "fp16", False), bound)
    h, kv, hd = c.heads // c.tp, max(1, c.kv_heads // c.tp), c.n_embd // c.heads
    if c.op == "attn_decode":
        return price.attention_decode(c.tokens, c.kv_len, h, kv, hd).seconds
    if c.kv_len == 0:
        return price.attention_prefill(1, c.tokens, h, kv, hd).seconds

    def chunk(x: int, cached: int) -> float:  # a chunk after cached tokens (no workload has it)
        return attention.attention_prefill(1, x, h, kv, hd, hw, act_bytes=2, kv_bytes=2,
                                       cached=cached).seconds  # fmt: skip

    t = None if bound is None else bound.op_seconds("attn_prefill", c.gpu, "fp16", c.tokens,
                                                   c.kv_len, chunk)  # fmt: skip
    return chunk(c.tokens, c.kv_len) if t is None else t


def predict(
    kernels: Kernels, table: KernelTable | None = None, among: Iterable[KernelCase] | None = None
) -> list[float]:
    """What tpsim prices each case at (``among``, default all) under ``kernels`` and
    ``table``, in order."""
    lowered: dict[tuple[object, ...], dict[str, float]] = {}
    out = []
    for c in cases() if among is None else among:
        if c.op in ("attn_decode", "attn_prefill"):
            out.append(_attention(c, kernels, table))
            continue
        model = _model(c)
        key = (model, c.gpu, c.tp, c.tokens)
        if key not in lowered:
            lowered[key] = layer_kernels(model, c.gpu, c.tp, c.tokens, kernels, table)
        out.append(lowered[key][c.op])
    return out
