"""The layouts ``--kernel-table`` reads, each parsed into measured points with row numbers.

A layout is recognised by its header (the first line that is not a ``#`` comment):

- ``gemm``: tpsim's GEMM table ``gpu,op,dtype,m,n,k,time_us`` (one GEMM shape per row);
- ``ops``: tpsim's operator table ``gpu,dtype,n_embd,heads,kv_heads,intermediate,tp,op,
  tokens,kv_len,time_us``, one measured operator of a model shape at a TP per row;
- ``vidur-mlp``: Vidur's per-operator table (``gpu,n_head,n_kv_head,n_embd,
  n_expanded_embd,tp,num_tokens`` and one ``<op>_median_ms`` column per operator);
- ``vidur-attention``: Vidur's attention table (``gpu,shape,tp,phase,batch_size,
  prefill_chunk_size,kv_cache_size,time_median_ms``; the shape as ``n_embd=..,n_q_head=..,
  n_kv_head=..`` or as three columns of those names).

Every defect is a :class:`ConfigError` naming the file, the row (1-based line) and the field.
Vidur's files repeat some points (token-grid boundaries, two models of one shape); they are
kept and the table takes their median. Vidur names GPUs by SKU (``a100``, ``h100``: A100 and
H100 80GB SXM in its DGX nodes); they are read as the catalog's ``a100-sxm-80gb`` and
``h100-sxm``.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from tpsim.calibration.bounded import shorten
from tpsim.core.errors import ConfigError

GEMM_COLUMNS = ("gpu", "op", "dtype", "m", "n", "k", "time_us")
GEMM_OPS = ("gemm", "qkv_proj", "o_proj", "mlp_up", "mlp_down", "lm_head")
OPS_COLUMNS = ("gpu", "dtype", "n_embd", "heads", "kv_heads", "intermediate", "tp", "op",
               "tokens", "kv_len", "time_us")  # fmt: skip
ATTENTION_OPS = ("attn_prefill", "attn_decode")
#: Operators an ``ops`` table may hold: the lowering's kernel names (``attn`` split by phase).
OPS = ("qkv_proj", "o_proj", "mlp_up", "mlp_down", "input_norm", "post_attn_norm",
       "final_norm", "residual", "act", "rotary", "embedding", *ATTENTION_OPS)  # fmt: skip
DTYPES = ("bf16", "fp16", "fp8", "fp4", "int4")  # fp4: NVFP4 weights; int4: AWQ/GPTQ (W4A16)
#: Vidur's operator columns and the lowering's kernel each one measures.
VIDUR_OPS = {
    "attn_pre_proj": "qkv_proj",
    "attn_post_proj": "o_proj",
    "mlp_up_proj": "mlp_up",
    "mlp_down_proj": "mlp_down",
    "mlp_act": "act",
    "attn_rope": "rotary",
    "input_layernorm": "input_norm",
    "post_attention_layernorm": "post_attn_norm",
    "add": "residual",
    "emb": "embedding",
}
VIDUR_MLP_KEYS = ("gpu", "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "tp", "num_tokens")
VIDUR_ATTN_KEYS = ("gpu", "tp", "phase", "batch_size", "prefill_chunk_size", "kv_cache_size",
                   "time_median_ms")  # fmt: skip
VIDUR_SHAPE = ("n_embd", "n_q_head", "n_kv_head")
#: Columns of Vidur's files that say where a row comes from (read, not used).
VIDUR_INFO = ("model", "source", "source_csv_row", "time_min_ms", "time_max_ms", "backend", "dtype")
VIDUR_GPUS = {"a100": "a100-sxm-80gb", "h100": "h100-sxm"}


@dataclass(frozen=True, slots=True)
class Shape:
    """A model shape at a TP degree, as a table keys it (``intermediate`` 0: any, for
    attention, which does not depend on it)."""

    n_embd: int
    heads: int
    kv_heads: int
    intermediate: int
    tp: int


@dataclass(frozen=True, slots=True)
class GemmPoint:
    line: int
    op: str
    gpu: str
    dtype: str
    m: int
    n: int
    k: int
    seconds: float


@dataclass(frozen=True, slots=True)
class OpPoint:
    """One measured operator: ``x`` tokens (attention: decode batch or prefill chunk) and
    ``y`` KV-cache tokens (0 outside attention)."""

    line: int
    op: str
    gpu: str
    dtype: str
    shape: Shape
    x: int
    y: int
    seconds: float


#: Bounds of any measured kernel: a GPU clock tick to an hour; a dimension past 2**40 is no
#: tensor (and its FLOPs would not fit a float).
MIN_SECONDS, MAX_SECONDS, MAX_DIM = 1e-10, 3600.0, 2**40


def bad(path: str, line: int, field: str, value: object, why: str) -> ConfigError:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return ConfigError(f"kernel table {shorten(path, 80)} row {line}: {field}={shown}: {why}")


def _cells(path: str, line: int, text: str) -> list[str]:
    """The fields of one CSV line; an unterminated quote or a field past the csv module's
    limit is refused, never read as something else."""
    try:
        return next(csv.reader([text], strict=True))
    except csv.Error as e:
        raise bad(path, line, "row", text, f"not a CSV line ({e})") from None


class _Rows:
    """The data rows of one CSV text, as field dicts with their line numbers."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if not ln.startswith("#")]
        self.lines = [(i, ln) for i, ln in lines if ln.strip()]
        if not self.lines:
            raise ConfigError(
                f"kernel table {path}: empty (header {','.join(GEMM_COLUMNS)} or "
                f"{','.join(OPS_COLUMNS)} expected)"
            )
        self.header_line, header = self.lines[0]
        self.cols = [c.strip() for c in _cells(path, self.header_line, header)]
        if len(set(self.cols)) != len(self.cols):
            raise bad(path, self.header_line, "column", header, "a column appears twice")

    def check(self, required: tuple[str, ...], allowed: tuple[str, ...]) -> None:
        for c in self.cols:
            if c not in allowed:
                why = f"unknown; columns: {','.join(allowed)}"
                raise bad(self.path, self.header_line, "column", c, why)
        for c in required:
            if c not in self.cols:
                raise bad(self.path, self.header_line, "column", c, "missing from the header")

    def __iter__(self) -> Iterator[tuple[int, dict[str, str]]]:
        for line, text in self.lines[1:]:
            values = [v.strip() for v in _cells(self.path, line, text)]
            if len(values) != len(self.cols):
                why = f"has {len(values)} fields, expected {len(self.cols)}"
                raise bad(self.path, line, "row", text, why)
            yield line, dict(zip(self.cols, values, strict=True))

    def integer(self, line: int, field: str, value: str, least: int = 1) -> int:
        try:
            v = int(value)
        except ValueError:
            v = least - 1
        if v < least:
            kind = "positive" if least == 1 else "non-negative"
            raise bad(self.path, line, field, value, f"must be a {kind} integer")
        if v > MAX_DIM:
            raise bad(self.path, line, field, value, f"implausibly large (at most {MAX_DIM})")
        return v

    def seconds(self, line: int, field: str, value: str, per_second: float) -> float:
        try:
            t = float(value)
        except ValueError:
            t = math.nan
        if not (math.isfinite(t) and t > 0):
            raise bad(self.path, line, field, value, "must be a positive number")
        if not MIN_SECONDS <= t / per_second <= MAX_SECONDS:
            why = f"implausible kernel time (between {MIN_SECONDS:g} and {MAX_SECONDS:g} s)"
            raise bad(self.path, line, field, value, why)
        return t / per_second

    def choice(self, line: int, field: str, value: str, choices: tuple[str, ...]) -> str:
        if value not in choices:
            raise bad(self.path, line, field, value, f"must be one of {', '.join(choices)}")
        return value

    def gpu(self, line: int, value: str, aliases: dict[str, str] | None = None) -> str:
        if not value:
            raise bad(self.path, line, "gpu", value, "must be a GPU name")
        g = value.lower()
        return (aliases or {}).get(g, g)


