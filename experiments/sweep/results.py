"""The sweep results file: one row per point, CSV or JSON Lines, appended as points finish.

A row is the point's parameters (with its ``point_id``), then what the simulation gave
(:data:`RESULT_COLUMNS`) or an ``error``. Rows hold no wall-clock figures, so the same point
gives the same row text in every run.

The file is a ledger: a row means the point is done (a result, or an error of the point
itself). A failure of the machinery (a worker killed, a Dask task lost) is never written;
rows that older versions wrote for such failures (:func:`infrastructure_error`) count as
not done, and resuming drops them. One process writes a file at a time: it holds an
exclusive lock on ``<file>.lock`` (released by the OS when it exits, however it exits).
Each row is one line, written with one ``write`` and flushed (fsync every
:data:`FSYNC_EVERY` rows and at the end): a killed sweep leaves whole rows and at most one
partial last line, which :func:`open_results` cuts off when resuming.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import io
import json
import logging
import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tpsim.calibration.bounded import ReadRefused, read_lines, read_text, shorten, show
from tpsim.core.errors import ConfigError
from tpsim.experiments.sweep.grid import CONTROL, LAYOUT_AXES, MOE_AXES, POINT_FIELDS
from tpsim.outputs.export import write_text

log = logging.getLogger(__name__)

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
FSYNC_EVERY = 256  # rows between fsyncs (and at least every FSYNC_S seconds)
FSYNC_S = 5.0
#: Error texts of failures of the machinery, not of the point: what the sweep writes (older
#: files hold such rows) and how --resume knows them.
WORKER_DIED = "worker process died while simulating this point"
DASK_FAILED = "dask task failed"
INFRASTRUCTURE_ERRORS = ("worker process died", DASK_FAILED)


def infrastructure_error(row: Mapping[str, Any]) -> bool:
    """A row whose error is the machinery's (a lost worker or task): the point is not done."""
    error = row.get("error")
    return isinstance(error, str) and error.startswith(INFRASTRUCTURE_ERRORS)


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


class RowNotWritten(OSError):
    """A row the results file could not take (its file keeps every row written before)."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"cannot write {path} ({why})")
        self.path, self.why = path, why


class ResultsWriter:
    """Appends rows to a results file: each one line in one ``write``, flushed; fsync every
    :data:`FSYNC_EVERY` rows or :data:`FSYNC_S` seconds and on close. Closing releases the
    lock."""

    def __init__(self, path: Path, fmt: str, fd: int, lock: int) -> None:
        self.path, self.fmt, self._fd, self._lock = path, fmt, fd, lock
        self.written = 0
        self._synced_at = (0, time.monotonic())

    def write(self, row: Mapping[str, Any]) -> None:
        """Append one row whole, or raise :class:`RowNotWritten` (a full disk, a file too
        large) with the file as it was: a row cut short is cut off again."""
        data = (format_row(row, self.fmt) + "\n").encode("utf-8")
        size = os.fstat(self._fd).st_size
        try:
            n = os.write(self._fd, data)
            if n != len(data):  # a file size limit or a full disk takes part of it
                os.write(self._fd, data[n:])  # raises the reason (EFBIG, ENOSPC)
                raise OSError(errno.EIO, "short write")
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)
            raise RowNotWritten(self.path, exc.strerror or str(exc)) from None
        self.written += 1
        rows, when = self._synced_at
        if self.written - rows >= FSYNC_EVERY or time.monotonic() - when >= FSYNC_S:
            self.sync()

    def sync(self) -> None:
        os.fsync(self._fd)
        self._synced_at = (self.written, time.monotonic())

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            self.sync()
        finally:
            os.close(self._fd)
            os.close(self._lock)  # releases the lock
            self._fd = self._lock = -1

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def lock_path(path: str | Path) -> Path:
    p = Path(path)
    return p.with_name(p.name + ".lock")


def _lock(path: Path) -> int:
    """Hold ``<path>.lock`` exclusively (ConfigError at once if another process holds it)."""
    name = lock_path(path)
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ConfigError(f"--out={path}: cannot create its lock file {name}: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ConfigError(
            f"--out={path}: another sweep is writing this file (it holds {name})"
        ) from None
    return fd


def check_output(path: str | Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse an output path before the sweep runs (no file is created here)."""
    p = Path(path)
    result_format(p)
    if not p.parent.is_dir():
        raise ConfigError(f"--out={path}: folder {p.parent} does not exist")
    if p.exists() and not p.is_file():
        raise ConfigError(f"--out={path}: not a regular file")
    if p.exists() and not (resume or overwrite):
        raise ConfigError(
            f"--out={path}: already exists; pass --resume to continue it or --overwrite"
        )


def open_results(
    path: str | Path, *, resume: bool, overwrite: bool = False
) -> tuple[ResultsWriter, set[str]]:
    """Lock ``path``, open it for appending and return the writer and the point ids done.

    Resuming cuts a partial last line (left by a killed sweep) off the file first, and
    rewrites it (atomically) without rows that are not done (:func:`infrastructure_error`)
    and without repeated point ids, keeping each point's first done row.
    """
    p = Path(path)
    fmt = result_format(p)
    check_output(p, resume=resume, overwrite=overwrite)
    lock = _lock(p)
    try:
        done: set[str] = set()
        fresh = not (resume and p.exists())
        if not fresh:
            _truncate_partial_line(p)
            if p.stat().st_size == 0:
                fresh = True
            else:
                done = _keep_done(p, fmt)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_CREAT
        fd = os.open(p, flags | (os.O_TRUNC if fresh else 0), 0o644)
    except BaseException:
        os.close(lock)
        raise
    if fresh and fmt == "csv":
        header = (csv_header() + "\n").encode()
        try:
            n = os.write(fd, header)
            if n != len(header):
                os.write(fd, header[n:])  # raises the reason (EFBIG, ENOSPC)
        except OSError as exc:
            os.close(fd)
            os.close(lock)
            p.unlink(missing_ok=True)
            why = exc.strerror or exc
            raise ConfigError(f"--out={shorten(str(p), 120)}: cannot write ({why})") from None
    return ResultsWriter(p, fmt, fd, lock), done


def _keep_done(path: Path, fmt: str) -> set[str]:
    """The point ids done in ``path``; rows that are not done or repeat a point go."""
    done: set[str] = set()
    kept: list[dict[str, Any]] = []
    rows = read_rows(path)
    for r in rows:
        if not infrastructure_error(r) and r["point_id"] not in done:
            done.add(r["point_id"])
            kept.append(r)
    if len(kept) < len(rows):
        dropped = len(rows) - len(kept)
        log.warning("%s: %d rows not done or repeated; their points run again", path, dropped)
        write_text(path, results_text(kept, fmt))
    return done


def _truncate_partial_line(path: Path) -> None:
    try:
        data = read_text(path, MAX_RESULTS_BYTES, bom=False).encode()
    except ReadRefused as exc:
        raise ConfigError(f"results file {shorten(str(path), 100)}: {exc}") from None
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        log.warning("%s: dropping a partial last line (%d bytes)", path, len(data) - keep)
        with path.open("r+b") as f:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())


def results_text(rows: Iterable[Mapping[str, Any]], fmt: str) -> str:
    """A whole results file as text (a header for CSV, then one line per row)."""
    lines = [csv_header()] if fmt == "csv" else []
    lines += [format_row(r, fmt) for r in rows]
    return "\n".join(lines) + "\n"
