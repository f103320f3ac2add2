"""The SimPy serving loop against queueing theory: M/D/1's mean wait (Pollaczek-Khinchine),
Little's law, and a closed loop's throughput."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import pytest
from tpsim.core.engine.serving import run_loop


class OneAtATime:
    """A server taking one request at a time for ``service_s``, first come first served."""

    def __init__(self, service_s: float) -> None:
        self.service_s = service_s
        self.queue: deque[int] = deque()
        self.current: int | None = None
        self.arrived: dict[int, float] = {}
        self.started: dict[int, float] = {}
        self.done: dict[int, float] = {}

    def admit(self, request: int, now: float) -> None:
        self.arrived[request] = now
        self.queue.append(request)

    def step(self, now: float) -> float | None:
        if not self.queue:
            return None
        self.current = self.queue.popleft()
        self.started[self.current] = now
        return self.service_s

    def finish(self, now: float) -> Sequence[int]:
        assert self.current is not None
        self.done[self.current] = now
        return [self.current]


def test_md1_mean_wait_is_pollaczek_khinchine() -> None:
    """Poisson arrivals at 0.5/s, a constant 1 s service, 100k requests: the mean wait in
    the queue is rho / (2 mu (1 - rho)) = 0.5 s (M/D/1), within 2 %. (At rho = 0.8 the
    waits are so correlated that 100k requests estimate their mean to about 3 %.)"""
    rate, service, n = 0.5, 1.0, 100_000
    rng = np.random.default_rng(0)
    arrivals = np.concatenate(([0.0], np.cumsum(rng.exponential(1 / rate, n - 1))))
    server = OneAtATime(service)
    loop = run_loop([server], lambda i, now: 0, arrivals_s=arrivals.tolist())
    waits = [server.started[i] - server.arrived[i] for i in range(n)]
    rho = rate * service
    expected = rho * service / (2 * (1 - rho))
    assert np.mean(waits) == pytest.approx(expected, rel=0.02)
    # Little's law: time-average number in system = arrival rate x mean time in system
    sojourn = np.mean([server.done[i] - server.arrived[i] for i in range(n)])
    mean_in_system = loop.in_system_s / loop.end_s
    assert mean_in_system == pytest.approx(n / loop.end_s * sojourn, rel=0.01)


def test_closed_loop_throughput_is_concurrency_over_latency() -> None:
    """4 clients, one server of 0.25 s: once all four have sent, each request waits for the
    3 ahead of it, so the latency is 1 s and the throughput 4 requests/s = C / latency
    (within 1 %: the first three requests wait less)."""
    server = OneAtATime(0.25)
    loop = run_loop([server], lambda i, now: 0, concurrency=4, requests=400)
    latencies = [server.done[i] - server.arrived[i] for i in range(400)]
    assert latencies[:4] == [0.25, 0.5, 0.75, 1.0]
    assert set(latencies[4:]) == {1.0}
    assert loop.end_s == 100.0
    assert 400 / loop.end_s == pytest.approx(4 / np.mean(latencies), rel=0.01)
    assert len(loop.sent_s) == 400


def test_closed_loop_for_a_duration_stops_sending() -> None:
    server = OneAtATime(1.0)
    loop = run_loop([server], lambda i, now: 0, concurrency=2, requests=10**6, until_s=10.0)
    assert max(loop.sent_s) < 10.0
    assert len(server.done) == len(loop.sent_s)


def test_requests_go_where_route_says() -> None:
    a, b = OneAtATime(1.0), OneAtATime(1.0)
    run_loop([a, b], lambda i, now: i % 2, arrivals_s=[0.0, 0.0, 0.0, 0.0])
    assert sorted(a.done) == [0, 2] and sorted(b.done) == [1, 3]
    assert a.done[2] == b.done[3] == 2.0


def test_a_stuck_server_is_an_error_not_a_hang() -> None:
    class Stuck(OneAtATime):
        def step(self, now: float) -> float | None:
            return None

    with pytest.raises(RuntimeError, match="2 requests unfinished"):
        run_loop([Stuck(1.0)], lambda i, now: 0, arrivals_s=[0.0, 1.0])
