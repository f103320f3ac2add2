"""A serving run: ``dp`` engine instances of a ``tp``-way group each, a workload, the SimPy
loop (:func:`tpsim.core.engine.serving.run_loop`), and what it measured.

The KV cache of each instance is sized as its engine sizes it (:func:`kv_blocks`); every
iteration is timed by the forward-pass simulator for that iteration's composition
(:class:`tpsim.core.step_timer.IterationTimer`, one for all instances: they are alike).
Requests go to the instance with the fewest unfinished requests (the lowest index among
equals).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from tpsim.calibration.scheduler import SchedulerSpec, scheduler
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.engine.serving import run_loop
from tpsim.core.errors import ConfigError
from tpsim.core.kv_transfer import KVRoutes, Pool
from tpsim.core.plan import RunPlan, resolve
from tpsim.core.stage_sends import StageSends
from tpsim.core.step_timer import IterationTimer
from tpsim.experiments.serve import metrics
from tpsim.experiments.serve.disagg import Disagg, DisaggServers
from tpsim.experiments.serve.engine import EngineInstance, Request, StepRecord
from tpsim.experiments.serve.kvcache import KVCache, kv_blocks, kv_cache
from tpsim.experiments.serve.lockstep import LockstepGroup
from tpsim.experiments.serve.pipeline import SplitPass, Stages, VirtualEngine
from tpsim.experiments.serve.workload import MAX_REQUESTS, Lengths, Requests, streams
from tpsim.models.spec import ModelSpec


@dataclass(frozen=True)
class ServeSetup:
    """What runs: the model on the topology, the layout, the options and the scheduler."""

    model: ModelSpec | str
    topology: Any  # a graph or a catalog name
    tp: int
    dp: int = 1
    nodes: int = 1
    gpus_per_node: int = 0
    options: Options = Options()  # noqa: RUF009 (frozen, so one shared default is safe)
    exact: bool = False
    overrides: tuple[tuple[str, Any], ...] = ()  # SchedulerSpec fields set on the CLI
    ep: int = 1  # expert-parallel ranks of the MoE layers, inside each TP group
    disagg: Disagg | None = None  # prefill and decode pools (then tp and dp are unused)
    #: attention data-parallel groups of ``tp`` GPUs sharing the MoE layers (each replica's
    #: groups schedule their own batches and step together: serve.lockstep)
    attention_dp: int = 1
    #: pipeline stages of ``tp`` GPUs each, run as that many virtual engines (serve.pipeline)
    pp: int = 1
    #: ranks splitting each routed expert's width, as ``run --moe-tp`` (0: derived; given,
    #: ``moe_tp * ep`` must be the MoE group)
    moe_tp: int = 0


@dataclass(frozen=True)
class ServeResult:
    """A finished run: the requests, the steps of each instance, the loop's figures."""

    requests: tuple[Request, ...]
    steps: tuple[tuple[StepRecord, ...], ...]
    duration_s: float
    in_system_s: float
    events: int
    spec: SchedulerSpec
    kv: KVCache
    preemptions: int
    iterations: int
    simulated_steps: int  # forward passes the engine simulated (cache misses, or all)
    wall_s: float
    closed_loop: bool
    model_name: str
    timer: IterationTimer | None = None  # the iteration timer, to pass to the next run
    #: disaggregated runs: the prefill pool's scheduler and KV cache (``spec`` and ``kv``
    #: are the decode pool's), and the bytes each KV transfer moved to each decode GPU
    prefill_spec: SchedulerSpec | None = None
    prefill_kv: KVCache | None = None
    transfer_bytes: tuple[float, ...] = ()
    #: what one of ``steps``' record lists is: an engine "instance" (a replica), an
    #: "attention group" (attention data parallelism) or a pipeline's "virtual engine"
    instance: str = "instance"
    #: each record list's KV blocks (a disaggregated run's prefill and decode pools differ)
    #: and its name where ``instance`` and a number do not say it ("prefill 0", "decode 1")
    instance_blocks: tuple[int, ...] = ()
    instance_names: tuple[str, ...] = ()

    def summary(
        self, slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = metrics.summary(
            self.requests, self.duration_s, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms
        )
        e2el = np.array([r.done_s - r.arrival_s for r in self.requests])
        rate = len(self.requests) / self.duration_s if self.duration_s > 0 else 0.0
        out["mean_in_system"] = self.in_system_s / self.duration_s if self.duration_s else 0.0
        out["littles_law_ratio"] = (
            out["mean_in_system"] / (rate * float(np.mean(e2el))) if len(e2el) else 1.0
        )
        sat = metrics.saturation(self.requests) if not self.closed_loop else None
        out["saturated"] = bool(sat and sat.saturated)
        if sat and sat.saturated:
            out["queue_growth_per_s"] = sat.growth_per_s
        out["preemptions"] = self.preemptions
        out["iterations"] = self.iterations
        out["kv_cache_blocks"] = self.kv.blocks
        out["kv_cache_tokens"] = self.kv.tokens
        if self.prefill_kv is not None:
            out["prefill_kv_cache_tokens"] = self.prefill_kv.tokens
            out["kv_transfers"] = len(self.transfer_bytes)
            out["mean_kv_transfer_mb"] = (
                float(np.mean(self.transfer_bytes)) / 1e6 if self.transfer_bytes else 0.0
            )
        return out


class _LazyLengths:
    """Request lengths drawn on demand, in id order (a closed loop for a duration does not
    know how many it will send)."""

    def __init__(self, seed: int, prompt: Lengths, output: Lengths) -> None:
        _, self.rp, self.ro = streams(seed)
        self.prompt, self.output = prompt, output
        self.p: list[int] = []
        self.o: list[int] = []

    def __call__(self, i: int) -> tuple[int, int]:
        while i >= len(self.p):
            if len(self.p) >= MAX_REQUESTS:
                raise ConfigError(f"--duration: more than {MAX_REQUESTS:,} requests")
            self.p.extend(int(x) for x in self.prompt.draw(self.rp, 1024))
            self.o.extend(int(x) for x in self.output.draw(self.ro, 1024))
        return self.p[i], self.o[i]


def linear_spec(spec: SchedulerSpec, block_size: int) -> SchedulerSpec:
    """vLLM's scheduler for a model with linear-attention layers: its cache's blocks of
    ``block_size`` tokens (HybridAttentionMambaModelConfig raises the attention block size
    to hold a state page) and prefix caching off (MambaModelConfig.verify_and_update_config
    turns it off for a model without ``supports_mamba_prefix_caching``, which
    Qwen3NextForCausalLM does not declare: vllm/model_executor/models/config.py,
    qwen3_next.py)."""
    return replace(spec, block_size=block_size, prefix_caching=False)


def scheduler_spec(setup: ServeSetup, gpu_bytes: float) -> SchedulerSpec:
    """The engine's scheduler, with the setup's overrides and its options' asynchronous
    scheduling where they set it (the same option prices the steps' host work:
    :meth:`tpsim.calibration.model.Engine.synchronous`)."""
    spec = scheduler(setup.options.engine, gpu_bytes)
    if setup.options.async_scheduling is not None:
        spec = replace(spec, async_scheduling=setup.options.async_scheduling)
    named = dict(setup.overrides)
    spec = replace(spec, **named) if named else spec
    given = {"max_num_seqs", "max_num_batched_tokens"} & set(named)
    if given and spec.max_num_batched_tokens < spec.max_num_seqs:
        flag = "max-num-batched-tokens" if "max_num_batched_tokens" in given else "max-num-seqs"
        raise ConfigError(  # vLLM's SchedulerConfig refuses it the same way
            f"--{flag}={named[flag.replace('-', '_')]}: max_num_batched_tokens "
            f"({spec.max_num_batched_tokens}) below max_num_seqs ({spec.max_num_seqs}); "
            "every running sequence needs a token a step"
        )
    return spec


def check_fits(spec: SchedulerSpec, kv: KVCache, model: ModelSpec, prompt: int, output: int,
               what: str) -> None:  # fmt: skip
    """A request the engine could never run: beyond the model's context, the cache, or (no
    chunking) the step's token budget."""
    limit = model.max_position_embeddings
    if limit and prompt + output > limit:
        raise ConfigError(
            f"{what}: {prompt} + {output} tokens, beyond {model.name}'s context of {limit:,}"
        )
    if kv.sequences(prompt + output) < 1:
        raise ConfigError(
            f"{what}: {prompt} + {output} tokens, more than the whole KV cache "
            f"({kv.tokens:,} tokens); raise --tp or --gpu-memory-utilization"
        )
    # without chunking a prompt runs whole; recomputed after a preemption, with the output
    # it had generated (one token short of all of it, or it would have finished)
    longest = prompt if spec.kv_admission == "reserve" else prompt + output - 1
    if not spec.chunked_prefill and longest > spec.max_num_batched_tokens:
        why = "" if longest == prompt else (
            f" (a preempted request is recomputed as one prefill of its {prompt}-token prompt "
            f"and up to {output - 1} generated tokens)")  # fmt: skip
        raise ConfigError(
            f"{what}: a {longest}-token prefill cannot be chunked by engine "
            f"{spec.engine} and exceeds max_num_batched_tokens={spec.max_num_batched_tokens}" + why
        )


def _check_deepep_batch(plan: RunPlan, max_num_seqs: int) -> None:
    """Refuse, before the run, an engine that hands a decode step's tokens to DeepEP's
    low-latency kernels at once (SGLang; the lowering refuses such a step,
    :meth:`~tpsim.core.lowering.moe_block.ExpertBlock.low_latency_chunks`) where
    ``max_num_seqs`` lets a decode batch past the buffer's tokens a GPU: the run had exited
    partway, on the step that first grew past it."""
    engine = plan.calib.engine
    if plan.options.moe_a2a != "deepep" or engine.deepep_ll_chunked or not plan.model.is_moe:
        return
    most = engine.deepep_ll_tokens * plan.layout.tp
    if max_num_seqs > most:
        raise ConfigError(
            f"max_num_seqs={max_num_seqs}: engine {engine.name} hands a decode step's tokens "
            f"to DeepEP's low-latency kernels at once, whose buffer holds "
            f"{engine.deepep_ll_tokens} a GPU (profile key deepep_ll_tokens): at most {most} "
            f"sequences per attention-DP group (give --max-num-seqs {most})"
        )


def serve(
    setup: ServeSetup,
    *,
    requests: Requests | None = None,
    lengths: tuple[int, Lengths, Lengths] | None = None,
    concurrency: int = 0,
    count: int = 0,
    until_s: float | None = None,
    timer: Callable[[Any], float] | None = None,
    iterations: IterationTimer | None = None,
    prefix: tuple[int, int] = (0, 0),
) -> ServeResult:
    """Run the workload: ``requests`` (open loop when they carry arrival times) or, in a
    closed loop of ``concurrency`` clients, lengths drawn from ``lengths`` (seed, prompt,
    output) for ``count`` requests or until ``until_s``.

    ``iterations``: the iteration timer of an earlier run of the same setup (its cache
    carries over: runs of one configuration at several rates simulate each step once);
    ``timer``: any step-time function instead of the simulator (tests); ``prefix``: (tokens,
    groups): request ``i`` begins with the ``tokens`` of shared prompt ``i mod groups``
    (its prompt's own prefix groups, when it has them, win)."""
    wall = time.perf_counter()
    opts = setup.options
    d = setup.disagg
    if d is None:
        layout = Layout(setup.tp, setup.gpus_per_node, setup.pp, setup.dp, ep=setup.ep,
                        attention_dp=setup.attention_dp, moe_tp=setup.moe_tp)  # fmt: skip
        resolve(
            setup.model,
            setup.topology,
            layout,
            Workload(1, "decode", 1, 1),
            opts,
            nodes=setup.nodes,
            oom_flag=False,
        )  # fmt: skip  (refuses a layout the topology cannot hold)
    it = iterations or _timer(setup, setup.tp if d is None else d.decode_tp)
    lay = it.plan.layout
    if (it.plan.options, lay.tp, lay.ep, lay.attention_dp, it.exact) != (
        _timer_options(setup),
        setup.tp if d is None else d.decode_tp,
        setup.ep,
        setup.attention_dp,
        setup.exact,
    ):
        raise ValueError(
            "iterations: a timer of another setup (tp, ep, attention_dp, options or exact differ)"
        )
    model = it.model
    simulated_before = it.simulated
    spec = scheduler_spec(setup, it.plan.gpu.hbm_bytes)
    kv = kv_blocks(it, spec, setup.pp, connector=d is not None)
    if kv.layout and kv.layout.linear:  # vLLM's HybridAttentionMambaModelConfig
        spec = linear_spec(spec, kv.block_size)
    engine = it.plan.calib.engine
    _check_deepep_batch(it.plan, spec.max_num_seqs)
    split = engine.pipeline_split_tokens is not None  # one instance splits its own batches
    if setup.pp > 1 and not split:  # each virtual engine its share of every stage's cache
        share = kv.layout and replace(kv.layout, swa_pool=kv.layout.swa_pool // setup.pp)
        kv = replace(kv, blocks=kv.blocks // setup.pp, layout=share)
        if kv.blocks < 1:
            raise ConfigError(f"pp={setup.pp}: too little KV cache for {setup.pp} virtual engines")
    p_it, p_kv = it, kv
    if d is not None:
        if setup.attention_dp > 1 or setup.pp > 1:
            what = (
                f"attention_dp={setup.attention_dp}" if setup.attention_dp > 1 else f"pp={setup.pp}"
            )
            raise ConfigError(f"{what}: disaggregated pools run TP groups (give it without "
                              "the pools)")  # fmt: skip
        if spec.policy == "static":
            raise ConfigError(f"engine={spec.engine}: static batching has no disaggregated "
                              "prefill and decode")  # fmt: skip
        p_it = it if d.prefill_tp == d.decode_tp else _timer(setup, d.prefill_tp)
        p_kv = kv_blocks(p_it, spec, connector=True)
    closed = requests is None or not requests.arrival_s
    smallest = min(kv.tokens, p_kv.tokens)
    fits_kv = kv if kv.tokens == smallest else p_kv

    def shared(i: int) -> tuple[int, int]:
        tokens, groups = prefix
        return (i % groups, tokens) if tokens and groups else (-1, 0)

    if requests is not None:
        for i, (p, o) in enumerate(zip(requests.prompt, requests.output, strict=True)):
            check_fits(spec, fits_kv, model, p, o, f"request {i} (row {i + 1})")

        def lookup(i: int) -> tuple[int, int, int, int]:
            if requests.group:
                return requests.prompt[i], requests.output[i], requests.group[i], requests.shared[i]
            return requests.prompt[i], requests.output[i], *shared(i)
    else:
        assert lengths is not None
        draw = _LazyLengths(*lengths)

        def lookup(i: int) -> tuple[int, int, int, int]:
            p, o = draw(i)
            check_fits(spec, fits_kv, model, p, o, f"request {i}")
            return p, o, *shared(i)

    handoff, capacities, pools = None, [], None
    instance = "instance"  # what each engine's record list is (ServeResult.instance)
    groups: list[LockstepGroup] = []

    def make(step_time: Callable[[Any], float]) -> EngineInstance:
        return EngineInstance(spec, kv.blocks, step_time, lookup, layout=kv.layout)

    if d is not None:
        plan = it.plan
        kv_routes = KVRoutes(plan.routes, plan.gpu, plan.calib, Pool(d.prefill_tp,
                             d.prefill_workers), Pool(d.decode_tp, d.decode_workers),
                             setup.gpus_per_node)  # fmt: skip
        pools = DisaggServers(d, kv_routes, (spec, spec), (p_kv.blocks, kv.blocks),
                              (timer or p_it.seconds, timer or it.seconds), lookup,
                              kv.sent_bytes, (p_kv.layout, kv.layout))  # fmt: skip
        engines = pools.servers
        servers: list[Any] = list(engines)
        route, handoff, capacities = pools.route, pools.handoff, kv_routes.capacities
    else:
        if setup.pp > 1:
            pp, per_host, whole = setup.pp, setup.gpus_per_node, timer or it.seconds
            sends = StageSends(it.plan)

            def pass_s(step: Any) -> tuple[float, tuple[float, ...]]:
                return whole(step), sends.seconds(step.tokens, pp, per_host)

            if split:  # one instance a replica, its steps split into micro-batches
                engines = [make(SplitPass(pp, engine, pass_s)) for _ in range(setup.dp)]
                servers = list(engines)
            else:
                servers, instance = [], "virtual engine"
                for _ in range(setup.dp):  # each replica's virtual engines share its stages
                    stages = Stages(pp)
                    servers += [VirtualEngine(stages, make, pass_s) for _ in range(pp)]
                engines = [v.engine for v in servers]
        elif setup.attention_dp > 1:
            price = (lambda steps: max(map(timer, steps))) if timer else it.group_seconds
            groups = [LockstepGroup(setup.attention_dp, make, price) for _ in range(setup.dp)]
            servers, instance = list(groups), "attention group"
            engines = [rank for g in groups for rank in g.ranks]
        else:
            engines = [make(timer or it.seconds) for _ in range(setup.dp)]
            servers = list(engines)

        def route(i: int, now: float) -> int:
            """The server (replica, attention-DP group or virtual engine) with the fewest
            unfinished requests."""
            return min(range(len(servers)), key=lambda k: (servers[k].in_system, k))

    if requests is not None and requests.arrival_s:
        loop = run_loop(servers, route, arrivals_s=requests.arrival_s, handoff=handoff,
                        capacities=capacities)  # fmt: skip
    else:
        n = count or (len(requests) if requests is not None else 0)
        if requests is not None:
            n = min(n, len(requests)) if n else len(requests)
        loop = run_loop(servers, route, concurrency=concurrency, requests=n or MAX_REQUESTS,
                        until_s=until_s, handoff=handoff, capacities=capacities)  # fmt: skip
    finished = sorted((r for e in engines for r in e.finished), key=lambda r: r.id)
    simulated = it.simulated + (p_it.simulated if p_it is not it else 0)
    return ServeResult(
        requests=tuple(finished),
        steps=tuple(tuple(e.steps) for e in engines),
        duration_s=loop.end_s,
        in_system_s=loop.in_system_s,
        events=loop.events,
        spec=spec,
        kv=kv,
        preemptions=sum(e.preemptions for e in engines),
        iterations=sum(g.step_count for g in groups) or sum(e.step_count for e in engines),
        simulated_steps=simulated - simulated_before,
        wall_s=time.perf_counter() - wall,
        closed_loop=closed,
        model_name=model.name,
        timer=it,
        prefill_spec=spec if d is not None else None,
        prefill_kv=p_kv if d is not None else None,
        transfer_bytes=tuple(pools.transfers) if pools is not None else (),
        instance=instance,
        instance_blocks=tuple(e.total_blocks for e in engines),
        instance_names=(
            tuple(f"prefill {k}" for k in range(len(pools.prefill)))
            + tuple(f"decode {k}" for k in range(len(pools.decode)))
            if pools is not None
            else ()
        ),
    )


def _timer_options(setup: ServeSetup) -> Options:
    """The timer's options: the run's; with pipeline stages it times the whole model on one
    stage's TP group, which need not fit one group's memory (each stage holds its layers)."""
    return replace(setup.options, allow_oom=True) if setup.pp > 1 else setup.options


def _timer(setup: ServeSetup, tp: int) -> IterationTimer:
    return IterationTimer(setup.model, setup.topology, tp, _timer_options(setup), nodes=setup.nodes,
                          gpus_per_node=setup.gpus_per_node, exact=setup.exact,
                          ep=setup.ep, attention_dp=setup.attention_dp)  # fmt: skip


__all__ = ["KVCache", "ServeResult", "ServeSetup", "kv_blocks", "kv_cache", "serve"]
