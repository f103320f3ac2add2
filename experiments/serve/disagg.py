"""Disaggregated prefill and decode: a prefill pool and a decode pool of engine instances,
each with its own TP and count, and the KV cache moved between them.

A request goes to the prefill worker with the fewest unfinished requests, which runs its
prompt (chunked as its scheduler chunks it) and samples its first token; the request's KV
cache then moves to the decode worker with the fewest requests (those in transfer to it
included) as flows over the routed links (:class:`tpsim.core.kv_transfer.KVRoutes`: NVLink
in a host, the NIC across hosts; transfers sharing a link share it). The first token
reaches the client when the transfer ends (TTFT includes it, as a P/D proxy returns the
decode worker's stream); the decode worker admits the request with its prompt computed
and decodes the rest. The prefill worker holds the request's blocks until the transfer
ends (the decode side pulls them). A request of one output token ends at the prefill
worker. A decode worker that preempts a request recomputes it there (vLLM V1's recompute).

Each instance holds its cache as its engine does with a KV connector
(:func:`~tpsim.experiments.serve.kvcache.kv_blocks`): SGLang's prefill and decode servers
keep the sliding layers' pool, so a request holds there only its window on either side,
and the transfer sends the sliding layers' window only
(:meth:`~tpsim.experiments.serve.kvcache.KVCache.sent_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpsim.calibration.scheduler import SchedulerSpec
from tpsim.core.engine.serving import Flows
from tpsim.core.kv_transfer import KVRoutes
from tpsim.experiments.serve.engine import EngineInstance, Request
from tpsim.experiments.serve.kvblocks import BlockLayout
from tpsim.experiments.serve.kvpool import Key

Lookup = Callable[[int], tuple[int, int, int, int]]


@dataclass(frozen=True)
class Disagg:
    """The two pools: TP and workers of each."""

    prefill_tp: int
    prefill_workers: int
    decode_tp: int
    decode_workers: int

    @property
    def gpus(self) -> int:
        return self.prefill_tp * self.prefill_workers + self.decode_tp * self.decode_workers

    def label(self) -> str:
        return (f"{self.prefill_workers}P (tp {self.prefill_tp}) + "
                f"{self.decode_workers}D (tp {self.decode_tp})")  # fmt: skip


class PrefillInstance(EngineInstance):
    """A prefill worker: every request's output is its first token; the blocks of a request
    handed to a decode worker are held until its transfer ends (:meth:`sent`)."""

    def __init__(self, spec: SchedulerSpec, blocks: int, timer: Callable[[Any], float],
                 lookup: Lookup, layout: BlockLayout | None = None) -> None:  # fmt: skip
        self.outputs: dict[int, int] = {}
        self.held: dict[int, tuple[list[Key], int, int]] = {}

        def first_token(i: int) -> tuple[int, int, int, int]:
            prompt, output, group, shared = lookup(i)
            self.outputs[i] = output
            return prompt, 1, group, shared

        super().__init__(spec, blocks, timer, first_token, layout=layout)

    def _release(self, r: Request) -> None:
        if self.outputs.get(r.id, 1) > 1 and r.done_s >= 0:  # handed on: held until sent
            swa = self.layout.swa_held(r.blocks)  # the sliding pool's, where there is one
            self.held[r.id] = (r.keys, r.blocks - len(r.keys), swa)
            r.keys, r.blocks, r.next_key = [], 0, 0
            return
        super()._release(r)

    def sent(self, i: int) -> None:
        """Request ``i``'s KV cache has arrived at its decode worker: its blocks are free."""
        keys, own, swa = self.held.pop(i)
        self.pool.release(keys, own)
        self.kv.swa_free += swa


class DecodeInstance(EngineInstance):
    """A decode worker: requests arrive with their prompt computed and first token out."""

    def __init__(self, spec: SchedulerSpec, blocks: int, timer: Callable[[Any], float],
                 arriving: dict[int, tuple[Request, int, PrefillInstance]],
                 incoming: list[int], index: int,
                 layout: BlockLayout | None = None) -> None:  # fmt: skip
        super().__init__(spec, blocks, timer, lambda i: (0, 0, -1, 0), layout=layout)
        self.arriving, self.incoming, self.index = arriving, incoming, index

    def admit(self, request: int, now: float) -> None:
        r, output, source = self.arriving.pop(request)
        source.sent(request)
        self.incoming[self.index] -= 1
        r.output, r.done_s = output, -1.0
        r.token_s = [now]  # the first token reaches the client with the KV cache
        r.computed, r.generated = r.prompt, 1
        r.keys, r.blocks, r.next_key = [], 0, 0
        r.group = -1  # its prefix arrived with it: nothing to look up or register
        self.queue(r, now)


class DisaggServers:
    """The pools' instances, how requests enter and move, and the transfers' figures:
    ``blocks`` and ``layouts`` of each pool's instances (None: every layer at length),
    ``sent_bytes``: those a transfer of a prompt of so many tokens brings each decode
    GPU."""

    def __init__(
        self,
        d: Disagg,
        kv_routes: KVRoutes,
        specs: tuple[SchedulerSpec, SchedulerSpec],
        blocks: tuple[int, int],
        timers: tuple[Callable[[Any], float], Callable[[Any], float]],
        lookup: Lookup,
        sent_bytes: Callable[[int], float],
        layouts: tuple[BlockLayout | None, BlockLayout | None] = (None, None),
    ) -> None:
        self.d, self.kv_routes = d, kv_routes
        self.arriving: dict[int, tuple[Request, int, PrefillInstance]] = {}
        self.incoming = [0] * d.decode_workers  # requests in transfer to each decode worker
        self.prefill = [PrefillInstance(specs[0], blocks[0], timers[0], lookup, layouts[0])
                        for _ in range(d.prefill_workers)]  # fmt: skip
        self.decode = [DecodeInstance(specs[1], blocks[1], timers[1], self.arriving,
                                      self.incoming, j, layouts[1])
                       for j in range(d.decode_workers)]  # fmt: skip
        self.servers: list[EngineInstance] = [*self.prefill, *self.decode]
        self.sent_bytes = sent_bytes
        self.transfers: list[float] = []  # bytes per decode GPU of each transfer

    def route(self, i: int, now: float) -> int:
        p = self.prefill
        return min(range(len(p)), key=lambda k: (p[k].in_system, k))

    def handoff(self, i: int, k: int, now: float) -> tuple[int, Flows] | None:
        if k >= len(self.prefill):  # a decode worker finished it
            return None
        src = self.prefill[k]
        output = src.outputs.pop(i)
        if output <= 1:
            return None
        r = next(x for x in reversed(src.finished) if x.id == i)
        src.finished.remove(r)
        dec = self.decode
        j = min(range(len(dec)), key=lambda n: (dec[n].in_system + self.incoming[n], n))
        self.incoming[j] += 1
        self.arriving[i] = (r, output, src)
        nbytes = self.sent_bytes(r.prompt)
        self.transfers.append(nbytes)
        return len(self.prefill) + j, self.kv_routes.flows(k, j, nbytes)


__all__ = ["DecodeInstance", "Disagg", "DisaggServers", "PrefillInstance"]
