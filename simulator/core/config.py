"""Frozen, validated run configuration: the parallel layout, the workload and the options.

Each dataclass checks itself once in ``__post_init__`` and raises :class:`ConfigError`
with one line naming the field and the bad value. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpsim import calibration
from tpsim.calibration import Calibration
from tpsim.calibration.scheduler import checked
from tpsim.core.comm.algorithms import REGISTRY
from tpsim.core.errors import ConfigError

PHASES: tuple[str, ...] = ("prefill", "decode")
LAUNCH_MODES: tuple[str, ...] = ("eager", "graph", "compiled")
OVERLAP_MODES: tuple[str, ...] = ("none", "chunked", "microbatch")
#: All-reduce algorithms (the registry, tpsim.core.comm.algorithms): auto picks the fastest of
#: all, nccl NCCL's own choice (as its tuning model ranks them), or one by name that runs an
#: all-reduce (the group's other collectives run as a ring then); the all-to-all kernels are
#: ``moe_a2a``'s.
ALLREDUCE_ALGOS: tuple[str, ...] = (
    "auto", "nccl", *(name for name, a in REGISTRY.items() if "all_reduce" in a.ops)
)  # fmt: skip
#: The all-to-all kernels of MoE token dispatch (Options.moe_a2a).
MOE_A2A: tuple[str, ...] = ("nccl", "deepep")
COMPUTE_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp4", "int4")
#: KV cache dtypes (``--kv-dtype``): no 4-bit cache is modelled.
KV_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8")

#: Upper bounds that keep a request within what one process can simulate.
MAX_BATCH = 1 << 20
MAX_TOKENS = 1 << 24


def _positive_int(field: str, value: object, upper: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{field}={value!r}: must be a positive integer")
    if upper is not None and value > upper:
        raise ConfigError(f"{field}={value!r}: must be at most {upper}")


def _choice(field: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{field}={value!r}: must be one of {', '.join(allowed)}")


_TOKEN_UNITS = {"": 1, "K": 1024, "M": 1024**2}


def parse_tokens(text: str, field: str = "length") -> int:
    """A token count: ``4096``, ``4K`` or ``4k`` (K = 1024, M = 1024²), a whole number >= 1."""
    t = str(text).strip()
    unit = t[-1:].upper() if t[-1:].upper() in ("K", "M") else ""
    number = t[: len(t) - len(unit)] if unit else t
    try:
        value = float(number) * _TOKEN_UNITS[unit] if unit else int(number)
    except (ValueError, OverflowError):
        raise ConfigError(
            f"{field}={text!r}: must be a whole number of tokens (e.g. 4096, 4K)"
        ) from None
    if not 1 <= value <= 1 << 40 or value != int(value):
        raise ConfigError(f"{field}={text!r}: must be a whole number of tokens >= 1")
    return int(value)


@dataclass(frozen=True)
class Layout:
    """How the model is split: ``tp`` GPUs in one tensor-parallel group; ``pp`` such groups
    as pipeline stages, ``dp`` copies of the pipeline as independent replicas.

    ``gpus_per_node``: take this many GPUs from each host, host after host (0: fill each
    host before the next), so TP 8 over two hosts with 4 GPUs each is ``Layout(8, 4)``.
    """

    tp: int = 1
    gpus_per_node: int = 0
    #: pipeline stages, data-parallel replicas, micro-batches per step (0: as the engine
    #: splits the batch, tpsim.calibration.model.Engine.pipeline_micro_batches; resolved by
    #: tpsim.core.plan.resolve), layers per stage (empty: balanced); see
    #: tpsim.core.comm.layout
    pp: int = 1
    dp: int = 1
    micro_batches: int = 1
    pp_layers: tuple[int, ...] = ()
    #: GPU node names of the layout ranks in (dp, pp, tp) order, overriding the derived
    #: placement (empty: derived from the graph)
    placement: tuple[str, ...] = ()
    #: Mixture-of-experts layout, as TensorRT-LLM names it: ``attention_dp`` attention
    #: data-parallel groups of ``tp`` ranks share the MoE layers (the MoE group is
    #: ``tp * attention_dp`` GPUs), whose routed experts are split ``ep`` ways and each
    #: expert's width ``moe_tp`` ways (``moe_tp * ep`` = the MoE group; 0: derived)
    ep: int = 1
    attention_dp: int = 1
    moe_tp: int = 0

    def __post_init__(self) -> None:
        _positive_int("tp", self.tp, 4096)
        _positive_int("ep", self.ep, 4096)
        _positive_int("attention_dp", self.attention_dp, 4096)
        if isinstance(self.moe_tp, bool) or not isinstance(self.moe_tp, int) or self.moe_tp < 0:
            raise ConfigError(f"moe_tp={self.moe_tp!r}: must be a positive integer (0: derived)")
        group = self.moe_group
        if group % self.ep:
            raise ConfigError(
                f"ep={self.ep}: must divide the MoE group of tp*attention_dp={group} GPUs"
            )
        if self.moe_tp and self.moe_tp * self.ep != group:
            raise ConfigError(
                f"moe_tp={self.moe_tp}: moe_tp*ep must be the MoE group of "
                f"tp*attention_dp={group} GPUs (ep={self.ep})"
            )
        _positive_int("pp", self.pp, 1024)
        _positive_int("dp", self.dp, 4096)
        m = self.micro_batches
        if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m <= 4096:
            raise ConfigError(
                f"micro_batches={m!r}: must be an integer from 1 to 4096, or 0 (the engine's split)"
            )
        if not isinstance(self.pp_layers, tuple) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.pp_layers
        ):
            raise ConfigError(f"pp_layers={self.pp_layers!r}: must be positive layer counts")
        if self.pp_layers and len(self.pp_layers) != self.pp:
            raise ConfigError(
                f"pp_layers={','.join(map(str, self.pp_layers))}: "
                f"{len(self.pp_layers)} stages, pp={self.pp}"
            )
        if not isinstance(self.placement, tuple) or not all(
            isinstance(x, str) and x for x in self.placement
        ):
            raise ConfigError(f"placement={self.placement!r}: must be GPU names")
        need = self.ranks
        if self.placement and len(self.placement) != need:
            what = "tp*attention_dp*pp*dp" if self.attention_dp > 1 else "tp*pp*dp"
            raise ConfigError(
                f"placement={','.join(self.placement)[:80]}: {len(self.placement)} GPUs, "
                f"the layout has {what}={need} ranks"
            )
        if len(set(self.placement)) < len(self.placement):
            raise ConfigError(f"placement={','.join(self.placement)[:80]}: a GPU twice")
        g = self.gpus_per_node
        if isinstance(g, bool) or not isinstance(g, int) or g < 0:
            raise ConfigError(f"gpus_per_node={g!r}: must be a non-negative integer")
        if g and self.tp % g:
            raise ConfigError(f"gpus_per_node={g}: must divide tp={self.tp}")

    @property
    def moe_group(self) -> int:
        """GPUs that share one set of MoE layers: ``tp * attention_dp``."""
        return self.tp * self.attention_dp

    @property
    def expert_tp(self) -> int:
        """Each routed expert's width is split this many ways: ``moe_tp``, or derived."""
        return self.moe_tp or self.moe_group // self.ep

    @property
    def ranks(self) -> int:
        """GPUs of the layout: ``tp * attention_dp * pp * dp``."""
        return self.tp * self.attention_dp * self.pp * self.dp


