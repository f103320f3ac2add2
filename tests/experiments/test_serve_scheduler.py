"""tpsim serve's engine scheduler, one iteration at a time: the token budget, chunked
prefill, async scheduling, preemption, reserved admission, separate prefill steps, the
prefix cache and static batching."""

from __future__ import annotations

import pytest
from tpsim.calibration.scheduler import scheduler
from tpsim.core.lowering.mixed import MixedStep
from tpsim.experiments.serve.engine import EngineInstance


# ------------------------------------------------------------------ the scheduler
def _engine(blocks: int, *, engine: str = "vllm", **fields: object) -> EngineInstance:
    """An engine instance of ``engine``'s scheduler with ``fields`` set; synchronous (a
    request is in the next plan after it arrives) unless ``async_scheduling`` is given."""
    from dataclasses import replace

    fields.setdefault("async_scheduling", False)
    spec = replace(scheduler(engine, 80 * 2**30), **fields)
    reqs: dict[int, tuple[int, int, int, int]] = {}
    e = EngineInstance(spec, blocks, lambda step: 0.01 + 1e-6 * step.tokens, lambda i: reqs[i])
    e.reqs = reqs  # type: ignore[attr-defined]
    return e


def _send(e: EngineInstance, i: int, prompt: int, output: int, now: float = 0.0,
          group: int = -1, shared: int = 0) -> None:  # fmt: skip
    e.reqs[i] = (prompt, output, group, shared)  # type: ignore[attr-defined]
    e.admit(i, now)


def _drain(e: EngineInstance, now: float = 0.0) -> float:
    while (dt := e.step(now)) is not None:
        now += dt
        e.finish(now)
    return now


def test_chunked_prefill_under_the_token_budget() -> None:
    """A 5000-token prompt under a 2048-token budget: chunks of 2048, 2048, 904; the first
    token comes with the last chunk, then one decode per step."""
    e = _engine(10_000, max_num_batched_tokens=2048)
    _send(e, 0, 5000, 3)
    sizes, now = [], 0.0
    while (dt := e.step(now)) is not None:
        sizes.append([n for _, n in e.plan])
        now += dt
        e.finish(now)
    assert sizes == [[2048], [2048], [904], [1], [1]]
    assert e.finished[0].generated == 3


def test_decodes_first_then_new_prompts() -> None:
    e = _engine(10_000, max_num_batched_tokens=100)
    _send(e, 0, 10, 5)
    e.finish(e.step(0.0) or 0.0)  # prefill of request 0 -> its first token
    _send(e, 1, 500, 5)
    e.step(1.0)
    assert [(r.id, n) for r, n in e.plan] == [(0, 1), (1, 99)]


def test_async_scheduling_plans_one_iteration_ahead() -> None:
    """Planning the next iteration while this one runs (vLLM's batch queue, the overlap
    schedulers): a request arriving during an iteration misses the one already planned and
    joins the one after; the first request of an idle engine is scheduled at once."""
    ahead, sync = _engine(10_000, async_scheduling=True), _engine(10_000)
    first: dict[str, list[list[int]]] = {}
    for name, e in (("ahead", ahead), ("sync", sync)):
        _send(e, 0, 10, 6)  # the engine is idle: planned now in both
        now, ids = 0.0, []
        while (dt := e.step(now)) is not None:
            ids.append(sorted(r.id for r, _ in e.plan))
            if len(ids) == 1:
                _send(e, 1, 10, 2, now=now + dt / 2)  # arrives during the first iteration
            now += dt
            e.finish(now)
        first[name] = ids
    assert first["sync"][:2] == [[0], [0, 1]]
    assert first["ahead"][:3] == [[0], [0], [0, 1]]
    late = [next(r for r in e.finished if r.id == 1).token_s[0] for e in (sync, ahead)]
    assert late[1] - late[0] == pytest.approx(0.01 + 1e-6)  # the step of request 0 alone


