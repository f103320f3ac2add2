"""Load a ModelSpec from a local Hugging Face ``config.json``. Never touches the network.

Supported ``model_type`` values and the layout each implies:

========  ==============================  =====  =========  ===============  =========  ====
type      size keys                       MLP    norm       biases           positions  tied
========  ==============================  =====  =========  ===============  =========  ====
llama     hidden_size, num_hidden_layers  gated  rmsnorm    attention_bias,  rotary     no
          num_attention_heads, ...                          mlp_bias keys
mistral   (as llama)                      gated  rmsnorm    none             rotary     no
qwen2     (as llama)                      gated  rmsnorm    q, k, v          rotary     no
gpt_neox  (as llama)                      plain  layernorm  all linears      rotary     no
gpt2      n_embd, n_layer, n_head, ...    plain  layernorm  all linears      learned    yes
opt       (as llama), ffn_dim             plain  layernorm  all linears      learned    yes
qwen3     (as llama), head_dim            gated  rmsnorm    attention_bias   rotary     no
========  ==============================  =====  =========  ===============  =========  ====

qwen3 adds an RMSNorm on each query and key head (``qk_norm``). Mixture-of-experts families
(gated experts, rmsnorm, rotary, untied by default; ``num_experts_per_tok`` experts per
token):

==========  ==================  ==============================  ========================
type        experts             expert width                    shared experts, dense
==========  ==================  ==============================  ========================
mixtral     num_local_experts   intermediate_size               none
qwen2_moe   num_experts         moe_intermediate_size           shared_expert_intermediate
                                                                _size; mlp_only_layers,
                                                                decoder_sparse_step
qwen3_moe   num_experts         moe_intermediate_size           none; as qwen2_moe
==========  ==================  ==============================  ========================

qwen2_moe's sigmoid gate on the shared expert ([d, 1] per layer) is not counted; qwen3_moe
has qwen3's q/k norms, qwen2_moe qwen2's q, k, v biases. ``norm_topk_prob`` changes no cost.
DeepSeek-V2/V3 (multi-head latent attention) and gpt-oss are refused, naming what is not
modelled yet. Each family is one reader in :data:`FAMILIES`.

"tied" is the default when ``tie_word_embeddings`` is absent. An absent
``num_key_value_heads`` means multi-head attention; an explicit ``head_dim`` wins over
hidden_size // heads. ``torch_dtype`` (or ``dtype``) maps bfloat16/float16/float32 to
bf16/fp16/fp32; absent means bf16.

Any other (or absent) model_type whose config has the llama keys loads as llama-like.
Every malformed input raises ModelError with a one-line message naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpsim.calibration.bounded import ReadRefused, read_text, shorten
from tpsim.models.errors import ModelError
from tpsim.models.spec import MAX_MODEL_DIM, MAX_POSITIONS, ModelSpec

#: A config.json is a few KB; anything above this is not one (and is not read into memory).
MAX_CONFIG_BYTES = 10 * 10**6

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

_LLAMA_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)
#: Fields of layer structures tpsim does not model yet (mixture-of-experts routing and expert
#: FFNs, multi-head latent attention). A config that sets one is refused, never timed as the
#: dense model its other fields describe (a Mixtral read as a dense 7B is ten times off).
UNMODELLED_FIELDS = {
    "num_local_experts": "mixture-of-experts (Mixtral)",
    "num_experts": "mixture-of-experts (Qwen-MoE)",
    "n_routed_experts": "mixture-of-experts (DeepSeek)",
    "num_experts_per_tok": "mixture-of-experts routing",
    "moe_intermediate_size": "mixture-of-experts FFN",
    "kv_lora_rank": "multi-head latent attention (DeepSeek)",
    "q_lora_rank": "multi-head latent attention (DeepSeek)",
}
#: Families tpsim knows and does not model yet: model_type and what is missing.
REFUSED_TYPES = {
    "deepseek_v2": "multi-head latent attention (kv_lora_rank) is not modelled yet",
    "deepseek_v3": "multi-head latent attention (kv_lora_rank) is not modelled yet",
    "gpt_oss": (
        "gpt-oss's alternating sliding-window attention, attention sinks and MXFP4 experts "
        "are not modelled yet"
    ),
}

_MISSING = object()


def _show(value: object) -> str:
    """repr of a value, cut short so a message stays readable and on one line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _where(path: Path | str) -> str:
    text = str(path)
    return text if text.isprintable() else repr(text)


