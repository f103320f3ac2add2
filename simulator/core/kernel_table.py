"""Measured GEMM times that override the roofline (``--kernel-table FILE.csv``).

Profiled simulators (Vidur, LLMCompass's validation) reach a few percent by replaying
measured kernel times; this is the same idea for GEMMs. Format (README, "Kernel tables")::

    # comment lines start with '#'
    gpu,op,dtype,m,n,k,time_us
    a100-sxm-80gb,mlp_up,fp16,1,7168,8192,77.0

``op`` is ``gemm`` (any GEMM of that shape) or a GEMM's name in the lowering (``qkv_proj``,
``o_proj``, ``mlp_up``, ``mlp_down``, ``lm_head``; preferred over ``gemm`` rows). A GEMM
matches rows with the same ``gpu`` (catalog name), ``dtype`` (of its weights), ``n`` and
``k``; its time is interpolated in ``m``:

- inside the measured range: linearly in m. GEMM time is close to affine in m between
  measurements (a fixed weight read plus work per token), and on the convex
  ``max(weight read, compute)`` knee the linear chord is nearer than a log-log one when the
  rows are spaced geometrically (1, 64, 512, 4096 as profilers take them);
- outside it: the roofline's time scaled by the nearest row's measured/roofline ratio, so
  the measured efficiency carries over and the shape's own trend (waves, regime) is kept.
"""

from __future__ import annotations

import csv
import math
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tpsim.core.errors import ConfigError

COLUMNS = ("gpu", "op", "dtype", "m", "n", "k", "time_us")
GEMM_OPS = ("gemm", "qkv_proj", "o_proj", "mlp_up", "mlp_down", "lm_head")
DTYPES = ("bf16", "fp16", "fp8")

Key = tuple[str, str, str, int, int]  # (op, gpu, dtype, n, k)


@dataclass(frozen=True)
class KernelTable:
    """Rows by (op, gpu, dtype, n, k), each a tuple of (m, seconds) sorted by m."""

    path: str
    rows: dict[Key, tuple[tuple[int, float], ...]]

    def points(
        self, op: str, gpu: str, dtype: str, n: int, k: int
    ) -> tuple[tuple[int, float], ...]:
        g = gpu.lower()
        return self.rows.get((op, g, dtype, n, k)) or self.rows.get(("gemm", g, dtype, n, k), ())

    def gemm_seconds(
        self,
        op: str,
        gpu: str,
        dtype: str,
        m: int,
        n: int,
        k: int,
        roofline_s: Callable[[int], float],
    ) -> float | None:
        """Measured (or interpolated) seconds of ``[m, k] x [k, n]``; None if no row matches.

        ``roofline_s(m)`` is the model's time for the same GEMM at ``m`` rows.
        """
        pts = self.points(op, gpu, dtype, n, k)
        if not pts:
            return None
        ms = [p[0] for p in pts]
        i = bisect_left(ms, m)
        if i < len(ms) and ms[i] == m:
            return pts[i][1]
        if 0 < i < len(ms):
            (m0, t0), (m1, t1) = pts[i - 1], pts[i]
            return t0 + (t1 - t0) * (m - m0) / (m1 - m0)
        m_near, t_near = pts[0] if i == 0 else pts[-1]
        return roofline_s(m) * t_near / roofline_s(m_near)


def _bad(path: str, line: int, field: str, value: object, why: str) -> ConfigError:
    return ConfigError(f"kernel table {path} row {line}: {field}={value!r}: {why}")


def _int(path: str, line: int, field: str, value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        raise _bad(path, line, field, value, "must be a positive integer") from None
    if v < 1:
        raise _bad(path, line, field, value, "must be a positive integer")
    return v


def load(path: str | Path) -> KernelTable:
    """Read and validate a kernel table; ConfigError (file, row, field) on any defect."""
    name = str(path)
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"kernel_table={name!r}: no such file")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"kernel_table={name!r}: cannot read ({exc})") from None
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if not ln.startswith("#")]
    lines = [(i, ln) for i, ln in lines if ln.strip()]
    if not lines:
        raise ConfigError(f"kernel table {name}: empty (header {','.join(COLUMNS)} expected)")
    header_line, header = lines[0]
    cols = [c.strip() for c in next(csv.reader([header]))]
    for c in cols:
        if c not in COLUMNS:
            raise _bad(name, header_line, "column", c, f"unknown; columns: {','.join(COLUMNS)}")
    for c in COLUMNS:
        if c not in cols:
            raise _bad(name, header_line, "column", c, "missing from the header")
    if len(set(cols)) != len(cols):
        raise _bad(name, header_line, "column", header, "a column appears twice")
    rows: dict[Key, dict[int, float]] = {}
    for line, text_row in lines[1:]:
        values = [v.strip() for v in next(csv.reader([text_row]))]
        if len(values) != len(cols):
            raise _bad(
                name, line, "row", text_row, f"has {len(values)} fields, expected {len(cols)}"
            )
        f = dict(zip(cols, values, strict=True))
        if not f["gpu"]:
            raise _bad(name, line, "gpu", f["gpu"], "must be a GPU name")
        if f["op"] not in GEMM_OPS:
            raise _bad(name, line, "op", f["op"], f"must be one of {', '.join(GEMM_OPS)}")
        if f["dtype"] not in DTYPES:
            raise _bad(name, line, "dtype", f["dtype"], f"must be one of {', '.join(DTYPES)}")
        m, n, k = (_int(name, line, c, f[c]) for c in ("m", "n", "k"))
        try:
            t_us = float(f["time_us"])
        except ValueError:
            t_us = math.nan
        if not (math.isfinite(t_us) and t_us > 0):
            raise _bad(name, line, "time_us", f["time_us"], "must be a positive number")
        key = (f["op"], f["gpu"].lower(), f["dtype"], n, k)
        by_m = rows.setdefault(key, {})
        if m in by_m:
            raise _bad(name, line, "m", m, f"duplicate row for {f['op']} {f['gpu']} n={n} k={k}")
        by_m[m] = t_us / 1e6
    return KernelTable(name, {key: tuple(sorted(v.items())) for key, v in rows.items()})
