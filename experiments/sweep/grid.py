"""Sweep grids: a small declarative grid (from CLI flags or a YAML file) -> a list of points.

A grid maps each axis (``model``, ``tp``, ``batch``, ...) to one value or a list of values;
its points are the Cartesian product, in axis order (see :data:`AXES`), duplicates dropped.
A YAML file holds one grid (a mapping) or a list of grids whose points are concatenated.

Every value is checked here, before anything runs or any file is written: an unknown model,
a non-positive batch or an unknown key raises :class:`ConfigError` naming the field and the
value. A combination that cannot run (TP larger than the topology, TP not dividing the heads)
is not an input error: the sweep records it as a row with an ``error``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml
from tpsim.calibration.bounded import (
    ReadRefused,
    UniqueKeyLoader,
    read_text,
    shorten,
    show,
    yaml_load,
)
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.errors import INPUT_ERRORS, ConfigError
from tpsim.core.run_options import RUN_OPTIONS, RunOption, sweepable

#: At most this many points in one sweep (a typo like ``--batch 1,2,...`` x 6 axes).
MAX_POINTS = 200_000
#: A grid file is a few lines; its values (aliases expanded) a few thousand at most.
MAX_GRID_BYTES = 10 * 10**6
MAX_GRID_NODES = 100_000
#: Characters no value may hold: a row of the results file is one line.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class GridPoint:
    """One simulation of a sweep. ``prompt_len`` is None for decode, ``context_len`` None
    for prefill (the other length does not change the pass); ``dtype`` None: the model's."""

    model: str
    topology: str
    nodes: int
    gpus_per_node: int
    tp: int
    batch: int
    phase: str
    prompt_len: int | None
    context_len: int | None
    dtype: str | None
    kv_dtype: str | None
    launch: str
    overlap: str
    allreduce_algo: str
    sequence_parallel: bool
    ideal: bool
    engine: str
    #: pipeline stages, data-parallel replicas, micro-batches (tpsim.core.comm.layout); added
    #: after the others, so their columns come last in the results file
    pp: int = 1
    dp: int = 1
    micro_batches: int = 1
    #: mixture-of-experts layout and routing (tpsim.core.lowering.experts), added last
    ep: int = 1
    attention_dp: int = 1
    expert_skew: float = 0.0
    #: each routed expert's width split (0: derived, tp * attention_dp / ep, as run's
    #: default) and the all-to-all kernels of token dispatch, added after those
    moe_tp: int = 0
    moe_a2a: str = "nccl"

    @property
    def point_id(self) -> str:
        """A stable key derived from the parameters only (the same in every run and file).

        A single TP group (pp = dp = micro_batches = 1) keeps the key it had before those
        axes existed: they enter the key only when one differs from 1; the MoE axes, and
        the experts' split and all-to-all added after them, only when one of their group
        differs from its default."""
        values = asdict(self)
        if all(values[k] == 1 for k in LAYOUT_AXES):
            for k in LAYOUT_AXES:
                del values[k]
        for group in (MOE_AXES, MOE_SPLIT_AXES):
            if all(values[k] == d for k, d in group.items()):
                for k in group:
                    del values[k]
        text = json.dumps(values, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def params(self) -> dict[str, Any]:
        """``point_id`` and the parameters, in column order."""
        return {"point_id": self.point_id, **asdict(self)}

    @property
    def gpus(self) -> int:
        """GPUs the point runs on: tp * attention_dp * pp * dp."""
        return self.tp * self.attention_dp * self.pp * self.dp

    def _fields(self, belongs: str) -> dict[str, Any]:
        """The point's values of the dataclass ``belongs`` (each sweepable option's field,
        in its unit; a length left None takes the dataclass default)."""
        out: dict[str, Any] = {}
        for o in sweepable():
            value = getattr(self, o.name)
            if o.belongs == belongs and value is not None:
                out[o.field or o.name] = value * o.scale if o.scale != 1.0 else value
        return out

    def layout(self) -> Layout:
        return Layout(**self._fields("layout"))

    def workload(self) -> Workload:
        return Workload(**self._fields("workload"))

    def options(self) -> Options:
        """The point's options; layouts that do not fit still run (the row says fits=false)."""
        return Options(**self._fields("options"), allow_oom=True)


#: The axes of a layout of several TP groups (pipeline stages, replicas).
LAYOUT_AXES: tuple[str, ...] = ("pp", "dp", "micro_batches")
#: The axes of a mixture-of-experts layout and its routing, with their defaults.
MOE_AXES: dict[str, Any] = {"ep": 1, "attention_dp": 1, "expert_skew": 0.0}
#: The axes added after those, with their defaults (run's): each routed expert's width
#: split (0: derived) and the all-to-all kernels of token dispatch.
MOE_SPLIT_AXES: dict[str, Any] = {"moe_tp": 0, "moe_a2a": "nccl"}
POINT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GridPoint))