def _layout(rows: _Rows) -> str:
    """Which layout a table's header names (``gemm``, ``ops``, ``vidur-mlp``,
    ``vidur-attention``); ConfigError naming the header otherwise."""
    cols = set(rows.cols)
    if {"m", "n", "k"} & cols:
        return "gemm"
    if "kv_len" in cols or "heads" in cols:
        return "ops"
    if "num_tokens" in cols:
        return "vidur-mlp"
    if "phase" in cols:
        return "vidur-attention"
    return "gemm"  # the GEMM reader names what the header lacks


def parse(path: str, text: str) -> tuple[str, list[GemmPoint] | list[OpPoint]]:
    """A table's layout and its points."""
    rows = _Rows(path, text)  # split and filtered once (a table may be tens of MB)
    kind = _layout(rows)
    if kind == "gemm":
        return kind, list(_gemm(rows))
    if kind == "ops":
        return kind, list(_ops(rows))
    if kind == "vidur-mlp":
        return kind, list(_vidur_mlp(rows))
    return kind, list(_vidur_attention(rows))


def _gemm(rows: _Rows) -> Iterator[GemmPoint]:
    rows.check(GEMM_COLUMNS, GEMM_COLUMNS)
    for line, f in rows:
        gpu = rows.gpu(line, f["gpu"])
        op = rows.choice(line, "op", f["op"], GEMM_OPS)
        dtype = rows.choice(line, "dtype", f["dtype"], DTYPES)
        m, n, k = (rows.integer(line, c, f[c]) for c in ("m", "n", "k"))
        t = rows.seconds(line, "time_us", f["time_us"], 1e6)
        yield GemmPoint(line, op, gpu, dtype, m, n, k, t)


