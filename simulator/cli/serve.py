"""``tpsim serve``: a serving engine under traffic (arrivals, continuous batching, KV cache),
reported as ``vllm bench serve`` reports it. The work is in :mod:`tpsim.experiments.serve`."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from tpsim.cli.paths import check_output
from tpsim.cli.run import add_option, run_topology
from tpsim.core.config import Layout, Options, Workload, check_nodes, tp_problem
from tpsim.core.errors import ConfigError
from tpsim.core.run_options import BY_NAME
from tpsim.outputs.text import hosts

#: Requests one run may send (as tpsim.experiments.serve.workload.MAX_REQUESTS, which the
#: parser does not import: --help stays light).
MAX_REQUESTS = 1_000_000

#: The options of ``run`` that ``serve`` takes as they are (RUN_OPTIONS, not copied).
RUN_FLAGS = (
    "model", "topology", "nodes", "nic_gbps", "nics_per_node", "gpus_per_node", "tp", "pp",
    "dp", "ep", "attention_dp", "moe_tp", "expert_skew", "moe_a2a", "routing", "dtype",
    "kv_dtype", "launch", "allreduce_algo", "ideal", "engine", "kernel_table",
)  # fmt: skip
ARRIVALS = ("poisson", "constant", "gamma")
#: Request lengths when not given: the one prompt default of every command (the Workload's),
#: and vllm bench serve's random dataset output length.
PROMPT_DEFAULT = Workload.prompt_len
OUTPUT_DEFAULT = 128
#: Scheduler fields the command line may set over the engine profile's.
SCHEDULER_FLAGS = (
    ("max_num_seqs", int, "sequences running at once (default: the engine profile's)"),
    ("max_num_batched_tokens", int, "tokens per iteration (default: the engine profile's)"),
    ("gpu_memory_utilization", float, "share of GPU memory for weights, activations and KV cache "
     "(trtllm: of the memory free after its weights, as its free_gpu_memory_fraction; default: "
     "the engine profile's)"),
    ("block_size", int, "KV cache block, tokens (default: the engine profile's)"),
)  # fmt: skip


def add_serve_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("serve", help="simulate an engine serving a stream of requests")
    for name in RUN_FLAGS:
        add_option(p, BY_NAME[name])
    w = p.add_argument_group("workload (one of --concurrency, --rate, --trace)")
    w.add_argument("--concurrency", type=int, help="closed loop: C clients, each sending its "
                   "next request when its last one completes")  # fmt: skip
    w.add_argument("--rate", type=float, help="open loop: requests per second")
    w.add_argument("--arrivals", choices=ARRIVALS, help="arrival process of --rate "
                   "(default: poisson)")  # fmt: skip
    w.add_argument("--burstiness", type=float, help="coefficient of variation of the gaps "
                   "between arrivals (gamma; default 1, as Poisson)")  # fmt: skip
    w.add_argument("--trace", help="CSV or JSONL of arrival time, prompt and output tokens "
                   "(Azure LLM inference trace columns TIMESTAMP, ContextTokens, "
                   "GeneratedTokens read as they are)")  # fmt: skip
    w.add_argument("--requests", type=int, help="requests to send (default 1000, or the "
                   "whole trace)")  # fmt: skip
    w.add_argument("--duration", type=float, help="send requests for this many seconds")
    w.add_argument("--prompt-len", help="prompt tokens: N, uniform:A-B, normal:MEAN,STD, "
                   "lognormal:MEAN,STD or a file of lengths "
                   f"(default: {PROMPT_DEFAULT})")  # fmt: skip
    w.add_argument(
        "--output-len", help=f"output tokens, as --prompt-len (default: {OUTPUT_DEFAULT})"
    )
    w.add_argument("--prefix-len", type=int, default=None, help="the first N prompt tokens are "
                   "one of --prefix-groups shared prompts (a system prompt), request i's the "
                   "(i mod groups)-th: the prefix cache finds them (default: none)")  # fmt: skip
    w.add_argument("--prefix-groups", type=int, default=1, help="how many shared prompts")
    w.add_argument("--seed", type=int, default=0, help="seed of every random draw")
    g = p.add_argument_group("disaggregated prefill and decode (any of these: two pools)")
    for pool in ("prefill", "decode"):
        g.add_argument(f"--{pool}-tp", type=int, help=f"TP of each {pool} worker "
                       "(default: --tp)")  # fmt: skip
        g.add_argument(f"--{pool}-workers", type=int, help=f"{pool} workers (default 1)")
    s = p.add_argument_group("engine scheduler")
    for name, kind, text in SCHEDULER_FLAGS:
        s.add_argument("--" + name.replace("_", "-"), type=kind, help=text)
    s.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="plan each iteration while the one before runs, so an arrival waits "
        "one more; off, the engine overlaps less of its host work with the GPU where its "
        "profile says (vLLM: 0.5 of it, against 0.9) (default: the engine profile's; "
        "vLLM, SGLang, TensorRT-LLM: on)",
    )
    s.add_argument("--exact", action="store_true", help="simulate every iteration "
                   "(no iteration cache)")  # fmt: skip
    o = p.add_argument_group("outputs")
    o.add_argument("--slo-ttft-ms", type=float, help="goodput: TTFT at most this")
    o.add_argument("--slo-tpot-ms", type=float, help="goodput: TPOT at most this")
    o.add_argument("--out", type=Path, help="write one JSON line per request (.jsonl)")
    o.add_argument("--plots", type=Path, help="write the run's charts (PNG) into this folder")
    o.add_argument("--json", action="store_true", help="print the results as JSON")
    return p


#: vLLM's KV cache block sizes on CUDA (vllm/config/cache.py BlockSize).
BLOCK_SIZES = (1, 8, 16, 32, 64, 128)


def _positive(flag: str, value: float | None, *, whole: bool = False, zero: bool = False,
              upper: float = 1e9) -> None:  # fmt: skip
    if value is None:
        return
    low_ok = value >= 0 if zero else value > 0
    if not math.isfinite(value) or not low_ok or value > upper:
        what = "a whole number" if whole else "a number"
        most = f"{int(upper):,}" if whole else f"{upper:g}"
        raise ConfigError(f"{flag}={value}: must be {what} {'>= 0' if zero else '> 0'} "
                          f"and at most {most}")  # fmt: skip


def _checks(a: argparse.Namespace) -> None:
    modes = [f for f, v in (("--concurrency", a.concurrency), ("--rate", a.rate),
                            ("--trace", a.trace)) if v is not None]  # fmt: skip
    if len(modes) != 1:
        shown = " and ".join(modes) if modes else "none"
        raise ConfigError(f"workload={shown}: give one of --concurrency, --rate, --trace")
    if not 0 <= a.seed < 2**63:
        raise ConfigError(f"--seed={a.seed}: must be a whole number from 0 to 2**63 - 1")
    _positive("--concurrency", a.concurrency, whole=True, upper=1_000_000)
    _positive("--rate", a.rate, upper=1e6)
    _positive("--requests", a.requests, whole=True, upper=MAX_REQUESTS)
    _positive("--duration", a.duration, upper=1e7)
    _positive("--burstiness", a.burstiness, zero=True, upper=100)
    _positive("--slo-ttft-ms", a.slo_ttft_ms, upper=1e12)
    _positive("--slo-tpot-ms", a.slo_tpot_ms, upper=1e12)
    _positive("--max-num-seqs", a.max_num_seqs, whole=True, upper=1 << 20)
    _positive("--max-num-batched-tokens", a.max_num_batched_tokens, whole=True, upper=1 << 24)
    _positive("--block-size", a.block_size, whole=True, upper=1 << 16)
    _positive("--gpu-memory-utilization", a.gpu_memory_utilization, upper=1.0)
    _positive("--prefix-len", a.prefix_len, whole=True, zero=True, upper=1 << 20)
    _positive("--prefix-groups", a.prefix_groups, whole=True, upper=1_000_000)
    if a.requests is not None and a.duration is not None:
        raise ConfigError(f"--duration={a.duration:g}: give --requests or --duration, not both")
    if a.rate is not None:  # the arrivals span at most what a trace may
        from tpsim.experiments.serve.trace import MAX_SPAN_S

        span = (a.requests or 1000) / a.rate if a.duration is None else a.duration
        if span > MAX_SPAN_S:
            raise ConfigError(
                f"--rate={a.rate:g}: its arrivals would span {span:.3g} s, more than "
                f"{MAX_SPAN_S:g} s (raise the rate or send fewer requests)"
            )
    if a.block_size is not None and a.block_size not in BLOCK_SIZES:
        raise ConfigError(
            f"--block-size={a.block_size}: vLLM's CUDA KV cache takes "
            f"{', '.join(map(str, BLOCK_SIZES))}"
        )
    if a.prefix_groups is not None and a.prefix_groups > 1 and a.prefix_len is None:
        raise ConfigError(f"--prefix-groups={a.prefix_groups}: needs --prefix-len")
    if a.rate is None and (a.arrivals is not None or a.burstiness is not None):
        flag = "--arrivals" if a.arrivals is not None else "--burstiness"
        value = a.arrivals if a.arrivals is not None else a.burstiness
        raise ConfigError(f"{flag}={value}: applies to --rate only")
    arrivals = a.arrivals or "poisson"
    if a.burstiness is not None and arrivals != "gamma" and a.burstiness != (arrivals == "poisson"):
        raise ConfigError(f"--burstiness={a.burstiness:g}: {arrivals} arrivals have CV "
                          f"{int(arrivals == 'poisson')}; use --arrivals gamma")  # fmt: skip
    if a.trace is not None and (a.prompt_len is not None or a.output_len is not None):
        flag = "--prompt-len" if a.prompt_len is not None else "--output-len"
        raise ConfigError(f"{flag}={a.prompt_len or a.output_len}: the trace gives the lengths")
    if a.pp != 1 and a.attention_dp != 1:
        raise ConfigError(f"pp={a.pp}: pipeline stages with attention data parallelism are "
                          "not modelled yet (give one of --pp and --attention-dp)")  # fmt: skip
    for flag in ("prefill_tp", "prefill_workers", "decode_tp", "decode_workers"):
        _positive("--" + flag.replace("_", "-"), getattr(a, flag), whole=True, upper=4096)
    if _disaggregated(a) and a.dp != 1:
        raise ConfigError(f"dp={a.dp}: with disaggregated pools give --prefill-workers and "
                          "--decode-workers instead")  # fmt: skip
    if (a.attention_dp != 1 or a.pp != 1) and _disaggregated(a):
        what = f"attention_dp={a.attention_dp}" if a.attention_dp != 1 else f"pp={a.pp}"
        raise ConfigError(f"{what}: disaggregated pools run TP groups (give it without the "
                          "pools)")  # fmt: skip
    check_nodes(a.nodes)


def _disaggregated(a: argparse.Namespace) -> bool:
    pools = ("prefill_tp", "prefill_workers", "decode_tp", "decode_workers")
    return any(getattr(a, f) is not None for f in pools)


def _pool_checks(a: argparse.Namespace, disagg: Any) -> None:
    """The checks of the pools and MoE flags that need the model: each disaggregated pool's
    TP against --ep and the model's heads, --expert-skew's cap (a warning) and --moe-tp
    against each pool's MoE group."""
    if disagg is None and not a.expert_skew and not a.moe_tp:
        return
    from tpsim.cli.run import warn_held_skew
    from tpsim.models.catalog import get_model

    spec = get_model(a.model)
    pools = [("--tp", a.tp)]
    if disagg is not None:
        pools = [("--prefill-tp", disagg.prefill_tp), ("--decode-tp", disagg.decode_tp)]
        for flag, tp in pools:
            if tp % a.ep:  # each pool's experts split over its own TP group
                raise ConfigError(f"{flag}={tp}: --ep={a.ep} must divide it (--ep applies "
                                  "to both pools, each a TP group)")  # fmt: skip
        for flag, tp in (("--prefill-tp", a.prefill_tp), ("--decode-tp", a.decode_tp)):
            problem = tp and tp_problem(tp, spec.num_heads, spec.num_kv_heads)
            if problem:
                raise ConfigError(f"{flag}={tp}: {problem} of {spec.name}")
    warn_held_skew(a.expert_skew, spec)
    if a.moe_tp:  # each pool's MoE group is split as asked (the engine checks its own too)
        if not spec.is_moe:
            raise ConfigError(f"moe_tp={a.moe_tp}: {spec.name} has no experts")
        for flag, tp in pools:
            try:
                Layout(tp, ep=a.ep, attention_dp=a.attention_dp, moe_tp=a.moe_tp)
            except ConfigError as e:
                raise ConfigError(f"{flag}={tp}: {e}" if disagg else str(e)) from None


