"""A sweep results file read back: every whole row, a line at a time, each checked (a
damaged file is refused, naming its line); the file is bounded in size, and a partial last
line (a killed sweep's) is ignored."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tpsim.calibration.bounded import ReadRefused, read_lines, shorten, show
from tpsim.core.errors import ConfigError
from tpsim.experiments.sweep.grid import LAYOUT_AXES
from tpsim.experiments.sweep.rows import (
    APPENDED_COLUMNS,
    BOOL_COLUMNS,
    COLUMNS,
    FLOAT_COLUMNS,
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
)
#: What --resume says of a file written before the columns of APPENDED_COLUMNS existed.
OLD_FILE = (
    "written by an older tpsim, without the columns {missing}; start a new file "
    "(or pass --overwrite)"
)


def _lines(path: Path, fmt: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every complete line, header excluded, blank lines skipped.

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
            if line != csv_header():
                names = line.split(",")
                missing = [c for c in APPENDED_COLUMNS if c not in names]
                if (
                    names[: len(COLUMNS) - len(APPENDED_COLUMNS)]
                    == list(COLUMNS[: len(COLUMNS) - len(APPENDED_COLUMNS)])
                    and missing
                ):
                    raise ConfigError(
                        f"results file {path}: " + OLD_FILE.format(missing=", ".join(missing))
                    )
                raise ConfigError(
                    f"results file {path}: its header is not this version's columns "
                    "(start a new file)"
                )
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
    return row


def stream_rows(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of every whole row of a results file, in file order, read a line
    at a time (a partial last line is ignored); every line is checked, so a damaged file is
    refused whichever rows its reader keeps."""
    p = Path(path)
    fmt = result_format(p)
    if not p.exists():
        raise ConfigError(f"results file {path}: no such file")
    for number, line in _lines(p, fmt):
        try:
            row = _checked(parse_line(line, fmt))
        except (ValueError, KeyError, RecursionError) as exc:
            why = shorten(str(exc)) if not isinstance(exc, RecursionError) else "nested too deeply"
            raise ConfigError(f"results file {path}: line {number} is not a row ({why})") from None
        yield number, row


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every whole row of a results file, in file order (a partial last line is ignored)."""
    return [row for _, row in stream_rows(path)]
