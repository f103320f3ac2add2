"""The sweep results file as a ledger: one row per point, CSV or JSON Lines, appended as
points finish.

A row is the point's parameters (with its ``point_id``), then what the simulation gave
(:data:`.rows.RESULT_COLUMNS`) or an ``error`` (its columns and its line text:
:mod:`.rows`; the file read back: :mod:`.reading`). Rows hold no wall-clock figures, so the
same point gives the same row text in every run.

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
import errno
import fcntl
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tpsim.calibration.bounded import ReadRefused, read_text, shorten
from tpsim.core.errors import ConfigError
from tpsim.experiments.sweep.reading import MAX_RESULTS_BYTES, check_resumable, read_rows
from tpsim.experiments.sweep.rows import csv_header, format_row, result_format, results_text
from tpsim.outputs.export import write_text

log = logging.getLogger(__name__)

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
    # the lock file, and a resumed file's atomic rewrite, are created beside it
    if not os.access(p.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--out={path}: folder {p.parent} is not writable")
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
                check_resumable(p)  # an older file's rows lack columns new rows have
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
