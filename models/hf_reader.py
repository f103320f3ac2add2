"""Typed, validated reads of one Hugging Face ``config.json`` dict: what every family reader
(:mod:`tpsim.models.families`) uses. Every malformed value raises ModelError naming the key
and the source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpsim.models.dtypes import INT4_GROUP
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


#: ``quantization_config.quant_method`` values whose linear layers tpsim runs in one of its
#: dtypes: block- or row-scaled e4m3 (transformers' FineGrainedFP8, DeepSeek-V3's and
#: Qwen3's -FP8 checkpoints; FBGEMM's row-scaled fp8). The linear layers a checkpoint's skip
#: list leaves 16-bit (Meta's Llama-3.1-405B-FP8: attention, its first and last layers) are
#: read by :func:`tpsim.models.hf_skiplist.with_skip_lists`.
FP8_METHODS = ("fp8", "fbgemm_fp8")
#: ``quant_method`` values of 4-bit integer weights with group scales and zero points
#: (AutoAWQ's and AutoGPTQ/GPTQModel's checkpoints; vLLM runs both with Marlin: ``int4``).
INT4_METHODS = ("awq", "gptq")
#: The quantisations of :func:`linear_dtype` in words, for its refusals.
MODELLED_QUANT = "fp8, fbgemm_fp8, awq/gptq int4 g128, compressed-tensors fp8/NVFP4/W4A16, modelopt"


def weight_block(r: Reader) -> tuple[int, ...]:
    """A block-scaled fp8 checkpoint's ``quantization_config.weight_block_size`` ([rows,
    columns] of one scale: DeepSeek-V3's and Qwen3's FP8 releases, [128, 128]), or an
    llm-compressor one's ``block_structure`` (its weights' ``strategy: block``, the
    FP8_BLOCK scheme, which vLLM's compressed-tensors fp8 loads with the same block check);
    () for any other checkpoint."""
    method = quant_method(r)
    if method == "compressed-tensors":
        return _compressed_block(r, r.cfg["quantization_config"])
    if method not in FP8_METHODS:
        return ()
    return _block(r, "quantization_config.weight_block_size",
                  r.cfg["quantization_config"].get("weight_block_size"))  # fmt: skip


def _block(r: Reader, key: str, block: object) -> tuple[int, ...]:
    if block is None:
        return ()
    if (
        not isinstance(block, list)
        or len(block) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        raise r.fail(key, block, "must be two positive integers [rows, columns]")
    return (int(block[0]), int(block[1]))


def _compressed_block(r: Reader, q: dict[str, Any]) -> tuple[int, ...]:
    """The [rows, columns] block of a compressed-tensors checkpoint's block-scaled weights
    (every group's, which must agree); () where no group is block-scaled."""
    groups = q.get("config_groups")
    found: set[tuple[int, ...]] = set()
    for name, group in groups.items() if isinstance(groups, dict) else ():
        weights = group.get("weights") if isinstance(group, dict) else None
        if isinstance(weights, dict) and weights.get("strategy") == "block":
            key = f"quantization_config.config_groups.{name}.weights.block_structure"
            block = weights.get("block_structure")
            if block is None:
                raise r.fail(key, None, "must be [rows, columns] where strategy is block")
            found.add(_block(r, key, block))
    if len(found) > 1:
        raise r.fail("quantization_config.config_groups", sorted(found),
                     "mixes weight blocks across layers; not modelled")  # fmt: skip
    return found.pop() if found else ()


def linear_dtype(r: Reader) -> str:
    """The dtype of the checkpoint's linear layers: its ``quantization_config``'s format
    where tpsim runs it (fp8 or NVFP4: ``fp4``), else ``torch_dtype``'s. Any other
    quantisation (bitsandbytes, 8-bit or 3-bit integers, other AWQ/GPTQ group sizes, ...) is
    refused naming it: sized as the 16-bit model it is not, its weights would be 2-4x too
    large. AWQ and GPTQ 4-bit checkpoints in groups of 128 are ``int4`` (W4A16, Marlin)."""
    method = quant_method(r)
    if method is None:
        return dtype_of(r)
    q = r.cfg["quantization_config"]
    if method in FP8_METHODS:
        return "fp8"
    if method in INT4_METHODS:
        bits = q.get("bits", q.get("w_bit"))
        if bits != 4:
            raise r.fail("quantization_config.bits", bits,
                         f"not modelled; modelled: {MODELLED_QUANT}")  # fmt: skip
        _int4_group(r, "quantization_config", q.get("group_size", q.get("q_group_size")))
        return "int4"
    if method == "modelopt":
        algo = q.get("quant_algo")
        formats = {"FP8": "fp8", "NVFP4": "fp4"}
        if algo not in formats:
            raise r.fail("quantization_config.quant_algo", algo,
                         f"not modelled; modelled: {MODELLED_QUANT}")  # fmt: skip
        return formats[algo]
    if method == "compressed-tensors":
        return _compressed_tensors(r, q)
    raise r.fail(
        "quantization_config.quant_method",
        method,
        f"not modelled (its weights are not a format tpsim prices); modelled: {MODELLED_QUANT}",
    )


def _compressed_tensors(r: Reader, q: dict[str, Any]) -> str:
    """llm-compressor's format: every config group's weights 8-bit float (fp8) or 4-bit
    float in groups of 16 (NVFP4)."""
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise r.fail("quantization_config.config_groups", groups,
                     "must be an object of quantisation groups")  # fmt: skip
    found = set()
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        key = f"quantization_config.config_groups.{name}.weights"
        if not isinstance(weights, dict):
            raise r.fail(key, weights, "must be an object with num_bits and type")
        form = (weights.get("type"), weights.get("num_bits"))
        if form == ("float", 8):
            found.add("fp8")
        elif form == ("float", 4) and weights.get("group_size") == 16:
            found.add("fp4")
        elif form == ("int", 4):  # W4A16 (integer activations are not modelled)
            acts = group.get("input_activations")
            if acts:
                raise r.fail(f"quantization_config.config_groups.{name}.input_activations",
                             acts, "integer activations (W4A8) not modelled; W4A16 is")  # fmt: skip
            _int4_group(r, key, weights.get("group_size"))
            found.add("int4")
        else:
            shown = f"{form[0]} {form[1]}-bit"
            raise r.fail(key, shown, f"not modelled; modelled: {MODELLED_QUANT}")
    if len(found) > 1:
        raise r.fail("quantization_config.config_groups", sorted(found),
                     "mixes weight formats across layers; not modelled")  # fmt: skip
    return found.pop()


def declared_kv_dtype(r: Reader) -> str:
    """The KV cache's dtype a quantised checkpoint declares: ModelOpt's
    ``quantization_config.kv_cache_quant_algo`` (``FP8``; nvidia's FP8 and FP4 releases
    made with ModelOpt's default fp8 cache) or llm-compressor's ``kv_cache_scheme`` (8-bit
    float); "" where it declares none (null or absent). vLLM, SGLang and TensorRT-LLM run
    such a cache in fp8 under their default ``auto`` (vLLM's resolve_kv_cache_dtype_string
    and compressed-tensors' Attention set-up, SGLang's ModelRunner.configure_kv_cache_dtype,
    TensorRT-LLM's load_modelopt_quant_config); any other declared format is refused."""
    method = quant_method(r)
    q: dict[str, Any] = r.cfg.get("quantization_config") or {}
    if method == "modelopt":
        algo = q.get("kv_cache_quant_algo")
        if algo is None:
            return ""
        if algo != "FP8":
            raise r.fail("quantization_config.kv_cache_quant_algo", algo,
                         "not modelled; modelled: FP8 (or none)")  # fmt: skip
        return "fp8"
    if method == "compressed-tensors":
        scheme = q.get("kv_cache_scheme")
        if scheme is None:
            return ""
        form = (scheme.get("type"), scheme.get("num_bits")) if isinstance(scheme, dict) else None
        if form != ("float", 8):
            raise r.fail("quantization_config.kv_cache_scheme", scheme,
                         "not modelled; modelled: 8-bit float (or none)")  # fmt: skip
        return "fp8"
    return ""


def _int4_group(r: Reader, key: str, group: object) -> None:
    """Refuse 4-bit integer weights whose scales are not per group of 128 (``int4``'s
    bytes): per channel (-1) or in groups of 32 or 64 the checkpoint is 4-11% off."""
    if group != INT4_GROUP:
        raise r.fail(f"{key}.group_size", group,
                     f"not modelled; 4-bit integer weights are modelled in groups of "
                     f"{INT4_GROUP} (int4)")  # fmt: skip


def top_k(r: Reader, experts: int) -> int:
    k = r.integer("num_experts_per_tok")
    if k > experts:
        raise r.fail("num_experts_per_tok", k, f"must be at most the {experts} experts")
    return k


__all__ = [
    "HF_DTYPES",
    "MISSING",
    "Reader",
    "declared_kv_dtype",
    "dtype_of",
    "heads_of",
    "layer_list",
    "linear_dtype",
    "quant_method",
    "show",
    "top_k",
    "where_of",
]
