"""The KV blocks of an engine instance's requests: how many each holds, how many a number of
tokens needs, and, with prefix caching, which it registers and finds (vLLM V1
``KVCacheManager``: allocate, free, the cached prefix of a new request, the hashed blocks of
a preempted one). The pool itself (:class:`~tpsim.experiments.serve.kvpool.BlockPool`) only
counts blocks and keys; the scheduler (:mod:`tpsim.experiments.serve.engine`) decides who
gets them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tpsim.experiments.serve.kvpool import BlockPool, Key

if TYPE_CHECKING:
    from tpsim.experiments.serve.engine import Request
    from tpsim.models.spec import ModelSpec


#: The blocks a sequence holds in each linear-attention group: one (vLLM V1's MambaManager
#: without prefix caching, which vLLM turns off for Qwen3-Next: :func:`hybrid_layout`)
STATE_BLOCKS = 1


@dataclass(frozen=True)
class BlockLayout:
    """How a sequence holds the pool's blocks, ``size`` tokens each: one block a ``size``
    tokens in each of ``full`` groups of layers, and in each of ``sliding`` groups only the
    blocks that hold its last ``window`` tokens (vLLM V1's hybrid KV cache manager: a block
    of the pool holds one group's layers; ``SlidingWindowManager.remove_skipped_blocks``
    frees the blocks wholly before the window before each allocation, so a decoding
    sequence keeps at most ``ceil((window - 1) / size) + 1`` of them, and a prefill step's
    new tokens are all held until the next step, the window's ``window - 1`` cached tokens
    before them: given the tokens computed, the blocks past :meth:`slid`). One full group
    and no sliding one: every layer's cache at the sequence's length.

    ``swa_pool`` blocks (SGLang's ``SWAKVPool``): the sliding layers in a second pool of
    their own, the main pool's blocks holding the full layers; a sequence holds in it at
    most ``swa_keep`` tokens' blocks (its window, the tokens decoded between two frees of
    those past it, a page), as many as it holds of the main pool below that.

    ``chunked`` groups (Llama 4's chunked local attention layers, vLLM V1's
    ``ChunkedLocalAttentionManager``): a sequence keeps only the blocks from its computed
    tokens' chunk on (``get_num_skipped_tokens``: ``num_computed_tokens // chunk * chunk``
    tokens skipped, their whole blocks freed by ``remove_skipped_blocks`` before each
    allocation): given the tokens computed, the blocks past the skipped ones (a step's new
    tokens all held, however many chunks they span); without, the most a decoding sequence
    keeps, :attr:`chunk_blocks`.

    ``linear`` groups (Qwen3-Next's Gated DeltaNet layers, vLLM V1's ``MambaSpec`` and
    ``MambaManager``): a sequence holds one block in each, its layers' conv and recurrent
    state, whatever its length (without prefix caching of the state, the MambaSpec's
    block_size is max_model_len: ``cdiv(tokens, max_model_len)``, one block)."""

    size: int
    full: int = 1
    sliding: int = 0
    window: int = 0
    swa_pool: int = 0
    swa_keep: int = 0
    chunked: int = 0
    chunk: int = 0
    linear: int = 0

    @property
    def groups(self) -> int:
        return self.full + self.sliding + self.chunked + self.linear

    @property
    def chunk_blocks(self) -> int:
        """The most blocks a chunked group keeps for one sequence: a chunk's, one more
        where chunks do not start on a block boundary."""
        return -(-self.chunk // self.size) + (1 if self.chunk % self.size else 0)

    @property
    def window_blocks(self) -> int:
        """The most blocks a sliding group keeps for one sequence."""
        return -(-(self.window - 1) // self.size) + 1

    @property
    def keep_blocks(self) -> int:
        """The most blocks of the sliding pool a sequence keeps."""
        return -(-self.swa_keep // self.size)

    def skipped(self, computed: int) -> int:
        """The whole blocks a chunked group has freed once ``computed`` tokens are computed
        (vLLM's ChunkedLocalAttentionManager.get_num_skipped_tokens // block_size)."""
        return computed // self.chunk * self.chunk // self.size

    def slid(self, computed: int) -> int:
        """The whole blocks a sliding group has freed once ``computed`` tokens are computed
        (vLLM's SlidingWindowManager.get_num_skipped_tokens, ``computed - window + 1``
        tokens, // block_size)."""
        return max(computed - self.window + 1, 0) // self.size

    def blocks_for(self, tokens: int, computed: int | None = None) -> int:
        """Blocks that hold ``tokens`` of one sequence, ``computed`` of them computed before
        this step (None: a decoding sequence's most, :attr:`chunk_blocks` a chunked
        group)."""
        n = -(-tokens // self.size)
        chunked = sliding = 0
        if self.chunked:
            kept = min(n, self.chunk_blocks) if computed is None else n - self.skipped(computed)
            chunked = self.chunked * kept
        if self.sliding:
            kept = min(n, self.window_blocks) if computed is None else n - self.slid(computed)
            sliding = self.sliding * kept
        return self.full * n + sliding + chunked + self.linear * STATE_BLOCKS

    def blocks_of(self, tokens: np.ndarray, computed: np.ndarray | None = None) -> np.ndarray:
        """:meth:`blocks_for` of each of ``tokens`` (and ``computed``)."""
        n = -(-tokens // self.size)
        out = self.full * n
        if self.sliding:
            if computed is None:
                out = out + self.sliding * np.minimum(n, self.window_blocks)
            else:
                slid = np.maximum(computed - self.window + 1, 0) // self.size
                out = out + self.sliding * (n - slid)
        if self.chunked:
            if computed is None:
                out = out + self.chunked * np.minimum(n, self.chunk_blocks)
            else:
                skipped = computed // self.chunk * self.chunk // self.size
                out = out + self.chunked * (n - skipped)
        return out + self.linear * STATE_BLOCKS

    def swa_held(self, blocks: int) -> int:
        """Blocks of the sliding pool a sequence holding ``blocks`` of the main pool keeps
        (0 without one)."""
        return min(blocks, self.keep_blocks) if self.swa_pool else 0

    def swa_of(self, blocks: np.ndarray) -> np.ndarray:
        """:meth:`swa_held` of each of ``blocks``."""
        return np.minimum(blocks, self.keep_blocks)

    def sequences(self, blocks: int, tokens: int) -> int:
        """How many sequences of ``tokens`` a pool of ``blocks`` (and the sliding pool)
        holds."""
        n = self.blocks_for(tokens)
        most = blocks // n
        return min(most, self.swa_pool // self.swa_held(n)) if self.swa_pool else most


def hybrid_layout(model: ModelSpec, layers: range, block_size: int) -> tuple[BlockLayout, int]:
    """vLLM V1's hybrid KV cache groups (``_get_kv_cache_groups_uniform_page_size``) of
    ``model``, and the layers of ``layers`` (a pipeline stage's) one block of the pool holds.

    The model's full, sliding, chunked and linear-attention layers (each a KVCacheSpec of
    its own: FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec, MambaSpec) are
    split into groups of one size: the fewest kind's count, or the most's when it is under
    1.5 times that (each kind then padded to whole groups); a model of one kind is one
    group. A stage's block holds one layer of each of its groups' layers there, the largest
    group's count on the stage. Llama 4's 12 full and 36 chunked layers: groups of 12, one
    full and three chunked (vLLM groups chunked layers so by default since
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 1, vllm/envs.py; before,
    vllm/config/vllm.py turned the hybrid manager off for a model with attention_chunk_size,
    every layer at length). Qwen3-Next's 12 full and 36 linear layers: one full group and
    three linear ones of 12."""
    sliding = [i for i in range(model.num_layers) if model.is_sliding_layer(i)]
    chunked = [i for i in range(model.num_layers) if model.is_chunked_layer(i)]
    linear = [i for i in range(model.num_layers) if model.is_linear_layer(i)]
    full = model.num_layers - len(sliding) - len(chunked) - len(linear)
    counts = (full, len(sliding), len(chunked), len(linear))
    kinds = [n for n in counts if n]
    size = min(kinds) if max(kinds) >= 1.5 * min(kinds) else max(kinds)
    nf, ns, nc, nl = (-(-n // size) for n in counts)
    here = sum(1 for i in layers if model.is_sliding_layer(i))
    there = sum(1 for i in layers if model.is_chunked_layer(i))
    state = sum(1 for i in layers if model.is_linear_layer(i))
    per_block = max(
        -(-(len(layers) - here - there - state) // nf) if nf else 0,
        -(-here // ns) if ns else 0,
        -(-there // nc) if nc else 0,
        -(-state // nl) if nl else 0,
    )
    layout = BlockLayout(block_size, nf, ns, model.sliding_window if ns else 0,
                         chunked=nc, chunk=model.attention_chunk_size if nc else 0,
                         linear=nl)  # fmt: skip
    return layout, per_block


class RequestBlocks:
    """``pool``'s blocks as requests hold them, as ``layout`` says (``size`` tokens each),
    and the free blocks of the layout's sliding pool, when it has one (``swa_free``: only
    counted, never cached)."""

    def __init__(self, pool: BlockPool, layout: BlockLayout, prefix_caching: bool) -> None:
        # an all-sliding model's prefix cache (its blocks held past the window) is not
        # modelled: a request's registered blocks are among its full groups' blocks
        self.pool, self.layout = pool, layout
        self.prefix_caching = prefix_caching and layout.full > 0
        self.size = layout.size
        self.swa_free = layout.swa_pool

    def blocks_for(self, tokens: int, computed: int | None = None) -> int:
        """Blocks that hold ``tokens`` (``computed`` of them computed before)."""
        return self.layout.blocks_for(tokens, computed)

    def hold(self, tokens: int, held: int, computed: int | None = None) -> int | None:
        """The blocks held once ``tokens`` fit, from ``held``, taking what is missing (and
        the sliding pool's, where there is one); None (nothing taken) when too few are free
        in either. ``computed``: the tokens computed before (:meth:`BlockLayout.blocks_for`)."""
        need = self.blocks_for(tokens, computed) - held
        if need > 0:
            swa = self.layout.swa_held(held + need) - self.layout.swa_held(held)
            if swa > self.swa_free or not self.pool.take(need):
                return None
            self.swa_free -= swa
        return max(held, held + need)

    def grow(self, r: Request, tokens: int) -> bool:
        """Blocks for ``r`` (not running) to hold ``tokens``; False when too few are free."""
        blocks = self.hold(tokens, r.blocks, r.computed)
        if blocks is not None:
            r.blocks = blocks
        return blocks is not None

    def release(self, r: Request) -> None:
        """``r`` gives its blocks back (registered ones stay cached)."""
        self.pool.release(r.keys, r.blocks - len(r.keys))
        self.swa_free += self.layout.swa_held(r.blocks)
        r.keys = []
        r.blocks = 0
        r.next_key = 0

    def register(self, r: Request, computed: int) -> None:
        """``r``'s full blocks of its shared prefix computed so far, registered."""
        while r.next_key < min(computed, r.shared) // self.size:
            key = (r.group, r.next_key)
            if self.pool.register(key):
                r.keys.append(key)
            r.next_key += 1

    def cached_prefix(self, r: Request) -> list[Key]:
        """The leading blocks of ``r``'s tokens found registered (at least its last token is
        computed, as vLLM V1 does to sample): its shared prefix's, then, for a request
        preempted before, the blocks of its own it computed then and that are still
        cached."""
        if not self.prefix_caching or r.computed:
            return []
        size, limit = self.size, (r.tokens - 1) // self.size
        shared = min(r.shared, r.tokens - 1) // size if r.group >= 0 else 0
        keys = self.pool.lookup(r.group, shared) if shared else []
        if r.preemptions and len(keys) == shared < limit:
            keys += self.pool.lookup(own_group(r), limit, start=shared)
        return keys

    def start_after(self, r: Request, keys: list[Key], tokens: int) -> bool:
        """``r`` holds the cached blocks ``keys`` and starts after them, if the blocks for
        its next ``tokens`` can be had too (vLLM V1: the cached blocks first, then blocks for
        the tokens after them); False (nothing held) otherwise."""
        hit = len(keys) * self.size
        if (
            self.blocks_for(hit + tokens, hit) - len(keys) + self.pool.cost_of(keys)
            > self.pool.free
        ):
            return False
        if self.layout.swa_held(self.blocks_for(hit + tokens, hit)) > self.swa_free:
            return False
        self.pool.acquire(keys)
        self.swa_free -= self.layout.swa_held(len(keys))
        r.keys, r.blocks, r.computed, r.next_key = list(keys), len(keys), hit, len(keys)
        return True

    def keep_own(self, r: Request) -> None:
        """``r`` is preempted: with prefix caching, vLLM V1 hashes every full block of a
        request (not only shared prefixes), so the full blocks it computed past its shared
        prefix stay cached under its own keys, to be found when it is scheduled again if
        nothing has evicted them by then (the tail ones go first)."""
        if not self.prefix_caching:
            return
        own = own_group(r)
        for i in range((r.shared // self.size if r.group >= 0 else 0), r.computed // self.size):
            if self.pool.register((own, i)):  # not if it holds that block already
                r.keys.append((own, i))


def own_group(r: Request) -> int:
    """The prefix group of ``r``'s own tokens (negative: never a workload's shared group)."""
    return -2 - r.id


__all__ = ["STATE_BLOCKS", "BlockLayout", "RequestBlocks", "hybrid_layout", "own_group"]
