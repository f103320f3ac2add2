"""Flows over shared links: a flow-level network model with max-min fair sharing.

A flow crosses a fixed path of directed links. At every moment each active flow gets its
max-min fair rate (progressive filling): a link's capacity is split evenly among the
flows that are not held back elsewhere, and a flow never exceeds its own rate cap. Rates
are recomputed whenever a flow starts or ends, for the flows that share links with it
(directly or through others), so two flows over one link take twice as long as one, and
a PCIe uplink, a socket interconnect or a NIC port shared by several transfers becomes
the bottleneck it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import simpy


@dataclass(eq=False, slots=True)
class Flow:
    links: tuple[int, ...]
    remaining: float  # bytes still to move
    cap: float  # the flow's own rate limit, B/s (math.inf if none)
    done: simpy.Event
    size: float
    rate: float = 0.0


class Network:
    """Active flows over links with capacities in B/s (indexed 0 .. n-1)."""

    def __init__(
        self,
        env: simpy.Environment,
        capacities: Sequence[float],
        log: list[tuple[float, int, float]] | None = None,
    ) -> None:
        """``log``, if given, receives (time, link, total B/s) whenever a link's load changes."""
        self.env = env
        self.log = log
        self.capacity = list(capacities)
        self.active: list[Flow] = []
        self.users: dict[int, list[Flow]] = {}
        self._last = 0.0
        self._generation = 0

    def send(self, links: tuple[int, ...], nbytes: float, cap: float = math.inf) -> simpy.Event:
        """Start a flow of ``nbytes`` over ``links`` now; the event fires when it has arrived."""
        done = self.env.event()
        if nbytes <= 0 or (not links and math.isinf(cap)):
            done.succeed()
            return done
        if not links:
            return self.env.timeout(nbytes / cap)
        self._advance()
        flow = Flow(links, float(nbytes), cap, done, float(nbytes))
        self.active.append(flow)
        shared = False
        for link in links:
            users = self.users.setdefault(link, [])
            shared = shared or bool(users)
            users.append(flow)
        if shared:
            component = self._component([flow])
            self._assign_rates(component)
            self._log(component)
        else:
            flow.rate = min(cap, min(self.capacity[link] for link in links))
            self._log([flow])
        self._schedule()
        return done

    # ---------------------------------------------------------------- internals
    def _advance(self) -> None:
        """Move every active flow forward to the current time at its current rate."""
        dt = self.env.now - self._last
        if dt > 0:
            for f in self.active:
                f.remaining -= f.rate * dt
        self._last = self.env.now

    def _schedule(self) -> None:
        self._generation += 1
        if not self.active:
            return
        dt = min(f.remaining / f.rate for f in self.active)
        generation = self._generation
        self.env.timeout(max(dt, 0.0)).callbacks.append(lambda _e: self._on_timer(generation))

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return  # the rates changed since this timer was set
        self._advance()
        finished = [f for f in self.active if f.remaining <= f.size * 1e-12]
        if not finished:  # rounding left a sliver: finish the flow closest to done
            finished = [min(self.active, key=lambda f: f.remaining / f.rate)]
        touched: list[Flow] = []
        for f in finished:
            self.active.remove(f)
            for link in f.links:
                users = self.users[link]
                users.remove(f)
                touched.extend(users)
            f.done.succeed()
        if touched:
            component = self._component(touched)
            self._assign_rates(component)
            self._log(component)
        if self.log is not None:  # links left idle
            for f in finished:
                for link in f.links:
                    if not self.users[link]:
                        self.log.append((self.env.now, link, 0.0))
        self._schedule()

    def _log(self, flows: list[Flow]) -> None:
        if self.log is None:
            return
        links = sorted({link for f in flows for link in f.links})
        for link in links:
            self.log.append((self.env.now, link, sum(f.rate for f in self.users[link])))

    def _component(self, seeds: list[Flow]) -> list[Flow]:
        """The active flows connected to ``seeds`` through shared links (in a stable order)."""
        seen = {id(f) for f in seeds}
        out = list(seeds)
        i = 0
        while i < len(out):
            for link in out[i].links:
                for g in self.users[link]:
                    if id(g) not in seen:
                        seen.add(id(g))
                        out.append(g)
            i += 1
        return out

    def _assign_rates(self, flows: list[Flow]) -> None:
        """Max-min fair rates of ``flows`` by progressive filling, with per-flow caps."""
        free: dict[int, float] = {}
        count: dict[int, int] = {}
        for f in flows:
            f.rate = -1.0
            for link in f.links:
                free[link] = self.capacity[link]
                count[link] = count.get(link, 0) + 1
        unfixed = list(flows)
        while unfixed:
            share, where = math.inf, -1
            for link, n in count.items():
                if n and free[link] / n < share:
                    share, where = free[link] / n, link
            capped = min(unfixed, key=lambda f: f.cap)
            if capped.cap < share:
                fixing, rate = [capped], capped.cap
            else:
                fixing, rate = [f for f in unfixed if where in f.links], share
            for f in fixing:
                f.rate = max(rate, 1e-300)
                for link in f.links:
                    free[link] = max(0.0, free[link] - rate)
                    count[link] -= 1
            unfixed = [f for f in unfixed if f.rate < 0]
