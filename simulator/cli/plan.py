"""``tpsim plan``: rank the TP x PP x DP layouts of N GPUs for a model (experiments/plan.py).

Thin: parses the flags, calls the planner, prints its table and recommendation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tpsim.cli.types import number, tokens
from tpsim.core.config import COMPUTE_DTYPES, KV_DTYPES, Workload, check_nodes, parse_tokens
from tpsim.core.errors import ConfigError
from tpsim.core.run_options import BY_NAME


def add_plan_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="rank TP x PP x DP layouts of the GPUs for a model; with "
                       "--rate or --concurrency, the GPUs a traffic needs")  # fmt: skip
    p.add_argument("--model", required=True)
    p.add_argument("--topology", required=True)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus", type=int, default=0, help="GPUs to use (default: all)")
    p.add_argument("--batch-max", type=int, default=0, help="largest batch per replica "
                   "(default: what memory and the engine's max_num_seqs allow, bounded by the TPOT "
                   "SLO; given, it replaces max_num_seqs)")  # fmt: skip
    # one default context everywhere: the Workload's, as run, sweep and check-claim use
    p.add_argument("--prompt-len", default=Workload.prompt_len,
                   help=f"tokens per prompt (default: {Workload.prompt_len}); under traffic "
                   "also a distribution, "
                   "as tpsim serve's: uniform:A-B, normal:MEAN,STD, lognormal:MEAN,STD or a "
                   "file")  # fmt: skip
    p.add_argument("--context-len", type=tokens("--context-len"), default=Workload.context_len)
    p.add_argument("--slo-ttft-ms", type=number(0, 1e7))
    p.add_argument("--slo-tpot-ms", type=number(0, 1e7))
    p.add_argument("--gpu-hour-usd", type=number(0, 1e5), help="price of one GPU-hour: adds $/Mtok")
    p.add_argument("--engine", default="vllm")
    p.add_argument("--ideal", action="store_true")
    p.add_argument("--dtype", choices=COMPUTE_DTYPES, help=BY_NAME["dtype"].help_text)
    p.add_argument("--kv-dtype", choices=KV_DTYPES, help=BY_NAME["kv_dtype"].help_text)
    p.add_argument(
        "--jobs", type=int, help="worker processes, 1 to 64 (default: the CPUs, at most 8)"
    )
    p.add_argument("--json", action="store_true")
    t = p.add_argument_group("under traffic (tpsim serve's simulation; one of these)")
    t.add_argument("--rate", type=number(0, 1e6), help="requests/s to serve (Poisson): "
                   "the units and GPUs it needs")  # fmt: skip
    t.add_argument("--concurrency", type=int, help="concurrent clients to serve (closed loop)")
    t.add_argument("--output-len", help="output tokens per request, or a distribution as "
                   "--prompt-len's (default: --context-len minus --prompt-len)")  # fmt: skip
    t.add_argument("--slo-percentile", type=number(0, 100), help="the percentile of TTFT "
                   "and TPOT held to the SLOs (default 99)")  # fmt: skip
    t.add_argument("--requests", type=int, help="requests per simulated run, at least "
                   "(default 300)")  # fmt: skip
    t.add_argument("--seed", type=int, help="seed of the runs' draws (default 0)")
    t.add_argument("--no-disaggregated", action="store_true", help="aggregated units only")
    p.add_argument("--plots", type=Path, help="folder for the Pareto plot (plan_pareto.png)")


def _plan(a: argparse.Namespace) -> int:
    from tpsim.experiments.plan import PlanRequest, plan, to_dicts
    from tpsim.experiments.plan_text import table

    check_nodes(a.nodes)
    if a.gpus < 0:
        raise ConfigError(f"--gpus={a.gpus}: must be 0 (all) or more")
    if a.jobs is not None and not 1 <= a.jobs <= 64:
        raise ConfigError(f"--jobs={a.jobs}: must be between 1 and 64")
    if a.batch_max < 0:
        raise ConfigError(f"--batch-max={a.batch_max}: must be at least 1 (0: memory decides)")
    for flag in ("slo_ttft_ms", "slo_tpot_ms", "gpu_hour_usd"):
        v = getattr(a, flag)
        if v is not None and not v > 0:
            raise ConfigError(f"--{flag.replace('_', '-')}={v}: must be positive")
    if a.rate is not None or a.concurrency is not None:
        return _plan_traffic(a)
    try:
        a.prompt_len = parse_tokens(str(a.prompt_len), "--prompt-len")
    except ConfigError:
        raise ConfigError(
            f"--prompt-len={a.prompt_len}: a number of tokens (a distribution of lengths "
            "applies under traffic, with --rate or --concurrency)"
        ) from None
    for flag in TRAFFIC_ONLY:
        if getattr(a, flag) not in (None, False):
            value = "" if getattr(a, flag) is True else f"={getattr(a, flag)}"
            raise ConfigError(f"--{flag.replace('_', '-')}{value}: applies under traffic "
                              "(with --rate or --concurrency)")  # fmt: skip
    if a.context_len < a.prompt_len:
        raise ConfigError(f"--context-len={a.context_len}: below --prompt-len={a.prompt_len} "
                          "(a decode attends to its prompt and what it generated)")  # fmt: skip
    req = PlanRequest(a.model, a.topology, a.nodes, a.gpus, a.batch_max, a.prompt_len,
                      a.context_len, a.slo_ttft_ms, a.slo_tpot_ms, a.gpu_hour_usd, a.engine,
                      a.ideal, a.dtype, a.kv_dtype)  # fmt: skip
    if a.plots is not None:
        from tpsim.cli.studies import check_folder

        check_folder(a.plots, "--plots")
    rows = plan(req, a.jobs or 0)
    if a.json:
        from tpsim.experiments.plan_text import recommendation

        top = rows[0]
        best = {"layout": top.label, "tp": top.tp, "pp": top.pp, "dp": top.dp, "ep": top.ep,
                "attention_dp": top.attention_dp, "batch": top.batch, "meets_slo": top.slo_ok,
                "text": recommendation(rows)}  # fmt: skip
        print(json.dumps({"layouts": to_dicts(rows), "recommendation": best}, indent=2))
    else:
        print(table(rows, req))
        if a.dtype or a.kv_dtype:  # what the rows were priced in, beside the model's own
            asked = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in
                              (("dtype", a.dtype), ("kv_dtype", a.kv_dtype)) if v)  # fmt: skip
            print(f"Priced with {asked} (engine {a.engine}).")
    if a.plots is not None:
        from tpsim.experiments.plan_text import plot_front
        from tpsim.outputs.export import make_folder

        make_folder(a.plots)
        path = plot_front(rows, req, a.plots)
        if not a.json:
            print(f"wrote {path}")
    return 0


def _plan_traffic(a: argparse.Namespace) -> int:
    from tpsim.experiments.plan_rate import RateRequest, plan_rate, table, to_dicts, verdict
    from tpsim.experiments.serve.workload import parse_lengths

    if a.rate is not None and a.concurrency is not None:
        raise ConfigError(f"--concurrency={a.concurrency}: give --rate or --concurrency, not both")
    if a.rate is not None and not a.rate > 0:
        raise ConfigError(f"--rate={a.rate}: must be positive")
    if a.concurrency is not None and not 1 <= a.concurrency <= 1_000_000:
        raise ConfigError(f"--concurrency={a.concurrency}: must be from 1 to 1000000")
    if a.concurrency is not None and a.slo_ttft_ms is None and a.slo_tpot_ms is None:
        raise ConfigError(
            f"--concurrency={a.concurrency}: a closed loop never saturates; give "
            "--slo-ttft-ms or --slo-tpot-ms to bound each unit's clients"
        )
    a.slo_percentile = 99.0 if a.slo_percentile is None else a.slo_percentile
    a.requests = 300 if a.requests is None else a.requests
    a.seed = 0 if a.seed is None else a.seed
    if not 0 < a.slo_percentile <= 100:
        raise ConfigError(f"--slo-percentile={a.slo_percentile}: must be above 0, at most 100")
    if not 20 <= a.requests <= 100_000:
        raise ConfigError(f"--requests={a.requests}: must be from 20 to 100000")
    if not 0 <= a.seed < 2**63:
        raise ConfigError(f"--seed={a.seed}: must be a whole number from 0 to 2**63 - 1")
    for flag in ("gpus", "batch_max", "plots"):
        if getattr(a, flag):
            raise ConfigError(f"--{flag.replace('_', '-')}={getattr(a, flag)}: applies to "
                              "the static plan (without --rate or --concurrency)")  # fmt: skip
    a.prompt_len = str(a.prompt_len)
    prompt = parse_lengths("--prompt-len", a.prompt_len)
    if a.output_len is None:
        if prompt.kind != "fixed":
            raise ConfigError(f"--prompt-len={a.prompt_len}: a distribution; give "
                              "--output-len too")  # fmt: skip
        output = str(a.context_len - int(prompt.a))
        if int(output) < 1:  # the output defaults to the context the prompt leaves
            raise ConfigError(
                f"--prompt-len={a.prompt_len}: fills --context-len={a.context_len}, leaving "
                "no output; give --output-len (and a longer --context-len)"
            )
    else:
        output = a.output_len
        parse_lengths("--output-len", output)
    req = RateRequest(a.model, a.topology, a.nodes, a.rate, a.concurrency, a.prompt_len,
                      output, a.slo_ttft_ms, a.slo_tpot_ms, a.slo_percentile, a.gpu_hour_usd,
                      a.engine, a.ideal, a.requests, a.seed,
                      not a.no_disaggregated, a.dtype, a.kv_dtype)  # fmt: skip
    rows = plan_rate(req, a.jobs or 0)
    if a.json:
        top = rows[0]
        best = {"unit": top.label, "kind": top.kind, "units": top.units, "gpus": top.gpus,
                "meets_slo": top.ok, "text": verdict(rows, req)}  # fmt: skip
        print(json.dumps({"units": to_dicts(rows), "recommendation": best}, indent=2))
    else:
        print(table(rows, req))
    return 0


#: The flags of the traffic plan that the static plan has no use for.
TRAFFIC_ONLY = ("output_len", "slo_percentile", "requests", "seed", "no_disaggregated")

PLAN_COMMANDS = {"plan": _plan}
