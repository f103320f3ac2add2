"""Every option ``tpsim run`` takes, declared once: :data:`RUN_OPTIONS`.

One :class:`RunOption` per option: its name (the argparse ``dest``, the grid key and the
results column), its flag, how a value is read, its default (taken from the
:class:`~tpsim.core.config.Layout`, :class:`~tpsim.core.config.Workload` or
:class:`~tpsim.core.config.Options` field it fills, never repeated here), its help, where it
belongs and whether a sweep may vary it. Generated from the table:

- ``tpsim run``'s flags (``tpsim.cli.run.add_run_parser``; ``compare`` and ``report`` copy
  them as comma lists);
- ``tpsim sweep``'s axis flags (``tpsim.cli.studies``), one per sweepable option;
- the sweep grid's keys, checks and defaults (``tpsim.experiments.sweep.grid.AXES``), in the
  table's order, which is the grid's expansion order: a new option goes at the end.

A sweepable option is also a field of ``GridPoint`` and a column of the results file
(``tests/experiments/test_sweep_layout.py`` holds them equal); the options ``sweepable=False``
say why in a comment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from tpsim import calibration
from tpsim.core.config import (
    ALLREDUCE_ALGOS,
    COMPUTE_DTYPES,
    KV_DTYPES,
    LAUNCH_MODES,
    MOE_A2A,
    OVERLAP_MODES,
    PHASES,
    Layout,
    Options,
    Workload,
)
from tpsim.core.option_checks import (
    bool_check,
    choice_check,
    counts_check,
    engine_check,
    float_check,
    int_check,
    name_check,
    text_check,
    via_check,
)

#: Hosts a run or a sweep point may join.
MAX_NODES = 1024  # as tpsim.topologies.join.MAX_NODES (not imported: networkx)

#: How the command line reads a value: ``text``, ``int``, ``float`` (within ``bounds``),
#: ``tokens`` (4K = 4096), ``counts`` (40,40), ``choice`` (one of ``choices``), ``switch`` (a
#: flag alone: true) or ``negatable`` (``--x`` / ``--no-x``).
Kind = Literal["text", "int", "float", "tokens", "counts", "choice", "switch", "negatable"]
#: Where the value goes: a :class:`Layout`, :class:`Workload` or :class:`Options` field, or
#: ``simulate`` (what ``simulate`` takes beside them: the model, the topology and its hosts).
Belongs = Literal["layout", "workload", "options", "simulate"]

_DATACLASS: dict[str, type] = {"layout": Layout, "workload": Workload, "options": Options}


@dataclass(frozen=True)
class RunOption:
    """One option of ``tpsim run`` (see the module's docstring)."""

    name: str
    kind: Kind
    belongs: Belongs
    #: what the value means (shown by run, sweep, compare and report); a callable is asked
    #: when a parser is built (the list of engines reads a folder)
    help: str | Callable[[], str] | None
    #: a value (str from flags or YAML, or already typed from YAML) -> the checked value;
    #: raises ConfigError naming the field
    parse: Callable[[Any], Any]
    sweepable: bool = True
    required: bool = False
    choices: tuple[str, ...] = ()
    #: the dataclass field it fills when not ``name`` (``launch_skew_us`` fills
    #: ``launch_skew_s``), and the factor from the option's unit to the field's
    field: str | None = None
    scale: float = 1.0
    #: the default of an option that fills no dataclass field, or of one whose commands
    #: default otherwise than its dataclass (micro_batches: 0, the engine's split)
    own_default: Any = None
    #: run's flag is None when not given (the command decides: a length that does not apply
    #: to the phase is warned about), not the dataclass default
    unset: bool = False
    #: ``float``: (low, high, low_open)
    bounds: tuple[float, float, bool] = (0.0, 0.0, True)
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def default(self) -> Any:
        """The value when the option is not given (None for a required one)."""
        if self.required:
            return None
        if self.belongs == "simulate" or self.own_default is not None:
            return self.own_default
        value = getattr(_DATACLASS[self.belongs], self.field or self.name)
        return value / self.scale if self.scale != 1.0 else value

    @property
    def help_text(self) -> str | None:
        return self.help() if callable(self.help) else self.help


def _engines_help() -> str:
    return (
        "serving engine: "
        + ", ".join(calibration.engines())
        + " (tpsim list engines), or a profile file .yaml"
    )


_DTYPE = (
    "the linear layers' weights, and their inputs where the GPU computes in it (default: the "
    "model's, a quantised checkpoint's as stored); fp4: NVFP4 weights, run on fp4 tensor "
    "cores (Blackwell), else dequantised to fp8 (Hopper, Ada) or 16-bit (Ampere); int4: "
    "AWQ/GPTQ 4-bit weights, run weight-only at 16 bits (Marlin)"
)

#: Every option of ``tpsim run``. Its order is the grid's expansion order and the order of
#: the sweep's flags: a new option goes at the end.
RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption(
        "model",
        "text",
        "simulate",
        "catalog name (tpsim list models) or a Hugging Face config.json",
        name_check("model"),
        required=True,
    ),
    RunOption(
        "topology",
        "text",
        "simulate",
        "catalog name (tpsim list topologies) or a topology file (.yaml/.json)",
        name_check("topology"),
        required=True,
    ),
    RunOption(
        "nodes",
        "int",
        "simulate",
        "hosts joined over the network (copies of a catalog node)",
        int_check("nodes", 1, MAX_NODES),
        own_default=1,
    ),
    # the network of a multi-host join: not a results column (yet)
    RunOption(
        "nic_gbps",
        "float",
        "simulate",
        "bandwidth of one NIC of the multi-host join, Gb/s per direction "
        "(default: the topology's network, else the NIC paired with its GPUs)",
        float_check("nic_gbps", 1e-30, 1e5),
        sweepable=False,
        bounds=(0, 1e5, True),
        metavar="G",
    ),
    RunOption(
        "nics_per_node",
        "int",
        "simulate",
        "NICs per host, shared by its GPUs in turn (default: the topology's, else one a GPU)",
        int_check("nics_per_node", 1),
        sweepable=False,
        metavar="K",
    ),
    RunOption(
        "gpus_per_node",
        "int",
        "layout",
        "GPUs of the group on each host (default: fill each host first)",
        int_check("gpus_per_node", 0, 4096),
    ),
    RunOption(
        "tp", "int", "layout", "tensor-parallel degree", via_check("tp", Layout), required=True
    ),
    RunOption(
        "batch",
        "int",
        "workload",
        "sequences per step",
        via_check("batch", lambda v: Workload(batch=v)),
    ),
    RunOption(
        "phase",
        "choice",
        "workload",
        "prefill (one pass over the prompts) or decode (one new token per sequence)",
        choice_check("phase", PHASES),
        choices=PHASES,
    ),
    RunOption(
        "prompt_len",
        "tokens",
        "workload",
        "prefill: tokens per sequence (2K = 2048; "
        f"default: {Workload.prompt_len}, as every command)",
        via_check("prompt_len", lambda v: Workload(prompt_len=v)),
        unset=True,
    ),
    RunOption(
        "context_len",
        "tokens",
        "workload",
        "decode: keys each new token attends to (4K = 4096; "
        f"default: {Workload.context_len}, as every command)",
        via_check("context_len", lambda v: Workload(context_len=v)),
        unset=True,
    ),
    RunOption(
        "dtype",
        "choice",
        "options",
        _DTYPE,
        choice_check("dtype", COMPUTE_DTYPES, optional=True),
        choices=COMPUTE_DTYPES,
    ),
    RunOption(
        "kv_dtype",
        "choice",
        "options",
        "KV cache (default: a 16-bit --dtype's; with fp8 or fp4, as the engine keeps it "
        "(its profile's kv_cache_dtype): 16-bit under vllm and sglang, fp8 under trtllm and "
        "ideal (with fp4 where the GPU has fp8 tensor cores); with int4, or a checkpoint run "
        "as stored: 16-bit)",
        choice_check("kv_dtype", KV_DTYPES, optional=True),
        choices=KV_DTYPES,
    ),
    RunOption(
        "launch",
        "choice",
        "options",
        "eager: one host launch per kernel; graph: CUDA graph replay; compiled: "
        "torch.compile with graphs (fewer, fused kernels)",
        choice_check("launch", LAUNCH_MODES),
        choices=LAUNCH_MODES,
    ),
    RunOption(
        "overlap",
        "choice",
        "options",
        "chunked: GEMM pieces overlap their collective; microbatch: two "
        "halves of the batch interleaved",
        choice_check("overlap", OVERLAP_MODES),
        choices=OVERLAP_MODES,
    ),
    RunOption(
        "allreduce_algo",
        "choice",
        "options",
        "all-reduce algorithm: auto (the engine decides), nccl, or one by name",
        choice_check("allreduce_algo", ALLREDUCE_ALGOS),
        choices=ALLREDUCE_ALGOS,
    ),
    RunOption(
        "sequence_parallel",
        "switch",
        "options",
        "reduce-scatter + all-gather instead of each all-reduce",
        bool_check("sequence_parallel"),
    ),
    RunOption(
        "ideal",
        "switch",
        "options",
        "first principles: every efficiency 1, every fixed overhead 0",
        bool_check("ideal"),
    ),
    RunOption("engine", "text", "options", _engines_help, engine_check),
    RunOption(
        "pp",
        "int",
        "layout",
        "pipeline stages (one TP group each)",
        via_check("pp", lambda v: Layout(pp=v)),
    ),
    RunOption(
        "dp", "int", "layout", "data-parallel replicas", via_check("dp", lambda v: Layout(dp=v))
    ),
    RunOption(
        "micro_batches",
        "int",
        "layout",
        "micro-batches per step (pipeline); 0, the default: as the engine splits the batch "
        "(one for engines that keep a batch per stage in flight, FasterTransformer's halving "
        "for fastertransformer)",
        via_check("micro_batches", lambda v: Layout(micro_batches=v), positive=False),
        own_default=0,
    ),
    # a list per run: not a comma-list axis
    RunOption(
        "pp_layers",
        "counts",
        "layout",
        "layers per stage: 40,40",
        counts_check("pp_layers"),
        sweepable=False,
    ),
    RunOption(
        "placement",
        "text",
        "layout",
        "the GPU of each rank in (dp, pp, tp) order, e.g. n0.gpu0,n0.gpu2,n0.gpu4,n0.gpu6 "
        "(default: TP inside a host first, then stages, then replicas)",
        text_check("placement"),
        sweepable=False,
        unset=True,
        metavar="GPU,GPU,...",
    ),
    # the options below are not results columns (yet): a sweep runs them at their defaults
    RunOption(
        "overlap_chunks",
        "int",
        "options",
        "pieces per GEMM with --overlap chunked (default: the TP degree, at most 4)",
        int_check("overlap_chunks", 0, 64),
        sweepable=False,
    ),
    RunOption(
        "launch_skew_us",
        "float",
        "options",
        "the last rank's host thread starts this much later (us)",
        float_check("launch_skew_us", 0, 1e7),
        sweepable=False,
        field="launch_skew_s",
        scale=1e-6,
        bounds=(0, 1e7, False),
    ),
    # a sweep simulates every point, fitting or not (its row says fits=false)
    RunOption(
        "allow_oom",
        "switch",
        "options",
        "simulate a layout that does not fit",
        bool_check("allow_oom"),
        sweepable=False,
    ),
    RunOption(
        "fused",
        "negatable",
        "options",
        "fuse residual add + RMSNorm as vLLM does (default; --no-fused: separate kernels)",
        bool_check("fused"),
        sweepable=False,
    ),
    RunOption(
        "kernel_table",
        "text",
        "options",
        "measured kernel times overriding the model: a CSV (tpsim's or Vidur's layout), "
        "a shipped table (vidur-a100, vidur-h100) or a comma-separated list",
        text_check("kernel_table"),
        sweepable=False,
        metavar="TABLE",
    ),
    # a limit of the process, not a parameter of the point
    RunOption(
        "max_records",
        "int",
        "options",
        "refuse a run estimated to produce more records than this "
        f"(default {Options.max_records:,}, about 9 GB of memory)",
        int_check("max_records", 1),
        sweepable=False,
    ),
    # mixture-of-experts layout and routing (tpsim.core.lowering.experts); a dense model
    # refuses ep or attention_dp above 1
    RunOption(
        "ep",
        "int",
        "layout",
        "expert-parallel ranks of the MoE layers (vLLM's --enable-expert-parallel is "
        "--ep tp*attention_dp)",
        int_check("ep", 1, 4096),
    ),
    RunOption(
        "attention_dp",
        "int",
        "layout",
        "attention data-parallel groups of --tp GPUs sharing the MoE layers (tokens "
        "dispatched by all-to-all)",
        int_check("attention_dp", 1, 4096),
    ),
    # 0, the default: derived from the other two (a sweep's row keeps the 0); given, it
    # must make moe_tp*ep the MoE group, else the point is refused as run refuses it
    RunOption(
        "moe_tp",
        "int",
        "layout",
        "ranks splitting each routed expert's width (default: tp*attention_dp/ep)",
        int_check("moe_tp", 0, 4096),
    ),
    RunOption(
        "expert_skew",
        "float",
        "options",
        "MoE routing: 0 uniform at random (the most-loaded rank gates each layer); S >= 1 "
        "the hottest expert takes S times the mean load (1: perfectly balanced)",
        float_check("expert_skew", 0, 4096),
        bounds=(0, 4096, False),
        metavar="S",
    ),
    RunOption(
        "moe_a2a",
        "choice",
        "options",
        "the all-to-all of tokens dispatched to experts (with --attention-dp): nccl "
        "(grouped send/recv) or deepep (DeepEP's low-latency kernels at decode, normal ones "
        "at prefill)",
        choice_check("moe_a2a", MOE_A2A),
        choices=MOE_A2A,
    ),
    # a file per run: not a grid axis
    RunOption(
        "routing",
        "text",
        "options",
        "MoE routing histogram: a file of tokens per expert (comma or space separated), one "
        "line for every MoE layer or one line per MoE layer",
        text_check("routing"),
        sweepable=False,
        unset=True,
        metavar="FILE",
    ),
)

BY_NAME: dict[str, RunOption] = {o.name: o for o in RUN_OPTIONS}


def sweepable(table: Iterable[RunOption] = RUN_OPTIONS) -> tuple[RunOption, ...]:
    """The options a sweep may vary, in the table's (the grid's) order."""
    return tuple(o for o in table if o.sweepable)
