"""What the engine runs: one program (a list of ops with dependencies) per rank.

As in a Chakra execution trace, every rank has its own node list: ranks of one TP group run
identical programs, pipeline stages or several groups would run different ones. The engine
knows nothing of transformers: an op is a kernel of known duration on the compute stream,
a collective on the comm stream that the engine times over links, or a point-to-point send
or receive on the comm stream, timed over the route between the two ranks. Symmetry is
detected (:meth:`Programs.shared`), never assumed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from tpsim.core.errors import ProgramError


@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """A collective over the whole TP group, or over ``span`` consecutive TP groups (a MoE
    group of attention data-parallel groups). ``nbytes`` is the nccl-tests size: the all-reduce
    buffer, the all-gather output (``ranks * per-rank input``), or for ``all_to_all`` the
    bytes each rank sends in total, its own block included, spread uniformly over the
    group's ranks (nccl-tests alltoall; ``nbytes / ranks`` to each rank).

    Optional, for MoE token dispatch and combine (issue #24): ``algo`` runs this call with
    one algorithm by name (e.g. ``deepep_ll``, set from the engine profile) instead of the
    group's choice ("" keeps it); ``phase`` says which half of an expert-parallel exchange
    it is ("dispatch" or "combine": DeepEP's kernels differ in fixed time; "" for a plain
    collective); ``node_dedup`` is the share of the bytes bound for another node's GPUs that
    cross the network under DeepEP's normal kernels, which send a token once per node and
    forward it over NVLink (1: no token goes to two GPUs of one node); ``experts`` is the
    number of experts the exchange serves (DeepEP's low-latency grid has one SM per expert;
    0: not known, no such limit); ``shares`` is, per rank of the group, the share of the
    exchange's token-expert pairs its experts take when routing is uneven (an expert-parallel
    skew or a routing histogram; they sum to 1): a dispatch sends each rank ``nbytes`` times
    its share, from every rank, and a combine returns them, each rank sending every rank
    ``nbytes`` times its own share (() : uniform, ``nbytes / ranks`` to each)."""

    op: str  # "all_reduce" | "all_gather" | "reduce_scatter" | "all_to_all"
    nbytes: int
    group: int = 0  # which TP group of a layout (pipeline stages, replicas) it runs over
    span: int = 1  # TP groups it spans, from ``group`` on (``group`` a multiple of ``span``)
    algo: str = ""  # one algorithm by name for this call; "": the group's choice
    phase: str = ""  # "" | "dispatch" | "combine"
    node_dedup: float = 1.0  # (0, 1]: network bytes per byte bound for another node
    experts: int = 0  # experts of the MoE layer (0: not known)
    shares: tuple[float, ...] = ()  # per rank, its experts' share of the pairs; (): uniform

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ProgramError(f"phase={self.phase!r}: must be one of dispatch, combine or ''")
        if not 0 < self.node_dedup <= 1:
            raise ProgramError(f"node_dedup={self.node_dedup!r}: must be in (0, 1]")
        if self.experts < 0:
            raise ProgramError(f"experts={self.experts!r}: must be 0 (not known) or more")
        if self.shares and (
            self.op != "all_to_all"
            or min(self.shares) < 0
            or abs(math.fsum(self.shares) - 1) > 1e-9
        ):
            raise ProgramError(
                f"shares={self.shares!r}: an all-to-all's non-negative shares summing to 1"
            )


#: ``CollectiveCall.phase`` values.
PHASES = ("", "dispatch", "combine")


@dataclass(frozen=True, slots=True)
class P2P:
    """A point-to-point transfer of ``nbytes``: this rank sends them to rank ``peer``
    (``direction="send"``) or receives them from it (``"recv"``). The k-th send from rank a
    to rank b with a ``tag`` matches the k-th receive on b from a with that tag."""

    direction: str  # "send" | "recv"
    peer: int  # the rank at the other end
    nbytes: int
    tag: int = 0

    def __post_init__(self) -> None:
        if self.direction not in ("send", "recv"):
            raise ProgramError(f"direction={self.direction!r}: must be send or recv")
        if self.nbytes < 0:
            raise ProgramError(f"nbytes={self.nbytes}: must be non-negative")


@dataclass(frozen=True, slots=True)
class Op:
    name: str  # after the layer structure: "qkv_proj", "attn", "attn_out.all_reduce", ...
    kind: str  # "gemm" | "attention" | "elementwise" | "collective" | "p2p"
    layer: int  # -1 embedding, 0..L-1 layers, L final norm and LM head
    site: str  # collective site, or "" for kernels
    stream: str  # "compute" | "comm" | "cpu" (host work, run by the launch thread itself)
    launch_s: float  # host time to launch this op
    seconds: float  # kernel duration; 0 for collectives and p2p, which the engine times
    flops: float
    bytes: int
    category: str  # "compute" | "memory" | "communication" | "host"
    detail: str  # shape, for the trace
    deps: tuple[int, ...]  # indices of ops that must finish before this one starts
    collective: CollectiveCall | None = None
    p2p: P2P | None = None
    dispatch_s: float = 0.0  # device gap before the kernel, counted as launch overhead
    #: host work the engine's one scheduler (driver) process does for every rank: each rank
    #: waits for the same process, so host jitter (tpsim.core.engine.jitter) leaves it alone
    driver: bool = False


@dataclass(frozen=True)
class Program:
    """One rank's op list and its launch prelude."""

    ops: tuple[Op, ...]
    replay_s: float = 0.0  # one host launch before the first op (CUDA graph replay)
    meta: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Programs:
    """One program per rank: ``programs[r]`` is rank r's.

    Ranks that run the same program should share one object (:meth:`same`): checking that
    they are identical is then one identity test per rank.
    """

    per_rank: tuple[Program, ...]

    @classmethod
    def same(cls, program: Program, ranks: int) -> Programs:
        """``ranks`` ranks that all run ``program`` (one TP group)."""
        return cls((program,) * ranks)

    @property
    def ranks(self) -> int:
        return len(self.per_rank)

    def __len__(self) -> int:
        return len(self.per_rank)

    def __getitem__(self, rank: int) -> Program:
        return self.per_rank[rank]

    def __iter__(self) -> Iterator[Program]:
        return iter(self.per_rank)

    def shared(self) -> Program | None:
        """The program every rank runs, if all are identical (the same object or equal);
        None if any two differ."""
        if not self.per_rank:
            return None
        first = self.per_rank[0]
        for p in self.per_rank[1:]:
            if p is not first and p != first:
                return None
        return first

    def head(self, ranks: int) -> Programs:
        """The programs of ranks 0 .. ``ranks`` - 1."""
        return Programs(self.per_rank[:ranks])

    def has_p2p(self) -> bool:
        """Whether any rank sends or receives point to point."""
        return any(op.p2p is not None for p in _distinct(self.per_rank) for op in p.ops)


