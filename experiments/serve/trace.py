"""Request traces for ``tpsim serve --trace FILE``: CSV or JSONL, one request a row.

Columns (CSV header or JSON keys), case as written:

- arrival time: ``TIMESTAMP`` (the Azure LLM inference trace: a date and time such as
  ``2023-11-16 18:15:46.6805900``, or seconds), ``timestamp``, ``arrival_s`` or ``time_s``
  (seconds); times are taken relative to the first row and must not decrease;
- prompt tokens: ``ContextTokens`` (Azure), ``prompt_tokens``, ``input_tokens`` or
  ``prompt_len``;
- output tokens: ``GeneratedTokens`` (Azure), ``output_tokens`` or ``output_len``.

A row with zero output tokens is sent with one (an engine always returns a token).
"""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime

from tpsim.calibration.bounded import ReadRefused, read_text, shorten
from tpsim.core.errors import ConfigError
from tpsim.experiments.serve.workload import MAX_FILE_BYTES, MAX_LENGTH, MAX_REQUESTS, Requests

TIME_KEYS = ("TIMESTAMP", "timestamp", "arrival_s", "time_s")
PROMPT_KEYS = ("ContextTokens", "prompt_tokens", "input_tokens", "prompt_len")
OUTPUT_KEYS = ("GeneratedTokens", "output_tokens", "output_len")


def _bad(path: str, why: str) -> ConfigError:
    return ConfigError(f"--trace={shorten(path, 60)}: {why}")


def _seconds(path: str, row: int, value: object) -> float:
    if isinstance(value, bool):
        raise _bad(path, f"row {row}: time {value!r} is not a time")
    if isinstance(value, int | float):
        t = float(value)
    else:
        text = str(value).strip()
        try:
            t = float(text)
        except ValueError:
            t = _datetime(path, row, text)
    if not math.isfinite(t):
        raise _bad(path, f"row {row}: time {shorten(str(value), 30)!r} is not finite")
    return t


def _datetime(path: str, row: int, text: str) -> float:
    head, _, frac = text.partition(".")
    digits = "".join(c for c in frac if c.isdigit())
    zone = frac[len(digits) :]
    try:
        base = datetime.fromisoformat(head + zone)
    except ValueError:
        raise _bad(
            path, f"row {row}: time {shorten(text, 40)!r} is neither seconds nor a date"
        ) from None
    fraction = int(digits) / 10 ** len(digits) if digits else 0.0
    return _naive(base) + fraction


def _naive(base: datetime) -> float:
    if base.tzinfo is not None:
        return base.timestamp()
    return (base - datetime(1970, 1, 1)).total_seconds()


def _count(path: str, row: int, what: str, value: object, least: int) -> int:
    try:
        n = float(str(value).strip()) if not isinstance(value, int | float) else float(value)
    except ValueError:
        raise _bad(path, f"row {row}: {what} {shorten(str(value), 30)!r} is not a number") from None
    if (
        isinstance(value, bool)
        or not math.isfinite(n)
        or n != int(n)
        or not least <= n <= MAX_LENGTH
    ):
        raise _bad(
            path,
            f"row {row}: {what} {shorten(str(value), 30)!r} must be a whole number "
            f"from {least} to {MAX_LENGTH}",
        )
    return int(n)


#: The longest a trace may span, first arrival to last (as ``--duration`` at most): 115 days.
MAX_SPAN_S = 1e7


def _pick(path: str, keys: list[str], names: tuple[str, ...], what: str) -> str:
    found = [name for name in names if name in keys]
    if len(found) > 1:
        raise _bad(path, f"columns {' and '.join(found)} both give the {what}: keep one")
    if found:
        return found[0]
    raise _bad(
        path, f"no {what} column (one of {', '.join(names)}); it has {shorten(', '.join(keys), 80)}"
    )


def _rows(path: str, text: str) -> list[dict[str, object]]:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        rows: list[dict[str, object]] = []
        for k, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise _bad(path, f"line {k}: not a JSON object") from None
            if not isinstance(obj, dict):
                raise _bad(path, f"line {k}: not a JSON object")
            rows.append(obj)
        return rows
    # comments and blank lines skipped; a space after a comma is not part of a name
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    header = next(csv.reader(lines[:1], skipinitialspace=True), [])
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise _bad(path, f"column {twice[0]!r} appears twice in the header")
    return list(csv.DictReader(io.StringIO("\n".join(lines)), skipinitialspace=True))


def read_trace(path: str, *, requests: int = 0, duration_s: float | None = None) -> Requests:
    """The requests of trace ``path`` (the first ``requests``, or those arriving before
    ``duration_s``, when given)."""
    try:
        text = read_text(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        raise _bad(path, "no such file") from None
    except (ReadRefused, OSError, UnicodeDecodeError) as e:
        raise _bad(path, f"cannot read it: {shorten(str(e), 80)}") from None
    rows = _rows(path, text)
    if not rows:
        raise _bad(path, "holds no requests")
    keys = [str(k) for k in rows[0]]
    tk = _pick(path, keys, TIME_KEYS, "arrival time")
    pk = _pick(path, keys, PROMPT_KEYS, "prompt tokens")
    ok = _pick(path, keys, OUTPUT_KEYS, "output tokens")
    times: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    for k, row in enumerate(rows, 1):
        if requests and len(times) >= requests:
            break
        if len(times) >= MAX_REQUESTS:
            raise _bad(path, f"more than {MAX_REQUESTS:,} requests")
        t = _seconds(path, k, row.get(tk))
        if times and t < times[-1]:
            raise _bad(path, f"row {k}: arrival times must not decrease")
        if times and t - times[0] > MAX_SPAN_S:
            raise _bad(
                path,
                f"row {k}: arrives {t - times[0]:.3g} s after the first; a trace spans at "
                f"most {MAX_SPAN_S:g} s",
            )
        times.append(t)
        prompt.append(_count(path, k, pk, row.get(pk), 1))
        output.append(max(1, _count(path, k, ok, row.get(ok), 0)))
    t0 = times[0]
    rel = [t - t0 for t in times]
    if duration_s is not None:
        n = sum(1 for t in rel if t < duration_s)
        rel, prompt, output = rel[:n], prompt[:n], output[:n]
    return Requests(tuple(prompt), tuple(output), tuple(rel))


__all__ = ["read_trace"]
