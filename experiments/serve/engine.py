"""One serving engine instance as the SimPy loop runs it (:class:`EngineInstance`, a
:class:`tpsim.core.engine.serving.Server`): its queues, its KV cache in blocks, its scheduler,
and an iteration timer that prices each step it schedules.

The scheduler follows vLLM V1's ``Scheduler.schedule`` (v0.8 to v0.11), with the profile's
:class:`~tpsim.calibration.scheduler.SchedulerSpec` deciding where other engines differ:

- every step has a token budget (``max_num_batched_tokens``); the running requests come
  first, in admission order, each with all the tokens it has not computed (one, for a
  decode; the rest of its prompt, for a prefill, cut to the budget left);
- a request that needs blocks when none are free preempts the last admitted running
  request (its blocks freed, its progress dropped, back to the front of the queue: it is
  recomputed as a prefill of its prompt and the tokens it had generated), until it fits or
  is the one preempted;
- then, when nothing was preempted, waiting requests in arrival order while there are fewer
  than ``max_num_seqs`` running, budget is left and their blocks can be had (a prompt longer
  than the budget left is chunked: ``chunked_prefill``);
- a step's sequences each emit a token when their last token has been computed; a request
  with all its output tokens leaves and frees its blocks.

``async_scheduling`` (vLLM's batch queue of two, SGLang's and TensorRT-LLM's overlap
schedulers) plans each iteration while the one before it runs: the plan for the iteration
starting now was made when the last one started, so a request that arrived since waits one
more iteration, unless the engine would otherwise have nothing to run (an idle engine
schedules an arrival at once).

``kv_admission: reserve`` (TensorRT-LLM's GUARANTEED_NO_EVICT) takes the blocks of the whole
prompt and output at admission, so nothing is preempted; ``mixed_batches: false`` (SGLang
without mixed chunks, vLLM V0) runs prefill steps apart, whenever a prompt can be admitted,
and decode steps otherwise; ``policy: static`` (FasterTransformer, gpt-fast) admits a batch
only when the engine is idle and runs it, finished sequences included, until the last ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from tpsim.calibration.scheduler import SchedulerSpec
from tpsim.core.lowering.mixed import MixedStep
from tpsim.experiments.serve.kvblocks import BlockLayout, RequestBlocks
from tpsim.experiments.serve.kvpool import BlockPool, Key
from tpsim.experiments.serve.running import (
    BLOCKS,
    COMPUTED,
    GENERATED,
    OUTPUT,
    PADDING,
    PROMPT,
    RUN_FIRST,
    RUN_LAST,
    SHARED,
    Running,
)


def _fitting(total: np.ndarray, free: int) -> int:
    """How many leading requests' blocks fit ``free``, ``total`` their running sum."""
    return len(total) if total[-1] <= free else int(np.searchsorted(total, free, "right"))


#: A plan: the running positions scheduled (ascending: admission order) and their tokens.
Plan = tuple[np.ndarray, np.ndarray]
_NONE = np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class Request:
    """A request's life in the engine (times in seconds)."""

    id: int
    arrival_s: float
    prompt: int
    output: int
    group: int = -1  # prefix group: requests of a group begin with the same ``shared`` tokens
    shared: int = 0
    computed: int = 0  # tokens whose KV is in the cache
    generated: int = 0
    blocks: int = 0
    keys: list[Key] = field(default_factory=list)  # its blocks registered for prefix caching
    next_key: int = 0  # the next shared block to register
    token_s: list[float] = field(default_factory=list)  # when each output token came out
    preemptions: int = 0
    done_s: float = -1.0

    @property
    def tokens(self) -> int:
        """Tokens whose KV the next step needs: the prompt and what was generated."""
        return self.prompt + self.generated


@dataclass(frozen=True)
class StepRecord:
    """One iteration: start, seconds, what waited and ran, blocks in use after scheduling."""

    start_s: float
    seconds: float
    waiting: int
    running: int
    tokens: int
    decodes: int
    blocks_used: int
    preemptions: int  # in the whole run so far