def _serve(a: argparse.Namespace) -> int:
    from tpsim.experiments.serve import report
    from tpsim.experiments.serve.run import ServeSetup, serve
    from tpsim.experiments.serve.trace import read_trace
    from tpsim.experiments.serve.workload import arrival_times, parse_lengths, streams, synthetic

    _checks(a)
    check_output(a.out, "--out", (".jsonl",), a)
    if a.plots is not None:
        from tpsim.cli.studies import check_folder

        check_folder(a.plots, "--plots")
    options = Options(launch=a.launch, allreduce_algo=a.allreduce_algo, dtype=a.dtype,
                      kv_dtype=a.kv_dtype, ideal=a.ideal, kernel_table=a.kernel_table,
                      engine=a.engine, expert_skew=a.expert_skew, routing=a.routing,
                      moe_a2a=a.moe_a2a, async_scheduling=a.async_scheduling)  # fmt: skip
    named = [name for name, _, _ in SCHEDULER_FLAGS]
    overrides = tuple((n, getattr(a, n)) for n in named if getattr(a, n) is not None)
    disagg = None
    if _disaggregated(a):
        from tpsim.experiments.serve.disagg import Disagg

        disagg = Disagg(a.prefill_tp or a.tp, a.prefill_workers or 1, a.decode_tp or a.tp,
                        a.decode_workers or 1)  # fmt: skip
    _pool_checks(a, disagg)
    setup = ServeSetup(a.model, run_topology(a), disagg.decode_tp if disagg else a.tp, a.dp,
                       a.nodes, a.gpus_per_node, options, a.exact, overrides, ep=a.ep,
                       disagg=disagg, attention_dp=a.attention_dp, pp=a.pp,
                       moe_tp=a.moe_tp)  # fmt: skip
    prefix = (a.prefix_len or 0, a.prefix_groups)
    prompt = parse_lengths("--prompt-len", a.prompt_len or str(PROMPT_DEFAULT))
    output = parse_lengths("--output-len", a.output_len or str(OUTPUT_DEFAULT))
    for flag, lengths in (("--prompt-len", prompt), ("--output-len", output)):
        if lengths.kind == "normal" and lengths.clipped_mean > 1.05 * lengths.a:
            from tpsim.cli.run import warn

            warn(
                f"{flag}=normal:{lengths.a:g},{lengths.b:g}: lengths are cut at 1 token, so "
                f"their mean is {lengths.clipped_mean:.0f}, not {lengths.a:g} "
                "(lognormal:MEAN,STD keeps its mean)"
            )
    longest = prompt.largest
    if a.trace is not None:
        reqs = read_trace(a.trace, requests=a.requests or 0, duration_s=a.duration)
        longest = max(reqs.prompt, default=0)
    if a.prefix_len and longest is not None and a.prefix_len > longest:
        raise ConfigError(f"--prefix-len={a.prefix_len}: longer than every prompt (at most "
                          f"{longest} tokens; the shared prefix is their start)")  # fmt: skip
    if a.trace is not None:
        result = serve(setup, requests=reqs, prefix=prefix)
        what = f"trace {Path(a.trace).name}, {len(reqs)} requests"
    elif a.rate is not None:
        arrivals = a.arrivals or "poisson"
        cv = a.burstiness if a.burstiness is not None else 1.0
        rng = streams(a.seed)[0]
        times = arrival_times(rng, a.rate, arrivals, cv, requests=a.requests or 1000,
                              duration_s=a.duration)  # fmt: skip
        reqs = synthetic(a.seed, prompt, output, count=len(times), arrival_s=times)
        result = serve(setup, requests=reqs, prefix=prefix)
        what = f"{arrivals} arrivals at {a.rate:g} req/s"
    else:
        count = 0 if a.duration is not None else (a.requests or 1000)
        result = serve(setup, lengths=(a.seed, prompt, output), concurrency=a.concurrency,
                       count=count, until_s=a.duration, prefix=prefix)  # fmt: skip
        what = f"closed loop, concurrency {a.concurrency}"
    s = result.summary(a.slo_ttft_ms, a.slo_tpot_ms)
    layout = f"tp {a.tp}" + (f" x attention-dp {a.attention_dp}" if a.attention_dp > 1 else "")
    layout += f" x pp {a.pp}" if a.pp > 1 else ""
    layout += f" x dp {a.dp}" if a.dp > 1 else ""
    if disagg is not None:
        layout = disagg.label()
    layout += f", ep {a.ep}" if a.ep > 1 else ""
    layout += f", moe-a2a {a.moe_a2a}" if a.moe_a2a != Options.moe_a2a else ""
    # an uneven routing moves every MoE step: said, as run's experts line says it
    layout += f", expert-skew {a.expert_skew:g}" if a.expert_skew else ""
    layout += f", routing {Path(a.routing).name}" if a.routing else ""
    # the dtypes asked for (the model's own otherwise): an int4 run and a bf16 one differ
    dtypes = "".join(f", {k.replace('_', '-')} {v}" for k, v in
                     (("dtype", a.dtype), ("kv_dtype", a.kv_dtype)) if v)  # fmt: skip
    # the hosts as run's title names them (dgx-h100x2: --nodes 2 copies of the catalog host)
    where = hosts(str(setup.topology.graph.get("name", a.topology)), a.nodes)
    setup_line = f"{result.model_name} on {where}, {layout}{dtypes}, engine {a.engine}; {what}"
    if a.out is not None:
        from tpsim.outputs.export import write_text

        write_text(a.out, report.requests_jsonl(result))
    if a.plots is not None:
        from tpsim.experiments.plots.serve import serve_plots
        from tpsim.outputs.export import make_folder

        make_folder(a.plots)
        paths = serve_plots(result, a.plots, setup_line)
    if a.json:
        s["engine"] = {"events": result.events, "wall_s": result.wall_s,
                       "simulated_steps": result.simulated_steps}  # fmt: skip
        print(json.dumps(s, indent=2, allow_nan=False))
    else:
        print(report.text(s, result, setup_line))
        if a.out is not None:
            print(f"wrote {a.out}")
        if a.plots is not None:
            for path in paths:
                print(f"wrote {path}")
    return 0


SERVE_COMMANDS = {"serve": _serve}