class _Reader:
    """Typed, validated access to the keys of one config dict; errors name the source."""

    def __init__(self, cfg: dict[str, Any], source: str) -> None:
        self.cfg = cfg
        self.source = source

    def fail(self, key: str, value: object, why: str) -> ModelError:
        return ModelError(f"{key}={_show(value)} in {self.source}: {why}")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> int:
        value = self.cfg.get(key)
        if value is None:
            if default is _MISSING:
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


def _dtype(r: _Reader) -> str:
    key = "torch_dtype" if r.has("torch_dtype") else "dtype"  # newer transformers: "dtype"
    value = r.string(key)
    if value is None:
        return "bf16"
    if value not in HF_DTYPES:
        valid = ", ".join(k for k in HF_DTYPES if k.endswith("16") or k.endswith("32"))
        raise r.fail(key, value, f"unsupported dtype; valid: {valid}")
    return HF_DTYPES[value]


def _heads(r: _Reader, d: int, heads_key: str, heads: int) -> tuple[int, int]:
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


def _llama_like(r: _Reader, name: str, model_type: str | None, **moe: Any) -> ModelSpec:
    """llama, mistral, qwen2, qwen3 (and the MoE families, whose expert fields are ``moe``)."""
    d = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    kv_heads, head_dim = _heads(r, d, "num_attention_heads", heads)
    qkv_bias = r.boolean("attention_bias", model_type in ("qwen2", "qwen2_moe"))
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=r.integer("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=r.integer("intermediate_size"),
        vocab_size=r.integer("vocab_size"),
        gated_mlp=True,
        tied_embeddings=r.boolean("tie_word_embeddings", False),
        dtype=_dtype(r),
        norm="rmsnorm",
        qkv_bias=qkv_bias,
        mlp_bias=r.boolean("mlp_bias", False),
        max_position_embeddings=r.integer("max_position_embeddings", 0, minimum=0),
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        **moe,
    )


def _mixtral(r: _Reader, name: str) -> ModelSpec:
    """Mixtral: a mistral whose every MLP is ``num_local_experts`` experts of width
    intermediate_size."""
    experts = r.integer("num_local_experts")
    return _llama_like(
        r,
        name,
        "mixtral",
        num_experts=experts,
        experts_per_token=_top_k(r, experts),
        moe_intermediate_size=r.integer("intermediate_size"),
    )


def _top_k(r: _Reader, experts: int) -> int:
    k = r.integer("num_experts_per_tok")
    if k > experts:
        raise r.fail("num_experts_per_tok", k, f"must be at most the {experts} experts")
    return k


def _qwen_moe(r: _Reader, name: str, model_type: str) -> ModelSpec:
    """qwen2_moe and qwen3_moe: layer i has experts unless it is in mlp_only_layers or
    (i + 1) is no multiple of decoder_sparse_step."""
    experts = r.integer("num_experts")
    layers = r.integer("num_hidden_layers")
    step = r.integer("decoder_sparse_step", 1)
    only = r.cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in only
    ):
        raise r.fail("mlp_only_layers", only, f"must be a list of layer indices below {layers}")
    dense = tuple(i for i in range(layers) if i in only or (i + 1) % step != 0)
    shared = 0
    if model_type == "qwen2_moe":
        shared = r.integer("shared_expert_intermediate_size", 0, minimum=0)
    return _llama_like(
        r,
        name,
        model_type,
        num_experts=experts,
        experts_per_token=_top_k(r, experts),
        moe_intermediate_size=r.integer("moe_intermediate_size"),
        shared_intermediate_size=shared,
        dense_layers=dense,
    )