def _ops(rows: _Rows) -> Iterator[OpPoint]:
    rows.check(OPS_COLUMNS, OPS_COLUMNS)
    for line, f in rows:
        gpu = rows.gpu(line, f["gpu"])
        dtype = rows.choice(line, "dtype", f["dtype"], DTYPES)
        op = rows.choice(line, "op", f["op"], OPS)
        attention = op in ATTENTION_OPS
        d, h, kv = (rows.integer(line, c, f[c]) for c in ("n_embd", "heads", "kv_heads"))
        inter = 0 if attention and f["intermediate"] == "-" else None
        if inter is None:
            inter = rows.integer(line, "intermediate", f["intermediate"])
        tp = rows.integer(line, "tp", f["tp"])
        x = rows.integer(line, "tokens", f["tokens"])
        y = rows.integer(line, "kv_len", f["kv_len"], least=0)
        if op == "attn_decode" and y < 1:
            raise bad(rows.path, line, "kv_len", f["kv_len"], "a decode step attends >= 1 token")
        if not attention and y:
            raise bad(rows.path, line, "kv_len", f["kv_len"], f"must be 0 for {op}")
        t = rows.seconds(line, "time_us", f["time_us"], 1e6)
        yield OpPoint(line, op, gpu, dtype, Shape(d, h, kv, 0 if attention else inter, tp), x, y, t)


def _vidur_mlp(rows: _Rows) -> Iterator[OpPoint]:
    times = [c for c in rows.cols if c.endswith("_median_ms")]
    known = tuple(f"{op}_median_ms" for op in VIDUR_OPS)
    rows.check(VIDUR_MLP_KEYS, (*VIDUR_MLP_KEYS, *VIDUR_INFO, *known))
    if not times:
        raise bad(rows.path, rows.header_line, "column", "<op>_median_ms", "no operator column")
    for line, f in rows:
        gpu = rows.gpu(line, f["gpu"], VIDUR_GPUS)
        dtype = rows.choice(line, "dtype", f.get("dtype", "fp16"), DTYPES)
        h, kv, d, inter, tp, x = (rows.integer(line, c, f[c]) for c in VIDUR_MLP_KEYS[1:])
        shape = Shape(d, h, kv, inter, tp)
        for col in times:
            t = rows.seconds(line, col, f[col], 1e3)
            op = VIDUR_OPS[col.removesuffix("_median_ms")]
            yield OpPoint(line, op, gpu, dtype, shape, x, 0, t)


def _vidur_attention(rows: _Rows) -> Iterator[OpPoint]:
    shape_cols = ("shape",) if "shape" in rows.cols else VIDUR_SHAPE
    rows.check((*VIDUR_ATTN_KEYS, *shape_cols), (*VIDUR_ATTN_KEYS, *shape_cols, *VIDUR_INFO))
    for line, f in rows:
        gpu = rows.gpu(line, f["gpu"], VIDUR_GPUS)
        dtype = rows.choice(line, "dtype", f.get("dtype", "fp16"), DTYPES)
        if "shape" in f:
            found = {k: re.search(rf"\b{k}=(\d+)", f["shape"]) for k in VIDUR_SHAPE}
            missing = [k for k, v in found.items() if v is None]
            if missing:
                raise bad(rows.path, line, "shape", f["shape"], f"names no {missing[0]}=")
            dims = {k: v.group(1) for k, v in found.items() if v is not None}
        else:
            dims = {k: f[k] for k in VIDUR_SHAPE}
        d, h, kv = (rows.integer(line, k, dims[k]) for k in VIDUR_SHAPE)
        tp = rows.integer(line, "tp", f["tp"])
        phase = rows.choice(line, "phase", f["phase"], ("decode", "prefill"))
        batch = rows.integer(line, "batch_size", f["batch_size"])
        chunk = rows.integer(line, "prefill_chunk_size", f["prefill_chunk_size"], least=0)
        kv_len = rows.integer(line, "kv_cache_size", f["kv_cache_size"], least=0)
        t = rows.seconds(line, "time_median_ms", f["time_median_ms"], 1e3)
        if phase == "decode":
            if chunk:
                why = "a decode row has no prefill chunk"
                raise bad(rows.path, line, "prefill_chunk_size", f["prefill_chunk_size"], why)
            if kv_len < 1:
                why = "a decode step attends >= 1 token"
                raise bad(rows.path, line, "kv_cache_size", f["kv_cache_size"], why)
            yield OpPoint(line, "attn_decode", gpu, dtype, Shape(d, h, kv, 0, tp), batch, kv_len, t)
            continue
        if batch != 1:
            why = "a prefill row is one request"
            raise bad(rows.path, line, "batch_size", f["batch_size"], why)
        if chunk < 1:
            why = "a prefill row has >= 1 new token"
            raise bad(rows.path, line, "prefill_chunk_size", f["prefill_chunk_size"], why)
        yield OpPoint(line, "attn_prefill", gpu, dtype, Shape(d, h, kv, 0, tp), chunk, kv_len, t)
