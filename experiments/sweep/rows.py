"""One row of a sweep results file: its columns (the point's parameters, then what the
simulation gave, :data:`RESULT_COLUMNS`), and the row as one line of CSV or JSON Lines and
back. Rows hold no wall-clock figures, so the same point gives the same row text in every
run."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tpsim.core.errors import ConfigError
from tpsim.experiments.sweep.grid import CONTROL, LAYOUT_AXES, MOE_AXES, POINT_FIELDS

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
#: Columns added after the first release of the file, appended so the others keep their
#: places: the layout axes, and the pipeline bubble of the breakdown.
APPENDED_COLUMNS: tuple[str, ...] = (*LAYOUT_AXES, "bubble_s", *MOE_AXES)
COLUMNS: tuple[str, ...] = (
    "point_id",
    *(f for f in POINT_FIELDS if f not in LAYOUT_AXES and f not in MOE_AXES),
    *RESULT_COLUMNS,
    *APPENDED_COLUMNS,
)

INT_COLUMNS = frozenset(
    {"nodes", "gpus_per_node", "tp", "batch", "prompt_len", "context_len", "hosts"}
    | set(LAYOUT_AXES)
    | {"ep", "attention_dp"}
    | set(MEMORY)
    | {"collectives", "comm_bytes_per_gpu"}
)
FLOAT_COLUMNS = frozenset(
    {"latency_s", "tokens_per_s", "tokens_per_s_per_gpu", *(f"{c}_s" for c in BREAKDOWN)}
    | {"bubble_s", "expert_skew"}
)
BOOL_COLUMNS = frozenset({"sequence_parallel", "ideal", "fits"})
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


def _typed(raw: Mapping[str, str]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for c in COLUMNS:
        v = raw.get(c, "")
        if v == "" and c != "error":
            row[c] = None
        elif c in INT_COLUMNS:
            row[c] = int(v)
        elif c in FLOAT_COLUMNS:
            row[c] = float(v)
        elif c in BOOL_COLUMNS:
            row[c] = v == "true"
        else:
            row[c] = v or None
    return row


def parse_line(line: str, fmt: str) -> dict[str, Any]:
    """A row back from its line (ValueError if the line is not a row)."""
    if fmt == "jsonl":
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        for k in LAYOUT_AXES:  # a row from before these axes (keys by name): one TP group
            obj.setdefault(k, 1)
        for k, default in MOE_AXES.items():
            obj.setdefault(k, default)
        return full_row(obj)
    (cells,) = list(csv.reader([line]))
    if len(cells) != len(COLUMNS):
        raise ValueError(f"{len(cells)} fields, expected {len(COLUMNS)}")
    return _typed(dict(zip(COLUMNS, cells, strict=True)))


def results_text(rows: Iterable[Mapping[str, Any]], fmt: str) -> str:
    """A whole results file as text (a header for CSV, then one line per row)."""
    lines = [csv_header()] if fmt == "csv" else []
    lines += [format_row(r, fmt) for r in rows]
    return "\n".join(lines) + "\n"