def _gpt_neox(r: _Reader, name: str) -> ModelSpec:
    d = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    kv_heads, head_dim = _heads(r, d, "num_attention_heads", heads)
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=r.integer("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=r.integer("intermediate_size"),
        vocab_size=r.integer("vocab_size"),
        gated_mlp=False,
        tied_embeddings=r.boolean("tie_word_embeddings", False),
        dtype=_dtype(r),
        norm="layernorm",
        qkv_bias=True,
        mlp_bias=True,
        max_position_embeddings=r.integer("max_position_embeddings", 0, minimum=0),
    )


def _gpt2(r: _Reader, name: str) -> ModelSpec:
    d = r.integer("n_embd")
    heads = r.integer("n_head")
    if d % heads != 0:
        raise r.fail("n_embd", d, f"not divisible by n_head={heads}")
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=r.integer("n_layer"),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=d // heads,
        intermediate_size=r.integer("n_inner", 4 * d),
        vocab_size=r.integer("vocab_size"),
        gated_mlp=False,
        tied_embeddings=r.boolean("tie_word_embeddings", True),
        dtype=_dtype(r),
        norm="layernorm",
        qkv_bias=True,
        mlp_bias=True,
        max_position_embeddings=r.integer("n_positions"),
        learned_position_embeddings=True,
    )


def _opt(r: _Reader, name: str) -> ModelSpec:
    # word_embed_proj_dim (opt-350m's small projection) is ignored: hidden_size is used.
    # OPT's position table has 2 extra rows (an offset); not counted.
    d = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    if d % heads != 0:
        raise r.fail("hidden_size", d, f"not divisible by num_attention_heads={heads}")
    bias = r.boolean("enable_bias", True)
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=r.integer("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=d // heads,
        intermediate_size=r.integer("ffn_dim"),
        vocab_size=r.integer("vocab_size"),
        gated_mlp=False,
        tied_embeddings=r.boolean("tie_word_embeddings", True),
        dtype=_dtype(r),
        norm="layernorm",
        qkv_bias=bias,
        mlp_bias=bias,
        max_position_embeddings=r.integer("max_position_embeddings"),
        learned_position_embeddings=True,
    )


Family = Callable[[_Reader, str], ModelSpec]

#: The families tpsim models: model_type, its reader and the UNMODELLED_FIELDS it reads.
FAMILIES: dict[str, tuple[Family, tuple[str, ...]]] = {
    "gpt2": (_gpt2, ()),
    "gpt_neox": (_gpt_neox, ()),
    "llama": (lambda r, name: _llama_like(r, name, "llama"), ()),
    "mistral": (lambda r, name: _llama_like(r, name, "mistral"), ()),
    "mixtral": (_mixtral, ("num_local_experts", "num_experts_per_tok")),
    "opt": (_opt, ()),
    "qwen2": (lambda r, name: _llama_like(r, name, "qwen2"), ()),
    "qwen2_moe": (
        lambda r, name: _qwen_moe(r, name, "qwen2_moe"),
        ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    ),
    "qwen3": (lambda r, name: _llama_like(r, name, "qwen3"), ()),
    "qwen3_moe": (
        lambda r, name: _qwen_moe(r, name, "qwen3_moe"),
        ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    ),
}
SUPPORTED_TYPES = tuple(sorted(FAMILIES))


