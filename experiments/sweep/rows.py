"""One row of a sweep results file: its columns (the point's parameters, then what the
simulation gave, :data:`RESULT_COLUMNS`, then the columns added since, :data:`APPENDED_COLUMNS`),
and the row as one line of CSV or JSON Lines and back; a file of an earlier version
(:data:`EARLIER_HEADERS`) reads with the later columns at their defaults. Rows hold no
wall-clock figures, so the same point gives the same row text in every run.

:func:`served` is a row's throughput as ``compare`` and ``plan`` rank it: a pipeline's with
its stages kept full (the ``in_flight_*`` columns), any other point's step."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tpsim.core.errors import ConfigError
from tpsim.experiments.sweep.grid import (
    CONTROL,
    LAYOUT_AXES,
    MOE_AXES,
    MOE_SPLIT_AXES,
    POINT_FIELDS,
)

BREAKDOWN = ("compute", "memory", "communication", "launch_overhead", "host", "idle")
MEMORY = (
    "weights_bytes_per_gpu",
    "kv_cache_bytes_per_gpu",
    "activation_bytes_per_gpu",
    "total_bytes_per_gpu",
    "capacity_bytes_per_gpu",
)
#: What a simulated point adds to its parameters (all empty, and ``error`` set, on failure).
RESULT_COLUMNS: tuple[str, ...] = (
    "gpu",
    "hosts",
    "latency_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "regime",
    *(f"{c}_s" for c in BREAKDOWN),
    "fits",
    *MEMORY,
    "collectives",
    "comm_bytes_per_gpu",
    "error",
)
#: A pipeline's decode kept full, as serving engines run one: ``run --json``'s ``in_flight``
#: (:class:`tpsim.core.summary.InFlight`), each key a column ``in_flight_<key>``; empty for
#: any other point (one stage, prefill, several micro-batches, an engine that splits each
#: batch itself).
IN_FLIGHT = (
    "batches",
    "tpot_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "bytes_per_gpu",
    "fits",
    "largest_batch",
)
IN_FLIGHT_COLUMNS: tuple[str, ...] = tuple(f"in_flight_{k}" for k in IN_FLIGHT)
#: Columns added after the first release of the file, appended so the others keep their
#: places, in the versions that added them: the layout axes with the pipeline bubble of the
#: breakdown, the MoE axes, a pipeline kept full, the experts' split and all-to-all.
ADDED: tuple[tuple[str, ...], ...] = (
    (*LAYOUT_AXES, "bubble_s"),
    tuple(MOE_AXES),
    IN_FLIGHT_COLUMNS,
    tuple(MOE_SPLIT_AXES),
)
APPENDED_COLUMNS: tuple[str, ...] = tuple(c for added in ADDED for c in added)
COLUMNS: tuple[str, ...] = (
    "point_id",
    *(f for f in POINT_FIELDS if f not in (*LAYOUT_AXES, *MOE_AXES, *MOE_SPLIT_AXES)),
    *RESULT_COLUMNS,
    *APPENDED_COLUMNS,
)
#: The columns of each earlier version of the file, oldest first: what a file written by
#: an older tpsim has in its header (read with the later columns at their defaults).
EARLIER_HEADERS: tuple[tuple[str, ...], ...] = tuple(
    COLUMNS[: len(COLUMNS) - sum(len(a) for a in ADDED[k:])] for k in range(len(ADDED))
)

INT_COLUMNS = frozenset(
    {"nodes", "gpus_per_node", "tp", "batch", "prompt_len", "context_len", "hosts"}
    | set(LAYOUT_AXES)
    | {"ep", "attention_dp", "moe_tp"}
    | set(MEMORY)
    | {"collectives", "comm_bytes_per_gpu"}
    | {"in_flight_batches", "in_flight_bytes_per_gpu", "in_flight_largest_batch"}
)
FLOAT_COLUMNS = frozenset(
    {"latency_s", "tokens_per_s", "tokens_per_s_per_gpu", *(f"{c}_s" for c in BREAKDOWN)}
    | {"bubble_s", "expert_skew"}
    | {"in_flight_tpot_s", "in_flight_tokens_per_s", "in_flight_tokens_per_s_per_gpu"}
)
BOOL_COLUMNS = frozenset({"sequence_parallel", "ideal", "fits", "in_flight_fits"})
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def result_format(path: str | Path) -> str:
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise ConfigError(f"results file {str(path)!r}: must end in .csv or .jsonl")
    return fmt


def full_row(values: Mapping[str, Any]) -> dict[str, Any]:
    """Every column in order (missing ones None); non-finite floats become None."""
    row = {c: values.get(c) for c in COLUMNS}
    for c in FLOAT_COLUMNS:
        v = row[c]
        if isinstance(v, float) and not math.isfinite(v):
            row[c] = None
    if isinstance(row["error"], str):  # one line, whatever the message was
        row["error"] = " ".join(CONTROL.sub(" ", row["error"]).split())
    return row


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def format_row(row: Mapping[str, Any], fmt: str) -> str:
    """One row as one line of text (no newline), the same bytes for the same row."""
    row = full_row(row)
    if fmt == "jsonl":
        return json.dumps(row, separators=(",", ":"), allow_nan=False)
    buf = io.StringIO()
    # "\r\n" as the terminator makes the writer quote a cell holding either (then cut off)
    csv.writer(buf, lineterminator="\r\n").writerow([_cell(row[c]) for c in COLUMNS])
    return buf.getvalue().removesuffix("\r\n")


def csv_header() -> str:
    return ",".join(COLUMNS)


def _older(row: dict[str, Any]) -> dict[str, Any]:
    """A row of an earlier version (:data:`EARLIER_HEADERS`, or JSON Lines without these
    keys) with the axes added since at their defaults: one TP group, no experts split
    beyond TP, each expert's width split as derived (moe_tp 0), NCCL's all-to-all; a
    pipeline kept full is not known (its columns stay empty)."""
    for k in LAYOUT_AXES:
        if row.get(k) is None:
            row[k] = 1
    for k, default in (MOE_AXES | MOE_SPLIT_AXES).items():
        if row.get(k) is None:
            row[k] = default
    return row


def _typed(raw: Mapping[str, str], columns: tuple[str, ...]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for c in COLUMNS:
        v = raw.get(c, "")
        if c not in columns or (v == "" and c != "error"):  # not in this file's version: None
            row[c] = None
        elif c in INT_COLUMNS:
            row[c] = int(v)
        elif c in FLOAT_COLUMNS:
            row[c] = float(v)
        elif c in BOOL_COLUMNS:
            row[c] = v == "true"
        else:
            row[c] = v or None
    return _older(row) if len(columns) < len(COLUMNS) else row


def parse_line(line: str, fmt: str, columns: tuple[str, ...] = COLUMNS) -> dict[str, Any]:
    """A row back from its line (ValueError if the line is not a row); ``columns``: the
    CSV file's header, this version's or one of :data:`EARLIER_HEADERS`."""
    if fmt == "jsonl":
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        return _older(full_row(obj))  # keys by name: a row from before some reads as older
    (cells,) = list(csv.reader([line]))
    if len(cells) != len(columns):
        raise ValueError(f"{len(cells)} fields, expected {len(columns)}")
    return _typed(dict(zip(columns, cells, strict=True)), columns)


def served(row: Mapping[str, Any]) -> tuple[float, float] | None:
    """A simulated row's (tokens/s, tokens/s per GPU) as ``compare`` and ``plan`` rank it:
    a pipeline's decode with its stages kept full (``in_flight_*``), any other point's step
    (``tokens_per_s``); None where the batches in flight do not fit in memory, or the row
    has no result."""
    if row.get("in_flight_tokens_per_s") is not None:
        if not row.get("in_flight_fits"):
            return None
        return float(row["in_flight_tokens_per_s"]), float(row["in_flight_tokens_per_s_per_gpu"])
    if row.get("error") or not row.get("tokens_per_s"):
        return None
    return float(row["tokens_per_s"]), float(row["tokens_per_s_per_gpu"])


def kept_full(row: Mapping[str, Any]) -> bool:
    """Whether a row is a pipeline whose throughput is its stages kept full (``in_flight``)."""
    return row.get("in_flight_tokens_per_s") is not None


def results_text(rows: Iterable[Mapping[str, Any]], fmt: str) -> str:
    """A whole results file as text (a header for CSV, then one line per row)."""
    lines = [csv_header()] if fmt == "csv" else []
    lines += [format_row(r, fmt) for r in rows]
    return "\n".join(lines) + "\n"
