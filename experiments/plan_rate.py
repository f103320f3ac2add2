"""Capacity planning under traffic (``tpsim plan --rate R`` / ``--concurrency C``): for each
serving unit that fits, the most traffic one unit sustains under the SLOs, found by
simulation with ``tpsim serve``'s machinery, then how many units and GPUs the requested
traffic needs.

A unit is one engine instance of a TP group (aggregated; a MoE model also with its experts
split over the group, ``ep = tp``, and with attention data parallelism: ``D`` attention
groups of ``tp`` GPUs in one host stepping together over experts split over all of them,
``ep = tp x D``, as ``tpsim serve --attention-dp`` runs them; across hosts, a pipeline of
one TP group per host, as vLLM's multi-node recipe sets it: ``--tp`` the GPUs of a host,
``--pp`` the hosts) or a disaggregated group of prefill and decode workers (``xP + yD``,
each worker a TP group). Units are independent (a
request goes to one), so ``R`` needs ``ceil(R / r_max)`` of them. ``r_max`` is the largest
Poisson rate (or closed-loop concurrency) at which a short seeded run of ``requests``
requests (more at high rates: :data:`WINDOW`) keeps the SLO percentile (p99 by default) of
TTFT and TPOT within the SLOs and does not saturate: the rate is doubled from 1 req/s until
a run fails (halved down to :data:`MIN_RATE` when 1 req/s already fails), then bisected to
``REL_TOL``. The batch is what the engine's scheduler runs at that rate: bounded by its KV
cache (memory) and by the SLOs, never by a fixed cap.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np
from tpsim.calibration.scheduler import scheduler
from tpsim.core.config import Options, tp_problem
from tpsim.core.errors import ConfigError
from tpsim.core.step_timer import IterationTimer
from tpsim.experiments.plan_rate_text import MIN_RATE, table, verdict
from tpsim.experiments.serve.disagg import Disagg
from tpsim.experiments.serve.kvcache import linear_refusal
from tpsim.experiments.serve.metrics import per_request
from tpsim.experiments.serve.run import ServeResult, ServeSetup, serve
from tpsim.experiments.serve.workload import arrival_times, parse_lengths, streams, synthetic
from tpsim.experiments.sweep.pool import map_in_workers
from tpsim.experiments.sweep.run import default_jobs
from tpsim.models.catalog import get_model
from tpsim.topologies.io import get_topology
from tqdm import tqdm

#: Bisection stops when the bracket is this narrow (relative to its upper end).
REL_TOL = 0.05
#: A run at rate R sends at least R x WINDOW x (a request's latency at 1 req/s) requests:
#: their arrivals span WINDOW lifetimes, so the queue can show whether it keeps up.
WINDOW = 10
MAX_PROBE_REQUESTS = 20_000
#: A run that kept up but spanned too few lifetimes at its own latency runs again when the
#: count that would span :data:`WINDOW` of them is this many times its own.
LONGER = 1.25
#: Disaggregated prefill:decode worker ratios tried.
RATIOS = ((1, 1), (1, 2), (2, 1), (1, 3), (3, 1))


@dataclass(frozen=True)
class RateRequest:
    model: str
    topology: str
    nodes: int = 1
    rate: float | None = None  # requests/s to serve (open loop), or
    concurrency: int | None = None  # clients to serve (closed loop)
    #: tokens per prompt and per output: a number, or a distribution as ``tpsim serve``
    #: reads it (``uniform:A-B``, ``normal:MEAN,STD``, ``lognormal:MEAN,STD``, a file)
    prompt_len: int | str = 1024
    output_len: int | str = 1024
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    percentile: float = 99.0
    gpu_hour_usd: float | None = None
    engine: str = "vllm"
    ideal: bool = False
    requests: int = 300  # per probe run
    seed: int = 0
    disaggregated: bool = True  # also try xP + yD units
    dtype: str | None = None  # --dtype (None: the model's)
    kv_dtype: str | None = None  # --kv-dtype (None: as the engine keeps it)


@dataclass(frozen=True)
class RateRow:
    label: str
    kind: str  # "aggregated" or "disaggregated"
    tp: int
    ep: int
    prefill_workers: int  # 0: aggregated
    decode_workers: int
    attention_dp: int  # attention data-parallel groups of tp GPUs (MoE), 1: none
    pp: int  # pipeline stages of tp GPUs, 1: none
    unit_gpus: int
    max_load: float  # req/s (or clients) one unit sustains under the SLOs; 0: none
    limit: str  # what fails just above max_load
    ttft_ms: float  # the SLO percentile at max_load (at the lowest load tried when none)
    tpot_ms: float
    mean_batch: float  # sequences per decode iteration at max_load
    units: int  # units the requested traffic needs (0 when none meets the SLOs)
    gpus: int
    usd_per_mtok: float | None  # per million output tokens at the requested traffic
    miss: float  # worst SLO ratio at the load shown (<= 1: met)

    @property
    def ok(self) -> bool:
        return self.max_load > 0


class Unit(NamedTuple):
    """One serving unit to try (see the module's text)."""

    tp: int
    ep: int = 1
    prefill_workers: int = 0  # 0: aggregated
    decode_workers: int = 1
    attention_dp: int = 1
    pp: int = 1


def units(req: RateRequest) -> list[Unit]:
    """The units to try: TP groups inside one host (and the whole topology's GPUs when that
    is one group), MoE experts split over the group too, and attention data-parallel groups
    of them in one host, or over 2 or more whole hosts, with the experts split over all of
    them; disaggregated groups of
    the same TP in :data:`RATIOS` that fit; across hosts, a host's GPUs as the TP group of
    each of 2 or more pipeline stages, one a host."""
    spec = get_model(req.model)
    graph = get_topology(req.topology, req.nodes)
    total = sum(1 for _, k in graph.nodes(data="kind") if k == "gpu")
    per_host = int(graph.graph.get("gpus_per_host", total)) or total
    out: list[Unit] = []
    tps = [t for t in range(1, per_host + 1) if per_host % t == 0]
    for tp in tps:
        if tp_problem(tp, spec.num_heads, spec.num_kv_heads):
            continue
        eps = [1] + ([tp] if spec.num_experts and tp > 1 and spec.num_experts % tp == 0 else [])
        for ep in eps:
            out.append(Unit(tp, ep))
            if req.disaggregated:
                out += [Unit(tp, ep, p, d) for p, d in RATIOS if (p + d) * tp <= total]
            if tp == per_host:  # a pipeline of whole hosts
                hosts = total // per_host
                out += [Unit(tp, ep, pp=n) for n in range(2, hosts + 1) if hosts % n == 0]
        if spec.num_experts:
            groups = [a for a in tps if a > 1 and tp * a <= per_host]
            # across hosts: the groups of 2 or more whole hosts (wide expert parallelism)
            hosts = total // per_host
            groups += [h * per_host // tp for h in range(2, hosts + 1) if hosts % h == 0]
            out += [Unit(tp, tp * a, attention_dp=a) for a in groups
                    if spec.num_experts % (tp * a) == 0]  # fmt: skip
    return out


def _setup(
    req: RateRequest, tp: int, ep: int, p: int, d: int, adp: int = 1, pp: int = 1
) -> ServeSetup:
    opts = Options(ideal=req.ideal, engine=req.engine, dtype=req.dtype, kv_dtype=req.kv_dtype)
    disagg = Disagg(tp, p, tp, d) if p else None
    return ServeSetup(req.model, req.topology, tp, nodes=req.nodes, options=opts, ep=ep,
                      disagg=disagg, attention_dp=adp, pp=pp)  # fmt: skip


class _Prober:
    """Runs one unit at a load and judges it against the SLOs (the iteration timer kept)."""

    def __init__(self, req: RateRequest, setup: ServeSetup) -> None:
        self.req, self.setup = req, setup
        self.prompt = parse_lengths("--prompt-len", str(req.prompt_len))
        self.output = parse_lengths("--output-len", str(req.output_len))
        self.timer: IterationTimer | None = None
        self.latency_s = 0.0  # a request's mean latency at the first load run

    def count(self, load: float) -> int:
        """Requests of a run at ``load``: ``requests``, or more where that many would arrive
        within :data:`WINDOW` request lifetimes (a burst, not a steady state), or would give
        each closed-loop client fewer than :data:`WINDOW` requests; at most
        :data:`MAX_PROBE_REQUESTS`."""
        n = self.req.requests
        if self.req.rate is not None:
            n = max(n, math.ceil(load * WINDOW * self.latency_s))
        else:
            n = max(n, int(load) * WINDOW)
        return min(n, MAX_PROBE_REQUESTS)

    def run(self, load: float) -> ServeResult:
        """A run at ``load``. Open loop, a run whose arrivals spanned fewer than
        :data:`WINDOW` of its requests' lifetimes (its count came from the latency at
        1 req/s, and batching at this load made them longer) runs again, long enough: a
        short burst hides a queue that grows too slowly to show in it, and shows as growth
        the fill of one that settles. A run judged saturated is measured by the lifetimes
        of its first quarter's requests, before a queue built up."""
        req = self.req
        n = self.count(load)
        r = self._serve(load, n)
        if req.rate is not None and r.requests:
            saturated = r.summary()["saturated"]
            life = _early_latency(r) if saturated else _mean_latency(r)
            wanted = min(math.ceil(load * WINDOW * life), MAX_PROBE_REQUESTS)
            if wanted > LONGER * n:
                r = self._serve(load, wanted)
        if not self.latency_s and r.requests:
            self.latency_s = _mean_latency(r)
        return r

    def _serve(self, load: float, n: int) -> ServeResult:
        req = self.req
        if req.rate is not None:
            times = arrival_times(streams(req.seed)[0], load, "poisson", 1.0, requests=n)
            reqs = synthetic(req.seed, self.prompt, self.output, count=len(times), arrival_s=times)
            r = serve(self.setup, requests=reqs, iterations=self.timer)
        else:
            r = serve(self.setup, lengths=(req.seed, self.prompt, self.output),
                      concurrency=int(load), count=n, iterations=self.timer)  # fmt: skip
        self.timer = r.timer
        return r

    def judge(self, r: ServeResult) -> tuple[str, float, float, float]:
        """(what fails, or "" when it passes; TTFT and TPOT at the percentile, ms; the
        worst ratio to an SLO). A closed loop is judged without its clients' first requests
        (sent together at the start)."""
        req = self.req
        done = r.requests
        if req.concurrency is not None:  # the clients' first requests, all sent at once: a
            # cold start that a steady stream of users never sees again
            start = min((x.arrival_s for x in done), default=0.0)
            done = tuple(x for x in done if x.arrival_s > start) or done
        v = per_request(done)
        q = req.percentile
        ttft = float(np.percentile(v["ttft"], q)) * 1e3 if len(v["ttft"]) else 0.0
        tpot = float(np.percentile(v["tpot"], q)) * 1e3 if len(v["tpot"]) else 0.0
        ratios = [0.0]
        fail = ""
        if req.slo_tpot_ms is not None:
            ratios.append(tpot / req.slo_tpot_ms)
            if tpot > req.slo_tpot_ms:
                fail = f"p{q:g} TPOT"
        if req.slo_ttft_ms is not None:
            ratios.append(ttft / req.slo_ttft_ms)
            if ttft > req.slo_ttft_ms:
                fail = f"p{q:g} TTFT"
        if not fail and r.summary()["saturated"]:
            fail = "saturation"
        return fail, ttft, tpot, max(ratios)


def _mean_latency(r: ServeResult) -> float:
    """A run's mean request latency (arrival to last token), in seconds."""
    return float(np.mean([x.done_s - x.arrival_s for x in r.requests]))


def _early_latency(r: ServeResult) -> float:
    """The mean latency of the requests that arrived in a run's first quarter (of its
    arrivals' span): a request's lifetime before the queue of an overloaded run built up."""
    arrivals = np.array([x.arrival_s for x in r.requests])
    cut = arrivals.min() + (arrivals.max() - arrivals.min()) / 4
    return float(np.mean([x.done_s - x.arrival_s for x in r.requests if x.arrival_s <= cut]))


def _batch(r: ServeResult, groups: int = 1) -> float:
    """Sequences per iteration, on average; attention data-parallel ``groups`` step
    together, so an iteration's are all of theirs."""
    if groups > 1:
        per: dict[float, int] = {}
        for e in r.steps:
            for s in e:
                per[s.start_s] = per.get(s.start_s, 0) + s.running
        return float(np.mean(list(per.values()))) if per else 0.0
    steps = [s.running for e in r.steps for s in e]
    return float(np.mean(steps)) if steps else 0.0


def evaluate(
    req: RateRequest, tp: int, ep: int, p: int, d: int, adp: int = 1, pp: int = 1
) -> RateRow | None:
    """The unit's largest sustainable load, and what the requested traffic needs of it."""
    closed = req.concurrency is not None
    try:
        prober = _Prober(req, _setup(req, tp, ep, p, d, adp, pp))
        first = prober.run(1.0)  # 1 req/s, or one client
    except ConfigError:  # does not fit (memory, GPUs): not a candidate
        return None
    j = prober.judge(first)
    gpus_unit = tp * (p + d) if p else tp * adp * pp
    experts = (f" x PP {pp}" if pp > 1 else "") + (f" x ADP {adp}" if adp > 1 else "")
    experts += f" EP {ep}" if ep > 1 else ""
    label = f"TP {tp}{experts}" if not p else f"{p}P+{d}D TP {tp}{experts}"
    kind = "disaggregated" if p else "aggregated"
    good, good_r, good_j = 0.0, first, j
    bad, bad_fail = math.inf, ""
    if j[0]:  # fails at 1: halve down to MIN_RATE (one client is the least of a closed loop)
        bad, bad_fail, load, r = 1.0, j[0], 1.0, first
        while not closed and load / 2 >= MIN_RATE:
            load /= 2
            r = prober.run(load)
            j = prober.judge(r)
            if not j[0]:
                good, good_r, good_j = load, r, j
                break
            bad, bad_fail = load, j[0]
        if not good:
            return RateRow(label, kind, tp, ep, p, d, adp, pp, gpus_unit, 0.0, j[0], j[1], j[2],
                           _batch(r, adp), 0, 0, None, j[3])  # fmt: skip
    else:
        good, load = 1.0, 1.0
        while math.isinf(bad) and load < 1e6:  # double until a run fails
            load *= 2
            r = prober.run(load)
            j = prober.judge(r)
            if j[0]:
                bad, bad_fail = load, j[0]
            else:
                good, good_r, good_j = load, r, j
    while not math.isinf(bad) and (bad - good) > REL_TOL * bad and (not closed or bad - good > 1):
        mid = (good + bad) / 2 if not closed else float((int(good) + int(bad)) // 2)
        r = prober.run(mid)
        j = prober.judge(r)
        if j[0]:
            bad, bad_fail = mid, j[0]
        else:
            good, good_r, good_j = mid, r, j
    miss = good_j[3]
    want = req.rate if req.rate is not None else float(req.concurrency or 0)
    n = math.ceil(want / good - 1e-12)
    usd = None
    if req.gpu_hour_usd is not None:
        out_per_s = _output_rate(req, prober, good, good_r, n)
        usd = n * gpus_unit * req.gpu_hour_usd / 3600 / out_per_s * 1e6 if out_per_s else None
    batch = _batch(good_r, adp)
    return RateRow(label, kind, tp, ep, p, d, adp, pp, gpus_unit, good, bad_fail or "none found",
                   good_j[1], good_j[2], batch, n, n * gpus_unit, usd, miss)  # fmt: skip


def _output_rate(
    req: RateRequest, prober: _Prober, good: float, good_r: ServeResult, n: int
) -> float:
    """Output tokens/s the requested traffic produces on ``n`` units: open loop, the rate
    times the output length; closed loop, the clients shared out over the units (some one
    more than others) and each unit run at its share (the run at ``good`` clients reused)."""
    if req.rate is not None:
        return req.rate * prober.output.mean
    share, extra = divmod(int(req.concurrency or 0), n)
    total = 0.0
    for clients, units in ((share + 1, extra), (share, n - extra)):
        if units and clients:
            r = good_r if clients == int(good) else prober.run(float(clients))
            total += units * float(r.summary()["output_throughput"])
    return total


def _evaluate(args: tuple[RateRequest, int, int, int, int, int, int]) -> RateRow | None:
    return evaluate(*args)


def plan_rate(req: RateRequest, jobs: int = 0) -> list[RateRow]:
    """Every unit evaluated, ranked: meeting the SLOs first, then the fewest GPUs, the most
    load per GPU; the others by how close they come."""
    spec = get_model(req.model)
    sched = scheduler(req.engine, 0.0)
    if spec.linear_layers and sched.sliding_window_kv != "hybrid":
        # every unit's serving run would be refused: say why, once
        raise ConfigError(linear_refusal(spec, sched.engine))
    cands = units(req)
    if not cands:
        raise ConfigError(f"model={req.model}: no TP group splits it on {req.topology}")
    args = [(req, *c) for c in cands]
    jobs = min(jobs or default_jobs(), len(args))
    with tqdm(total=len(args), unit="unit", file=sys.stderr, disable=None,
              dynamic_ncols=True) as bar:  # fmt: skip
        if jobs <= 1:
            rows = []
            for a in args:
                rows.append(_evaluate(a))
                bar.update()
        else:
            rows = map_in_workers(_evaluate, args, jobs, done=bar.update)
    found = [r for r in rows if r is not None]
    if not found:
        raise ConfigError(f"model={req.model}: no serving unit fits in memory on these GPUs")

    def rank(r: RateRow) -> tuple[Any, ...]:
        if r.ok:
            return (0, r.gpus, -r.max_load / r.unit_gpus, r.unit_gpus, r.label)
        return (1, r.miss, 0.0, r.unit_gpus, r.label)

    return sorted(found, key=rank)


def to_dicts(rows: list[RateRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


__all__ = [
    "RateRequest",
    "RateRow",
    "evaluate",
    "plan_rate",
    "table",
    "to_dicts",
    "units",
    "verdict",
]