def _distinct(programs: Sequence[Program]) -> list[Program]:
    """``programs`` without repeats of one object."""
    return list({id(p): p for p in programs}.values())


def check(programs: Programs) -> None:
    """:class:`ProgramError` unless the programs fit together: every rank issues the same
    collectives in the same order (a collective is over all ranks, matched by order, as on
    an NCCL communicator), and every send has the receive that matches it, of the same
    size, on an existing other rank (and the other way round)."""
    n = programs.ranks
    if programs.shared() is None:
        calls = [tuple(op.collective for op in p.ops if op.collective) for p in programs]
        first: dict[int, int] = {}  # group -> its first rank (ranks of one group compare)
        for r in range(n):
            g = calls[r][0].group if calls[r] else 0
            f = first.setdefault(g, r)
            if f == r:
                continue
            if calls[r] != calls[f]:
                k = next(
                    (k for k, (a, b) in enumerate(zip(calls[f], calls[r], strict=False)) if a != b),
                    min(len(calls[f]), len(calls[r])),
                )
                raise ProgramError(
                    f"rank {r} issues collectives that rank {f} does not (first difference at "
                    f"collective {k}): every rank must issue the same collectives in order"
                )
    if not programs.has_p2p():
        return
    sends: dict[tuple[int, int, int], list[tuple[int, int]]] = {}  # (src, dst, tag)
    recvs: dict[tuple[int, int, int], list[tuple[int, int]]] = {}  # -> [(size, op index)]
    for rank, p in enumerate(programs):
        for i, op in enumerate(p.ops):
            x = op.p2p
            if x is None:
                continue
            if not 0 <= x.peer < n or x.peer == rank:
                raise ProgramError(
                    f"rank {rank} op {i} ({op.name}): peer={x.peer} must be another rank of the {n}"
                )
            if op.stream not in ("comm", "p2p"):
                raise ProgramError(
                    f"rank {rank} op {i} ({op.name}): p2p runs on the comm or p2p stream"
                )
            if x.direction == "send":
                sends.setdefault((rank, x.peer, x.tag), []).append((x.nbytes, i))
            else:
                recvs.setdefault((x.peer, rank, x.tag), []).append((x.nbytes, i))
    for key in sorted(sends.keys() | recvs.keys()):
        src, dst, tag = key
        out, into = sends.get(key, []), recvs.get(key, [])
        for k in range(max(len(out), len(into))):
            if k >= len(into):
                raise ProgramError(
                    f"rank {src} op {out[k][1]} sends {out[k][0]} B to rank {dst} (tag {tag}) "
                    f"that rank {dst} never receives (it posts {len(into)} matching recv)"
                )
            if k >= len(out):
                raise ProgramError(
                    f"rank {dst} op {into[k][1]} receives from rank {src} (tag {tag}), which "
                    f"sends nothing to match it (it posts {len(out)} matching send)"
                )
            if out[k][0] != into[k][0]:
                raise ProgramError(
                    f"rank {src} op {out[k][1]} sends {out[k][0]} B to rank {dst} (tag {tag}), "
                    f"whose matching recv (op {into[k][1]}) expects {into[k][0]} B"
                )
