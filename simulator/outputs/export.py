"""Export a record list: Chrome/Perfetto trace JSON, CSV, and atomic file writes.

Pure functions over ``list[Record]``; the only I/O is in the ``write_*`` helpers, which
write a temporary file beside the target and ``os.replace`` it, so a crash never leaves a
partial file behind. No matplotlib here (plots live in ``experiments/``).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import secrets
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from tpsim.core.records import Record

#: Thread id of each stream inside a rank's process in the trace.
STREAM_TIDS: dict[str, int] = {"cpu": 1, "compute": 2, "comm": 3, "p2p": 4}

#: Thread names shown by Perfetto / chrome://tracing.
STREAM_LABELS: dict[str, str] = {
    "cpu": "CPU launch",
    "compute": "compute stream",
    "comm": "comm stream",
    "p2p": "pipeline sends",
}
#: Thread id and name of a rank's point-to-point receives, beside its sends (tid 4): a
#: middle stage receives micro-batch m + 1 while it still sends m, and slices of one thread
#: must nest, which the two do not always do.
RECV_TID, RECV_LABEL = 5, "pipeline receives"

#: Column order of :func:`records_csv` (the Record fields, in declaration order).
CSV_FIELDS: tuple[str, ...] = Record._fields


def _ns(t_s: float) -> int:
    """Seconds -> integer nanoseconds (the trace's resolution)."""
    return round(t_s * 1e9)


def _us(t_ns: int) -> float:
    """Integer nanoseconds -> microseconds; the shortest repr has at most 3 decimals."""
    return t_ns / 1000


def _pid(rank: int) -> int:
    return rank + 1


def shown_stream(record: Record) -> str:
    """The row of a rank's Gantt that ``record`` is drawn on: its stream, but every
    point-to-point record on the ``p2p`` row. A pipeline stage's receive runs on the comm
    stream (posted behind the TP collectives, so it never holds one up) and its sends on
    their own; drawn by stream, the receive sat among the TP collectives and apart from the
    sends. In the trace the receives get a thread of their own beside the sends
    (:data:`RECV_TID`)."""
    return "p2p" if record.kind == "p2p" else record.stream


def is_receive(record: Record) -> bool:
    """Whether ``record`` is a point-to-point receive (the engine's detail of one starts
    "recv N B from rank R")."""
    return record.kind == "p2p" and record.detail.startswith("recv ")


def _tid(record: Record) -> int:
    if record.stream not in STREAM_TIDS:
        raise ValueError(
            f"record {record.id}: stream={record.stream!r} is not one of {sorted(STREAM_TIDS)}"
        )
    return RECV_TID if is_receive(record) else STREAM_TIDS[shown_stream(record)]


def _metadata(records: Sequence[Record], rank_labels: Mapping[int, str]) -> list[dict[str, Any]]:
    """process_name/sort_index per rank, thread_name/sort_index per (rank, stream) used."""
    used: dict[int, set[int]] = {}
    for r in records:
        used.setdefault(r.rank, set()).add(_tid(r))
    tid_names = {tid: STREAM_LABELS[s] for s, tid in STREAM_TIDS.items()}
    tid_names[RECV_TID] = RECV_LABEL
    events: list[dict[str, Any]] = []
    for rank in sorted(used):
        pid = _pid(rank)
        name = f"GPU {rank}"
        if rank in rank_labels:
            name += f" ({rank_labels[rank]})"
        meta = [
            (0, "process_name", {"name": name}),
            (0, "process_sort_index", {"sort_index": rank}),
        ]
        for tid in sorted(used[rank]):
            meta.append((tid, "thread_name", {"name": tid_names[tid]}))
            meta.append((tid, "thread_sort_index", {"sort_index": tid}))
        events += [
            {"ph": "M", "name": key, "pid": pid, "tid": tid, "ts": 0, "args": args}
            for tid, key, args in meta
        ]
    return events


def _first_by_op(records: Sequence[Record]) -> dict[tuple[int, int], dict[str, Record]]:
    """Earliest non-launch record of each (rank, op), per stream."""
    first: dict[tuple[int, int], dict[str, Record]] = {}
    for r in records:
        if r.kind == "launch":
            continue
        per_stream = first.setdefault((r.rank, r.op), {})
        best = per_stream.get(r.stream)
        if best is None or (r.start_s, r.id) < (best.start_s, best.id):
            per_stream[r.stream] = r
    return first


def _flows(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One s/f flow pair from each launch to the first record of its op on another stream.

    The flow ends sit at the middle of their slices so Perfetto binds each end to the
    intended slice even when slices on a thread touch end to start.
    """
    first = _first_by_op(records)
    events: list[dict[str, Any]] = []
    for launch in sorted((r for r in records if r.kind == "launch"), key=lambda r: r.id):
        per_stream = first.get((launch.rank, launch.op), {})
        targets = [k for stream, k in per_stream.items() if stream != launch.stream]
        if not targets:
            continue  # both ends or neither
        kernel = min(targets, key=lambda k: (k.start_s, k.id))
        for ph, r in (("s", launch), ("f", kernel)):
            start, end = _ns(r.start_s), _ns(r.end_s)
            event: dict[str, Any] = {
                "ph": ph,
                "name": "launch",
                "cat": "launch",
                "id": launch.id,
                "pid": _pid(r.rank),
                "tid": _tid(r),
                "ts": _us(start + max(0, end - start) // 2),
            }
            if ph == "f":
                event["bp"] = "e"
            events.append(event)
    return events


#: Flow ids of dependency arrows start here (launch arrows use the launch's record id).
DEPENDENCY_FLOW_BASE = 1 << 40


def _dependency_flows(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One s/f flow pair from each record to the record on another thread of its rank that
    its end released (``cause``): the graph replay to the first kernel, a GEMM to the
    collective after it, a collective to the kernel waiting for it; and from a pipeline's
    send to the receive on the next stage's GPU that waited for it, where the critical
    path crosses from one stage to the next. Launch arrows are drawn by :func:`_flows` and
    not repeated here."""
    by_id = {r.id: r for r in records}
    events: list[dict[str, Any]] = []
    for r in sorted(records, key=lambda r: r.id):
        cause = by_id.get(r.cause)
        if cause is None:
            continue
        if cause.rank != r.rank:
            if not (is_receive(r) and cause.kind == "p2p"):
                continue  # another GPU's record: only a send is drawn into its receive
        elif _tid(cause) == _tid(r):
            continue
        if cause.kind == "launch" and cause.op == r.op:
            continue  # the launch arrow of this op
        for ph, end in (("s", cause), ("f", r)):
            start, stop = _ns(end.start_s), _ns(end.end_s)
            event: dict[str, Any] = {
                "ph": ph,
                "name": "dependency",
                "cat": "dependency",
                "id": DEPENDENCY_FLOW_BASE + r.id,
                "pid": _pid(end.rank),
                "tid": _tid(end),
                "ts": _us(start + max(0, stop - start) // 2),
            }
            if ph == "f":
                event["bp"] = "e"
            events.append(event)
    return events


def _slice(record: Record, critical: frozenset[int] | None) -> tuple[tuple[Any, ...], dict]:
    start, end = _ns(record.start_s), _ns(record.end_s)
    dur = max(0, end - start)  # both ends rounded first: neighbours on a thread never overlap
    args: dict[str, Any] = {
        "id": record.id,
        "kind": record.kind,
        "category": record.category,
        "layer": record.layer,
        "site": record.site,
        "op": record.op,
        "flops": record.flops,
        "bytes": record.bytes,
        "cause": record.cause,
        "detail": record.detail,
    }
    if critical is not None:
        args["on_critical_path"] = record.id in critical
    pid, tid = _pid(record.rank), _tid(record)
    event = {
        "ph": "X",
        "name": record.name,
        "cat": record.kind,
        "pid": pid,
        "tid": tid,
        "ts": _us(start),
        "dur": _us(dur),
        "args": args,
    }
    return (pid, tid, start, -dur, record.id), event


def chrome_trace(
    records: Sequence[Record],
    *,
    title: str,
    rank_labels: Mapping[int, str] | None = None,
    critical: Collection[int] = (),
    link_usage: Sequence[tuple[float, str, float]] = (),
) -> dict[str, Any]:
    """Chrome trace (JSON object format) of ``records``, as Perfetto and chrome://tracing read it.

    One process per rank (pid = rank + 1, named "GPU r" plus the label if given), one thread
    per stream (cpu = 1, compute = 2, comm = 3), and a pipeline's point-to-point sends (4)
    and receives (5) apart from the collectives, whichever stream they ran on, as the Gantt
    draws them (:func:`shown_stream`). Each record becomes a complete ("X") event with ts
    and dur in microseconds at nanosecond resolution; every launch gets a flow arrow to the
    first record of its op on another stream, and every record released by a record on
    another thread of its rank gets a dependency arrow from it (a CUDA graph replay to its
    first kernel, a GEMM to its all-reduce, the all-reduce to the next kernel, a pipeline
    receive to the all-gathers after it), and every receive that waited for its send an
    arrow from that send, on the previous stage's GPU.
    ``args.on_critical_path`` is present only when ``critical`` is non-empty. ``link_usage``
    ((time, link, B/s) samples) becomes one counter track per link ("C" events, GB/s, one
    value per time and only when it changes) in a process named "Links" (pid
    :data:`LINKS_PID`, after every GPU's). Event order is fixed, so equal inputs give equal
    JSON.
    """
    crit = frozenset(critical) if critical else None
    slices = sorted((_slice(r, crit) for r in records), key=lambda kv: kv[0])
    return {
        "traceEvents": [
            *_metadata(records, rank_labels or {}),
            *(event for _, event in slices),
            *_flows(records),
            *_dependency_flows(records),
            *_counters(link_usage),
        ],
        "displayTimeUnit": "ns",
        "otherData": {"title": title},
    }


#: The process that holds one counter track per link: a positive pid (Perfetto treats pid 0
#: as the idle process) above every GPU's (rank + 1).
LINKS_PID = 1 << 30


def _counters(samples: Sequence[tuple[float, str, float]]) -> list[dict[str, Any]]:
    if not samples:
        return []
    out: list[dict[str, Any]] = [
        {
            "ph": "M",
            "name": "process_name",
            "pid": LINKS_PID,
            "tid": 0,
            "ts": 0,
            "args": {"name": "Links (GB/s in use)"},
        },
        {
            "ph": "M",
            "name": "process_sort_index",
            "pid": LINKS_PID,
            "tid": 0,
            "ts": 0,
            "args": {"sort_index": 1 << 20},
        },
    ]
    # one value per (link, time): the last sample at that time; then only changes
    last_at: dict[tuple[str, int], float] = {}
    order: list[tuple[str, int]] = []
    for t, link, bps in samples:
        key = (link, _ns(t))
        if key not in last_at:
            order.append(key)
        last_at[key] = round(bps / 1e9, 6)
    shown: dict[str, float] = {}
    for link, t_ns in order:
        value = last_at[(link, t_ns)]
        if shown.get(link) == value:
            continue
        shown[link] = value
        out.append(
            {
                "ph": "C",
                "name": link,
                "pid": LINKS_PID,
                "tid": 0,
                "ts": _us(t_ns),
                "args": {"GB/s": value},
            }
        )
    return out


def records_csv(records: Sequence[Record]) -> str:
    """CSV text: a header of the Record field names, then one row per record.

    Floats are written with ``repr`` so ``float(cell)`` gives back the exact value.
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in records:
        writer.writerow(
            [repr(v) if isinstance(v, float) else v for v in (getattr(r, f) for f in CSV_FIELDS)]
        )
    return buf.getvalue()


#: The files written so far by the command in progress (see :func:`all_or_nothing`).
_WRITTEN: ContextVar[list[Path] | None] = ContextVar("tpsim_written", default=None)
#: The folders created so far by the command in progress (see :func:`make_folder`).
_MADE: ContextVar[list[Path] | None] = ContextVar("tpsim_made", default=None)


@contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same suffix); on success, move it onto ``path``.

    On any exception the temporary file is removed and ``path`` is left untouched.
    A failure to write (a full disk, a file too large: ``OSError`` without a file name, or
    naming the temporary file) is raised as an ``OSError`` naming ``path``, the file the
    user asked for.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.stem}.{secrets.token_hex(6)}.tmp{target.suffix}")
    try:
        yield tmp
        os.replace(tmp, target)
        written = _WRITTEN.get()
        if written is not None:
            written.append(target)
    except OSError as exc:
        if exc.filename not in (None, str(tmp), tmp):
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from None
    finally:
        tmp.unlink(missing_ok=True)


def make_folder(path: str | Path) -> Path:
    """Create the folder ``path`` (and its missing parents); under :func:`all_or_nothing`,
    the folders created here are removed again, if left empty, when the command fails."""
    folder = Path(path)
    missing: list[Path] = []
    for p in (folder, *folder.parents):
        if p.is_dir():
            break
        missing.append(p)
    folder.mkdir(parents=True, exist_ok=True)
    made = _MADE.get()
    if made is not None:
        made.extend(reversed(missing))
    return folder


@contextmanager
def all_or_nothing() -> Iterator[None]:
    """Around one command: if it fails or is interrupted (any exception, Ctrl-C included),
    the files it has already written atomically are removed, and the folders it created
    (:func:`make_folder`) if they are left empty, so it leaves all its outputs or none."""
    written: list[Path] = []
    made: list[Path] = []
    token, made_token = _WRITTEN.set(written), _MADE.set(made)
    try:
        yield
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        for folder in reversed(made):  # innermost first; one holding anything else stays
            with suppress(OSError):
                folder.rmdir()
        raise
    finally:
        _WRITTEN.reset(token)
        _MADE.reset(made_token)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_output(path) as tmp:
        # O_EXCL: never follow or clobber something already at the temporary name;
        # mode 0o666 is narrowed by the umask like any ordinary file.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with open(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())


def write_json(path: str | Path, obj: object, *, indent: int | None = None) -> None:
    """Write ``obj`` as JSON (compact unless ``indent``) plus a newline, atomically; to a
    path ending in ``.gz``, gzip-compressed (with no time stamp: the same object gives the
    same bytes), as Perfetto opens it: a trace's link counters make a large run's JSON
    hundreds of MB, a tenth of that compressed.

    NaN and infinities are rejected (ValueError): they are not JSON.
    """
    separators = (",", ":") if indent is None else (",", ": ")
    text = json.dumps(obj, indent=indent, separators=separators, allow_nan=False)
    if Path(path).suffix.lower() != ".gz":
        write_text(path, text + "\n")
        return
    data = gzip.compress((text + "\n").encode("utf-8"), compresslevel=6, mtime=0)
    with atomic_output(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
