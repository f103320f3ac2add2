"""Measured kernel times that override the cost models (``--kernel-table``).

Profiled simulators (Vidur, LLMCompass's validation) reach a few percent by replaying
measured kernel times. A table is one or more CSV files (comma-separated), or the name of a
table shipped in ``tpsim/calibration/tables`` (``vidur-a100``, ``vidur-h100``), in any layout
of :mod:`tpsim.core.kernels.table_formats` (README, "Kernel tables"):

- GEMM rows match a GEMM by ``gpu``, weight ``dtype`` (exactly), ``n`` and ``k`` and are
  interpolated in ``m``;
- operator rows (tpsim's ``ops`` layout and Vidur's files) match every kernel of the
  lowering by ``gpu``, dtype and the model's shape (``n_embd``, heads, KV heads, MLP width)
  at its TP, once the table is bound to the model (:meth:`KernelTable.bind`: a gated MLP
  with ``head_dim = n_embd / heads``, the shapes Vidur profiles). fp16 and bf16 rows stand
  for each other (same tensor-core rate, same bytes); the exact dtype is preferred. The
  final norm reads the input norm's rows (the same RMSNorm over ``[T, d]``).

Interpolation (:func:`interpolate`): linearly in tokens between measured points (kernel
time is close to affine in tokens between measurements, and on the convex
``max(weight read, compute)`` knee the linear chord is nearer than a log-log one on the
geometric grids profilers take); attention over two axes, the decode batch (or prefill
chunk) and the KV length: linearly in KV length along each measured batch, then linearly in
batch between the two measured batches around it. That is exact for anything bilinear in
(batch, KV length), such as the KV bytes a decode step reads, and needs no full rectangle
(a prefill chunk plus its cache stays within the model's length). Outside the measured
range on an axis the model's time is scaled by the nearest measured point's
measured/model ratio, so the measured efficiency carries over and the shape's own trend
(waves, regime) is kept.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from statistics import median

from tpsim import calibration
from tpsim.calibration.bounded import ReadRefused, read_text, shorten
from tpsim.core.errors import ConfigError
from tpsim.core.kernels.table_formats import (
    ATTENTION_OPS,
    GemmPoint,
    Shape,
    bad,
    parse,
)
from tpsim.models.spec import ModelSpec

Key = tuple[str, str, str, int, int]  # (op, gpu, dtype, n, k)
OpKey = tuple[str, str, str, Shape]  # (op, gpu, dtype, shape at TP)
Points = tuple[tuple[int, float], ...]  # (coordinate, seconds), sorted
Grid = tuple[tuple[int, Points], ...]  # (x, points along y), sorted by x
#: Operators read from another's rows when a table has none of their own.
ALIASES = {"final_norm": "input_norm"}
SIXTEEN = ("fp16", "bf16")

__all__ = [
    "KernelTable",
    "interpolate",
    "load",
    "resolve",
    "shipped",
]


def _scaled(model_query: float, model_near: float, t_near: float) -> float:
    return t_near if model_near <= 0 else model_query * t_near / model_near


def _along(points: Points, y: int, model_y: Callable[[int], float]) -> float:
    ys = [p[0] for p in points]
    i = bisect_left(ys, y)
    if i < len(ys) and ys[i] == y:
        return points[i][1]
    if 0 < i < len(ys):
        (y0, t0), (y1, t1) = points[i - 1], points[i]
        return t0 + (t1 - t0) * (y - y0) / (y1 - y0)
    y_near, t_near = points[0] if i == 0 else points[-1]
    return _scaled(model_y(y), model_y(y_near), t_near)


def interpolate(grid: Grid, x: int, y: int, model: Callable[[int, int], float]) -> float:
    """The time at (``x``, ``y``) from measured columns ``grid`` (module docstring);
    ``model(x, y)`` is the cost model's time, used only outside the measured range."""
    xs = [c[0] for c in grid]
    i = bisect_left(xs, x)

    def column(j: int) -> float:
        cx, points = grid[j]
        return _along(points, y, lambda yy: model(cx, yy))

    if i < len(xs) and xs[i] == x:
        return column(i)
    if 0 < i < len(xs):
        x0, x1 = xs[i - 1], xs[i]
        t0, t1 = column(i - 1), column(i)
        return t0 + (t1 - t0) * (x - x0) / (x1 - x0)
    j = 0 if i == 0 else len(xs) - 1
    return _scaled(model(x, y), model(xs[j], y), column(j))