def spec_from_hf_dict(cfg: dict[str, Any], name: str, *, source: str = "config.json") -> ModelSpec:
    """The ModelSpec described by an already-parsed HF config dict.

    ``source`` names the origin (a path) in error messages.
    """
    if not isinstance(cfg, dict):
        raise ModelError(f"{source}: top level must be a JSON object, got {type(cfg).__name__}")
    r = _Reader(cfg, source)
    model_type = r.string("model_type")
    if model_type in REFUSED_TYPES:
        raise r.fail("model_type", model_type, REFUSED_TYPES[model_type])
    family = FAMILIES.get(model_type) if model_type is not None else None
    reads = family[1] if family else ()
    for key, what in UNMODELLED_FIELDS.items():
        value = cfg.get(key)
        if key not in reads and value not in (None, 0, 1) and value is not False:
            raise r.fail(
                key,
                value,
                f"{what} is not modelled by tpsim for model_type={model_type!r}, which would "
                f"time this config as a dense model; supported families: "
                f"{', '.join(SUPPORTED_TYPES)}",
            )
    if family is not None:
        return family[0](r, name)
    if model_type is None and all(k in cfg for k in _LLAMA_KEYS):
        return _llama_like(r, name, None)
    if model_type is None:
        raise ModelError(
            f"model_type missing in {source}: required unless the llama keys "
            f"({', '.join(_LLAMA_KEYS)}) are all present"
        )
    # a family tpsim does not know is refused, never run as the llama its keys resemble
    raise r.fail(
        "model_type",
        model_type,
        f"unsupported model family; supported: {', '.join(SUPPORTED_TYPES)} (or a config "
        "without model_type that has the llama keys)",
    )


class _NonFinite:
    """Stands in for NaN, Infinity or -Infinity, which Python's json accepts and JSON does not."""

    def __init__(self, token: str) -> None:
        self.token = token


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict, refusing a key given twice (Python's json keeps the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _key(name: str) -> str:
    return name if name.isprintable() and len(name) <= 60 else _show(name)


def _find_non_finite(cfg: Any) -> tuple[str, str] | None:
    """(key path, token) of the first NaN/Infinity in a parsed document, else None."""
    stack: list[tuple[str, Any]] = [("", cfg)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, _NonFinite):
            return key or "value", value.token
        if isinstance(value, dict):
            items = [(f"{key}.{_key(k)}" if key else _key(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(items))
    return None


def _model_name(cfg: Any, path: Path) -> str:
    """``_name_or_path``'s last component, else the folder of a config.json, else the stem."""
    if isinstance(cfg, dict):
        hinted = cfg.get("_name_or_path")
        if isinstance(hinted, str):
            last = hinted.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].strip()
            if last:  # control characters escaped: the name is printed to a terminal
                return shorten(last, 80)
    if path.name == "config.json" and path.parent.name:
        return path.parent.name
    return path.stem or "model"


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a local HF ``config.json`` (a file, or a directory that holds one)."""
    given = Path(path)
    try:
        is_dir = given.is_dir()
    except OSError as exc:  # e.g. a name longer than the file system allows
        raise ModelError(f"model={_show(str(given))}: cannot read ({exc.strerror})") from None
    file = given / "config.json" if is_dir else given
    where = _where(file)
    if is_dir and not file.is_file():
        raise ModelError(f"model={_show(str(given))}: directory has no config.json")
    try:
        text = read_text(file, MAX_CONFIG_BYTES, bom=False)
    except ReadRefused as exc:
        reason = str(exc)
        if reason.startswith("larger than"):
            reason += "; not a config.json"
        head = where if reason.startswith(("larger", "not UTF-8")) else f"model={_show(str(file))}"
        raise ModelError(f"{head}: {reason}") from None
    try:
        cfg = json.loads(text, parse_constant=_NonFinite, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ModelError(
            f"{_key(exc.key)} in {where}: given twice (JSON readers disagree on which wins)"
        ) from None
    except json.JSONDecodeError as exc:
        raise ModelError(
            f"{where}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:  # e.g. an integer with too many digits
        raise ModelError(f"{where}: not valid JSON: {str(exc)[:80]}") from None
    except RecursionError:
        raise ModelError(f"{where}: not valid JSON: nested too deeply") from None
    bad = _find_non_finite(cfg)
    if bad is not None:
        key, token = bad
        raise ModelError(f"{key}={token} in {where}: not a finite number (JSON has no {token})")
    if not isinstance(cfg, dict):
        raise ModelError(f"{where}: top level must be a JSON object, got {type(cfg).__name__}")
    return spec_from_hf_dict(cfg, _model_name(cfg, file), source=where)
