"""The collective algorithms, one module each, and the registry built from them.

Every module here (except those starting with ``_``) defines ``ALGORITHM``, one
:class:`Algorithm` entry that carries everything about it: the schedule builder, when it
applies (and why not), whether it is one of NCCL's own, which collectives it runs, the most
steps a rank takes (the record bound) and, for serving engines' own kernels, the largest
message ``auto`` hands it. The CLI choices, ``auto``/``nccl`` selection and the record
estimate are derived from :data:`REGISTRY`; adding an algorithm is adding a module here.
The closed-form time of any schedule is :func:`tpsim.core.comm.schedules.predict`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpsim.calibration import Protocol
from tpsim.core.comm.fabric import Fabric
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule


@dataclass
class Context:
    """What a builder needs beyond the call: the group's fabric, its ring order, the
    protocols NCCL may use there, whether the planner is choosing (``auto``/``nccl``) or
    running one named algorithm, and a memo for work done once per group (a ring search)."""

    fab: Fabric
    order: Sequence[int]
    protocols: Sequence[Protocol]
    choosing: bool
    memo: dict[str, Any] = field(default_factory=dict)

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]


#: A lower bound on a schedule's predicted time and how to build the schedule.
Bounded = tuple[float, Callable[[], Schedule]]


@dataclass(frozen=True)
class Algorithm:
    """One collective algorithm: everything the planner, the CLI and the estimate need."""

    name: str
    order: int  # position in listings; ties in auto selection go to the lower
    about: str  # one line for --help and the docs
    nccl: bool  # one of NCCL's own algorithms (``--algo nccl`` chooses among these)
    ops: tuple[str, ...]  # the collectives it runs; the others run as a ring
    why_not: Callable[[Fabric, str], str | None]  # why it cannot run an op here, or None
    build: Callable[[Context, CollectiveCall], list[Schedule]]  # a schedule per protocol
    max_steps: Callable[[int], int]  # most steps one rank takes, for p ranks
    #: Largest message ``auto`` gives it (serving engines hand larger ones to NCCL); None: any.
    auto_max_bytes: Callable[[Fabric], int] | None = None
    #: Smallest message ``auto`` gives it (a serving engine's two-shot above its one-shot).
    auto_min_bytes: Callable[[Fabric], int] | None = None
    #: Runs only when named (``--algo``, a call's ``algo``): ``auto`` and ``nccl`` never
    #: choose it (DeepEP's kernels, which an engine runs for MoE layers only).
    explicit_only: bool = False
    #: Per protocol, in ``build``'s order: a lower bound on the schedule's predicted time
    #: (:func:`tpsim.core.comm.schedules.predict`) and the schedule's own builder, so that a
    #: choosing planner builds only those that might beat the best found (None: build all).
    bounded: Callable[[Context, CollectiveCall], list[Bounded]] | None = None
    #: tpsim's own composition of collective phases, which no library or serving engine runs
    #: as one call: ``auto`` chooses it only where the calibration says the engine could
    #: (``nccl.yaml`` ``auto_composed``: the ideal engine), never a serving engine's
    composed: bool = False


def _discover() -> dict[str, Algorithm]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        entry = getattr(module, "ALGORITHM", None)
        if not isinstance(entry, Algorithm) or entry.name != info.name:
            raise ImportError(f"{module.__name__}: needs ALGORITHM = Algorithm(name={info.name!r})")
        found.append(entry)
    return {a.name: a for a in sorted(found, key=lambda a: (a.order, a.name))}


#: Every algorithm by name, in listing order.
REGISTRY: dict[str, Algorithm] = _discover()
#: The choices of ``--allreduce-algo`` / ``--algo``: the two selections, then each algorithm.
CHOICES: tuple[str, ...] = ("auto", "nccl", *REGISTRY)


def candidates(choice: str) -> list[Algorithm]:
    """The algorithms a choice may run: all for ``auto``, NCCL's own for ``nccl``, else the
    named one (and the ring and the all-to-all, which run the collectives it does not)."""
    if choice == "auto":
        return list(REGISTRY.values())
    if choice == "nccl":
        return [a for a in REGISTRY.values() if a.nccl]
    return [REGISTRY[choice], *(REGISTRY[a] for a in ("ring", "pairwise") if a != choice)]


def max_steps(choice: str, ranks: int) -> int:
    """The most steps one rank takes in any collective ``choice`` may run (record bound)."""
    if ranks < 2:
        return 0
    return max(a.max_steps(ranks) for a in candidates(choice))


__all__ = ["CHOICES", "REGISTRY", "Algorithm", "Bounded", "Context", "candidates", "max_steps"]