@dataclass(frozen=True)
class KernelTable:
    """GEMM rows by (op, gpu, dtype, n, k) in ``m``; operator grids by (op, gpu, dtype,
    shape at TP); ``bound``: the shape of the model being lowered (:meth:`bind`)."""

    path: str
    rows: dict[Key, Points]
    ops: dict[OpKey, Grid]
    bound: Shape | None = None

    @property
    def gpus(self) -> set[str]:
        """The GPUs the table has rows for (lower case, as rows are matched)."""
        return {k[1] for k in self.rows} | {k[1] for k in self.ops}

    def points(self, op: str, gpu: str, dtype: str, n: int, k: int) -> Points:
        g = gpu.lower()
        return self.rows.get((op, g, dtype, n, k)) or self.rows.get(("gemm", g, dtype, n, k), ())

    def gemm_seconds(self, op: str, gpu: str, dtype: str, m: int, n: int, k: int,
                     roofline_s: Callable[[int], float]) -> float | None:  # fmt: skip
        """Measured (or interpolated) seconds of ``[m, k] x [k, n]`` from the GEMM rows;
        None if no row matches. ``roofline_s(m)`` is the model's time at ``m`` rows."""
        pts = self.points(op, gpu, dtype, n, k)
        if not pts:
            return None
        return interpolate(((0, pts),), 0, m, lambda _, r: roofline_s(r))

    def bind(self, model: ModelSpec, tp: int) -> KernelTable:
        """This table for ``model`` at ``tp``: its operator rows of that shape apply (only to
        a gated MLP with ``head_dim * heads == n_embd``, the models Vidur profiles)."""
        fits = model.gated_mlp and model.head_dim * model.num_heads == model.hidden_size
        fits = fits and not model.is_moe and not model.qk_norm  # Vidur profiles neither
        # nor latent attention, a sliding window, attention chunks or attention sinks: their
        # attention differs
        fits = fits and not model.is_mla and not model.sliding_layers and not model.attention_sinks
        fits = fits and not model.chunked_layers and not model.linear_layers
        shape = Shape(model.hidden_size, model.num_heads, model.num_kv_heads,
                      model.intermediate_size, tp)  # fmt: skip
        return replace(self, bound=shape if fits and self.ops else None)

    def op_seconds(self, op: str, gpu: str, dtype: str, x: int, y: int,
                   model: Callable[[int, int], float]) -> float | None:  # fmt: skip
        """Measured (or interpolated) seconds of operator ``op`` of the bound shape at
        ``x`` tokens (attention: decode batch or prefill chunk) and ``y`` KV-cache tokens;
        None if the table has no rows for it."""
        if self.bound is None:
            return None
        shape = self.bound
        if op in ATTENTION_OPS:
            shape = replace(shape, intermediate=0)
        g = gpu.lower()
        for name in (op, ALIASES.get(op, op)):
            for dt in _dtypes(dtype):
                grid = self.ops.get((name, g, dt, shape))
                if grid:
                    return interpolate(grid, x, y, model)
        return None


def _dtypes(dtype: str) -> tuple[str, ...]:
    """The dtype's rows first, then the other 16-bit dtype's."""
    return (dtype, *(d for d in SIXTEEN if d != dtype)) if dtype in SIXTEEN else (dtype,)


def shipped(name: str = "") -> Path:
    """A table shipped with tpsim (``tpsim/calibration/tables/NAME.csv``), or the folder."""
    return calibration.tables(f"{name}.csv" if name else "")


def _shipped_names() -> list[str]:
    return sorted(p.name.removesuffix(".csv") for p in shipped().glob("*.csv"))


def _exists(name: str) -> bool:
    """Something is at ``name`` (a pipe or a device too: reading it is then refused)."""
    try:
        return Path(name).exists()
    except (OSError, ValueError):
        return False