def axes_of(table: Iterable[RunOption]) -> dict[str, tuple[Callable[[Any], Any], Any]]:
    """The grid's axes of a table of run options: its sweepable ones, in its order."""
    return {o.name: (o.parse, o.default) for o in sweepable(table)}


#: Grid axes in expansion order: name -> (check and normalise one value, default); the
#: sweepable options of tpsim.core.run_options.RUN_OPTIONS (``micro_batches`` 0, the engine's
#: split, as in ``tpsim run``: each point stores the number it resolves to).
AXES: dict[str, tuple[Callable[[Any], Any], Any]] = axes_of(RUN_OPTIONS)
REQUIRED = tuple(o.name for o in RUN_OPTIONS if o.sweepable and o.required)


def expand(grid: Mapping[str, Any], where: str = "sweep grid") -> list[GridPoint]:
    """The points of one grid: each axis a value or a list of values (checked here)."""
    return _product(_axes(grid, where), where)


def _axes(grid: Mapping[str, Any], where: str) -> list[list[Any]]:
    """The checked values of each axis of one grid (nothing expanded yet)."""
    unknown = sorted(set(grid) - set(AXES), key=str)
    if unknown:
        raise ConfigError(f"{where}: unknown key {show(unknown[0])}; keys: {', '.join(AXES)}")
    for key in REQUIRED:
        if grid.get(key) in (None, []):
            raise ConfigError(f"{where}: {key} is required")
    axes: list[list[Any]] = []
    for key, (check, default) in AXES.items():
        raw = grid.get(key, default)
        values = raw if isinstance(raw, list) else [raw]
        if not values:
            raise ConfigError(f"{where}: {key}=[]: give at least one value")
        checked = []
        for v in values:
            if isinstance(v, dict | list):
                raise ConfigError(f"{where}: {key}={show(v)}: must be a value or a list of values")
            if isinstance(v, str) and CONTROL.search(v):
                raise ConfigError(
                    f"{where}: {key}={show(v)}: contains a line break or control character"
                )
            try:
                checked.append(check(v))
            except INPUT_ERRORS as exc:
                raise ConfigError(f"{where}: {exc}") from None
        axes.append(list(dict.fromkeys(checked)))
    return axes


def _size(axes: list[list[Any]]) -> int:
    return math.prod(len(a) for a in axes)


def _product(axes: list[list[Any]], where: str) -> list[GridPoint]:
    size = _size(axes)
    if size > MAX_POINTS:
        raise ConfigError(f"{where}: {size} points: at most {MAX_POINTS} in one sweep")
    combos = itertools.product(*axes)
    return _dedupe(_canonical(dict(zip(AXES, combo, strict=True))) for combo in combos)


def _canonical(values: dict[str, Any]) -> GridPoint:
    if values["phase"] == "decode":
        values["prompt_len"] = None
    else:
        values["context_len"] = None
    point = GridPoint(**values)
    return replace(point, micro_batches=_split(point)) if point.micro_batches == 0 else point


