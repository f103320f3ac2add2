"""Work done at a rate that may change, timed by one re-armable timer.

A network flow (bytes at its share of the links) and a compute kernel slowed while a
collective holds some of its SMs (seconds of work at a fraction of full speed) are the same
thing: some work remaining as of a time, a rate, and a timer for the moment the work runs
out. When the rate changes, the owner brings the work up to now (:meth:`Rated.settle`),
sets the new rate and re-arms the timer (:meth:`Rated.arm`); a generation counter makes
every timer set before that a no-op when it fires.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import simpy

R = TypeVar("R", bound="Rated")


class Rated:
    """``remaining`` units of work as of time ``since``, done at ``rate`` units per second;
    ``done`` fires when the owner says the work is over."""

    __slots__ = ("done", "generation", "rate", "remaining", "since")

    def __init__(self, remaining: float, done: simpy.Event, now: float, rate: float = 0.0) -> None:
        self.remaining = remaining  # work left as of ``since``
        self.rate = rate  # units per second; 0 until the owner rates it
        self.since = now
        self.done = done
        self.generation = 0  # bumped by every arm and cancel: older timers do nothing

    def settle(self, now: float) -> None:
        """Bring ``remaining`` up to ``now`` at the current rate."""
        if self.rate > 0:
            self.remaining -= self.rate * (now - self.since)
        self.since = now

    def arm(self: R, env: simpy.Environment, fire: Callable[[R], None]) -> None:
        """Set the timer for the end of the work at the current rate: ``fire(self)`` runs
        then, unless the timer has been re-armed or cancelled in between."""
        self.generation += 1
        generation = self.generation

        def check(_e: object) -> None:
            if self.generation == generation:
                fire(self)

        env.timeout(max(0.0, self.remaining / self.rate)).callbacks.append(check)

    def cancel(self) -> None:
        """Make the armed timer (if any) a no-op."""
        self.generation += 1


__all__ = ["Rated"]