def test_async_scheduling_idle_engine_takes_an_arrival_at_once() -> None:
    """When nothing else would run, a newcomer does not wait for the next plan: the engine
    had nothing queued, so it schedules the request as it comes."""
    e = _engine(10_000, async_scheduling=True)
    _send(e, 0, 10, 1)
    now = _drain(e)
    assert e.step(now) is None  # idle, the plan made now is empty
    _send(e, 1, 10, 1, now=now + 1.0)
    assert e.step(now + 1.0) is not None and [r.id for r, _ in e.plan] == [1]
    assert e.in_system == 1


def test_max_num_seqs_caps_the_running_batch() -> None:
    e = _engine(10_000, max_num_seqs=3)
    for i in range(5):
        _send(e, i, 10, 10)
    e.step(0.0)
    assert len(e.running) == 3 and len(e.waiting) == 2


def test_preemption_by_recompute() -> None:
    """Blocks for 4 x 16 tokens: two requests of 16 + 20 tokens cannot both grow; the last
    admitted is preempted (its blocks freed, its progress dropped), then recomputed with the
    tokens it had generated."""
    e = _engine(4, block_size=16)
    _send(e, 0, 16, 20)
    _send(e, 1, 16, 20)
    now = 0.0
    while (dt := e.step(now)) is not None:
        now += dt
        e.finish(now)
    assert e.preemptions >= 1
    assert {r.id for r in e.finished} == {0, 1}
    assert all(r.generated == 20 and len(r.token_s) == 20 for r in e.finished)
    assert e.free == 4


def test_reserve_admission_never_preempts() -> None:
    e = _engine(4, block_size=16, kv_admission="reserve")
    _send(e, 0, 16, 20)
    _send(e, 1, 16, 20)
    e.step(0.0)
    assert [r.id for r in e.running] == [0] and e.free == 1  # 36 tokens: 3 blocks taken


def test_separate_prefill_steps() -> None:
    """mixed_batches false (SGLang, vLLM V0): a waiting prompt gets a step of its own."""
    e = _engine(10_000, engine="sglang")
    _send(e, 0, 10, 5)
    e.finish(e.step(0.0) or 0.0)
    _send(e, 1, 30, 5)
    e.step(1.0)
    assert [(r.id, n) for r, n in e.plan] == [(1, 30)]
    e.finish(2.0)
    e.step(2.0)
    assert sorted((r.id, n) for r, n in e.plan) == [(0, 1), (1, 1)]


def test_prefix_cache_hits_after_the_first_request() -> None:
    """Two requests of one group sharing 70 tokens (4 full blocks of 16): the second, sent
    after the first left, finds the 4 blocks cached and prefills the rest only."""
    e = _engine(1000)
    _send(e, 0, 100, 2, group=7, shared=70)
    now = _drain(e)
    assert e.pool.hits == 0 and e.free == 1000  # its blocks left, 4 of them cached
    _send(e, 1, 120, 2, now=now, group=7, shared=70)
    e.step(now)
    assert [(r.id, n) for r, n in e.plan] == [(1, 120 - 64)]
    assert e.pool.hits == 4 and e.plan[0][0].computed == 64


def test_prefix_cache_shared_while_running_and_evicted_when_needed() -> None:
    """A block in use by one request is shared by the next (no new block for it); cached
    blocks are evicted, oldest first, when new ones are needed, and of one request's its
    tail before its head (vLLM V1 frees a request's blocks in reverse), so a prefix keeps
    its leading blocks longest."""
    e = _engine(20, max_num_batched_tokens=1000)
    _send(e, 0, 40, 50, group=1, shared=32)  # 3 blocks now, 2 of them shareable
    e.finish(e.step(0.0) or 0.0)
    free = e.free
    _send(e, 1, 40, 1, now=1.0, group=1, shared=32)
    e.step(1.0)
    assert e.pool.hits == 2 and e.free == free - 1  # 40 tokens: 2 shared blocks + 1 new
    e.finish(2.0)
    _drain(e, 2.0)
    assert e.free == 20 and len(e.pool.cached) == 2
    _send(e, 2, 300, 1, now=9.0)  # needs 19 blocks: one cached block is evicted
    e.step(9.0)
    assert len(e.pool.cached) == 1 and e.pool.lookup(1, 2) == [(1, 0)]


