"""What a simulation returns (:class:`Result`) and the record budget a run is checked
against before it starts (:func:`estimate_records`, :func:`records_lower_bound`,
:func:`check_records`), apart from :mod:`tpsim.core.api` so that what reads a Result needs
nothing of the simulate path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpsim.core.comm import algorithms
from tpsim.core.config import Options, Workload
from tpsim.core.errors import ConfigError
from tpsim.core.program import Programs
from tpsim.core.records import Record
from tpsim.core.summary import Summary
from tpsim.models.spec import ModelSpec


@dataclass(frozen=True)
class Result:
    """What one simulation produced: the records, the summary (the JSON contract, a dict;
    ``typed_summary`` is the same as a :class:`~tpsim.core.summary.Summary`) and the
    critical path (record ids)."""

    records: tuple[Record, ...]
    summary: dict[str, Any]
    critical_path: tuple[int, ...]
    rank_labels: dict[int, str]
    #: (time, "src->dst", bytes/s) each time a link's load changed; only with link_usage=True
    link_usage: tuple[tuple[float, str, float], ...] = ()
    typed_summary: Summary | None = None

    @property
    def typed(self) -> Summary:
        """The summary as a :class:`~tpsim.core.summary.Summary` (``summary`` is its
        ``to_dict()``)."""
        if self.typed_summary is None:
            raise ValueError("this Result was built without its typed summary")
        return self.typed_summary

    @property
    def latency_s(self) -> float:
        if self.typed_summary is not None:
            return self.typed_summary.latency_s
        return float(self.summary["latency_s"])


#: Bytes one record holds in memory, about (see check_records; tests/cli/test_limits.py measures).
RECORD_BYTES = 450


def estimate_records(programs: Programs, algo: str = "auto") -> int:
    """An upper bound on the records ``programs`` make, known before the run.

    Per rank: the graph replay and the launch-skew record, one record per kernel and p2p
    op, one per host launch and per eager dispatch gap, and per collective its fixed-latency
    record plus its steps: the most steps any algorithm ``algo`` may choose takes (each
    registry entry's bound).
    """
    steps = algorithms.max_steps(algo, programs.ranks)
    per_program: dict[int, int] = {}
    total = 0
    for program in programs:
        n = per_program.get(id(program))
        if n is None:
            n = 2
            for op in program.ops:
                n += (op.launch_s > 0) + (op.dispatch_s > 0)
                n += 1 + steps if op.collective is not None else 1
            per_program[id(program)] = n
        total += n
    return total


def records_lower_bound(
    spec: ModelSpec, tp: int, workload: Workload, options: Options, micro_batches: int = 1
) -> int:
    """Records the run makes at least, known before lowering (so that an absurd request is
    refused before its program is built): per rank and layer the QKV, attention and
    activation kernels and the two row-parallel GEMMs, each followed by a collective when
    tp > 1, in ``parts`` pieces with ``overlap="chunked"``; a pipeline runs every layer once
    per micro-batch (one TP group of each stage stands for its replicas at least)."""
    parts = 1
    if tp > 1 and options.overlap == "chunked":
        parts = max(1, min(options.overlap_chunks or tp, workload.tokens))
    return micro_batches * tp * spec.num_layers * (3 + 2 * parts * (2 if tp > 1 else 1))


def check_records(records: int, options: Options, bound: str = "up to") -> None:
    """ConfigError when a run would make more than ``options.max_records`` records.

    A record in the result holds about 450 bytes (measured: a 15-field tuple of 160 bytes and
    its list slot, plus its own floats, ints, step name and detail text), so the default of 20
    million is about 9 GB: the run is refused up front rather than left to exhaust memory.
    """
    if records > options.max_records:
        raise ConfigError(
            f"max_records={options.max_records}: this run would make {bound} {records:,} "
            f"records (about {records * RECORD_BYTES / 1e9:,.1f} GB); lower --tp, "
            "--micro-batches, the layers or --overlap-chunks, or raise --max-records"
        )