class EngineInstance:
    """One engine instance (a replica): queues, KV blocks, the scheduler, the timer."""

    def __init__(
        self,
        spec: SchedulerSpec,
        blocks: int,
        timer: Callable[[MixedStep], float],
        requests: Callable[[int], tuple[int, int, int, int]],
        *,
        record_steps: bool = True,
        layout: BlockLayout | None = None,
    ) -> None:
        self.spec, self.total_blocks, self.timer = spec, blocks, timer
        self.pool = BlockPool(blocks)
        #: how a sequence holds blocks (default: every layer at its length)
        self.layout = layout or BlockLayout(spec.block_size)
        self.kv = RequestBlocks(self.pool, self.layout, spec.prefix_caching)
        self.lookup = requests  # id -> (prompt tokens, output tokens, prefix group, shared)
        self.waiting: deque[Request] = deque()
        #: async scheduling: requests admitted since the last plan, with when, in order
        self.newcomers: deque[tuple[float, Request]] = deque()
        self.planned_s = float("-inf")  # when the last plan was made
        #: the running requests (static batching: the batch in flight, finished included)
        self.running = Running()
        self._plan: Plan = (_NONE, _NONE)
        self.finished: list[Request] = []
        self.preemptions = 0
        self.steps: list[StepRecord] = []
        self.record_steps = record_steps
        self.step_count = 0

    @property
    def plan(self) -> list[tuple[Request, int]]:
        """The iteration scheduled last: each request, up to date, and its tokens."""
        sel, n = self._plan
        return [(self.running[i], k) for i, k in zip(sel.tolist(), n.tolist(), strict=True)]

    # ----------------------------------------------------------------- the loop's calls
    def admit(self, request: int, now: float) -> None:
        prompt, output, group, shared = self.lookup(request)
        self.queue(Request(request, now, prompt, output, group, min(shared, prompt)), now)

    def queue(self, r: Request, now: float) -> None:
        """``r`` joins the waiting queue, or, scheduling ahead, the newcomers."""
        if self.spec.async_scheduling:
            self.newcomers.append((now, r))
        else:
            self.waiting.append(r)

    def step(self, now: float) -> float | None:
        new, waiting = self.newcomers, self.waiting
        # there when this plan was made: before it (a request sent at that instant, as a
        # closed-loop client sends on its last token, came after the plan)
        while new and new[0][0] < self.planned_s:
            waiting.append(new.popleft()[1])
        schedule = self._static if self.spec.policy == "static" else self._continuous
        sel, n = schedule()
        if not len(sel) and new:  # nothing else to run: the engine takes the newcomers now
            waiting.extend(r for _, r in new)
            new.clear()
            sel, n = schedule()
        self.planned_s = now
        if not len(sel):
            return None
        self._plan = sel, n
        # a decode: one token after the whole prompt; the rest are chunks (in plan order)
        cols = self.running.cols
        computed = cols[COMPUTED, sel]
        decode = (n == 1) & (computed >= cols[PROMPT, sel])
        chunks: tuple[tuple[int, int], ...] = ()
        if decode.all():
            decodes = tuple((computed + 1).tolist())
        else:
            chunk = ~decode
            decodes = tuple((computed[decode] + 1).tolist())
            chunks = tuple(zip(n[chunk].tolist(), computed[chunk].tolist(), strict=True))
        seconds = self.timer(MixedStep.of(decodes, chunks))
        self.step_count += 1
        if self.record_steps:
            used = self.total_blocks - self.pool.free
            queued = len(waiting) + len(new)
            self.steps.append(StepRecord(now, seconds, queued, len(sel), int(n.sum()),
                                         len(decodes), used, self.preemptions))  # fmt: skip
        return seconds

    def finish(self, now: float) -> Sequence[int]:
        run, (sel, n) = self.running, self._plan
        self._plan = (_NONE, _NONE)
        k = len(run.ends)  # this step's index
        run.ends.append(now)
        static = self.spec.policy == "static"
        cols = run.cols
        before = cols[COMPUTED, sel]
        computed = before + n
        cols[COMPUTED, sel] = computed
        # full blocks of a shared prefix computed: registered (during its prefill only)
        for j in np.flatnonzero(before < cols[SHARED, sel]).tolist():
            self.kv.register(run.reqs[sel[j]], int(computed[j]))
        # a token from each sequence whose last token was computed (a static batch's
        # finished sequences pad it and emit nothing)
        generated = cols[GENERATED, sel]
        emit = computed >= cols[PROMPT, sel] + generated
        if static:
            emit &= cols[PADDING, sel] == 0
        generated = generated + emit
        cols[GENERATED, sel] = generated
        out = sel[emit]
        if not len(out):
            return []
        broken = out[cols[RUN_LAST, out] != k - 1]  # a new run of tokens for these
        for i in broken.tolist():
            run.flush(i)
        cols[RUN_FIRST, broken] = k
        cols[RUN_LAST, out] = k
        ended = out[generated[emit] >= cols[OUTPUT, out]]
        done: list[int] = []
        for i in ended.tolist():
            run.flush(i)
            r = run.sync(i)
            r.done_s = now
            done.append(r.id)
            self.finished.append(r)
            if static:
                cols[PADDING, i] = 1
            else:
                self._release(r)
        if static:
            if run.col(PADDING).all():
                for r in run:
                    self._release(r)
                run.clear()
        elif len(ended):  # the finished leave the running list at once, its order kept
            run.remove(ended)
        return done

    # ----------------------------------------------------------------- KV blocks
    @property
    def free(self) -> int:
        """Blocks that can be had: empty, or cached with no request holding them."""
        return self.pool.free

    def _grow_at(self, i: int, tokens: int) -> bool:
        """Blocks for the running request at position ``i`` to hold ``tokens``; False when
        too few are free."""
        cols = self.running.cols
        blocks = self.kv.hold(tokens, int(cols[BLOCKS, i]), int(cols[COMPUTED, i]))
        if blocks is not None:
            self.running.cols[BLOCKS, i] = blocks
        return blocks is not None

    def _release(self, r: Request) -> None:
        self.kv.release(r)

    def _reserve(self, r: Request) -> int:
        return r.prompt + r.output

    def _join(self, r: Request) -> int:
        """``r`` starts running; its position."""
        shared = r.shared if self.spec.prefix_caching and r.group >= 0 else 0
        return self.running.append(r, shared)

    # ----------------------------------------------------------------- continuous batching
    def _continuous(self) -> Plan:
        spec = self.spec
        if not spec.mixed_batches:
            # unfinished chunked prefills first (preempting as vLLM does when blocks run
            # out), then new prompts; decodes in a step of their own when no prefill runs
            sel, n, budget, preempted = self._schedule_running(
                spec.max_num_batched_tokens, only="prefills"
            )
            if not preempted:
                sel, n = self._admit_waiting(sel, n, budget)
            if len(sel):
                return sel, n
            return self._schedule_running(spec.max_num_batched_tokens, only="decodes")[:2]
        sel, n, budget, preempted = self._schedule_running(spec.max_num_batched_tokens)
        if not preempted:
            sel, n = self._admit_waiting(sel, n, budget)
        return sel, n

    def _schedule_running(
        self, budget: int, only: str = ""
    ) -> tuple[np.ndarray, np.ndarray, int, bool]:
        """The running requests in admission order, each with the tokens it has not
        computed cut to the budget left, while there is budget, and the blocks they grow
        into (``only``: the prefills, or the decodes). The blocks of every request up to
        the first that cannot have them are taken at once; that one preempts the last
        admitted until it fits (or is the one preempted: the step is planned), and the
        requests after it are scheduled in the same way."""
        run, layout = self.running, self.layout
        sels, ns, preempted, start = [], [], False, 0
        while start < len(run) and budget > 0:
            cols = run.cols[:, start : len(run)]
            computed, prompt = cols[COMPUTED], cols[PROMPT]
            left = prompt + cols[GENERATED] - computed
            if only:
                left = np.where((computed < prompt) == (only == "prefills"), left, 0)
            n = np.minimum(left, budget - (np.cumsum(left) - left))
            ok = n > 0
            if layout.chunked or layout.sliding:  # vLLM's remove_skipped_blocks, before
                # allocating: the chunked groups free the blocks before the computed tokens'
                # chunk, the sliding ones those before their window
                freed = np.maximum(cols[BLOCKS] - layout.blocks_of(computed, computed), 0)
                if total_freed := int(freed.sum()):
                    cols[BLOCKS] -= freed
                    self.pool.release([], total_freed)
            held = cols[BLOCKS]
            given = computed if layout.chunked or layout.sliding else None
            need = np.where(ok, layout.blocks_of(computed + n, given) - held, 0)
            np.maximum(need, 0, out=need)
            total = np.cumsum(need)
            m = len(total)
            j = _fitting(total, self.pool.free)
            if layout.swa_pool:  # the sliding pool's blocks too (SGLang's SWAKVPool)
                swa = np.cumsum(layout.swa_of(held + need) - layout.swa_of(held))
                j = min(j, _fitting(swa, self.kv.swa_free))
                if j:
                    self.kv.swa_free -= int(swa[j - 1])
            if j and total[j - 1]:
                self.pool.take(int(total[j - 1]))
                cols[BLOCKS, :j] += need[:j]
            sel = np.flatnonzero(ok[:j])
            sels.append(sel + start)
            ns.append(taken := n[sel])
            budget -= int(taken.sum())
            if j == m:
                break
            # position start + j needs blocks that are not free (and budget: its n > 0)
            i, k = start + j, int(n[j])
            r, fits = run.reqs[i], True
            while not self._grow_at(i, int(cols[COMPUTED, j]) + k):
                if self.spec.kv_admission == "reserve":
                    fits = False
                    break
                victim = run.pop()
                self._preempt(victim)
                preempted = True
                if victim is r:
                    fits = False
                    break
            if not fits:
                break
            sels.append(np.array([i]))
            ns.append(np.array([k]))
            budget -= k
            start = i + 1
        if not sels:
            return _NONE, _NONE, budget, preempted
        return np.concatenate(sels), np.concatenate(ns), budget, preempted

    def _preempt(self, r: Request) -> None:
        """``r`` leaves the running batch and goes back to the front of the queue, its
        progress dropped (with prefix caching, its own full blocks stay cached:
        :meth:`RequestBlocks.keep_own`)."""
        self.kv.keep_own(r)
        self._release(r)
        r.computed = 0
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)

    def _admit_waiting(self, sel: np.ndarray, n: np.ndarray, budget: int) -> Plan:
        spec, run = self.spec, self.running
        plan: list[int] = []
        tokens: list[int] = []
        while self.waiting and budget > 0 and len(run) < spec.max_num_seqs:
            r = self.waiting[0]
            keys = self.kv.cached_prefix(r)
            k = r.tokens - len(keys) * spec.block_size - r.computed  # computed: KV it came with
            if not spec.chunked_prefill and k > budget:
                break
            k = min(k, budget)
            if keys and not self.kv.start_after(r, keys, k):
                break
            want = self._reserve(r) if spec.kv_admission == "reserve" else r.computed + k
            if not self.kv.grow(r, want):
                break
            self.waiting.popleft()
            plan.append(self._join(r))
            tokens.append(k)
            budget -= k
        if not plan:
            return sel, n
        return np.concatenate([sel, plan]), np.concatenate([n, tokens])

    # ----------------------------------------------------------------- static batching
    def _static(self) -> Plan:
        run = self.running
        if not run:
            budget = self.spec.max_num_batched_tokens  # the batch's prompts in one pass
            while self.waiting and len(run) < self.spec.max_num_seqs:
                r = self.waiting[0]
                if r.prompt > budget or not self.kv.grow(r, self._reserve(r)):
                    break
                budget -= r.prompt
                self._join(self.waiting.popleft())
            if not run:
                return _NONE, _NONE
            return np.arange(len(run)), run.col(PROMPT).copy()
        return np.arange(len(run)), np.ones(len(run), dtype=np.int64)

    @property
    def in_system(self) -> int:
        queued = len(self.waiting) + len(self.newcomers)
        padding = int(self.running.col(PADDING).sum()) if self.spec.policy == "static" else 0
        return queued + len(self.running) - padding


__all__ = ["EngineInstance", "Request", "StepRecord"]
