"""What a serving run measured, as ``vllm bench serve`` reports it (``benchmarks/serve.py``,
``calculate_metrics``): throughputs over the whole run (first request sent to last one
finished), and per request TTFT (first token), TPOT ((latency - TTFT) / (output tokens -
1), requests of more than one output token), ITL (every gap between successive tokens of a
request) and E2E latency; mean, median, p90 and p99 in ms (numpy's linear percentiles).
Goodput: requests per second that met every SLO given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tpsim.experiments.serve.engine import Request

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = (("mean", None), ("median", 50.0), ("p90", 90.0), ("p99", 99.0))


def _stats(name: str, values_s: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, q in STATS:
        if len(values_s) == 0:
            v = 0.0
        elif q is None:
            v = float(np.mean(values_s))
        else:
            v = float(np.percentile(values_s, q))
        out[f"{label}_{name}_ms"] = v * 1e3
    return out


@dataclass(frozen=True)
class Saturation:
    """Whether the queue grew without bound while requests arrived (an open loop)."""

    saturated: bool
    arrival_rate: float  # requests/s offered
    completion_rate: float  # requests/s completed while they arrived
    growth_per_s: float  # requests in the system gained per second, second half of arrivals


def per_request(requests: Sequence[Request]) -> dict[str, np.ndarray]:
    """TTFT, TPOT, E2E latency per request and every ITL gap, in seconds."""
    ttft = np.array([r.token_s[0] - r.arrival_s for r in requests])
    e2el = np.array([r.done_s - r.arrival_s for r in requests])
    multi = [r for r in requests if r.output > 1]
    tpot = np.array([(r.done_s - r.token_s[0]) / (r.output - 1) for r in multi])
    gaps = [np.diff(np.asarray(r.token_s)) for r in requests if len(r.token_s) > 1]
    itl = np.concatenate(gaps) if gaps else np.zeros(0)
    return {"ttft": ttft, "tpot": tpot, "itl": itl, "e2el": e2el}


def summary(
    requests: Sequence[Request],
    duration_s: float,
    *,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
) -> dict[str, float | int]:
    """The vLLM-bench keys (``request_throughput``, ``mean_ttft_ms``, ...) of a finished run."""
    n = len(requests)
    inp = sum(r.prompt for r in requests)
    out = sum(r.output for r in requests)
    d = duration_s if duration_s > 0 else float("inf")
    result: dict[str, float | int] = {
        "completed": n,
        "duration_s": duration_s,
        "total_input_tokens": inp,
        "total_output_tokens": out,
        "request_throughput": n / d,
        "output_throughput": out / d,
        "total_token_throughput": (inp + out) / d,
    }
    values = per_request(requests)
    for name in METRICS:
        result.update(_stats(name, values[name]))
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        good = 0
        for r in requests:
            ttft = (r.token_s[0] - r.arrival_s) * 1e3
            tpot = (r.done_s - r.token_s[0]) / (r.output - 1) * 1e3 if r.output > 1 else 0.0
            if (slo_ttft_ms is None or ttft <= slo_ttft_ms) and (
                slo_tpot_ms is None or tpot <= slo_tpot_ms
            ):
                good += 1
        result["goodput"] = good / d
    return result


def saturation(requests: Sequence[Request]) -> Saturation:
    """Open loop: whether the queue grew without bound while requests arrived. A system that
    keeps up holds the number of requests in it around a level and its latency steady; one
    that cannot gains the excess of arrivals over completions, and each request waits longer
    than the one before. Saturated: the number in the system at the last arrival exceeds the
    number half-way through the arrivals by more than 10 % of the requests that arrived in
    between, and the requests arriving in the last quarter of the arrivals waited for their
    first token, or took in all, more than 1.5 times as long on average as those of the
    second quarter."""
    arrival = np.array([r.arrival_s for r in requests])
    e2e = np.array([r.done_s - r.arrival_s for r in requests])
    ttft = np.array([r.token_s[0] - r.arrival_s for r in requests])
    arrivals, done = np.sort(arrival), np.sort(np.array([r.done_s for r in requests]))
    last = float(arrivals[-1]) if len(arrivals) else 0.0
    if len(arrivals) < 20 or last <= 0:
        return Saturation(False, 0.0, 0.0, 0.0)
    half = last / 2

    def in_system(t: float) -> int:
        return int(np.searchsorted(arrivals, t, "right") - np.searchsorted(done, t, "right"))

    grew = in_system(last) - in_system(half)
    second = int(
        np.searchsorted(arrivals, last, "right") - np.searchsorted(arrivals, half, "right")
    )
    rate = len(arrivals) / last
    completed = float(np.searchsorted(done, last, "right")) / last
    q2, q4 = (arrival >= last / 4) & (arrival < half), arrival >= 3 * last / 4
    slower = bool(q2.any() and q4.any()) and any(
        float(x[q4].mean()) > 1.5 * float(x[q2].mean()) for x in (ttft, e2e)
    )
    saturated = grew > 0.1 * max(second, 1) and slower
    return Saturation(saturated, rate, completed, grew / (last - half))


__all__ = ["METRICS", "Saturation", "per_request", "saturation", "summary"]
