"""Flows over shared links: a flow-level network model with max-min fair sharing.

A flow crosses a fixed path of directed links. At every moment each active flow gets its
max-min fair rate (progressive filling): a link's capacity is split evenly among the
flows that are not held back elsewhere, and a flow never exceeds its own rate cap. When a
flow starts or ends, the rates of the flows that share links with it (directly or through
others) are recomputed and their completions re-timed; a flow alone on its links costs one
timer and nothing else. So two flows over one link take twice as long as one, and a PCIe
uplink, a socket interconnect or a NIC port shared by several transfers becomes the
bottleneck it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import simpy
from tpsim.core.engine.rated import Rated


def _succeed(event: simpy.Event) -> None:
    event.succeed()


class Flow(Rated):
    """Bytes crossing ``links``: remaining bytes at the flow's max-min fair rate (B/s)."""

    __slots__ = ("cap", "links", "size")

    def __init__(self, links: tuple[int, ...], nbytes: float, cap: float, done: simpy.Event,
                 now: float) -> None:  # fmt: skip
        super().__init__(nbytes, done, now)  # bytes still to move as of ``since``, unrated
        self.links = links
        self.size = nbytes
        self.cap = cap  # the flow's own rate limit, B/s (math.inf if none)


class FlowNetwork:
    """Active flows over links with capacities in B/s (indexed 0 .. n-1)."""

    def __init__(
        self,
        env: simpy.Environment,
        capacities: Sequence[float],
        log: list[tuple[float, int, float]] | None = None,
    ) -> None:
        """``log``, if given, receives (time, link, total B/s) whenever a link's load changes."""
        self.env = env
        self.capacity = list(capacities)
        self.users: list[list[Flow]] = [[] for _ in self.capacity]
        self.log = log
        self._pending: list[Flow] = []  # shared flows started at this instant, not yet rated
        self._on_finish = self._finish  # bound once: timers outlive many calls (fewer GC passes)

    def send(self, links: tuple[int, ...], nbytes: float, cap: float = math.inf,
             done: simpy.Event | None = None) -> simpy.Event:  # fmt: skip
        """Start a flow of ``nbytes`` over ``links`` now; ``done`` (or a new event) fires when
        it has arrived."""
        env = self.env
        if done is None:
            done = env.event()
        if nbytes <= 0 or (not links and math.isinf(cap)):
            done.succeed()
            return done
        if not links:
            env.timeout(nbytes / cap).callbacks.append(lambda _e: _succeed(done))
            return done
        flow = Flow(links, float(nbytes), cap, done, env.now)
        users = self.users
        shared = False
        for link in links:
            if users[link]:
                shared = True
            users[link].append(flow)
        if shared:  # rate all flows that join at this instant together, once
            if not self._pending:
                env.timeout(0).callbacks.append(self._flush)
            self._pending.append(flow)
        else:
            rate = cap
            for link in links:
                c = self.capacity[link]
                if c < rate:
                    rate = c
            flow.rate = rate
            flow.arm(env, self._on_finish)
            if self.log is not None:
                self._log([flow])
        return done

    # ---------------------------------------------------------------- internals
    def _flush(self, _e: object) -> None:
        seeds, self._pending = self._pending, []
        self._rebalance(seeds)

    def _finish(self, f: Flow) -> None:
        """``f``'s timer ran out: it ends, with every flow of its component done by now."""
        users = self.users
        if all(len(users[link]) == 1 for link in f.links):  # alone on its links
            for link in f.links:
                users[link].clear()
            f.done.succeed()
            if self.log is not None:
                for link in f.links:
                    self.log.append((self.env.now, link, 0.0))
            return
        flows = self._component([f])
        self._settle(flows)
        # every flow of the component that is done by now ends together with f
        ending = [g for g in flows if g is f or (g.rate > 0 and g.remaining <= g.size * 1e-9)]
        touched: list[Flow] = []
        for g in ending:
            g.cancel()
            for link in g.links:
                sharing = self.users[link]
                sharing.remove(g)
                touched.extend(sharing)
        for g in ending:
            g.done.succeed()
        ended = set(map(id, ending))
        touched = [g for g in touched if id(g) not in ended]
        if touched:
            self._rebalance(touched)
        if self.log is not None:
            now = self.env.now
            for link in sorted({link for g in ending for link in g.links}):
                if not self.users[link]:
                    self.log.append((now, link, 0.0))

    def _settle(self, flows: list[Flow]) -> None:
        """Bring ``flows``' remaining bytes up to now at their current rates."""
        now = self.env.now
        for f in flows:
            f.settle(now)

    def _rebalance(self, seeds: list[Flow]) -> None:
        """Re-rate the flows connected to ``seeds`` and re-time their completions."""
        flows = self._component(seeds)
        self._settle(flows)
        old = [f.rate for f in flows]
        self._assign_rates(flows)
        for f, before in zip(flows, old, strict=True):
            if f.rate != before or before == 0:
                f.arm(self.env, self._on_finish)
        if self.log is not None:
            self._log(flows)

    def _log(self, flows: list[Flow]) -> None:
        assert self.log is not None
        for link in sorted({link for f in flows for link in f.links}):
            self.log.append((self.env.now, link, sum(f.rate for f in self.users[link])))

    def _component(self, seeds: list[Flow]) -> list[Flow]:
        """The active flows connected to ``seeds`` through shared links (in a stable order:
        breadth first from the seeds, each link's flows in the order they joined it). Each
        link's flows are visited once, so a component costs its flows times their links."""
        seen = set(map(id, seeds))
        out = list(dict.fromkeys(seeds))
        visited: set[int] = set()
        i = 0
        users = self.users
        while i < len(out):
            for link in out[i].links:
                if link in visited:
                    continue
                visited.add(link)
                for g in users[link]:
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
