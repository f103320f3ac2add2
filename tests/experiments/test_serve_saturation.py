"""The open-loop saturation verdict (:func:`tpsim.experiments.serve.metrics.saturation`) on
request histories built by hand: an idle system, a queue converging to its level, and one
that grows without bound."""

from __future__ import annotations

from tpsim.experiments.serve.engine import Request
from tpsim.experiments.serve.metrics import saturation


def _history(arrivals: list[float], latency: list[float], ttft: float = 0.01) -> list[Request]:
    out = []
    for i, (a, e) in enumerate(zip(arrivals, latency, strict=True)):
        r = Request(i, a, 100, 10)
        r.token_s = [a + min(ttft, e)]
        r.done_s = a + e
        out.append(r)
    return out


def test_an_idle_system_is_not_saturated_even_in_a_short_run() -> None:
    """20 requests, 5 at once and then 2 s apart, each done in 50 ms, though the last
    quarter's happen to wait longer (a first token at 35 ms against 23): nothing
    accumulates. (The request that has just arrived is in the system at the last arrival:
    no growth.)"""
    arrivals = [0.1 * i for i in range(5)] + [2.0 * i for i in range(1, 16)]
    reqs = _history(arrivals, [0.05] * 20, ttft=0.023)
    for r in reqs[15:]:
        r.token_s = [r.arrival_s + 0.035]
    assert not saturation(reqs).saturated


def test_a_queue_converging_to_its_level_is_not_saturated() -> None:
    """Latency ramps up over the first quarter (the batch filling) and then holds."""
    n = 400
    arrivals = [i / 64 for i in range(n)]
    latency = [0.3 + 1.0 * min(1.0, a / 1.5) for a in arrivals]
    assert not saturation(_history(arrivals, latency)).saturated


def test_a_queue_growing_without_bound_is_saturated() -> None:
    """Arrivals at 2 req/s served at 1 req/s in turn: the wait grows linearly."""
    arrivals = [0.5 * i for i in range(200)]
    done = [1.0 * (i + 1) for i in range(200)]  # one at a time, a second each
    reqs = _history(arrivals, [d - a for d, a in zip(done, arrivals, strict=True)], ttft=0.5)
    for r, d in zip(reqs, done, strict=True):
        r.token_s = [d - 0.5]
    s = saturation(reqs)
    assert s.saturated
    assert 0.5 < s.growth_per_s < 1.5  # about 2 - 1 req/s
    # 20 s of it: arrivals like a clock leave the queue's averages no noise to hide in
    # (batch means), where a Poisson count's square root had called its 10 a quarter noise
    assert saturation(reqs[:40]).saturated


def test_a_burst_of_arrivals_is_not_a_trend() -> None:
    """A steady system (latency 1 s) whose arrivals come faster for a while in the last
    quarter: the number in it rises by about the burst, not without bound."""
    arrivals = [i / 64 for i in range(200)] + [200 / 64 + i / 96 for i in range(60)]
    arrivals += [arrivals[-1] + (i + 1) / 64 for i in range(68)]
    reqs = _history(arrivals, [1.0] * len(arrivals))
    for r in reqs[-80:]:  # first tokens of the last quarter slower too (a 2x ratio)
        r.token_s = [r.arrival_s + 0.02]
    assert not saturation(reqs).saturated


def _admitted_at(rate: float, capacity: float, n: int, decode_s: float = 4.0) -> list[Request]:
    """Poisson-free arrivals at ``rate``, admitted in turn at ``capacity`` a second, each
    then decoding ``decode_s`` in the running batch (a continuous-batching engine whose
    batch holds capacity x decode_s sequences)."""
    arrivals = [i / rate for i in range(n)]
    first = [max(a, i / capacity) for i, a in enumerate(arrivals)]
    reqs = _history(arrivals, [f + decode_s - a for f, a in zip(first, arrivals, strict=True)])
    for r, f in zip(reqs, first, strict=True):
        r.token_s = [f]
    return reqs


def test_a_modest_overload_is_flagged_however_long_the_run() -> None:
    """32 req/s against 28.8 (11 % over): the waiting line grows 3.2 a second however long
    the run. It was flagged at 10,000 requests and not at 20,000, and never under a 10 %
    overload: growth was held to 10 % of the arrivals and measured on the number in the
    system, where the running batch's level (115 here) set the noise bound."""
    for n in (2000, 10_000, 20_000):
        assert saturation(_admitted_at(32.0, 28.8, n)).saturated
    assert saturation(_admitted_at(30.0, 28.8, 20_000)).saturated  # 4 % over
    for n in (2000, 20_000):  # under capacity: admitted on arrival, nothing waits
        assert not saturation(_admitted_at(28.0, 28.8, n)).saturated
