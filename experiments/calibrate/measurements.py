"""Measured step times for ``tpsim calibrate``: a CSV read into validated points.

Columns: ``model,topology,nodes,tp,batch,phase,prompt_len,context_len,dtype,measured_ms``
(``model``, ``topology``, ``tp`` and ``measured_ms`` must be there; the others may be left
out), and optionally ``output_len`` and ``allreduce``. Lines starting with ``#`` are
comments. An empty cell means the default (nodes 1, batch 1, decode, prompt 512, context
1024, the model's dtype, the engine's all-reduce), or that the field does not apply to the
phase (a decode step has no prompt length, a prefill no context length). ``measured_ms`` is
the decode step time, or the prefill time, in milliseconds; with ``output_len`` N it is a
whole request (as vLLM's ``benchmark_latency`` times one): the prefill and the N - 1 decode
steps after it, priced at their mean context (attention is linear in it). ``allreduce``:
the engine's all-reduce as ``tpsim run --allreduce-algo`` takes it (``nccl``: NCCL only).

Anything wrong is one :class:`ConfigError` naming the file, the row (its line number in the
file) and the field.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from tpsim.calibration.bounded import ReadRefused, read_text, shorten
from tpsim.core.comm.group import tp_group
from tpsim.core.config import (
    ALLREDUCE_ALGOS,
    COMPUTE_DTYPES,
    PHASES,
    Workload,
    check_nodes,
    tp_problem,
)
from tpsim.core.errors import INPUT_ERRORS, ConfigError
from tpsim.models.catalog import MODELS, get_model
from tpsim.models.spec import ModelSpec
from tpsim.topologies.builders import TOPOLOGIES
from tpsim.topologies.gpus import GPUSpec
from tpsim.topologies.graph import TopologyGraph
from tpsim.topologies.io import get_topology

COLUMNS = (
    "model",
    "topology",
    "nodes",
    "tp",
    "batch",
    "phase",
    "prompt_len",
    "context_len",
    "dtype",
    "measured_ms",
    "output_len",
    "allreduce",
)
REQUIRED = ("model", "topology", "tp", "measured_ms")
#: More points than this would take hours of simulation: refused up front.
MAX_POINTS = 1000
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured step: what ran and how long it took."""

    row: int  # line number in the file
    model: str
    topology: str
    nodes: int
    tp: int
    workload: Workload
    dtype: str | None  # None: the model's own
    measured_s: float
    spec: ModelSpec = field(repr=False, compare=False)
    graph: TopologyGraph = field(repr=False, compare=False)
    gpu: GPUSpec = field(repr=False, compare=False)
    #: a whole request (``output_len``): the decode steps after the prefill (0: one step)
    decode_steps: int = 0
    allreduce: str = "auto"  # the engine's all-reduce (tpsim run --allreduce-algo)
    #: the row's cells in columns that are not tpsim's (notes, a run id), in file order:
    #: not read, echoed where the report lists the point
    extra: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    #: cells given that the row's phase does not read (``prompt_len`` of a decode step):
    #: ``(column, value, what the point uses instead)``
    ignored: tuple[tuple[str, str, str], ...] = field(default=(), compare=False)

    @property
    def measured_ms(self) -> float:
        """The measured time in ms as the file wrote it (not seconds times 1e3's last bit)."""
        return float(f"{self.measured_s * 1e3:.12g}")

    @property
    def same_point(self) -> tuple[object, ...]:
        """What the point measures, whatever its row and time: two rows with the same are
        one point measured twice."""
        w = self.workload  # the length the phase reads (run ignores the other)
        shape = (w.batch, w.phase, w.context_len if w.phase == "decode" else w.prompt_len)
        return (self.model, self.topology, self.nodes, self.tp, shape, self.dtype,
                self.decode_steps, self.allreduce)  # fmt: skip

    @property
    def decode(self) -> Workload:
        """One of a request's decode steps, at their mean context (``decode_steps`` > 0)."""
        w = self.workload
        return Workload(
            w.batch, "decode", w.prompt_len, w.prompt_len + (self.decode_steps + 1) // 2
        )

    @property
    def label(self) -> str:
        w = self.workload
        shape = f"context {w.context_len}" if w.phase == "decode" else f"prompt {w.prompt_len}"
        where = self.topology if self.nodes == 1 else f"{self.topology} x{self.nodes}"
        dtype = f" {self.dtype}" if self.dtype else ""
        steps = f" + {self.decode_steps} decode steps" if self.decode_steps else ""
        algo = f" allreduce {self.allreduce}" if self.allreduce != "auto" else ""
        what = f"{w.phase} batch {w.batch} {shape}{steps}{dtype}{algo}"
        return f"{self.model} {where} TP {self.tp} {what}"


