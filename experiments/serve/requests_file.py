"""A serving run read back from its per-request lines (``tpsim serve --out requests.jsonl``),
for ``tpsim report --serve``: each request's arrival, lengths, first token and finish."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tpsim.calibration.bounded import ReadRefused, read_text, shorten
from tpsim.core.errors import ConfigError
from tpsim.experiments.serve.workload import MAX_FILE_BYTES, MAX_REQUESTS

#: The fields every line must carry, and their kinds.
FIELDS = {
    "id": int,
    "arrival_s": float,
    "prompt_tokens": int,
    "output_tokens": int,
    "first_token_s": float,
    "finish_s": float,
}


@dataclass(frozen=True)
class ServedRequest:
    id: int
    arrival_s: float
    prompt: int
    output: int
    first_token_s: float
    finish_s: float

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.output <= 1:
            return None
        return (self.finish_s - self.first_token_s) / (self.output - 1)

    @property
    def e2el_s(self) -> float:
        return self.finish_s - self.arrival_s


def _field(flag: str, n: int, row: dict[str, Any], name: str) -> float:
    v = row.get(name)
    kind = FIELDS[name]
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    if not ok or (kind is int and not float(v).is_integer()):  # type: ignore[arg-type]
        raise ConfigError(
            f"{flag}: line {n}: {name}={shorten(repr(v))} is not a "
            f"{'whole ' if kind is int else ''}number >= 0"
        )
    return float(v)  # type: ignore[arg-type]


def read_requests(path: str | Path, flag: str = "--serve") -> list[ServedRequest]:
    """The requests of ``path``; one line naming the flag, line and field when it is not
    what ``tpsim serve --out`` writes."""
    try:
        text = read_text(path, MAX_FILE_BYTES)
    except ReadRefused as e:
        raise ConfigError(f"{flag}={shorten(str(path))}: {e}") from None
    out: list[ServedRequest] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(out) >= MAX_REQUESTS:
            raise ConfigError(f"{flag}={shorten(str(path))}: more than {MAX_REQUESTS:,} requests")
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(f"{flag}={shorten(str(path))}: line {n} is not JSON") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{flag}={shorten(str(path))}: line {n} is not a JSON object")
        where = f"{flag}={shorten(str(path))}"
        v = {name: _field(where, n, row, name) for name in FIELDS}
        if not v["arrival_s"] <= v["first_token_s"] <= v["finish_s"]:
            raise ConfigError(
                f"{where}: line {n}: times out of order (arrival, first token, finish)"
            )
        out.append(
            ServedRequest(
                int(v["id"]),
                v["arrival_s"],
                int(v["prompt_tokens"]),
                int(v["output_tokens"]),
                v["first_token_s"],
                v["finish_s"],
            )
        )
    if not out:
        raise ConfigError(f"{flag}={shorten(str(path))}: no requests in it")
    return out


def stats(requests: list[ServedRequest]) -> dict[str, float]:
    """vllm-bench's keys that the lines give (no ITL: the lines keep no token times):
    throughputs over the run, mean, median, p90 and p99 of TTFT, TPOT and E2E latency (ms)."""
    start = min(r.arrival_s for r in requests)
    end = max(r.finish_s for r in requests)
    d = end - start if end > start else math.inf
    out = {
        "completed": float(len(requests)),
        "duration_s": end - start,
        "request_throughput": len(requests) / d,
        "output_throughput": sum(r.output for r in requests) / d,
        "total_token_throughput": sum(r.prompt + r.output for r in requests) / d,
    }
    series = {
        "ttft": [r.ttft_s for r in requests],
        "tpot": [t for r in requests if (t := r.tpot_s) is not None],
        "e2el": [r.e2el_s for r in requests],
    }
    for name, vals in series.items():
        a = np.asarray(vals) if vals else np.zeros(1)
        out[f"mean_{name}_ms"] = float(np.mean(a)) * 1e3
        for label, q in (("median", 50), ("p90", 90), ("p99", 99)):
            out[f"{label}_{name}_ms"] = float(np.percentile(a, q)) * 1e3
    return out


__all__ = ["ServedRequest", "read_requests", "stats"]
