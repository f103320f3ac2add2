"""DeepEP's low-latency kernels (decode): every token-expert message goes straight to the
GPU of its expert, over NVLink inside a node and by RDMA (NVSHMEM, IBGDA) across nodes, with
no NVLink forwarding. Dispatch sends fp8 tokens with one fp32 scale per 128 values, combine
returns bf16 ones; the call's ``nbytes`` carries that (every message a rank sends, its own
experts' included, uniform over the ranks) and its ``phase`` picks the kernel's fixed time.

One step: rank ``t`` writes ``n/p`` bytes to every other rank at once, its NVLink flows
sharing the LL kernels' share of its NVLink port, its RDMA flows that of its NIC; the block
for its own experts is a local copy. Dispatch's grid is one SM per expert (the call's
``experts``), each casting tokens to fp8 and writing them: with few experts those SMs, not
the links, bind. A serving engine's kernel, not NCCL's: ``auto`` and
``nccl`` never choose it; it runs when named (``--algo deepep_ll``, or a call's ``algo``).
"""

from __future__ import annotations

from tpsim.core.comm.algorithms import Algorithm, Context, _deepep
from tpsim.core.comm.schedules import steps
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule, Send


def low_latency(ctx: Context, call: CollectiveCall) -> Schedule:
    fab = ctx.fab
    p = fab.ranks
    m = _deepep.mode(fab, low_latency=True)
    blocks = _deepep.block(call, p)
    issue = _deepep.dispatch_issue(fab, m, call)
    sends: list[list[list[Send]]] = []
    for t in range(p):
        local = [u for u in range(p) if u != t and fab.hosts[u] == fab.hosts[t]]
        remote = [u for u in range(p) if fab.hosts[u] != fab.hosts[t]]
        out = [
            _deepep.flow(fab, m, t, u, blocks[t][u], len(local), 0.0, issue, call.phase)
            for u in local
        ]
        out += [
            _deepep.flow(fab, m, t, u, blocks[t][u], len(remote), 0.0, issue, call.phase)
            for u in remote
        ]
        sends.append([out])
    base = m.base(call.phase) if m is not None else 0.0
    return Schedule("deepep_ll", "direct", base, steps(sends, [[p - 1]] * p))


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [low_latency(ctx, call)]


ALGORITHM = Algorithm(
    name="deepep_ll",
    order=90,
    about="all-to-all: DeepEP's low-latency kernels (decode): each token-expert message "
    "straight to its GPU, NVLink in a node, RDMA across (a serving engine's, run only "
    "when named)",
    nccl=False,
    ops=("all_to_all",),
    why_not=_deepep.why_not,
    build=_build,
    max_steps=lambda p: 1,
    explicit_only=True,
)