def test_a_preempted_request_finds_its_own_blocks_cached() -> None:
    """vLLM V1 hashes every full block, not only shared prefixes: a request preempted with
    90 tokens computed leaves 5 full blocks cached under its own keys, and when it is
    scheduled again (nothing has evicted them) it recomputes only what is past them."""
    e = _engine(10, block_size=16)
    _send(e, 0, 90, 20)
    e.finish(e.step(0.0) or 0.0)  # 90 prompt tokens: 6 blocks, the first token out
    victim = e.running[0]
    e._preempt(e.running.pop())
    assert victim.computed == 0 and len(e.pool.cached) == 5  # 80 tokens in full blocks
    e.step(1.0)
    assert [(r.id, n) for r, n in e.plan] == [(0, 91 - 80)]
    assert e.pool.hits == 5
    off = _engine(10, block_size=16, prefix_caching=False)
    _send(off, 0, 90, 20)
    off.finish(off.step(0.0) or 0.0)
    off._preempt(off.running.pop())
    off.step(1.0)
    assert [(r.id, n) for r, n in off.plan] == [(0, 91)]


def test_no_prefix_caching_without_groups_or_when_off() -> None:
    e = _engine(1000, prefix_caching=False)
    _send(e, 0, 100, 2, group=7, shared=70)
    now = _drain(e)
    _send(e, 1, 100, 2, now=now, group=7, shared=70)
    e.step(now)
    assert e.plan[0][1] == 100 and e.pool.hits == 0


def test_static_batching_runs_the_batch_to_its_end() -> None:
    e = _engine(1000, engine="fastertransformer", max_num_seqs=2)
    _send(e, 0, 10, 2)
    _send(e, 1, 10, 5)
    _send(e, 2, 10, 1)
    compositions, now = [], 0.0
    while (dt := e.step(now)) is not None:
        compositions.append(sorted((r.id, n) for r, n in e.plan))
        now += dt
        e.finish(now)
    assert compositions[:5] == [[(0, 10), (1, 10)]] + [[(0, 1), (1, 1)]] * 4
    assert compositions[5] == [(2, 10)]


def test_step_composition() -> None:
    """Decodes at their contexts (the new token included), chunks after their prefix."""
    seen: list[MixedStep] = []
    e = _engine(10_000, max_num_batched_tokens=64)
    e.timer = lambda step: seen.append(step) or 0.01
    _send(e, 0, 100, 3)
    for now in (0.0, 1.0, 2.0):
        e.step(now)
        e.finish(now + 0.5)
    assert seen[0].chunks == ((64, 0),) and seen[1].chunks == ((36, 64),)
    assert seen[2].decodes == (101,)


def test_a_decode_that_sits_out_a_step_gets_its_token_times_right() -> None:
    """Separate prefill steps (SGLang): a decoding request sits out the step that prefills
    a newcomer, which breaks its run of output tokens; every token time is still the end of
    a step it ran in."""
    e = _engine(10_000, engine="sglang")
    _send(e, 0, 10, 5)
    now, ran = 0.0, {0: [], 1: []}
    while (dt := e.step(now)) is not None:
        ids = [r.id for r, _ in e.plan]
        now += dt
        e.finish(now)
        for i in ids:
            ran[i].append(now)
        if len(ran[0]) == 2 and not ran[1]:
            _send(e, 1, 30, 3, now=now)
    by_id = {r.id: r for r in e.finished}
    assert by_id[0].token_s == ran[0] and by_id[1].token_s[0] == ran[1][0]
    assert len(by_id[0].token_s) == 5 and len(by_id[1].token_s) == 3
    assert ran[1][0] not in ran[0]  # request 0 sat out request 1's prefill step
