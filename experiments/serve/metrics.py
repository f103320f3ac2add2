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
    growth_per_s: float  # arrivals less completions per second while requests arrived


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


#: Points at which each quarter of the arrivals is sampled for its time-averaged occupancy.
SAMPLES = 256
#: Consecutive batches of a quarter's samples whose means give its average's noise.
BATCHES = 8


#: The least excess of arrivals over completions, as a share of the arrivals, that
#: :func:`saturation` calls a trend (at 10 %, a queue 10 % over capacity grew without bound
#: and was never flagged, however long the run).
OVERLOAD = 0.03


def saturation(requests: Sequence[Request]) -> Saturation:
    """Open loop: whether the queue grew without bound while requests arrived. A system that
    keeps up holds the number of requests in it around a level (reached after a ramp from
    empty) and its latency steady; one that cannot gains the excess of arrivals over
    completions, linearly, and each request waits longer than the one before.

    The arrivals are cut into quarters and the number of requests waiting for their first
    token (queued, or in their prefill) is time-averaged over each (not read at an instant:
    the last arrival itself, or a burst, would count). Not the number in the system: a
    continuous-batching engine's running batch grows with the load to what its memory holds,
    a level, not a queue (its square root is no noise bound: at 32 req/s against 28.7 the
    batch held 500 and grew 26 a quarter while the waiting line grew 28 on 106). Saturated
    when both hold:

    - it still grows in the second half: the last quarter's average exceeds the third's by
      more than the noise of a steady level (twice its square root, as for a Poisson count,
      or twice the two averages' standard error by batch means where that is less: an
      average over a quarter wanders less than one count, and a long-prompt queue of 30 that
      grows by 6 a quarter is no burst) and by more than 3 % of the requests that arrived
      in the last quarter (a system converging to its level, or one at capacity, gains
      less; one 3 % over its capacity gains that much a quarter however long the run, and
      the noise term shrinks beside it as the run grows). A run shorter than a queue takes
      to settle may show its fill as growth: ``tpsim plan`` runs such probes again, longer;
    - the requests arriving in the last quarter waited for their first token, or took in
      all, more than 1.5 times as long on average as those of the second quarter.

    Fewer than 20 requests, or none after the first instant, are never judged saturated."""
    arrival = np.array([r.arrival_s for r in requests])
    e2e = np.array([r.done_s - r.arrival_s for r in requests])
    ttft = np.array([r.token_s[0] - r.arrival_s for r in requests])
    arrivals = np.sort(arrival)
    started = np.sort(np.array([r.token_s[0] for r in requests]))  # first token out
    if len(arrivals) < 20 or arrivals[-1] <= arrivals[0]:
        return Saturation(False, 0.0, 0.0, 0.0)
    first, last = float(arrivals[0]), float(arrivals[-1])
    quarter = (last - first) / 4
    edges = [first + k * quarter for k in range(5)]

    def occupancy(k: int) -> tuple[float, float]:
        """The time-averaged number waiting for a first token over quarter ``k`` (0 to 3),
        and the standard error of that average by batch means (the quarter's samples in
        :data:`BATCHES` consecutive batches; a level's own fluctuation, not a count's)."""
        t = edges[k] + (np.arange(SAMPLES) + 0.5) * (quarter / SAMPLES)
        inside = np.searchsorted(arrivals, t, "right") - np.searchsorted(started, t, "right")
        means = inside.reshape(BATCHES, -1).mean(axis=1)
        return float(inside.mean()), float(means.std(ddof=1) / np.sqrt(BATCHES))

    (third, se3), (fourth, se4) = occupancy(2), occupancy(3)
    grew = fourth - third
    late = int(len(arrivals) - np.searchsorted(arrivals, edges[3], "left"))
    noise = 2.0 * float(np.hypot(se3, se4))
    growing = grew > max(min(2.0 * np.sqrt(third + 1.0), noise), OVERLOAD * late)
    rate = (len(arrivals) - 1) / (last - first)
    done = np.sort(np.array([r.done_s for r in requests]))
    completed = float(np.searchsorted(done, last, "right")) / (last - first)
    # what the system gains a second: the arrival rate less the completions of the second
    # half (a continuous batch fills first, so completions before it lag the capacity)
    half = edges[2]
    served = np.searchsorted(done, last, "right") - np.searchsorted(done, half, "right")
    growth = max(0.0, rate - float(served) / (last - half))
    q2, q4 = (arrival >= edges[1]) & (arrival < edges[2]), arrival >= edges[3]
    slower = bool(q2.any() and q4.any()) and any(
        float(x[q4].mean()) > 1.5 * float(x[q2].mean()) for x in (ttft, e2e)
    )
    return Saturation(bool(growing and slower), rate, completed, growth)


__all__ = ["METRICS", "Saturation", "per_request", "saturation", "summary"]
