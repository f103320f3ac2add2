"""Building one rank's program: ops with their dependencies and launch costs.

An :class:`OpBuilder` appends kernels, collectives and point-to-point sends and receives to
one rank's op list. Each op belongs to a dependency chain (a micro-batch, say): by default
it depends on the chain's latest op, so a chain runs in order while separate chains may
overlap. Launch costs are the calibration's for the launch mode (:class:`LaunchCost`): a
host launch per kernel and per communication call, and a device-side dispatch gap before
every kernel (inside the kernel's slot from a CUDA graph; its own ``launch_overhead`` record
when kernels are launched one by one, ``eager``). Host work of the engine (scheduling,
sampling, Python per layer) is an op on the ``cpu`` stream that the launch thread runs
itself; it never becomes a chain's latest op. The builder knows nothing of the model;
:mod:`tpsim.core.lowering.lower` decides what to build.
"""

from __future__ import annotations

from typing import Any

from tpsim.calibration import LaunchCost
from tpsim.core.kernels.costs import KernelCost
from tpsim.core.program import P2P, CollectiveCall, Op, Program


class OpBuilder:
    """One rank's op list under construction, in a group of ``ranks``."""

    def __init__(
        self, launch: LaunchCost, ranks: int, *, eager: bool = False, pdl: bool = False
    ) -> None:
        self.launch = launch
        self.eager = eager  # kernels launched one by one: the dispatch gap is overhead
        #: kernels launched with programmatic dependent launch (in a graph: no gap after a
        #: kernel, :meth:`gap_before`)
        self.pdl = pdl and not eager
        self.ranks = ranks
        self.ops: list[Op] = []
        self.last: dict[int, int] = {}  # chain -> index of its latest op
        self.group = 0  # the TP group its collectives run over (pipeline stages, replicas)
        #: chain -> further ops its next op waits for (a pipeline stage's receive)
        self.after: dict[int, tuple[int, ...]] = {}

    def tail(self, chain: int) -> tuple[int, ...]:
        """The chain's latest op as a dependency (none before its first op)."""
        base = (self.last[chain],) if chain in self.last else ()
        return base + self.after[chain] if chain in self.after else base

    def _emit(self, chain: int, op: Op) -> int:
        self.after.pop(chain, None)
        self.ops.append(op)
        self.last[chain] = len(self.ops) - 1
        return self.last[chain]

    def kernel(
        self,
        chain: int,
        name: str,
        kind: str,
        layer: int,
        cost: KernelCost,
        detail: str,
        site: str = "",
        deps: tuple[int, ...] | None = None,
    ) -> int:
        """A compute kernel after its dispatch gap (:meth:`gap_before`)."""
        after = self.tail(chain) if deps is None else deps
        gap = self.gap_before(after)
        op = Op(
            name,
            kind,
            layer,
            site,
            "compute",
            self.launch.kernel_s,
            cost.seconds if self.eager else cost.seconds + gap,  # a graph's slot holds the gap
            cost.flops,
            cost.bytes,
            cost.category,
            detail,
            after,
            dispatch_s=gap if self.eager else 0.0,
        )
        return self._emit(chain, op)

    def gap_before(self, deps: tuple[int, ...]) -> float:
        """The device's dispatch gap before a kernel that waits for ``deps``: the launch
        mode's, except with programmatic dependent launch (:attr:`pdl`) after kernels
        only: the kernel's grid is launched while the one before drains (it waits for that
        one's results in the kernel, cudaGridDependencySynchronize), so the GPU's front end
        has dispatched it by the time the other ends. After a collective, host work or
        nothing, the gap stays (NCCL's kernels do not trigger dependents)."""
        if self.pdl and deps and all(self.ops[d].stream == "compute" for d in deps):
            return 0.0
        return self.launch.gpu_gap_s

    def collective(
        self,
        chain: int,
        op: str,
        site: str,
        layer: int,
        nbytes: int,
        deps: tuple[int, ...] | None = None,
        part: str = "",
        span: int = 1,
        **fields: Any,
    ) -> int | None:
        """Collective ``op`` of ``nbytes`` over the group at ``site`` (named
        ``site.op[part]``), or over ``span`` neighbouring groups (a MoE group of attention
        data-parallel groups); ``fields``: the call's own (its algorithm, its phase of an
        expert exchange, :class:`~tpsim.core.program.CollectiveCall`); None, and nothing
        built, over one rank."""
        ranks = self.ranks * span
        if ranks == 1:
            return None  # one rank: nothing to reduce or gather
        group = self.group - self.group % span
        o = Op(
            f"{site}.{op}{part}",
            "collective",
            layer,
            site,
            "comm",
            self.launch.collective_s,
            0.0,
            0.0,
            nbytes,
            "communication",
            f"{op} {nbytes} B over {ranks} ranks",
            self.tail(chain) if deps is None else deps,
            CollectiveCall(op, nbytes, group, span, **fields),
        )
        return self._emit(chain, o)

    def p2p(
        self,
        chain: int,
        direction: str,
        peer: int,
        nbytes: int,
        *,
        name: str,
        layer: int,
        site: str = "",
        tag: int = 0,
        deps: tuple[int, ...] | None = None,
        stream: str = "comm",
    ) -> int:
        """A point-to-point ``send`` of ``nbytes`` to rank ``peer`` or the ``recv`` of them
        from it, on the comm stream (launched as a communication call)."""
        o = Op(
            name,
            "p2p",
            layer,
            site,
            stream,
            self.launch.collective_s,
            0.0,
            0.0,
            nbytes,
            "communication",
            "",
            self.tail(chain) if deps is None else deps,
            p2p=P2P(direction, peer, nbytes, tag),
        )
        return self._emit(chain, o)

    def host(self, name: str, layer: int, seconds: float, detail: str,
             deps: tuple[int, ...] = (), driver: bool = False) -> int | None:  # fmt: skip
        """Host work of ``seconds`` on the launch thread, after ``deps`` finish (none: as soon
        as the thread gets there; ``driver``: the engine's one scheduler process does it for
        every rank, :attr:`tpsim.core.program.Op.driver`); None, and nothing built, if it
        takes no time."""
        if seconds <= 0:
            return None
        op = Op(name, "host", layer, "", "cpu", 0.0, seconds, 0.0, 0, "host", detail, deps,
                driver=driver)  # fmt: skip
        self.ops.append(op)
        return len(self.ops) - 1

    def program(self) -> Program:
        """The op list built so far, after the launch mode's graph replay."""
        return Program(ops=tuple(self.ops), replay_s=self.launch.replay_s)


__all__ = ["OpBuilder"]
