"""Mailboxes: the arrivals a rank waits for before a collective step or a receive is over.

A box is keyed by whatever names one wait: (collective, rank, step) for a collective, the
matching (send, receive) pair for a point-to-point transfer. A message records when its
sender's step began and the record a wait it ends names as its cause: a collective step
names the late sender's cause as its own (its record starts where the sender's step did),
a receive the send itself (its record starts as the bytes land).
"""

from __future__ import annotations

from collections.abc import Hashable

import simpy

#: (sender's step start, (record id, its end) the wait it ends names as its cause: the
#: sender's cause for a collective step, the send's own record for a receive, arrival,
#: hosts away)
Message = tuple[float, tuple[int, float], float, int]


class _Box:
    __slots__ = ("event", "msgs", "need")

    def __init__(self) -> None:
        self.msgs: list[Message] = []
        self.need = 0
        self.event: simpy.Event | None = None


class Mailboxes:
    """Arrivals per key; a waiter asks for a count and gets an event, or None if they are
    already there."""

    __slots__ = ("boxes", "env")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.boxes: dict[Hashable, _Box] = {}

    def deliver(self, key: Hashable, start: float, cause: tuple[int, float], shift: int) -> None:
        """A message arrives now in box ``key``."""
        box = self.boxes.get(key)
        if box is None:
            box = self.boxes[key] = _Box()
        box.msgs.append((start, cause, self.env.now, shift))
        if box.event is not None and not box.event.triggered and len(box.msgs) >= box.need:
            box.event.succeed()

    def wait(self, key: Hashable, need: int) -> tuple[simpy.Event | None, list[Message]]:
        """Box ``key``'s messages (the box's own list: it grows as they arrive) and an event
        that fires when it holds ``need`` of them (None if it already does)."""
        box = self.boxes.get(key)
        if box is None:
            box = self.boxes[key] = _Box()
        if len(box.msgs) >= need:
            return None, box.msgs
        box.need, box.event = need, self.env.event()
        return box.event, box.msgs


__all__ = ["Mailboxes", "Message"]
