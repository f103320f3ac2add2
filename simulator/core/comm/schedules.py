"""Building blocks of collective step schedules (pure functions, no SimPy).

A schedule (:class:`~tpsim.core.schedule.Schedule`) gives, per rank, the steps it runs and
in
each step the transfers it starts and the arrivals it waits for; the engine times them over
shared links. Here: one transfer under a protocol (:func:`send`), the ring schedule every
ring-based algorithm uses (:func:`ring`), and :func:`predict`, the closed form of any
schedule when every rank starts together (the test oracle, and what ``auto`` compares).
The algorithms themselves are in :mod:`tpsim.core.comm.algorithms`, one module each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from tpsim.calibration import Protocol
from tpsim.core.comm.enqueue import nccl_channels, ring_channels
from tpsim.core.comm.fabric import Fabric
from tpsim.core.errors import ProgramError
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule, Send, Step


def many_to_many(fab: Fabric, snd: Send, peers: int) -> Send:
    """``snd`` as one of a rank's flows to ``peers`` peers at once through its host's switch
    (an all-to-all): the port gives such traffic ``switch_all_to_all_efficiency`` of its
    rate (calibration ``nccl.yaml``), so the flow's wire bytes grow by its inverse while its
    own cap, in payload, stays: a channel-bound flow is not slowed. Unchanged for one peer,
    across hosts, or off a switch (direct links: NVLink bridges, xGMI, PCIe)."""
    eff = fab.tuning.switch_all_to_all_efficiency
    if eff >= 1.0 or peers < 2 or snd.net or not fab.via_nvswitch(snd.links):
        return snd
    return replace(snd, wire=snd.wire / eff, cap_Bps=snd.cap_Bps / eff)


def chunk_sizes(nbytes: int, parts: int) -> list[int]:
    """``nbytes`` split into ``parts`` chunks that differ by at most one byte."""
    q, r = divmod(nbytes, parts)
    return [q + (1 if j < r else 0) for j in range(parts)]


def exchange_blocks(call: CollectiveCall, ranks: int) -> list[list[int]]:
    """An all-to-all's bytes from each rank to each rank (its own block included): uniform,
    ``nbytes`` split evenly; with the call's ``shares`` (uneven routing), a dispatch sends
    rank ``u`` ``nbytes * shares[u]`` from every rank and a combine returns them (rank ``t``
    sends every rank ``nbytes * shares[t]``)."""
    if not call.shares:
        even = chunk_sizes(call.nbytes, ranks)
        return [even] * ranks
    if len(call.shares) != ranks:
        raise ProgramError(f"shares: {len(call.shares)} of them for a group of {ranks} ranks")
    if call.phase == "combine":
        return [[round(call.nbytes * call.shares[t])] * ranks for t in range(ranks)]
    row = [round(call.nbytes * x) for x in call.shares]
    return [row] * ranks


def send(
    fab: Fabric,
    src: int,
    dst: int,
    payload: int,
    proto: Protocol,
    notify: tuple[int, ...] | None = None,
    hop_s: float | None = None,
    share: float = 1.0,
    family: str = "ring",
) -> Send:
    """One transfer under ``proto``: its wire bytes, its hop latency, and its rate cap (the
    protocol's busbw limit, and ``share`` of the path's bandwidth for the payload).

    The hop latency is the protocol's for an algorithm ``family`` over the path's link
    class (or ``hop_s``). Over NVLink or PCIe it is a measured end-to-end step and includes
    the wire (the longer of the two counts); across hosts it is the software's cost of a
    network step (proxy, post, poll) and the network's own latency comes on top, as NCCL
    adds the net device's latency to its network hop (twice for a protocol that flushes
    the received data, ``net_flush``)."""
    path = fab.path(src, dst)
    hop = proto.hop(family, path.link_class) if hop_s is None else hop_s
    cap = proto.max_busbw_Bps.get(fab.gpu.scaleup_kind, math.inf) * proto.wire_factor
    if share < 1.0:
        cap = min(cap, share * path.bandwidth_Bps * proto.wire_factor)
    if path.link_class == "net":
        latency = hop + path.latency_s * (2 if proto.net_flush else 1)
    else:
        latency = max(path.latency_s, hop)
    return Send(
        links=path.links,
        payload=payload,
        wire=payload * proto.wire_factor,
        latency_s=latency,
        cap_Bps=cap,
        notify=(dst,) if notify is None else notify,
        peer=dst,
        net=path.link_class == "net",
    )


def share(fab: Fabric, proto: Protocol, algorithm: str, op: str) -> float:
    """Fraction of a path's bandwidth ``proto``'s payload reaches in ``algorithm``."""
    return fab.tuning.payload_share(proto.name, algorithm, op, fab.multi_host)


def steps(sends: list[list[list[Send]]], expects: list[list[int]]) -> tuple[tuple[Step, ...], ...]:
    """Per rank, per step: the sends it starts and the arrivals it waits for."""
    return tuple(
        tuple(Step(tuple(s), e) for s, e in zip(rank_sends, rank_expects, strict=True))
        for rank_sends, rank_expects in zip(sends, expects, strict=True)
    )


# ---------------------------------------------------------------------------- ring
RING_PHASES = {"all_reduce": ("rs", "ag"), "reduce_scatter": ("rs",), "all_gather": ("ag",)}


def ring(
    fab: Fabric,
    op: str,
    nbytes: int,
    proto: Protocol,
    orders: Sequence[Sequence[int]],
    *,
    model: bool = False,
) -> Schedule:
    """Ring reduce-scatter and/or all-gather: ``p-1`` steps each, every rank sending one
    ``n/p`` chunk to its successor per step; with several rings (channels over different
    links) the data is split evenly between them and they run side by side.

    Its ``model_s`` is the time of the same ring without the two mechanisms NCCL's tuning
    model leaves out, the last receive (:func:`final_receive_s`) and the thread blocks'
    copy rate (:func:`ring_copy_cap`), and with the model's latencies where the
    calibration has measured ones (:meth:`~tpsim.calibration.Protocol.modelled`): what NCCL
    predicts for it, and chooses by (``model``: build that ring itself)."""
    if model:
        proto = proto.modelled()
    p = fab.ranks
    phases = RING_PHASES[op]
    nsteps = len(phases) * (p - 1)
    sends: list[list[list[Send]]] = [[[] for _ in range(nsteps)] for _ in range(p)]
    frac = share(fab, proto, "ring", op)
    copy_cap = math.inf if model else ring_copy_cap(fab, op, nbytes, proto) / len(orders)
    model_cap = model_ring_cap(fab, proto, frac) / len(orders)  # NCCL's view of the switch
    pull = 0.0 if model else read_pull_s(fab, nbytes, proto)
    for order, ring_bytes in zip(orders, chunk_sizes(nbytes, len(orders)), strict=True):
        chunks = chunk_sizes(ring_bytes, p)
        for q, t in enumerate(order):
            succ = order[(q + 1) % p]
            # every send of this rank to its successor is this one with its own chunk: the
            # path, latency and cap priced once (send's own wire expression kept)
            one = send(fab, t, succ, 0, proto, share=frac)
            if pull and fab.path(t, succ).link_class == "nvlink":
                one = replace(one, latency_s=one.latency_s + pull)
            cap = min(copy_cap, one.cap_Bps)
            if model and model_cap < cap and fab.via_nvswitch(one.links):
                cap = model_cap
            factor = proto.wire_factor
            s = 0
            for phase in phases:
                for k in range(p - 1):
                    c = chunks[(q - k) % p] if phase == "rs" else chunks[(q + 1 - k) % p]
                    sends[t][s].append(Send(one.links, c, c * factor, one.latency_s, cap,
                                            one.notify, one.peer, net=one.net))  # fmt: skip
                    s += 1
    expects = [[len(orders)] * nsteps for _ in range(p)]
    last = 0.0 if model else final_receive_s(fab, proto, orders)
    sched = Schedule("ring", proto.name, proto.base("ring") + last, steps(sends, expects))
    exact = last == 0.0 and copy_cap == math.inf and model_cap == math.inf and not pull
    if model or (exact and not proto.measured):
        return sched  # NCCL's model is this schedule's closed form
    return replace(sched, model_s=predict(fab, ring(fab, op, nbytes, proto, orders, model=True)))


#: A ring Simple chunk a channel moves per loop: stepSize (NCCL_BUFFSIZE 4 MiB / NCCL_STEPS
#: 8) x the chunk steps of all-gather, reduce-scatter and all-reduce (NCCL_STEPS / 2).
SIMPLE_CHUNK = 2 << 20
#: A primitive's slices a chunk at most (SlicePerChunk), and the least slice (stepSize x
#: StepPerSlice / 32: src/device/prims_simple.h genericOp).
SIMPLE_SLICES, SIMPLE_MIN_SLICE = 2, 32 << 10


def read_pull_s(fab: Fabric, nbytes: int, proto: Protocol) -> float:
    """What a ring step's receive adds where NCCL runs its NVLink pairs in P2P read mode
    (``ring_read_archs``: A100): the receive pulls each slice from the sender's buffer, its
    first loads a full NVLink load latency that the slice's closing barrier keeps from
    overlapping the next (0 elsewhere, and for LL and LL128, whose buffers stay on the
    receiver)."""
    c = fab.tuning
    if proto.name != "Simple" or fab.gpu.arch not in c.ring_read_archs or fab.multi_host:
        return 0.0
    most = ring_channels(c, fab.gpu.arch)
    blocks = nccl_channels(c, "ring", proto.name, nbytes, fab.ranks, most, fab.multi_host)
    per_channel = nbytes / fab.ranks / max(1, blocks)  # a step's chunk a channel (of all)
    loops = max(1, math.ceil(per_channel / SIMPLE_CHUNK))
    last = per_channel - (loops - 1) * SIMPLE_CHUNK
    slices = (loops - 1) * SIMPLE_SLICES + (SIMPLE_SLICES if last > SIMPLE_MIN_SLICE else 1)
    return slices * c.custom_load_latency_s


def final_receive_s(fab: Fabric, proto: Protocol, orders: Sequence[Sequence[int]]) -> float:
    """The latency of a ring's last primitive, which NCCL's model does not count (0 where
    the calibration does not price it, or across hosts)."""
    if proto.name not in fab.tuning.ring_final_receive or fab.multi_host:
        return 0.0
    classes = {
        fab.path(t, order[(q + 1) % len(order)]).link_class
        for order in orders
        for q, t in enumerate(order)
    }
    return max(proto.hop("ring", cls) for cls in classes)


def model_ring_cap(fab: Fabric, proto: Protocol, frac: float) -> float:
    """Wire B/s NCCL's tuning model lets a ring's rank send over one host's NVSwitch (inf:
    the path's own bandwidth): its ring graph's busbw (``nccl.yaml``
    ``model_ring_busbw_GBps``, below the links' rate) in place of the path's, for the wire
    bytes and for the protocol's ``frac`` of the payload, as :func:`send` caps a flow."""
    busbw = fab.tuning.model_ring_busbw_Bps.get(fab.gpu.scaleup_kind)
    if busbw is None or fab.multi_host:
        return math.inf
    return busbw * min(1.0, frac * proto.wire_factor)


def ring_copy_cap(fab: Fabric, op: str, nbytes: int, proto: Protocol) -> float:
    """Wire B/s each rank of a ring sends at most, bound by its channels' thread blocks
    (inf: no bound): NCCL runs the operation on the channels its size gets
    (:func:`~tpsim.core.comm.enqueue.nccl_channels`), each block copying at the
    calibration's per-block rate (``nccl.yaml`` ``ring_block_copy_GBps``) through the ring
    primitives' loads and stores (:func:`~tpsim.calibration.model_collectives.ring_copy_bytes`)."""
    c = fab.tuning
    if not c.ring_block_copy_Bps:
        return math.inf
    most = ring_channels(c, fab.gpu.arch)
    blocks = nccl_channels(c, "ring", proto.name, nbytes, fab.ranks, most, fab.multi_host)
    return c.ring_copy_cap(proto.name, fab.gpu.scaleup_kind, op, fab.ranks, blocks)


# ---------------------------------------------------------------------------- prediction
def model_time(fab: Fabric, sched: Schedule) -> float:
    """The time NCCL's tuning model gives ``sched`` (its ``model_s``, else its closed form):
    what NCCL, and a planner choosing as NCCL does, ranks it by."""
    return predict(fab, sched) if sched.model_s is None else sched.model_s


def predict(fab: Fabric, sched: Schedule) -> float:
    """Closed-form time of a schedule when every rank starts together, as the engine runs
    it: the base latency, then step by step each send takes its latency and the step's
    heaviest link load (bytes over capacity) or its slowest capped flow; a rank's step ends
    when what it receives has arrived and its own sends have landed, or for a send across
    the network, left (the NIC carries it on: tpsim.core.engine.simulation). Latencies add
    up along the chain of arrivals: a ring over hosts pays the network's where its chunks
    cross. Where every send has one latency (one host, one kind of link) this is the
    lockstep sum of the steps' latency and heaviest load, exact for symmetric schedules;
    else it can differ from the engine: a send is charged the step's heaviest load, not its
    own links' (over hosts, an NVLink send the network's: the closed form is then above the
    engine at mid sizes, 4 MiB on 2 DGX H100 +34%). Pricing each send by its own links
    matched the engine over two hosts but moved NCCL's choice of tree over ring at
    128-512 KiB, which the 2-node measurements (nccltests_multinode_allreduce.csv) do not
    support: kept as is."""
    costs = step_costs(fab, sched)
    done = [0.0] * len(sched.steps)  # each rank's end of its last step
    end = 0.0
    for s, (_, busy) in enumerate(costs):
        after = done[:]
        for r, rank_steps in enumerate(sched.steps):
            if s >= len(rank_steps):
                continue
            for snd in rank_steps[s].sends:
                landed = done[r] + snd.latency_s + busy
                end = max(end, landed)
                after[r] = max(after[r], landed - snd.latency_s if snd.net else landed)
                for q in snd.notify:
                    after[q] = max(after[q], landed)
        done = after
    return sched.base_s + max(end, *done)


def step_costs(fab: Fabric, sched: Schedule) -> list[tuple[float, float]]:
    """Per step: the longest latency, and the time of the busiest link or capped flow."""
    out = []
    for s in range(max(len(r) for r in sched.steps)):
        load: dict[int, float] = {}
        latency = 0.0
        capped = 0.0
        for rank_steps in sched.steps:
            if s >= len(rank_steps):
                continue
            for snd in rank_steps[s].sends:
                latency = max(latency, snd.latency_s)
                capped = max(capped, snd.wire / snd.cap_Bps)
                for link in snd.links:
                    load[link] = load.get(link, 0.0) + snd.wire
        busy = max((b / fab.capacities[k] for k, b in load.items()), default=0.0)
        out.append((latency, max(busy, capped)))
    return out


def best_pieces(costs: Sequence[tuple[float, float]], slots: int, most: int) -> int:
    """The piece count (1 to ``most``) that a pipeline of these stages runs fastest, from
    its stages' (latency, busy time) with the data in one piece: every stage once for the
    first piece, then the slowest stage for each further one, whose latency overlaps
    ``slots`` ways with the pieces in flight before it (NCCL_STEPS)."""

    def time_s(k: int) -> float:
        fill = sum(lat + busy / k for lat, busy in costs)
        return fill + (k - 1) * max(lat / slots + busy / k for lat, busy in costs)

    return min(range(1, most + 1), key=lambda k: (time_s(k), k))
