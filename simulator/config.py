"""Frozen, validated run configuration: the parallel layout, the workload and the options.

Each dataclass checks itself once in ``__post_init__`` and raises :class:`ConfigError`
with one line naming the field and the bad value. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.spec import DTYPE_BYTES
from simulator.errors import ConfigError

PHASES: tuple[str, ...] = ("prefill", "decode")
LAUNCH_MODES: tuple[str, ...] = ("eager", "graph")
OVERLAP_MODES: tuple[str, ...] = ("none",)
ALLREDUCE_ALGOS: tuple[str, ...] = ("auto", "ring")
COMPUTE_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8")

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


@dataclass(frozen=True)
class Layout:
    """How the model is split: ``tp`` GPUs in one tensor-parallel group."""

    tp: int = 1

    def __post_init__(self) -> None:
        _positive_int("tp", self.tp, 4096)


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
    """How the pass runs. ``ideal``: every efficiency 1 and every fixed overhead 0."""

    launch: str = "graph"
    overlap: str = "none"
    allreduce_algo: str = "auto"
    dtype: str | None = None  # weights and activations; None = the model's own dtype
    kv_dtype: str | None = None  # KV cache; None = same as dtype
    ideal: bool = False
    allow_oom: bool = False

    def __post_init__(self) -> None:
        _choice("launch", self.launch, LAUNCH_MODES)
        _choice("overlap", self.overlap, OVERLAP_MODES)
        _choice("allreduce_algo", self.allreduce_algo, ALLREDUCE_ALGOS)
        if self.dtype is not None:
            _choice("dtype", self.dtype, COMPUTE_DTYPES)
        if self.kv_dtype is not None:
            _choice("kv_dtype", self.kv_dtype, COMPUTE_DTYPES)


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


def dtype_bytes(dtype: str) -> float:
    return DTYPE_BYTES[dtype]


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
    "dtype_bytes",
    "kv_split",
    "tp_problem",
    "valid_tp_degrees",
]
