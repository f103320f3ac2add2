"""The one record type the engine emits; every metric, chart and trace is computed from it.

Field meanings are documented once, in the README ("Records").
"""

from __future__ import annotations

from typing import Any, NamedTuple

#: Streams of one rank. A record's ``stream`` is one of these.
STREAMS: tuple[str, ...] = ("cpu", "compute", "comm", "p2p")

#: Kinds of work. ``launch`` (a host launch) and ``host`` (engine work: scheduling, input
#: preparation, sampling, Python per layer) live on the ``cpu`` stream; ``dispatch`` (the
#: device-side gap before an eagerly launched kernel) on ``compute``; ``collective`` and
#: ``p2p`` (a point-to-point send or receive) on ``comm``, in the ``communication`` category.
KINDS: tuple[str, ...] = (
    "launch",
    "host",
    "dispatch",
    "gemm",
    "attention",
    "elementwise",
    "collective",
    "p2p",
)
#: The kinds that are communication.
COMM_KINDS: tuple[str, ...] = ("collective", "p2p")

#: What a record's time counts as in the breakdown.
CATEGORIES: tuple[str, ...] = ("compute", "memory", "communication", "launch_overhead", "host")


class Record(NamedTuple):
    """One interval of work on one stream of one rank (times in seconds from t = 0).

    An immutable named tuple: millions are made in a large run, and a tuple is the cheapest
    immutable record Python has (``r._replace(...)`` makes a changed copy)."""

    id: int  # position in the engine's record list
    rank: int  # TP rank (0 .. tp-1)
    stream: str  # "cpu" | "compute" | "comm" | "p2p" (pipeline sends between stages)
    name: str  # op name after the layer structure: "qkv_proj", "attn_out.allreduce[3]", ...
    kind: str  # "launch" | "gemm" | "attention" | "elementwise" | "collective" | "p2p"
    category: str  # "compute" | "memory" | "communication" | "launch_overhead" | "host"
    layer: int  # transformer layer index; -1 for embedding, num_layers for the head
    site: str  # collective site ("attn_out", "mlp_out", "embedding", "lm_head"); "" if none
    op: int  # index of the op in the rank's program this record belongs to
    start_s: float
    end_s: float
    flops: float  # floating-point operations done by this record
    bytes: int  # HBM bytes moved (kernels) or bytes sent by this rank (collective steps, p2p)
    cause: int  # id of the record whose end released this one's start; -1 if none (t = 0)
    detail: str  # free text: shape, algorithm, protocol, peer

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()
