"""``tpsim plan``: rank the TP x PP x DP layouts of N GPUs for a model (experiments/plan.py).

Thin: parses the flags, calls the planner, prints its table and recommendation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tpsim.cli.types import number, tokens
from tpsim.core.config import Workload, check_nodes
from tpsim.core.errors import ConfigError


def add_plan_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="rank TP x PP x DP layouts of the GPUs for a model")
    p.add_argument("--model", required=True)
    p.add_argument("--topology", required=True)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus", type=int, default=0, help="GPUs to use (default: all)")
    p.add_argument("--batch-max", type=int, default=64, help="largest batch per replica")
    # one default context everywhere: the Workload's, as run, sweep and check-claim use
    p.add_argument("--prompt-len", type=tokens("--prompt-len"), default=Workload.prompt_len)
    p.add_argument("--context-len", type=tokens("--context-len"), default=Workload.context_len)
    p.add_argument("--slo-ttft-ms", type=number(0, 1e7))
    p.add_argument("--slo-tpot-ms", type=number(0, 1e7))
    p.add_argument("--gpu-hour-usd", type=number(0, 1e5), help="price of one GPU-hour: adds $/Mtok")
    p.add_argument("--engine", default="vllm")
    p.add_argument("--ideal", action="store_true")
    p.add_argument(
        "--jobs", type=int, help="worker processes, 1 to 64 (default: the CPUs, at most 8)"
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--plots", type=Path, help="folder for the Pareto plot (plan_pareto.png)")


def _plan(a: argparse.Namespace) -> int:
    from tpsim.experiments.plan import PlanRequest, plan, table, to_dicts

    check_nodes(a.nodes)
    if a.gpus < 0:
        raise ConfigError(f"--gpus={a.gpus}: must be 0 (all) or more")
    if a.jobs is not None and not 1 <= a.jobs <= 64:
        raise ConfigError(f"--jobs={a.jobs}: must be between 1 and 64")
    if a.batch_max < 1:
        raise ConfigError(f"--batch-max={a.batch_max}: must be at least 1")
    for flag in ("slo_ttft_ms", "slo_tpot_ms", "gpu_hour_usd"):
        v = getattr(a, flag)
        if v is not None and not v > 0:
            raise ConfigError(f"--{flag.replace('_', '-')}={v}: must be positive")
    req = PlanRequest(a.model, a.topology, a.nodes, a.gpus, a.batch_max, a.prompt_len,
                      a.context_len, a.slo_ttft_ms, a.slo_tpot_ms, a.gpu_hour_usd, a.engine,
                      a.ideal)  # fmt: skip
    if a.plots is not None:
        from tpsim.cli.studies import check_folder

        check_folder(a.plots, "--plots")
    rows = plan(req, a.jobs or 0)
    if a.json:
        print(json.dumps({"layouts": to_dicts(rows)}, indent=2))
    else:
        print(table(rows, req))
    if a.plots is not None:
        from tpsim.experiments.plan import plot_front
        from tpsim.outputs.export import make_folder

        make_folder(a.plots)
        path = plot_front(rows, req, a.plots)
        if not a.json:
            print(f"wrote {path}")
    return 0


PLAN_COMMANDS = {"plan": _plan}
