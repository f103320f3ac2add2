"""An engine instance's running requests, in admission order, as columns.

Every step touches every running request (hundreds, for thousands of steps), so what a step
changes of them (tokens computed and generated, KV blocks held, when each output token came
out) lives in the integer columns of :class:`Running`, updated with whole-array operations;
the :class:`~tpsim.experiments.serve.engine.Request` objects hold the rest and are brought up
to date (:meth:`Running.sync`) whenever one is handed out: indexed, iterated, popped or left.

Output tokens are kept as runs: a request that emits a token at consecutive steps stores
the first and last step of its run, and the run's times are copied from the steps' end times
into its ``token_s`` when the run breaks (a step it sat out, a preemption) or it leaves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tpsim.experiments.serve.engine import Request

#: The columns: tokens computed, generated, the prompt's, the output's, KV blocks held, the
#: first and last step of the current run of output tokens (-1 and -2: none), the prefix tokens
#: whose full blocks are registered as computed (0: none), a static batch's finished padding.
COMPUTED, GENERATED, PROMPT, OUTPUT, BLOCKS, RUN_FIRST, RUN_LAST, SHARED, PADDING = range(9)


class Running:
    """The running requests: a list of :class:`Request` and their columns, in one order."""

    def __init__(self, capacity: int = 64) -> None:
        self.reqs: list[Request] = []
        self.cols = np.zeros((9, capacity), dtype=np.int64)
        self.ends: list[float] = []  # each finished step's end time, by step index

    def col(self, field: int) -> np.ndarray:
        """A view of one column over the running requests."""
        return self.cols[field, : len(self.reqs)]

    def __len__(self) -> int:
        return len(self.reqs)

    def __bool__(self) -> bool:
        return bool(self.reqs)

    def __getitem__(self, i: int) -> Request:
        return self.sync(i if i >= 0 else len(self.reqs) + i)

    def __iter__(self) -> Iterator[Request]:
        return (self.sync(i) for i in range(len(self.reqs)))

    def append(self, r: Request, shared: int) -> int:
        """``r`` joins at the end, registering full blocks of its first ``shared`` tokens
        as they are computed; its position."""
        m = len(self.reqs)
        if m == self.cols.shape[1]:
            self.cols = np.concatenate([self.cols, np.zeros_like(self.cols)], axis=1)
        self.cols[:, m] = (r.computed, r.generated, r.prompt, r.output, r.blocks, -1, -2,
                           shared, 0)  # fmt: skip
        self.reqs.append(r)
        return m

    def sync(self, i: int) -> Request:
        """The request at position ``i``, its counters brought up to date."""
        r, c = self.reqs[i], self.cols
        r.computed, r.generated, r.blocks = (int(c[f, i]) for f in (COMPUTED, GENERATED, BLOCKS))
        return r

    def flush(self, i: int) -> None:
        """The output tokens of the current run of position ``i`` into its ``token_s``."""
        first = int(self.cols[RUN_FIRST, i])
        if first >= 0:
            last = int(self.cols[RUN_LAST, i])
            self.reqs[i].token_s.extend(self.ends[first : last + 1])
            self.cols[RUN_FIRST, i] = -1

    def pop(self) -> Request:
        """The last request leaves (a preemption's victim), up to date."""
        i = len(self.reqs) - 1
        self.flush(i)
        r = self.sync(i)
        self.reqs.pop()
        return r

    def remove(self, positions: np.ndarray) -> None:
        """The requests at ``positions`` (ascending; synced and flushed by the caller)
        leave; the others keep their order."""
        m = len(self.reqs)
        keep = np.ones(m, dtype=bool)
        keep[positions] = False
        self.cols[:, : m - len(positions)] = self.cols[:, :m][:, keep]
        for i in reversed(positions.tolist()):
            del self.reqs[i]

    def clear(self) -> None:
        self.reqs = []


__all__ = ["Running"]
