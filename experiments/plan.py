"""Capacity planning: which TP x PP x DP layout of N GPUs serves a model best.

Every layout that uses all the GPUs (``tp * pp * dp = G``) and fits in memory is a
candidate; a mixture-of-experts model adds, per layout, its experts split over the TP group
(``ep = tp``, as vLLM's ``--enable-expert-parallel``) and attention data parallelism (TP
groups of a replica sharing expert-parallel MoE layers, ``ep = tp * attention_dp``).
Obviously dominated ones are left out (more pipeline stages than 8, or a TP group that
crosses hosts while stages or replicas could keep it inside one). For each, the
largest batch per replica that fits in memory (or ``batch_max``) is simulated as one
decode step (TPOT; a pipeline keeps ``pp`` batches in flight, :func:`decode_step`),
halved until the TPOT SLO holds and then grown back by bisection to within 1/8 of the
largest that holds it, and one request's prefill of ``prompt_len`` tokens gives the TTFT.
Layouts are simulated in parallel (one process per layout). Ranked: SLOs met first, then
total tokens/s, then TPOT; when none meets them, by how close each comes.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tpsim.core.api import simulate
from tpsim.core.comm.layout import stage_layers
from tpsim.core.config import Layout, Options, Workload, tp_problem
from tpsim.core.errors import ConfigError
from tpsim.core.expert_shapes import engine_experts
from tpsim.core.lowering.experts import expert_split
from tpsim.core.lowering.mixed import MixedStep
from tpsim.core.memory import MemoryUse, memory_per_stage
from tpsim.core.metrics import pipeline_batches, pipelined_tpot, regime
from tpsim.core.precision import run_precision
from tpsim.core.summary import Summary
from tpsim.experiments.sweep.pool import map_in_workers
from tpsim.experiments.sweep.run import default_jobs
from tpsim.models.catalog import get_model
from tpsim.topologies.graph import first_gpu
from tpsim.topologies.io import get_topology
from tqdm import tqdm

if TYPE_CHECKING:
    from tpsim.calibration.scheduler import SchedulerSpec
    from tpsim.core.plan import RunPlan

MAX_PP = 8
#: The largest batch per replica tried when memory alone decides (no engine runs more).
BATCH_LIMIT = 1 << 14


@dataclass(frozen=True)
class PlanRequest:
    model: str
    topology: str
    nodes: int = 1
    gpus: int = 0  # 0: every GPU of the nodes
    batch_max: int = 0  # 0: what memory and max_num_seqs allow (bounded by the TPOT SLO)
    prompt_len: int = 1024
    context_len: int = 2048
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    gpu_hour_usd: float | None = None
    engine: str = "vllm"
    ideal: bool = False
    dtype: str | None = None  # --dtype (None: the model's)
    kv_dtype: str | None = None  # --kv-dtype (None: as the engine keeps it)


@dataclass(frozen=True)
class PlanRow:
    tp: int
    pp: int
    dp: int
    batch: int  # sequences per replica
    ttft_s: float
    tpot_s: float
    tokens_per_s: float  # all replicas
    tokens_per_s_per_gpu: float
    headroom_bytes: int  # free HBM on the fullest GPU
    regime: str
    ttft_ok: bool
    tpot_ok: bool
    usd_per_mtok: float | None
    ep: int = 1  # expert-parallel ranks (MoE)
    attention_dp: int = 1  # attention data-parallel groups per replica (MoE)
    #: what stopped the batch from doubling: "memory", "TPOT SLO", "--batch-max"
    batch_limit: str = ""
    #: the decode step's critical path by category (seconds)
    breakdown: tuple[tuple[str, float], ...] = ()
    #: the larger of TTFT and TPOT over their SLOs (<= 1: both met; 0: no SLO given)
    miss: float = 0.0

    @property
    def in_flight(self) -> int:
        """Sequences decoding at once over all replicas and attention groups."""
        return self.batch * self.dp * self.attention_dp

    @property
    def batch_unit(self) -> str:
        """What ``batch`` counts the sequences of: a replica, or one attention group of it."""
        return "per attention group" if self.attention_dp > 1 else "per replica"

    @property
    def label(self) -> str:
        adp = f" x ADP {self.attention_dp}" if self.attention_dp > 1 else ""
        ep = f" EP {self.ep}" if self.ep > 1 else ""
        return f"TP {self.tp}{adp} x PP {self.pp} x DP {self.dp}{ep}"

    @property
    def gpus(self) -> int:
        return self.tp * self.attention_dp * self.pp * self.dp

    @property
    def slo_ok(self) -> bool:
        return self.ttft_ok and self.tpot_ok


Candidate = tuple[int, int, int, int, int]  # tp, pp, dp, ep, attention_dp


def layouts(req: PlanRequest) -> list[Candidate]:
    """(tp, pp, dp, ep, attention_dp) with tp * attention_dp * pp * dp = G that split the
    heads, the layers and (MoE) the experts."""
    spec = get_model(req.model)
    graph = get_topology(req.topology, req.nodes)
    total = sum(1 for _, k in graph.nodes(data="kind") if k == "gpu")
    g = req.gpus or total
    if g > total:
        raise ConfigError(f"gpus={g}: more than the {total} GPUs of {req.nodes} node(s)")
    per_host = int(graph.graph.get("gpus_per_host", total)) or total
    experts = spec.num_experts
    out: list[Candidate] = []
    for tp in range(1, g + 1):
        if g % tp or tp_problem(tp, spec.num_heads, spec.num_kv_heads):
            continue
        for pp in range(1, min(MAX_PP, spec.num_layers, g // tp) + 1):
            if (g // tp) % pp:
                continue
            rest = g // (tp * pp)  # replicas, or attention data-parallel groups and replicas
            for adp in range(1, rest + 1) if experts else (1,):
                if rest % adp or (adp > 1 and pp > 1):
                    continue
                dp = rest // adp
                if tp > per_host and (pp > 1 or dp > 1 or adp > 1):
                    continue  # dominated: TP across hosts when stages or replicas could be
                eps = {1, tp * adp} if experts else {1}
                for ep in sorted(e for e in eps if not experts or experts % e == 0):
                    if adp > 1 and ep == 1:
                        continue  # attention DP is worth its all-to-all only with EP
                    out.append((tp, pp, dp, ep, adp))
    return out


def _stage_memory(
    req: PlanRequest, tp: int, pp: int, ep: int = 1, adp: int = 1
) -> Callable[[int], list[MemoryUse]]:
    """Each stage's memory at a batch per replica (its decode and prefill), the pipeline's
    sequences in ``pp`` micro-batches, one micro-batch's activations at a time."""
    spec = get_model(req.model)
    xs = expert_split(spec, tp, adp, ep, tp * adp // ep) if spec.is_moe else None
    gpu = first_gpu(get_topology(req.topology, 1))
    opts = Options(ideal=req.ideal, engine=req.engine, dtype=req.dtype, kv_dtype=req.kv_dtype)
    if xs is not None:  # the routed experts as the engine builds them (padded)
        xs = engine_experts(xs, spec, opts.calibration.engine, arch=gpu.arch,
                            expert_dtype=run_precision(opts, spec, gpu).experts,
                            phase="decode", a2a=opts.moe_a2a)  # fmt: skip
    stages = stage_layers(spec.num_layers, pp)

    def memory(b: int) -> list[MemoryUse]:
        w = Workload(b, "decode", req.prompt_len, req.context_len)
        return [
            memory_per_stage(spec, tp, w, opts, gpu, layers=r, first=s == 0,
                             last=s == pp - 1, micro_batches=min(pp, b), experts=xs)
            for s, r in enumerate(stages)
        ]  # fmt: skip

    return memory


def engine_sequences(req: PlanRequest, tp: int, pp: int, ep: int = 1, adp: int = 1) -> int:
    """The most sequences of ``context_len`` tokens the engine's paged KV cache holds per
    replica (per attention group), as the engine sizes it when it starts and ``tpsim serve``
    does (:func:`~tpsim.experiments.serve.run.kv_cache`: its share of the memory less the
    weights and a profiling step of ``max_num_batched_tokens`` tokens, in whole blocks, a
    sequence holding those of its sliding-window layers' window only where the engine's
    hybrid manager or sliding pool frees the rest, and fitting both of SGLang's pools);
    :data:`BATCH_LIMIT` for an engine without one (static batching)."""
    from tpsim.experiments.serve.run import kv_cache

    plan_, spec = _engine(req, tp, pp, ep, adp)
    if spec.policy == "static":
        return BATCH_LIMIT
    try:
        kv = kv_cache(plan_, spec, pp, states=False)
    except ConfigError:  # no room for one sequence's cache (or SGLang's sliding pool's share)
        return 0
    return kv.sequences(req.context_len)


def engine_batch_cap(req: PlanRequest, tp: int, pp: int, ep: int = 1, adp: int = 1) -> int:
    """The most sequences a continuous-batching engine runs at once per replica (per
    attention group): its ``max_num_seqs`` (vLLM's default 1024 on an 80 GB GPU) for each
    of a pipeline's virtual engines, as ``tpsim serve`` and ``plan --rate`` run them;
    :data:`BATCH_LIMIT` for a static engine (its batch is the caller's) or under
    ``--batch-max`` (which says the engine is set to run that many)."""
    _, spec = _engine(req, tp, pp, ep, adp)
    if spec.policy == "static" or req.batch_max:
        return BATCH_LIMIT
    return min(BATCH_LIMIT, pp * spec.max_num_seqs)


@functools.lru_cache(maxsize=256)
def _engine(req: PlanRequest, tp: int, pp: int, ep: int, adp: int) -> tuple[RunPlan, SchedulerSpec]:
    """The layout resolved (memory allowed to overflow) and its engine's scheduler."""
    from tpsim.calibration.scheduler import scheduler
    from tpsim.core.plan import resolve

    opts = Options(ideal=req.ideal, engine=req.engine, dtype=req.dtype, kv_dtype=req.kv_dtype,
                   allow_oom=True)  # fmt: skip
    lay = Layout(tp, pp=pp, ep=ep, attention_dp=adp)
    plan_ = resolve(req.model, req.topology, lay, Workload(1, "decode", 1, 1), opts,
                    nodes=req.nodes, oom_flag=False)  # fmt: skip
    return plan_, scheduler(req.engine, plan_.gpu.hbm_bytes)


def _fits(req: PlanRequest, tp: int, pp: int, ep: int = 1, adp: int = 1) -> Callable[[int], bool]:
    """Whether a batch's decode and prefill fit every stage of the layout, and its
    sequences the engine's KV cache."""
    memory = _stage_memory(req, tp, pp, ep, adp)
    most = engine_sequences(req, tp, pp, ep, adp)
    return lambda b: b <= most and all(m.fits for m in memory(b))


def fitting_batches(req: PlanRequest, tp: int, pp: int, ep: int = 1, adp: int = 1) -> list[int]:
    """Powers of 2 (up to ``batch_max``, or :data:`BATCH_LIMIT` when 0) whose decode and
    prefill fit every stage, then the largest batch that fits (memory, or the cap) when it
    is not a power of 2."""
    fits = _fits(req, tp, pp, ep, adp)
    cap = min(req.batch_max or BATCH_LIMIT, engine_batch_cap(req, tp, pp, ep, adp))
    out, b = [], 1
    while b <= cap and fits(b):
        out.append(b)
        b *= 2
    if out and out[-1] < cap:  # the largest that fits, between the last power and the next
        lo, hi = out[-1], min(2 * out[-1], cap + 1)  # lo fits, hi does not (or is past cap)
        if hi == cap + 1 and fits(cap):
            lo = cap
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        if lo > out[-1]:
            out.append(lo)
    return out


def _headroom(summary: Summary) -> int:
    stages = summary.memory_per_stage or (summary.memory,)
    return min(m.capacity_bytes_per_gpu - m.total_bytes_per_gpu for m in stages)


@dataclass(frozen=True)
class DecodeStep:
    """A layout's decode at one batch per replica, as a serving engine runs it steadily:
    ``batch`` sequences in flight per replica, each getting a token every ``tpot_s``."""

    batch: int
    tpot_s: float
    tokens_per_s: float  # all replicas
    regime: str
    breakdown: tuple[tuple[str, float], ...]
    headroom_bytes: int


def decode_step(req: PlanRequest, tp: int, pp: int, dp: int, ep: int = 1, adp: int = 1
                ) -> Callable[[int], DecodeStep]:  # fmt: skip
    """The decode step at a batch per replica. One stage, or an engine that splits each batch
    into micro-batches itself (FasterTransformer): the simulated step. A pipeline of ``pp``
    stages as the other serving engines run it: ``pp`` batches of ``batch // pp`` sequences
    in flight at once (:func:`~tpsim.core.metrics.pipeline_batches`), a token each per
    :func:`~tpsim.core.metrics.pipelined_tpot` of one such batch's simulated step."""
    memory = _stage_memory(req, tp, pp, ep, adp)
    opts = Options(ideal=req.ideal, engine=req.engine, dtype=req.dtype, kv_dtype=req.kv_dtype)

    def run(b: int, micro_batches: int) -> Summary:
        lay = Layout(tp, pp=pp, dp=dp, micro_batches=micro_batches, ep=ep, attention_dp=adp)
        return simulate(req.model, req.topology, lay,
                        Workload(b, "decode", req.prompt_len, req.context_len), opts,
                        nodes=req.nodes).typed  # fmt: skip

    def step(b: int) -> DecodeStep:
        if pp == 1 or opts.calibration.engine.pipeline_split_tokens is not None:
            # one stage, or an engine that splits each batch itself (FasterTransformer) and
            # runs one batch through its stages at a time: the simulated step
            s = run(b, 0)
            whole = tuple((k, v) for k, v in s.breakdown.to_dict().items() if v is not None)
            return DecodeStep(b, s.latency_s, s.tokens_per_s, s.regime, whole, _headroom(s))
        n, each = pipeline_batches(b, pp)
        s = run(each, 1)
        tpot = pipelined_tpot(s.latency_s, max(s.stage_s or (s.latency_s,)), n)
        # on TPOT's basis, with no fill (every stage busy with a batch): the last stage's
        # part of the step, once per batch in flight (when it bounds TPOT: n times), or its
        # mix over the whole pass (when one batch's own pass is longer)
        parts = {k: v for k, v in s.breakdown.to_dict().items() if k != "bubble"}
        last = math.fsum(parts.values())
        parts = {k: v * tpot / last for k, v in parts.items()} if last > 0 else parts
        free = min(m.capacity_bytes_per_gpu - m.total_bytes_per_gpu for m in memory(each * n))
        return DecodeStep(each * n, tpot, dp * each * n / tpot, regime(parts),
                          tuple(parts.items()), free)  # fmt: skip

    return step


def one_prompt(prompt_len: int, context_len: int, adp: int) -> Workload:
    """One request's prefill, the others idle: with attention data parallelism its group
    prefills alone while the other groups join each MoE layer's all-to-all with no tokens, so
    the experts route its ``prompt_len`` tokens only (as ``serve --concurrency 1`` runs it),
    not a prompt from every group (``Workload(1)`` is a batch of 1 in each group)."""
    if adp > 1:
        return MixedStep.of((), ((prompt_len, 0),), routed=prompt_len)
    return Workload(1, "prefill", prompt_len, context_len)


def evaluate(
    req: PlanRequest, tp: int, pp: int, dp: int, ep: int = 1, adp: int = 1
) -> PlanRow | None:
    """The layout at its best batch: the largest fitting one meeting the TPOT SLO (or 1),
    or the power of 2 below it where that gives more tokens/s."""
    batches = fitting_batches(req, tp, pp, ep, adp)
    if not batches:
        return None
    opts = Options(ideal=req.ideal, engine=req.engine, dtype=req.dtype, kv_dtype=req.kv_dtype)
    prefill = simulate(req.model, req.topology,
                       Layout(tp, pp=pp, dp=dp, micro_batches=0, ep=ep, attention_dp=adp),
                       one_prompt(req.prompt_len, req.context_len, adp), opts,
                       nodes=req.nodes).typed  # fmt: skip
    ttft = prefill.latency_s
    step = decode_step(req, tp, pp, dp, ep, adp)

    def ok(d: DecodeStep) -> bool:
        return req.slo_tpot_ms is None or d.tpot_s * 1e3 <= req.slo_tpot_ms

    above = 0  # the smallest batch known to miss the TPOT SLO
    for b in reversed(batches):
        s = step(b)
        if ok(s) or b == batches[0]:
            break
        above = b
    # between the batch meeting the SLO and the next one tried (missing it): to 1/8 of it
    while ok(s) and above and above - b > max(1, b // 8, pp):
        mid = (b + above) // 2
        m = step(mid)
        if ok(m):
            b, s = mid, m
        else:
            above = mid
    # tokens/s need not grow with the batch: past a power of 2 a GEMM's rows spill into
    # another row of tiles (70B TP 8 on H100: 12,033 tok/s at 256, 9,512 at 264); the power
    # of 2 below is taken where it gives more
    peak = False
    below = [x for x in batches if x < b and 2 * x > b]
    if below and ok(s):
        t = step(below[-1])
        if ok(t) and t.tokens_per_s > s.tokens_per_s:
            b, s, peak = below[-1], t, True
    tpot, tpot_ok = s.tpot_s, ok(s)
    engine_cap = engine_batch_cap(req, tp, pp, ep, adp)
    if peak:
        limit = "tokens/s peak"
    elif above:
        limit = "TPOT SLO"
    elif req.batch_max and b == req.batch_max:
        limit = "--batch-max"
    elif b == engine_cap < BATCH_LIMIT:
        limit = f"the engine's max_num_seqs, {engine_cap // pp}" + (
            " a virtual engine" if pp > 1 else ""
        )
    elif b == BATCH_LIMIT:
        limit = "the planner's limit"
    else:
        limit = "memory"
    gpus = tp * adp * pp * dp
    rate = s.tokens_per_s
    usd = None
    if req.gpu_hour_usd is not None and rate > 0:
        usd = gpus * req.gpu_hour_usd / 3600 / rate * 1e6
    return PlanRow(
        tp, pp, dp, s.batch, ttft, tpot, rate, rate / gpus, s.headroom_bytes, s.regime,
        req.slo_ttft_ms is None or ttft * 1e3 <= req.slo_ttft_ms, tpot_ok, usd, ep, adp,
        limit, s.breakdown, max(ttft * 1e3 / (req.slo_ttft_ms or math.inf),
                                tpot * 1e3 / (req.slo_tpot_ms or math.inf)),
    )  # fmt: skip


def _evaluate(args: tuple[PlanRequest, int, int, int, int, int]) -> PlanRow | None:
    try:
        return evaluate(*args)
    except ConfigError:  # a layout refused (memory, records): not a candidate
        return None


def plan(req: PlanRequest, jobs: int = 0) -> list[PlanRow]:
    """Every candidate layout evaluated, ranked (see the module doc)."""
    cands = layouts(req)
    if not cands:
        raise ConfigError(f"model={req.model}: no TP x PP x DP layout splits it over these GPUs")
    args = [(req, *c) for c in cands]
    jobs = min(jobs or default_jobs(), len(args))
    # progress on a terminal only (a large host or join takes minutes: say how far it is)
    with tqdm(
        total=len(args), unit="layout", file=sys.stderr, disable=None, dynamic_ncols=True
    ) as bar:
        if jobs <= 1:
            rows = []
            for a in args:
                rows.append(_evaluate(a))
                bar.update()
        else:  # workers that die with this process and stop at the first Ctrl-C
            rows = map_in_workers(_evaluate, args, jobs, done=bar.update)
    found = [r for r in rows if r is not None]
    if not found:
        raise ConfigError(f"model={req.model}: no layout fits in memory on these GPUs")
    # those meeting the SLOs by tokens/s; the others by how close they come
    return sorted(
        found,
        key=lambda r: (not r.slo_ok, 0.0 if r.slo_ok else r.miss, -r.tokens_per_s, r.tpot_s,
                       r.tp, r.pp, r.ep, r.attention_dp),
    )  # fmt: skip


def to_dicts(rows: list[PlanRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


__all__ = ["PlanRequest", "PlanRow", "layouts", "plan", "to_dicts"]
