"""A sweep results file read back: every whole row, a line at a time, each checked (a
damaged file is refused, naming its line); the file is bounded in size, and a partial last
line (a killed sweep's) is ignored. A file written by an older tpsim (a CSV header of
:data:`~.rows.EARLIER_HEADERS`, JSON Lines rows without some keys) is read with the later
columns at their defaults, but not resumed (:func:`check_resumable`): its rows lack figures
the new ones have."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tpsim.calibration.bounded import ReadRefused, read_lines, shorten, show
from tpsim.core.errors import ConfigError
from tpsim.experiments.sweep.grid import LAYOUT_AXES
from tpsim.experiments.sweep.rows import (
    BOOL_COLUMNS,
    COLUMNS,
    EARLIER_HEADERS,
    FLOAT_COLUMNS,
    IN_FLIGHT_COLUMNS,
    INT_COLUMNS,
    csv_header,
    parse_line,
    result_format,
)

#: A results file of MAX_POINTS rows is about 200 MB; one past 512 MiB is no results file.
MAX_RESULTS_BYTES = 512 << 20
_SIMULATED = ("tokens_per_s", "tokens_per_s_per_gpu", "hosts", "regime")
_POSITIVE = frozenset(
    {"nodes", "tp", "batch", "prompt_len", "context_len", "hosts", "ep", "attention_dp"}
    | set(LAYOUT_AXES)
    | {"in_flight_batches"}
)
#: What --resume says of a file written before some of the columns of APPENDED_COLUMNS.
OLD_FILE = (
    "written by an older tpsim, without the columns {missing}; start a new file "
    "(or pass --overwrite)"
)


def _header(line: str, path: Path) -> tuple[str, ...]:
    """The columns a CSV file's header names: this version's, or an earlier version's."""
    if line == csv_header():
        return COLUMNS
    names = tuple(line.split(","))
    if names in EARLIER_HEADERS:
        return names
    raise ConfigError(
        f"results file {path}: its header is not the columns of this or an earlier version "
        "(start a new file)"
    )


def file_columns(path: str | Path) -> tuple[str, ...]:
    """The columns a results file was written with: a CSV file's header, a JSON Lines
    file's first row's keys (this version's for a file without rows)."""
    p = Path(path)
    fmt = result_format(p)
    if not p.exists():
        raise ConfigError(f"results file {path}: no such file")
    try:
        lines = read_lines(p, MAX_RESULTS_BYTES)
        try:
            first = next(lines, None)
        finally:
            getattr(lines, "close", lambda: None)()  # the file closed now, not when collected
    except ReadRefused as exc:
        raise ConfigError(f"results file {shorten(str(path), 100)}: {exc}") from None
    if first is None or not first.strip():
        return COLUMNS
    first = first.removesuffix("\n").removesuffix("\r")
    if fmt == "csv":
        return _header(first, p)
    try:
        keys = json.loads(first)
    except (ValueError, RecursionError):
        keys = None
    if not isinstance(keys, dict) or any(c not in keys for c in COLUMNS[: len(EARLIER_HEADERS[0])]):
        return COLUMNS  # no row of any version: reading it says so, naming the line
    return tuple(c for c in COLUMNS if c in keys)


def check_resumable(path: str | Path) -> None:
    """Refuse (ConfigError) to resume a file written by an older tpsim: rows appended to it
    would have columns its own rows lack (a CSV header too short for them; JSON Lines rows
    without a pipeline's figures kept full, or without the experts' split and all-to-all).
    The columns it lacks are named in file order, the in_flight ones as ``in_flight_*``."""
    have = file_columns(path)
    missing = list(
        dict.fromkeys(
            "in_flight_*" if c in IN_FLIGHT_COLUMNS else c for c in COLUMNS if c not in have
        )
    )
    if missing:
        raise ConfigError(f"results file {path}: " + OLD_FILE.format(missing=", ".join(missing)))


def _lines(path: Path, fmt: str, columns: list[tuple[str, ...]]) -> Iterator[tuple[int, str]]:
    """(line number, text) of every complete line, header excluded, blank lines skipped;
    a CSV file's header is read into ``columns``.

    Lines end at a newline only: a carriage return inside a quoted cell stays in its row."""
    # bounded: a regular file, at most MAX_RESULTS_BYTES, UTF-8, read a line at a time (a
    # file of 500 MB is never held whole); what follows the last newline is not a row
    lines = read_lines(path, MAX_RESULTS_BYTES)
    number = 0
    while True:
        try:
            line = next(lines, None)
        except ReadRefused as exc:
            raise ConfigError(f"results file {shorten(str(path), 100)}: {exc}") from None
        if line is None:
            return
        number += 1
        line = line.removesuffix("\n").removesuffix("\r")
        if number == 1 and fmt == "csv":
            columns.append(_header(line, path))
            continue
        if line.strip():
            yield number, line


def _checked(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` if every cell has its column's type and a sane value (ValueError naming the
    column otherwise): plots and --resume then never meet a NaN, a list or tp=10**30."""
    if not isinstance(row["point_id"], str):
        raise ValueError(f"point_id={show(row['point_id'])}: must be a string")
    for c, v in row.items():
        if v is None:
            continue
        if c in INT_COLUMNS:
            low = 1 if c in _POSITIVE else 0
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v < 2**53:
                raise ValueError(f"{c}={show(v)}: must be an integer in {low}..2**53")
        elif c in FLOAT_COLUMNS:
            ok = isinstance(v, int | float) and not isinstance(v, bool)
            if not ok or not (math.isfinite(v) and 0 <= v < 1e30):
                raise ValueError(f"{c}={show(v)}: must be a finite number >= 0")
            row[c] = float(v)
        elif c in BOOL_COLUMNS:
            if not isinstance(v, bool):
                raise ValueError(f"{c}={show(v)}: must be true or false")
        elif not isinstance(v, str):
            raise ValueError(f"{c}={show(v)}: must be a string")
    if not row["error"] and row["fits"] is True and row["latency_s"]:  # a simulated point
        for c in _SIMULATED:
            if not row[c]:
                raise ValueError(f"{c}={show(row[c])}: a simulated row needs a value above 0")
    kept = [c for c in IN_FLIGHT_COLUMNS if row[c] is not None]
    if kept and len(kept) < len(IN_FLIGHT_COLUMNS):  # a pipeline kept full: all or none
        lost = next(c for c in IN_FLIGHT_COLUMNS if row[c] is None)
        raise ValueError(f"{lost}=empty: a row with {kept[0]} needs every in_flight column")
    return row


def stream_rows(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of every whole row of a results file, in file order, read a line
    at a time (a partial last line is ignored); every line is checked, so a damaged file is
    refused whichever rows its reader keeps."""
    p = Path(path)
    fmt = result_format(p)
    if not p.exists():
        raise ConfigError(f"results file {path}: no such file")
    columns: list[tuple[str, ...]] = []  # a CSV file's header, once read
    for number, line in _lines(p, fmt, columns):
        try:
            row = _checked(parse_line(line, fmt, *columns))
        except (ValueError, KeyError, RecursionError) as exc:
            why = shorten(str(exc)) if not isinstance(exc, RecursionError) else "nested too deeply"
            raise ConfigError(f"results file {path}: line {number} is not a row ({why})") from None
        yield number, row


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every whole row of a results file, in file order (a partial last line is ignored)."""
    return [row for _, row in stream_rows(path)]
