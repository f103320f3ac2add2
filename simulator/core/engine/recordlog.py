"""The record log of one engine run: records in completion order and what links them.

Each record names its ``cause`` (the record whose end released its start). When one host
of identical hosts stands for all (:mod:`tpsim.core.comm.symmetry`), a cause may lie on another
host's copy of a record: ``cause_shift`` says how many hosts away.
"""

from __future__ import annotations

from tpsim.core.program import Op
from tpsim.core.records import Record


class RecordLog:
    """Appends records and hands out their ids (positions in :attr:`records`)."""

    __slots__ = ("cause_shift", "labels", "records")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.cause_shift: dict[int, int] = {}  # record id -> hosts away its cause lies
        # (op name, detail, label, steps) -> the step records' names and details
        self.labels: dict[tuple[str, str, str, int], tuple[list[str], list[str]]] = {}

    def op(self, rank: int, stream: str, i: int, op: Op, name: str, nbytes: int, start: float,
           end: float, cause: int, detail: str) -> int:  # fmt: skip
        """A record of op ``i`` (positional: the engine's hot path); returns its id."""
        rid = len(self.records)
        self.records.append(Record(rid, rank, stream, name, op.kind, op.category, op.layer,
                                   op.site, i, start, end, op.flops, nbytes, cause,
                                   detail))  # fmt: skip
        return rid

    def launch(self, rank: int, i: int, name: str, layer: int, site: str, start: float,
               end: float, cause: int, detail: str) -> int:  # fmt: skip
        """A record of host launch work on the ``cpu`` stream; returns its id."""
        rid = len(self.records)
        self.records.append(Record(rid, rank, "cpu", name, "launch", "launch_overhead", layer,
                                   site, i, start, end, 0.0, 0, cause, detail))  # fmt: skip
        return rid

    def dispatch(self, rank: int, i: int, op: Op, start: float, end: float, cause: int) -> int:
        """The device-side gap before eagerly launched kernel ``i`` (``compute`` stream,
        ``launch_overhead``); returns its id."""
        rid = len(self.records)
        detail = "device dispatch of an eagerly launched kernel"
        self.records.append(Record(rid, rank, "compute", f"dispatch {op.name}", "dispatch",
                                   "launch_overhead", op.layer, op.site, i, start, end, 0.0, 0,
                                   cause, detail))  # fmt: skip
        return rid

    def step_labels(self, op: Op, label: str, n: int) -> tuple[list[str], list[str]]:
        """Names and details of a collective's ``n`` step records (made once per op and
        shape): ``attn_out.all_reduce[3]``, ``...; ring/LL step 4 of 14``."""
        key = (op.name, op.detail, label, n)
        got = self.labels.get(key)
        if got is None:
            got = self.labels[key] = (
                [f"{op.name}[{s}]" for s in range(n)],
                [f"{op.detail}; {label} step {s + 1} of {n}" for s in range(n)],
            )
        return got


__all__ = ["RecordLog"]