def resolve(spec: str) -> list[Path]:
    """The files a ``--kernel-table`` value names: a file, a shipped table's name, or a
    comma-separated list of them."""
    if _exists(spec):
        return [Path(spec)]
    out = []
    for part in (p.strip() for p in spec.split(",")):
        if _exists(part):
            out.append(Path(part))
        elif part and "/" not in part and not part.endswith(".csv") and shipped(part).is_file():
            out.append(shipped(part))
        elif part and "/" not in part and not part.endswith(".csv"):
            known = ", ".join(_shipped_names())
            raise ConfigError(f"kernel_table={part!r}: no such file or shipped table ({known})")
        else:
            raise ConfigError(f"kernel_table={part!r}: no such file")
    return out


#: A kernel table is at most a few MB (Vidur's largest profile is about 2 MB).
MAX_TABLE_BYTES = 64 * 10**6


def _read(path: Path) -> str:
    try:
        return read_text(path, MAX_TABLE_BYTES)
    except ReadRefused as exc:
        raise ConfigError(f"kernel_table={shorten(str(path), 100)!r}: {exc}") from None


def load(spec: str | Path) -> KernelTable:
    """Read and validate a kernel table (one file, a shipped name or a comma-separated list);
    ConfigError (file, row, field) on any defect. Read once per set of files as they are
    now (a sweep's points, and run's check of the table's GPUs, share one parse)."""
    files = resolve(str(spec))
    try:
        stamps = tuple((st.st_mtime_ns, st.st_size) for st in (f.stat() for f in files))
    except OSError:  # read below, and refused there
        stamps = None
    if stamps is None:
        return _load(str(spec), tuple(files))
    return _cached(str(spec), tuple(files), stamps)


@lru_cache(maxsize=16)
def _cached(
    spec: str, files: tuple[Path, ...], _stamps: tuple[tuple[int, int], ...]
) -> KernelTable:
    return _load(spec, files)


def _load(spec: str, files: tuple[Path, ...]) -> KernelTable:
    gemm: dict[Key, dict[int, float]] = {}
    ops: dict[OpKey, dict[tuple[int, int], list[float]]] = {}
    owner: dict[object, str] = {}  # key -> the file its rows come from
    for path in files:
        name = str(path)
        kind, points = parse(name, _read(path))
        if not points:
            raise ConfigError(f"kernel_table={shorten(name, 100)!r}: a header and no rows")
        vidur = kind.startswith("vidur")  # Vidur's files repeat points: their median
        for p in points:
            key: object = (
                (p.op, p.gpu, p.dtype, p.n, p.k)
                if isinstance(p, GemmPoint)
                else (p.op, p.gpu, p.dtype, p.shape)
            )
            if owner.setdefault(key, name) != name:
                why = f"rows for it are also in {owner[key]}"
                raise bad(name, p.line, "op", p.op, why)
            if isinstance(p, GemmPoint):
                by_m = gemm.setdefault((p.op, p.gpu, p.dtype, p.n, p.k), {})
                if p.m in by_m:
                    why = f"duplicate row for {p.op} {p.gpu} n={p.n} k={p.k}"
                    raise bad(name, p.line, "m", p.m, why)
                by_m[p.m] = p.seconds
            else:
                at = ops.setdefault((p.op, p.gpu, p.dtype, p.shape), {})
                if (p.x, p.y) in at and not vidur:
                    why = f"duplicate row for {p.op} at kv_len={p.y}"
                    raise bad(name, p.line, "tokens", p.x, why)
                at.setdefault((p.x, p.y), []).append(p.seconds)
    return KernelTable(
        spec,
        {key: tuple(sorted(v.items())) for key, v in gemm.items()},
        {key: _grid(v) for key, v in ops.items()},
    )


def _grid(points: dict[tuple[int, int], list[float]]) -> Grid:
    columns: dict[int, list[tuple[int, float]]] = {}
    for (x, y), times in sorted(points.items()):
        columns.setdefault(x, []).append((y, float(median(times))))
    return tuple((x, tuple(col)) for x, col in sorted(columns.items()))
