"""A serving loop in SimPy: requests arrive, servers run iterations, requests finish.

It knows nothing of transformers or schedulers. A :class:`Server` (one engine instance, a
replica) is three callbacks: ``admit`` (a request joins it), ``step`` (plan the next
iteration at the current time and say how long it runs, or ``None`` when there is nothing
to run) and ``finish`` (the iteration ended now: the requests it completed). Requests come
from an open loop (given arrival times) or a closed loop (``concurrency`` clients, each
sending its next request when its last one completes, as ``vllm bench serve
--max-concurrency`` and aiperf do); ``route`` picks a server for each request.

Disaggregated serving hands a request from one server to another: when ``handoff`` is
given, a request a server finishes may instead go on to another server after a transfer
(flows over a :class:`~tpsim.core.engine.flows.FlowNetwork` of the given link capacities,
each after its wire latency: transfers sharing a link share its bandwidth); the request is
admitted there once every flow has arrived.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import simpy
from tpsim.core.engine.flows import FlowNetwork

#: A transfer's flows: (links, bytes, wire latency in seconds) each.
Flows = Sequence[tuple[tuple[int, ...], float, float]]
#: Where a finished request goes next: (the server, the flows moving it), or None: done.
Handoff = Callable[[int, int, float], "tuple[int, Flows] | None"]


class Server(Protocol):
    """One engine instance: it runs one iteration at a time."""

    def admit(self, request: int, now: float) -> None: ...

    def step(self, now: float) -> float | None: ...

    def finish(self, now: float) -> Sequence[int]: ...


@dataclass(frozen=True)
class LoopResult:
    """When each request was sent (seconds), when the last one finished, SimPy's event
    count, and the integral over time of the number of requests in the system (sent, not
    finished: ``in_system_s / end_s`` is its time average, Little's ``L``)."""

    sent_s: tuple[float, ...]
    end_s: float
    events: int
    in_system_s: float


class _Counter(simpy.Environment):
    """A SimPy environment that counts the events it processes."""

    events = 0

    def step(self) -> None:
        self.events += 1
        super().step()


def run_loop(
    servers: Sequence[Server],
    route: Callable[[int, float], int],
    *,
    arrivals_s: Sequence[float] | None = None,
    concurrency: int = 0,
    requests: int = 0,
    until_s: float | None = None,
    handoff: Handoff | None = None,
    capacities: Sequence[float] = (),
) -> LoopResult:
    """Run requests ``0 .. n-1`` through ``servers`` until every one has finished.

    Open loop: request ``i`` arrives at ``arrivals_s[i]`` (non-decreasing). Closed loop
    (``concurrency`` > 0): ``concurrency`` clients send requests ``0, 1, ...`` back to back
    until ``requests`` have been sent, or until ``until_s`` when given (then no new request
    starts after it). Every request sent is run to completion.

    ``handoff(request, server, now)``: for each request ``server`` finishes, the server it
    goes on to and the flows that move it there (over links of ``capacities``, B/s), or
    None when it is done.
    """
    env = _Counter()
    wake = [env.event() for _ in servers]
    done: dict[int, simpy.Event] = {}
    sent: list[float] = []
    count = [0, 0.0, 0.0]  # in the system now, since when, the integral so far

    def change(by: int) -> None:
        count[2] += count[0] * (env.now - count[1])
        count[0] += by
        count[1] = env.now

    def send(i: int) -> simpy.Event:
        now = env.now
        sent.append(now)
        change(+1)
        k = route(i, now)
        done[i] = env.event()
        servers[k].admit(i, now)
        poke(k)
        return done[i]

    net = FlowNetwork(env, capacities) if handoff is not None else None

    def poke(k: int) -> None:
        if not wake[k].triggered:
            wake[k].succeed()

    def flow(
        links: tuple[int, ...], nbytes: float, latency: float
    ) -> simpy.events.ProcessGenerator:
        assert net is not None
        if latency > 0:
            yield env.timeout(latency)
        yield net.send(links, nbytes)

    def move(i: int, src: int, dst: int, flows: Flows) -> simpy.events.ProcessGenerator:
        yield env.all_of([env.process(flow(*f)) for f in flows])
        servers[dst].admit(i, env.now)
        poke(dst)
        poke(src)  # what the request held there is free now

    def serve(k: int) -> simpy.events.ProcessGenerator:
        server = servers[k]
        while True:
            seconds = server.step(env.now)
            if seconds is None:
                wake[k] = env.event()
                yield wake[k]
                continue
            yield env.timeout(seconds)
            for i in server.finish(env.now):
                nxt = handoff(i, k, env.now) if handoff is not None else None
                if nxt is not None:
                    env.process(move(i, k, *nxt))
                    continue
                change(-1)
                done.pop(i).succeed()

    def open_loop(times: Sequence[float]) -> simpy.events.ProcessGenerator:
        for i, t in enumerate(times):
            if t > env.now:
                yield env.timeout(t - env.now)
            send(i)

    next_id = [0]

    def client() -> simpy.events.ProcessGenerator:
        while next_id[0] < requests and (until_s is None or env.now < until_s):
            i = next_id[0]
            next_id[0] += 1
            yield send(i)

    for k in range(len(servers)):
        env.process(serve(k))
    if arrivals_s is not None:
        feeder = env.process(open_loop(arrivals_s))
        clients = [feeder]
    else:
        clients = [env.process(client()) for _ in range(concurrency)]
    finished = env.all_of(clients)

    def run_until(event: simpy.Event) -> None:
        try:
            env.run(until=event)
        except RuntimeError:  # no event left: every server idle with requests unfinished
            if event.triggered:
                raise
            raise RuntimeError(
                f"serving loop: {len(done)} requests unfinished and no server has anything "
                "to run (a scheduler that cannot make progress)"
            ) from None

    run_until(finished)
    while done:  # requests still running after the last one was sent
        run_until(env.all_of(list(done.values())))
    return LoopResult(tuple(sent), env.now, env.events, count[2])


__all__ = ["Flows", "Handoff", "LoopResult", "Server", "run_loop"]