def extra_columns(path: Path) -> list[str]:
    """The columns of a measurements file that are not tpsim's (notes, a run id): not read,
    kept with each point (:attr:`MeasuredPoint.extra`) and echoed where the report lists it.
    ``tpsim calibrate`` names them once, so that a misspelt column of its own (``bacth``) is
    seen rather than silently left at its default."""
    text = read_text(path, MAX_BYTES)
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return [c.strip() for c in next(csv.reader([line])) if c.strip() not in COLUMNS]
    return []


def read_points(path: Path) -> list[MeasuredPoint]:
    """The measurements in ``path``, validated (models, topologies and TP degrees resolved);
    columns that are not tpsim's are ignored (:func:`extra_columns` names them)."""
    name = str(path)
    try:  # bounded: a regular file, at most MAX_BYTES; a spreadsheet's byte-order mark is no column
        text = read_text(path, MAX_BYTES)
    except ReadRefused as e:
        why = str(e)
        if why.startswith(("cannot read (no such", "cannot read (not a regular")):
            why = why.removeprefix("cannot read (").removesuffix(")")
        if why.endswith("a folder"):
            why = "is a folder, not a CSV file"
        raise ConfigError(f"{shorten(name, 100)}: {why}") from None
    lines = [
        (n, line)
        for n, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines:
        raise ConfigError(f"{name}: no measurements (an empty file, or only comments)")
    header_row, header_line = lines[0]
    header = [c.strip() for c in next(csv.reader([header_line]))]
    for c in header:
        if not c:
            raise ConfigError(f"{name} row {header_row}: a column without a name")
        if header.count(c) > 1:
            raise ConfigError(f"{name} row {header_row}: column {c!r} appears twice")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ConfigError(f"{name} row {header_row}: no {missing[0]!r} column")
    if len(lines) - 1 > MAX_POINTS:
        raise ConfigError(f"{name}: {len(lines) - 1} rows; at most {MAX_POINTS} points")
    reader = _Reader(name, path.parent)
    points = []
    for row, line in lines[1:]:
        cells = [c.strip() for c in next(csv.reader([line]))]
        if len(cells) != len(header):
            raise ConfigError(
                f"{name} row {row}: {len(cells)} cells; the header has {len(header)} columns"
            )
        # columns of tpsim's own are read; others (notes, a run id) are kept in the file
        # and ignored here
        cells_of = dict(zip(header, cells, strict=True))
        point = reader.point(row, {c: v for c, v in cells_of.items() if c in COLUMNS})
        extra = tuple((c, v) for c, v in cells_of.items() if c not in COLUMNS)
        points.append(replace(point, extra=extra) if extra else point)
    if not points:
        raise ConfigError(f"{name}: a header and no measurements")
    return points


class _Reader:
    """Turns rows into points, loading each model and topology once."""

    def __init__(self, name: str, folder: Path | None = None) -> None:
        self.name = name
        self.folder = folder  # the CSV's: a relative path in it is read from there
        self.models: dict[str, ModelSpec] = {}
        self.graphs: dict[tuple[str, int], TopologyGraph] = {}

    def fail(self, row: int, key: str, value: str, why: str) -> ConfigError:
        shown = value if len(value) <= 40 else value[:40] + "..."
        return ConfigError(f"{self.name} row {row}, {key}={shown!r}: {why}")

    def integer(self, row: int, cells: dict[str, str], key: str, default: int) -> int:
        text = cells.get(key, "")
        if not text:
            return default
        if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:
            raise self.fail(row, key, text, "must be a positive whole number (below 10^9)")
        return int(text)

    def point(self, row: int, cells: dict[str, str]) -> MeasuredPoint:
        for key in REQUIRED:
            if not cells[key]:
                raise self.fail(row, key, "", "must be given")
        defaults = Workload()
        nodes = self.integer(row, cells, "nodes", 1)
        tp = self.integer(row, cells, "tp", 1)
        batch = self.integer(row, cells, "batch", defaults.batch)
        prompt = self.integer(row, cells, "prompt_len", defaults.prompt_len)
        context = self.integer(row, cells, "context_len", defaults.context_len)
        output = self.integer(row, cells, "output_len", 0)  # 0: not a whole request
        phase = cells.get("phase", "") or ("prefill" if output else defaults.phase)
        if phase not in PHASES:
            raise self.fail(row, "phase", phase, f"must be one of {', '.join(PHASES)}")
        if output and phase != "prefill":
            raise self.fail(row, "phase", phase, "a request (output_len) starts with a prefill")
        allreduce = cells.get("allreduce", "") or "auto"
        if allreduce not in ALLREDUCE_ALGOS:
            choices = ", ".join(ALLREDUCE_ALGOS)
            raise self.fail(row, "allreduce", allreduce, f"must be one of {choices}")
        dtype = cells.get("dtype", "") or None
        if dtype is not None and dtype not in COMPUTE_DTYPES:
            raise self.fail(row, "dtype", dtype, f"must be one of {', '.join(COMPUTE_DTYPES)}")
        measured = self.measured(row, cells["measured_ms"])
        model, topology = cells["model"], cells["topology"]
        try:
            check_nodes(nodes)
        except ConfigError as e:
            raise self.fail(row, "nodes", cells["nodes"], str(e)) from None
        try:
            if model not in self.models:
                self.models[model] = get_model(self.beside(model, MODELS))
        except INPUT_ERRORS as e:
            raise self.fail(row, "model", model, _why(e, "model", model)) from None
        try:
            if (topology, nodes) not in self.graphs:
                self.graphs[topology, nodes] = get_topology(
                    self.beside(topology, TOPOLOGIES), nodes
                )
        except INPUT_ERRORS as e:
            raise self.fail(row, "topology", topology, _why(e, "topology", topology)) from None
        spec, graph = self.models[model], self.graphs[topology, nodes]
        try:
            problem = tp_problem(tp, spec.num_heads, spec.num_kv_heads)
            if problem:
                raise ConfigError(f"{problem} of {spec.name}")
            gpu = tp_group(graph, tp).gpu
        except ConfigError as e:
            why = (
                str(e)
                .removeprefix(f"tp={tp}: ")
                .replace("--nodes, or nodes= in the API", "the nodes column")
            )
            raise self.fail(row, "tp", cells["tp"], why) from None
        try:
            workload = Workload(batch, phase, prompt, context)
        except ConfigError as e:
            raise ConfigError(f"{self.name} row {row}: {e}") from None
        ignored = []
        if phase == "decode" and cells.get("prompt_len"):
            ignored.append(("prompt_len", cells["prompt_len"], f"context_len {context}"))
        if phase == "prefill" and cells.get("context_len"):
            ignored.append(("context_len", cells["context_len"], f"prompt_len {prompt}"))
        return MeasuredPoint(row, model, topology, nodes, tp, workload, dtype, measured, spec,
                             graph, gpu, max(0, output - 1), allreduce,
                             ignored=tuple(ignored))  # fmt: skip

    def beside(self, value: str, catalog: Mapping[str, object]) -> str:
        """``value`` as a path beside the CSV when it names no catalog entry, is no path from
        here, and is one from the CSV's folder (as a profile's ``extends:`` is read)."""
        if self.folder is None or value.strip().lower() in catalog or Path(value).exists():
            return value
        there = self.folder / value
        return str(there) if there.exists() else value

    def measured(self, row: int, text: str) -> float:
        try:
            ms = float(text)
        except ValueError:
            raise self.fail(row, "measured_ms", text, "not a number") from None
        # a GPU step takes microseconds at least: 1e-320 ms is a typo (and a denormal that
        # no fit survives), as is anything past an hour
        if not math.isfinite(ms) or ms < 1e-3 or ms > 3.6e6:
            raise self.fail(
                row, "measured_ms", text, "must be a time in ms, from 0.001 (1 us) to 1 h"
            )
        return ms * 1e-3


def _why(e: Exception, key: str, value: str) -> str:
    """The first line of ``e`` without the ``key=value:`` the row's message names already."""
    line = str(e).splitlines()[0]
    return line.removeprefix(f"{key}={value!r}: ").removeprefix(f"{key}={value}: ")


__all__ = ["COLUMNS", "MeasuredPoint", "extra_columns", "read_points"]
