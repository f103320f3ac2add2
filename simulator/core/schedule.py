"""What a collective becomes before the engine runs it: per rank, a sequence of steps, each
a set of sends (:class:`Send`) and the arrivals it waits for (:class:`Step`), after a fixed
``base_s`` (:class:`Schedule`). The comm code (:mod:`tpsim.core.comm`) builds schedules
through a :data:`Planner` and point-to-point transfers through a :data:`Router`; the engine
(:mod:`tpsim.core.engine.simulation`) runs them. No SimPy here: the algorithms that build
schedules do not import the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tpsim.core.program import CollectiveCall

#: Ends the detail of a collective step whose sends cross the network between hosts.
NET_STEP = " over the network"


@dataclass(frozen=True, slots=True)
class Send:
    """One transfer of a collective step (or a point-to-point send)."""

    links: tuple[int, ...]  # indices of the directed links it crosses
    payload: int  # bytes of data it carries
    wire: float  # bytes on the wire (payload times the protocol's overhead)
    latency_s: float  # before its first byte arrives
    cap_Bps: float  # its own rate limit in wire bytes/s (math.inf: links alone limit it)
    notify: tuple[int, ...]  # ranks whose step waits for its arrival
    peer: int = -1  # destination rank, for the trace (-1: a switch)
    shift: int = 0  # blocks between sender and receiver, when one block stands for all
    shifts: tuple[int, ...] = ()  # the same per notified rank, for sends seen by several
    net: bool = False  # it crosses the network between hosts (the trace and Gantt say so)


@dataclass(frozen=True, slots=True)
class Step:
    sends: tuple[Send, ...]
    expect: int  # arrivals this rank waits for before the step is over


@dataclass(frozen=True)
class Schedule:
    """A collective as steps per rank (``steps[rank]``), after a fixed ``base_s``.

    ``model_s``: the time NCCL's own tuning model gives it, where that differs from the
    schedule's closed form (:func:`tpsim.core.comm.schedules.predict`) because the schedule
    also runs mechanisms the model leaves out (a ring's last receive, its thread blocks'
    copy rate): NCCL chooses by its model, so a choosing planner ranks by this, and the
    engine runs the schedule. None: the closed form is the model's."""

    algorithm: str
    protocol: str
    base_s: float
    steps: tuple[tuple[Step, ...], ...]
    model_s: float | None = None


#: Called once per distinct collective call; returns its schedule over the group.
Planner = Callable[[CollectiveCall], Schedule]
#: (source rank, destination rank, bytes) -> the transfer of a point-to-point send.
Router = Callable[[int, int, int], Send]
