"""An engine instance's KV cache as blocks, with vLLM V1's automatic prefix caching.

Every block is empty, in use (by one or more running requests) or cached: a block whose
requests have all left keeps its contents and its key, and counts as free until it is
needed, the least recently freed first (vLLM V1 ``KVCacheManager``/``BlockPool``: freed
blocks go to the tail of the free queue with their hash, and a new allocation takes from
the head, evicting the hash). A request's full blocks of a prefix it shares with others
(``(group, block index)`` keys: the requests of one group begin with the same tokens) are
registered when computed; a later request of the group finds the leading ones still
in use or cached and starts after them. A preempted request's own full blocks are
registered under its own group (:mod:`tpsim.experiments.serve.kvblocks`), so that its
recompute finds those still cached.
"""

from __future__ import annotations

from collections import OrderedDict

Key = tuple[int, int]  # (prefix group, block index)


class BlockPool:
    """``total`` blocks: ``free`` counts the empty and the cached (evictable) ones."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self.refs: dict[Key, int] = {}  # registered keys -> requests holding the block
        self.cached: OrderedDict[Key, None] = OrderedDict()  # refs 0, oldest first
        self.hits = 0  # blocks found cached or in use by admissions so far

    def take(self, n: int) -> bool:
        """``n`` new blocks, evicting cached ones beyond the empty ones; False (nothing
        taken) when fewer are free."""
        if n > self.free:
            return False
        empty = self.free - len(self.cached)
        for _ in range(n - empty):
            key, _ = self.cached.popitem(last=False)
            del self.refs[key]
        self.free -= n
        return True

    def lookup(self, group: int, blocks: int, start: int = 0) -> list[Key]:
        """The leading keys of ``group``'s blocks ``start`` to ``blocks - 1`` that are
        registered."""
        out: list[Key] = []
        for i in range(start, blocks):
            key = (group, i)
            if key not in self.refs:
                break
            out.append(key)
        return out

    def cost_of(self, keys: list[Key]) -> int:
        """Free blocks that taking ``keys`` would use (the cached ones among them)."""
        return sum(1 for k in keys if k in self.cached)

    def acquire(self, keys: list[Key]) -> None:
        """Hold the registered blocks ``keys`` (from :meth:`lookup`) for one more request."""
        for key in keys:
            if key in self.cached:
                del self.cached[key]
                self.free -= 1
            self.refs[key] += 1
        self.hits += len(keys)

    def register(self, key: Key) -> bool:
        """A request's newly computed full block under ``key``; False when another block
        holds that key already (the request's copy stays unregistered)."""
        if key in self.refs:
            return False
        self.refs[key] = 1
        return True

    def release(self, keys: list[Key], unregistered: int) -> None:
        """A request leaves: its registered blocks stay cached once no one holds them, the
        others are empty again. ``keys`` are in block order, and the last ones are evicted
        first (vLLM V1 frees a request's blocks in reverse, so that its tail goes before its
        head)."""
        self.free += unregistered
        for key in reversed(keys):
            self.refs[key] -= 1
            if self.refs[key] == 0:
                self.cached[key] = None
                self.free += 1


__all__ = ["BlockPool", "Key"]
