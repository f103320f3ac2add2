"""Typed, validated reads of one Hugging Face ``config.json`` dict: what every family reader
(:mod:`tpsim.models.families`) uses. Every malformed value raises ModelError naming the key
and the source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpsim.models.errors import ModelError
from tpsim.models.spec import MAX_MODEL_DIM, MAX_POSITIONS

#: HF ``torch_dtype`` strings and the ModelSpec dtype each maps to.
HF_DTYPES: dict[str, str] = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
    "bf16": "bf16",
    "fp16": "fp16",
    "fp32": "fp32",
    "fp8": "fp8",
}

MISSING = object()


def show(value: object) -> str:
    """repr of a value, cut short so a message stays readable and on one line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def where_of(path: Path | str) -> str:
    text = str(path)
    return text if text.isprintable() else repr(text)


class Reader:
    """Typed, validated access to the keys of one config dict; errors name the source."""

    def __init__(self, cfg: dict[str, Any], source: str) -> None:
        self.cfg = cfg
        self.source = source

    def fail(self, key: str, value: object, why: str) -> ModelError:
        return ModelError(f"{key}={show(value)} in {self.source}: {why}")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def integer(self, key: str, default: Any = MISSING, *, minimum: int = 1) -> int:
        value = self.cfg.get(key)
        if value is None:
            if default is MISSING:
                raise ModelError(f"{key} missing in {self.source}: required {self.kind_note}")
            return int(default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, value, "must be an integer")
        if value < minimum:
            kind = "a positive" if minimum == 1 else "a non-negative"
            raise self.fail(key, value, f"must be {kind} integer")
        limit = MAX_POSITIONS if "position" in key else MAX_MODEL_DIM
        if value > limit:
            raise self.fail(key, value, f"must be at most {limit}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, value, "must be true or false")
        return value

    def string(self, key: str) -> str | None:
        value = self.cfg.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(key, value, "must be a string")
        return value

    @property
    def kind_note(self) -> str:
        model_type = self.cfg.get("model_type")
        return f"for model_type={model_type!r}" if isinstance(model_type, str) else "field"


def dtype_of(r: Reader) -> str:
    key = "torch_dtype" if r.has("torch_dtype") else "dtype"  # newer transformers: "dtype"
    value = r.string(key)
    if value is None:
        return "bf16"
    if value not in HF_DTYPES:
        valid = ", ".join(k for k in HF_DTYPES if k.endswith("16") or k.endswith("32"))
        raise r.fail(key, value, f"unsupported dtype; valid: {valid}")
    return HF_DTYPES[value]


def heads_of(r: Reader, d: int, heads_key: str, heads: int) -> tuple[int, int]:
    """(num_kv_heads, head_dim), checked against the query head count."""
    kv_heads = r.integer("num_key_value_heads", heads)  # absent: multi-head attention
    if heads % kv_heads != 0:
        raise r.fail(
            "num_key_value_heads", kv_heads, f"must divide {heads_key}={heads} (grouped heads)"
        )
    if r.has("head_dim"):
        return kv_heads, r.integer("head_dim")
    if d % heads != 0:
        raise r.fail(
            "hidden_size", d, f"not divisible by {heads_key}={heads} (and no head_dim given)"
        )
    return kv_heads, d // heads


def layer_list(r: Reader, key: str, layers: int) -> list[Any]:
    """``key``: a list of one entry per layer (``layer_types``), or [] when absent."""
    value = r.cfg.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or len(value) != layers:
        raise r.fail(key, value, f"must be a list of {layers} entries, one per layer")
    return value


def quant_method(r: Reader) -> str | None:
    """``quantization_config.quant_method`` (fp8, mxfp4, ...), or None when unquantised."""
    q = r.cfg.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict) or not isinstance(q.get("quant_method"), str):
        raise r.fail("quantization_config", q, "must be an object with a quant_method string")
    return str(q["quant_method"])


def top_k(r: Reader, experts: int) -> int:
    k = r.integer("num_experts_per_tok")
    if k > experts:
        raise r.fail("num_experts_per_tok", k, f"must be at most the {experts} experts")
    return k


__all__ = [
    "HF_DTYPES",
    "MISSING",
    "Reader",
    "dtype_of",
    "heads_of",
    "layer_list",
    "quant_method",
    "show",
    "top_k",
    "where_of",
]