def _split(point: GridPoint) -> int:
    """The micro-batches the point's engine splits its batch into (1 without pipeline
    stages); 0 where the point cannot say (its run then reports why, as a row's error)."""
    if point.pp == 1:
        return 1
    try:
        tokens = point.workload().prompt_len if point.phase == "prefill" else 1
        engine = point.options().calibration.engine
    except INPUT_ERRORS:
        return 0
    return engine.pipeline_micro_batches(point.batch, tokens, point.pp)


def _dedupe(points: Iterable[GridPoint]) -> list[GridPoint]:
    return list(dict.fromkeys(points))


def grid_from_flags(flags: Mapping[str, str | None]) -> list[GridPoint]:
    """Points from CLI flags: each flag a comma-separated list (``--tp 1,2,4,8``)."""
    grid: dict[str, Any] = {}
    for key, text in flags.items():
        if text is None:
            continue
        values = [v.strip() for v in str(text).split(",")]
        if any(not v for v in values):
            raise ConfigError(f"--{key.replace('_', '-')}={text!r}: empty item in the list")
        grid[key] = values
    return expand(grid, "sweep")


def grid_from_yaml(path: str | Path) -> list[GridPoint]:
    """Points of a YAML grid file: one mapping, or a list of mappings (concatenated)."""
    where = f"grid file {shorten(str(path), 100)}"
    try:
        text = read_text(path, MAX_GRID_BYTES)
    except ReadRefused as exc:
        raise ConfigError(f"{where}: {exc}") from None
    try:
        data = yaml_load(text, UniqueKeyLoader, max_nodes=MAX_GRID_NODES)
    except (ConfigError, ReadRefused) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(f"{where}: malformed YAML{line}: {shorten(problem)}") from None
    except ValueError as exc:  # an integer past Python's 4300-digit limit
        raise ConfigError(f"{where}: unreadable number ({shorten(str(exc))})") from None
    grids = data if isinstance(data, list) else [data]
    if not grids:
        raise ConfigError(f"{where}: empty list of grids")
    checked: list[tuple[str, list[list[Any]]]] = []
    total = 0
    for i, grid in enumerate(grids):
        label = where if len(grids) == 1 else f"{where} (grid {i + 1})"
        if not isinstance(grid, dict):
            raise ConfigError(
                f"{label}: must be a mapping of keys to values, got {type(grid).__name__}"
            )
        checked.append((label, _axes(grid, label)))
        total += _size(checked[-1][1])  # counted before anything is expanded
        if total > MAX_POINTS:
            raise ConfigError(f"{where}: {total}+ points: at most {MAX_POINTS} in one sweep")
    points: list[GridPoint] = []
    for label, axes in checked:
        points += _product(axes, label)
    return _dedupe(points)


def describe(points: Sequence[GridPoint]) -> str:
    """A one-line summary: how many points and the values of each axis that varies."""
    varying = []
    for name in POINT_FIELDS:
        values = list(dict.fromkeys(getattr(p, name) for p in points))
        if len(values) > 1:
            values = [v for v in values if v is not None]
            varying.append(f"{name} {','.join(str(v) for v in values)}")
    return f"{len(points)} points" + (f" ({'; '.join(varying)})" if varying else "")


def point_from_row(row: Mapping[str, Any]) -> GridPoint:
    """The point a results row was simulated from (its parameter columns)."""
    values: dict[str, Any] = {name: row.get(name) for name in POINT_FIELDS}
    for k in LAYOUT_AXES:  # a row of a file from before these axes: one TP group
        if values[k] is None:
            values[k] = 1
    for k, default in (MOE_AXES | MOE_SPLIT_AXES).items():  # a row from before these axes
        if values[k] is None:
            values[k] = default
    return GridPoint(**values)