@dataclass(frozen=True)
class Workload:
    """One forward pass: a prefill of ``prompt_len`` tokens per sequence, or one decode step.

    Decode: each of ``batch`` sequences adds one token and attends over ``context_len`` keys
    (the KV cache plus the new token), so the cache holds ``context_len`` tokens per sequence.
    """

    batch: int = 1
    phase: str = "decode"
    prompt_len: int = 512
    context_len: int = 1024

    def __post_init__(self) -> None:
        _positive_int("batch", self.batch, MAX_BATCH)
        _choice("phase", self.phase, PHASES)
        _positive_int("prompt_len", self.prompt_len, MAX_TOKENS)
        _positive_int("context_len", self.context_len, MAX_TOKENS)
        if self.tokens > MAX_TOKENS:
            raise ConfigError(
                f"batch*prompt_len={self.tokens}: at most {MAX_TOKENS} tokens in one pass"
            )

    @property
    def tokens(self) -> int:
        """Tokens that flow through the layers in this pass."""
        return self.batch * self.prompt_len if self.phase == "prefill" else self.batch

    @property
    def kv_len(self) -> int:
        """Keys each new token attends over (and KV-cache tokens held per sequence)."""
        return self.prompt_len if self.phase == "prefill" else self.context_len


@dataclass(frozen=True)
class Options:
    """How the pass runs. ``ideal``: every efficiency 1 and every fixed overhead 0 (the
    ideal variant of the calibration, :attr:`calibration`)."""

    launch: str = "graph"
    overlap: str = "none"
    allreduce_algo: str = "auto"
    dtype: str | None = None  # weights and activations; None = the model's own dtype
    kv_dtype: str | None = None  # KV cache; None: as the engine keeps it (precision.py)
    ideal: bool = False
    allow_oom: bool = False
    fused: bool = True  # fused residual-add + RMSNorm kernels, as vLLM runs them
    kernel_table: str | None = None  # measured kernel times (tpsim.core.kernels.kernel_table)
    sequence_parallel: bool = False  # reduce-scatter + all-gather replace each all-reduce
    overlap_chunks: int = 0  # chunks of a row-parallel GEMM with --overlap chunked; 0: min(tp, 4)
    launch_skew_s: float = 0.0  # the last rank's host thread starts this much later
    #: seed of the order in which host jitter's factors go to the ranks (the engine
    #: profile's host_jitter_cv: tpsim.core.engine.jitter)
    host_jitter_seed: int = 0
    max_records: int = 20_000_000  # refuse a run estimated to make more records (api.py)
    engine: str = "vllm"  # serving-engine profile: a shipped name or a profile file (.yaml)
    #: MoE routing: 0 routes uniformly at random (each MoE layer waits for the rank the
    #: draw loads most: tpsim.core.lowering.experts); S >= 1 loads the hottest expert S
    #: times the mean and the others evenly (1: perfectly balanced)
    expert_skew: float = 0.0
    #: MoE routing histogram file: tokens per expert, one line or one per MoE layer
    #: (tpsim.core.lowering.experts.read_histogram); None: ``expert_skew`` decides
    routing: str | None = None
    #: the MoE all-to-all of dispatched tokens: NCCL's (grouped send/recv, the group's
    #: algorithm choice) or DeepEP's kernels (low-latency at decode, normal at prefill)
    moe_a2a: str = "nccl"
    #: whether the engine schedules each iteration while the one before it runs (vLLM's
    #: async scheduling, an overlap scheduler): None, the engine profile's own rule; False
    #: turns it off, and the step's host work is overlapped as the engine then does
    #: (:meth:`tpsim.calibration.model.Engine.synchronous`); True, on (``tpsim serve``'s
    #: planning rule; the host work overlapped as the profile says)
    async_scheduling: bool | None = None

    def __post_init__(self) -> None:
        _choice("launch", self.launch, LAUNCH_MODES)
        if (
            isinstance(self.overlap_chunks, bool)
            or not isinstance(self.overlap_chunks, int)
            or (not 0 <= self.overlap_chunks <= 64)
        ):
            raise ConfigError(f"overlap_chunks={self.overlap_chunks!r}: must be 0 (auto) to 64")
        skew = self.launch_skew_s
        if isinstance(skew, bool) or not isinstance(skew, int | float) or not 0 <= skew <= 1:
            raise ConfigError(f"launch_skew_s={skew!r}: must be between 0 and 1 second")
        if skew and self.ideal:
            raise ConfigError(
                f"launch_skew_s={skew!r}: cannot be combined with ideal=True "
                "(ideal mode has no host overheads)"
            )
        _positive_int("max_records", self.max_records)
        seed = self.host_jitter_seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise ConfigError(f"host_jitter_seed={seed!r}: must be an integer from 0 to 2^63-1")
        _choice("moe_a2a", self.moe_a2a, MOE_A2A)
        if self.routing is not None and (
            not isinstance(self.routing, str) or not self.routing.strip()
        ):
            raise ConfigError(f"routing={self.routing!r}: must be a path to a histogram file")
        es = self.expert_skew
        if (
            isinstance(es, bool)
            or not isinstance(es, int | float)
            or not (es == 0 or 1 <= es <= 4096)
        ):
            raise ConfigError(
                f"expert_skew={es!r}: must be 0 (random uniform routing) or from 1 to 4096"
            )
        if not isinstance(self.engine, str) or not self.engine.strip():
            raise ConfigError(f"engine={self.engine!r}: must name an engine or a profile file")
        object.__setattr__(self, "engine", calibration.profiles.canonical(self.engine))
        for flag in ("ideal", "allow_oom", "fused", "sequence_parallel"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{flag}={getattr(self, flag)!r}: must be true or false")
        if self.async_scheduling is not None and not isinstance(self.async_scheduling, bool):
            raise ConfigError(
                f"async_scheduling={self.async_scheduling!r}: must be true, false or None"
            )
        if self.kernel_table is not None:
            # Existence is checked where the file is read (tpsim.core.kernels.kernel_table.load):
            # no I/O here.
            if not isinstance(self.kernel_table, str) or not self.kernel_table.strip():
                raise ConfigError(f"kernel_table={self.kernel_table!r}: must be a path to a CSV")
            if self.ideal:
                raise ConfigError(
                    f"kernel_table={self.kernel_table!r}: cannot be combined with ideal=True "
                    "(ideal mode prices every kernel by its roofline)"
                )
        _choice("overlap", self.overlap, OVERLAP_MODES)
        _choice("allreduce_algo", self.allreduce_algo, ALLREDUCE_ALGOS)
        if self.dtype is not None:
            _choice("dtype", self.dtype, COMPUTE_DTYPES)
        if self.kv_dtype is not None:
            _choice("kv_dtype", self.kv_dtype, KV_DTYPES)

    @property
    def calibration(self) -> Calibration:
        """The constants this run is priced with: the engine profile's calibration, or its
        first-principles variant under ``ideal`` (the one place either is read). An unknown
        engine or a malformed profile raises CalibrationError."""
        calib = calibration.for_options(self.ideal, self.engine, self.async_scheduling is False)
        checked(self.engine)  # its scheduler too, as serve reads it (cached per profile)
        return calib

    @property
    def collective_algo(self) -> str:
        """The collective algorithm choice in force: ``allreduce_algo``, where ``auto`` is
        restricted to NCCL's own for an engine without a custom all-reduce."""
        if self.allreduce_algo == "auto" and self.calibration.engine.allreduce == "nccl":
            return "nccl"
        return self.allreduce_algo


def check_nodes(nodes: int) -> None:
    """``--nodes``: how many hosts to join (1 to 1024)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= 1024:
        raise ConfigError(f"nodes={nodes}: must be between 1 and 1024")


def valid_tp_degrees(num_heads: int, num_kv_heads: int, limit: int) -> list[int]:
    """TP degrees up to ``limit`` that split the heads evenly (KV heads split or replicate)."""
    return [p for p in range(1, limit + 1) if tp_problem(p, num_heads, num_kv_heads) is None]


def tp_problem(tp: int, num_heads: int, num_kv_heads: int) -> str | None:
    """Why ``tp`` cannot split these heads, or None if it can."""
    if num_heads % tp:
        return f"does not divide num_attention_heads={num_heads}"
    if num_kv_heads % tp and tp % num_kv_heads:
        return f"neither divides nor is a multiple of num_key_value_heads={num_kv_heads}"
    return None


def kv_split(tp: int, num_kv_heads: int) -> tuple[int, int]:
    """KV heads per GPU and how many GPUs hold a copy of each KV head."""
    if tp <= num_kv_heads:
        return num_kv_heads // tp, 1
    return 1, tp // num_kv_heads


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = [
    "ALLREDUCE_ALGOS",
    "LAUNCH_MODES",
    "OVERLAP_MODES",
    "PHASES",
    "Layout",
    "Options",
    "Workload",
    "ceil_div",
    "kv_split",
    "tp_problem",
    "valid_tp_degrees",
]
