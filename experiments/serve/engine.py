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

from tpsim.calibration.scheduler import SchedulerSpec
from tpsim.core.lowering.mixed import MixedStep
from tpsim.experiments.serve.kvpool import BlockPool, Key


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
    ) -> None:
        self.spec, self.total_blocks, self.timer = spec, blocks, timer
        self.pool = BlockPool(blocks)
        self.lookup = requests  # id -> (prompt tokens, output tokens, prefix group, shared)
        self.waiting: deque[Request] = deque()
        #: async scheduling: requests admitted since the last plan, with when, in order
        self.newcomers: deque[tuple[float, Request]] = deque()
        self.planned_s = float("-inf")  # when the last plan was made
        self.running: list[Request] = []
        self.batch: list[Request] = []  # static batching: the batch in flight
        self.plan: list[tuple[Request, int]] = []
        self.finished: list[Request] = []
        self.preemptions = 0
        self.steps: list[StepRecord] = []
        self.record_steps = record_steps
        self.step_count = 0

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
        plan = schedule()
        if not plan and new:  # nothing else to run: the engine takes the newcomers now
            waiting.extend(r for _, r in new)
            new.clear()
            plan = schedule()
        self.planned_s = now
        if not plan:
            return None
        self.plan = plan
        # a decode: one token after the whole prompt; the rest are chunks (in plan order)
        decodes = [r.computed + 1 for r, n in plan if n == 1 and r.computed >= r.prompt]
        chunks = (
            [(n, r.computed) for r, n in plan if n != 1 or r.computed < r.prompt]
            if len(decodes) < len(plan)
            else []
        )
        seconds = self.timer(MixedStep.of(tuple(decodes), tuple(chunks)))
        self.step_count += 1
        if self.record_steps:
            used = self.total_blocks - self.pool.free
            tokens = len(decodes) + sum(n for n, _ in chunks)  # the plan's: one per decode
            queued = len(waiting) + len(new)
            self.steps.append(StepRecord(now, seconds, queued, len(plan), tokens, len(decodes),
                                         used, self.preemptions))  # fmt: skip
        return seconds

    def finish(self, now: float) -> Sequence[int]:
        done: list[int] = []
        caching, size = self.spec.prefix_caching, self.spec.block_size
        static = self.spec.policy == "static"
        left = False  # some running request finished
        for r, n in self.plan:  # the hot loop: every scheduled sequence, every step
            computed = r.computed = r.computed + n
            if static and r.done_s >= 0:  # a finished sequence padding the static batch
                continue
            if caching and r.group >= 0:  # full shared blocks computed: registered
                while r.next_key < min(computed, r.shared) // size:
                    key = (r.group, r.next_key)
                    if self.pool.register(key):
                        r.keys.append(key)
                    r.next_key += 1
            generated = r.generated
            if computed < r.prompt + generated:
                continue  # a prefill chunk that does not end the prompt
            r.generated = generated = generated + 1
            r.token_s.append(now)
            if generated >= r.output:
                r.done_s = now
                done.append(r.id)
                self.finished.append(r)
                if not static:
                    left = True
                    self._release(r)
        if left:  # the finished leave the running list at once, its order kept
            self.running = [r for r in self.running if r.done_s < 0]
        if static and all(r.done_s >= 0 for r in self.batch):
            for r in self.batch:
                self._release(r)
            self.batch = []
        self.plan = []
        return done

    # ----------------------------------------------------------------- KV blocks
    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.spec.block_size)

    @property
    def free(self) -> int:
        """Blocks that can be had: empty, or cached with no request holding them."""
        return self.pool.free

    def _grow(self, r: Request, tokens: int) -> bool:
        """Blocks for ``r`` to hold ``tokens``; False (nothing taken) when too few are free."""
        need = self._blocks_for(tokens) - r.blocks
        if need > 0:
            if not self.pool.take(need):
                return False
            r.blocks += need
        return True

    def _release(self, r: Request) -> None:
        self.pool.release(r.keys, r.blocks - len(r.keys))
        r.keys = []
        r.blocks = 0
        r.next_key = 0

    def _reserve(self, r: Request) -> int:
        return r.prompt + r.output

    # ----------------------------------------------------------------- continuous batching
    def _continuous(self) -> list[tuple[Request, int]]:
        spec = self.spec
        if not spec.mixed_batches:
            # unfinished chunked prefills first (preempting as vLLM does when blocks run
            # out), then new prompts; decodes in a step of their own when no prefill runs
            plan, budget, preempted = self._schedule_running(
                spec.max_num_batched_tokens, only="prefills"
            )
            prefill = plan if preempted else self._admit_waiting(plan, budget)
            if prefill:
                return prefill
            return self._schedule_running(spec.max_num_batched_tokens, only="decodes")[0]
        budget = spec.max_num_batched_tokens
        plan, budget, preempted = self._schedule_running(budget)
        if not preempted:
            plan = self._admit_waiting(plan, budget)
        return plan

    def _schedule_running(
        self, budget: int, only: str = ""
    ) -> tuple[list[tuple[Request, int]], int, bool]:
        plan: list[tuple[Request, int]] = []
        preempted = False
        running, size = self.running, self.spec.block_size
        take, add = self.pool.take, plan.append
        # in admission order; a preemption pops the list's tail, which ends the loop sooner
        for r in running:
            if budget <= 0:
                break
            computed = r.computed
            n = r.prompt + r.generated - computed
            if n > budget:
                n = budget
            if only and (computed < r.prompt) != (only == "prefills"):
                continue
            need = -(-(computed + n) // size) - r.blocks  # _grow, inlined: the hot path
            if need <= 0 or take(need):
                if need > 0:
                    r.blocks += need
                add((r, n))
                budget -= n
                continue
            fits = True
            while not self._grow(r, r.computed + n):
                if self.spec.kv_admission == "reserve":
                    fits = False
                    break
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is r:
                    fits = False
                    break
            if not fits:
                break
            add((r, n))
            budget -= n
        return plan, budget, preempted

    def _cached_prefix(self, r: Request) -> list[Key]:
        """The leading blocks of ``r``'s tokens found registered (at least its last token is
        computed, as vLLM V1 does to sample): its shared prefix's, then, for a request
        preempted before, the blocks of its own it computed then and that are still
        cached."""
        if not self.spec.prefix_caching or r.computed:
            return []
        size, limit = self.spec.block_size, (r.tokens - 1) // self.spec.block_size
        shared = min(r.shared, r.tokens - 1) // size if r.group >= 0 else 0
        keys = self.pool.lookup(r.group, shared) if shared else []
        if r.preemptions and len(keys) == shared < limit:
            keys += self.pool.lookup(_own(r), limit, start=shared)
        return keys

    def _preempt(self, r: Request) -> None:
        """``r`` leaves the running batch and goes back to the front of the queue, its
        progress dropped. With prefix caching, vLLM V1 hashes every full block of a request
        (not only shared prefixes): the full blocks it had computed past its shared prefix
        stay cached under its own keys, to be found when it is scheduled again if nothing
        has evicted them by then (the tail ones go first)."""
        if self.spec.prefix_caching:
            size, own = self.spec.block_size, _own(r)
            for i in range((r.shared // size if r.group >= 0 else 0), r.computed // size):
                if self.pool.register((own, i)):  # not if it holds that block already
                    r.keys.append((own, i))
        self._release(r)
        r.computed = 0
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)

    def _admit_waiting(
        self, plan: list[tuple[Request, int]], budget: int
    ) -> list[tuple[Request, int]]:
        spec = self.spec
        while self.waiting and budget > 0 and len(self.running) < spec.max_num_seqs:
            r = self.waiting[0]
            keys = self._cached_prefix(r)
            hit = len(keys) * spec.block_size
            n = r.tokens - hit - r.computed  # computed: a KV cache that came with it
            if not spec.chunked_prefill and n > budget:
                break
            n = min(n, budget)
            if keys:  # vLLM V1: the cached blocks first, then blocks for the tokens after them
                if self._blocks_for(hit + n) - len(keys) + self.pool.cost_of(keys) > self.free:
                    break
                self.pool.acquire(keys)
                r.keys, r.blocks, r.computed, r.next_key = list(keys), len(keys), hit, len(keys)
            want = self._reserve(r) if spec.kv_admission == "reserve" else r.computed + n
            if not self._grow(r, want):
                break
            self.waiting.popleft()
            self.running.append(r)
            plan.append((r, n))
            budget -= n
        return plan

    # ----------------------------------------------------------------- static batching
    def _static(self) -> list[tuple[Request, int]]:
        if not self.batch:
            budget = self.spec.max_num_batched_tokens  # the batch's prompts in one pass
            while self.waiting and len(self.batch) < self.spec.max_num_seqs:
                r = self.waiting[0]
                if r.prompt > budget or not self._grow(r, self._reserve(r)):
                    break
                budget -= r.prompt
                self.batch.append(self.waiting.popleft())
            if not self.batch:
                return []
            return [(r, r.prompt) for r in self.batch]
        return [(r, 1) for r in self.batch]

    @property
    def in_system(self) -> int:
        queued = len(self.waiting) + len(self.newcomers)
        return queued + len(self.running) + sum(r.done_s < 0 for r in self.batch)


def _own(r: Request) -> int:
    """The prefix group of ``r``'s own tokens (negative: never a workload's shared group)."""
    return -2 - r.id


__all__ = ["EngineInstance", "Request", "StepRecord"]
