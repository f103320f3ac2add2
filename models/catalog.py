"""The model catalog: published architectures, and lookup by name or config.json path.

Each entry copies the numbers of the model's Hugging Face ``config.json`` (repo id beside
it); gpt3-175b has no published checkpoint and comes from its paper. The newer entries are
the published ``config.json`` files themselves, in ``configs/`` (named as the entry), read by
the one reader, :func:`tpsim.models.hf_config.load_hf_config`.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from tpsim.calibration.bounded import squash
from tpsim.models.errors import ModelError
from tpsim.models.hf_config import load_hf_config
from tpsim.models.spec import ModelSpec


def _llama(
    name: str,
    *,
    d: int,
    layers: int,
    heads: int,
    kv_heads: int,
    inner: int,
    vocab: int,
    max_pos: int,
    dtype: str = "bf16",
    qkv_bias: bool = False,
    window: int = 0,
) -> ModelSpec:
    """A llama-family model: gated SiLU MLP, rmsnorm, rotary positions, untied head;
    ``window``: every layer attends over that many last tokens (0: all of them)."""
    return ModelSpec(
        name=name,
        hidden_size=d,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=d // heads,
        intermediate_size=inner,
        vocab_size=vocab,
        dtype=dtype,
        qkv_bias=qkv_bias,
        max_position_embeddings=max_pos,
        sliding_window=window,
        sliding_layers=tuple(range(layers)) if window else (),
    )


_ENTRIES = [
    # Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1 (GPT-3 175B):
    # no HF checkpoint; gpt2-style layout (tied, learned positions, layernorm, biases).
    ModelSpec(
        name="gpt3-175b",
        hidden_size=12288,
        num_layers=96,
        num_heads=96,
        num_kv_heads=96,
        head_dim=128,
        intermediate_size=4 * 12288,
        vocab_size=50257,
        gated_mlp=False,
        tied_embeddings=True,
        norm="layernorm",
        qkv_bias=True,
        mlp_bias=True,
        max_position_embeddings=2048,
        learned_position_embeddings=True,
    ),
    # meta-llama/Llama-2-7b-hf
    _llama(
        "llama-2-7b",
        d=4096,
        layers=32,
        heads=32,
        kv_heads=32,
        inner=11008,
        vocab=32000,
        max_pos=4096,
        dtype="fp16",
    ),
    # meta-llama/Llama-2-13b-hf
    _llama(
        "llama-2-13b",
        d=5120,
        layers=40,
        heads=40,
        kv_heads=40,
        inner=13824,
        vocab=32000,
        max_pos=4096,
        dtype="fp16",
    ),
    # meta-llama/Llama-2-70b-hf
    _llama(
        "llama-2-70b",
        d=8192,
        layers=80,
        heads=64,
        kv_heads=8,
        inner=28672,
        vocab=32000,
        max_pos=4096,
        dtype="fp16",
    ),
    # meta-llama/Llama-3.1-8B
    _llama(
        "llama-3.1-8b",
        d=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        inner=14336,
        vocab=128256,
        max_pos=131072,
    ),
    # meta-llama/Llama-3.1-70B
    _llama(
        "llama-3.1-70b",
        d=8192,
        layers=80,
        heads=64,
        kv_heads=8,
        inner=28672,
        vocab=128256,
        max_pos=131072,
    ),
    # meta-llama/Llama-3.1-405B
    _llama(
        "llama-3.1-405b",
        d=16384,
        layers=126,
        heads=128,
        kv_heads=8,
        inner=53248,
        vocab=128256,
        max_pos=131072,
    ),
    # mistralai/Mistral-7B-v0.1 (its config's sliding_window: 4096 on every layer)
    _llama(
        "mistral-7b",
        d=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        inner=14336,
        vocab=32000,
        max_pos=32768,
        window=4096,
    ),
    # Qwen/Qwen2.5-72B (biases on q, k, v only)
    _llama(
        "qwen2.5-72b",
        d=8192,
        layers=80,
        heads=64,
        kv_heads=8,
        inner=29568,
        vocab=152064,
        max_pos=131072,
        qkv_bias=True,
    ),
    # LLaMA (v1) 33B, "LLaMA: Open and Efficient Foundation Language Models" (Touvron et al.
    # 2023, table 2: dimension 6656, 52 heads, 60 layers); FFN 17920, vocab 32000, 2048 positions
    _llama(
        "llama-33b",
        d=6656,
        layers=60,
        heads=52,
        kv_heads=52,
        inner=17920,
        vocab=32000,
        max_pos=2048,
        dtype="fp16",
    ),
    # codellama/CodeLlama-34b-hf
    _llama(
        "codellama-34b",
        d=8192,
        layers=48,
        heads=64,
        kv_heads=8,
        inner=22016,
        vocab=32000,
        max_pos=16384,
    ),
]

#: The published config.json files shipped as catalog entries (file stem = entry name).
CONFIGS = Path(__file__).parent / "configs"

#: Catalog of known models by lower-case name.
MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (*_ENTRIES, *(load_hf_config(f) for f in sorted(CONFIGS.glob("*.json"))))
}

#: Hugging Face ids (lower case) of the checkpoints each catalog entry describes: base and
#: instruct/chat variants share the architecture. ``--model meta-llama/Llama-3.1-70B-Instruct``
#: is the catalog's llama-3.1-70b (nothing is fetched).
HF_IDS: dict[str, str] = {
    hf.lower(): name
    for name, ids in {
        "llama-2-7b": ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-chat-hf"),
        "llama-2-13b": ("meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-13b-chat-hf"),
        "llama-2-70b": ("meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-70b-chat-hf"),
        "llama-3.1-8b": (
            "meta-llama/Llama-3.1-8B",
            "meta-llama/Llama-3.1-8B-Instruct",
            "meta-llama/Meta-Llama-3.1-8B",
            "meta-llama/Meta-Llama-3.1-8B-Instruct",
        ),
        "llama-3.1-70b": (
            "meta-llama/Llama-3.1-70B",
            "meta-llama/Llama-3.1-70B-Instruct",
            "meta-llama/Meta-Llama-3.1-70B",
            "meta-llama/Meta-Llama-3.1-70B-Instruct",
            "meta-llama/Llama-3.3-70B-Instruct",
        ),
        "llama-3.1-405b": (
            "meta-llama/Llama-3.1-405B",
            "meta-llama/Llama-3.1-405B-Instruct",
            "meta-llama/Meta-Llama-3.1-405B",
            "meta-llama/Meta-Llama-3.1-405B-Instruct",
        ),
        "mistral-7b": ("mistralai/Mistral-7B-v0.1", "mistralai/Mistral-7B-Instruct-v0.1"),
        "qwen2.5-72b": ("Qwen/Qwen2.5-72B", "Qwen/Qwen2.5-72B-Instruct"),
        "mixtral-8x7b": (
            "mistralai/Mixtral-8x7B-v0.1",
            "mistralai/Mixtral-8x7B-Instruct-v0.1",
        ),
        "mixtral-8x22b": (
            "mistralai/Mixtral-8x22B-v0.1",
            "mistralai/Mixtral-8x22B-Instruct-v0.1",
        ),
        "qwen3-32b": ("Qwen/Qwen3-32B",),
        "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Base"),
        "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B",),
        "deepseek-v3": (
            "deepseek-ai/DeepSeek-V3",
            "deepseek-ai/DeepSeek-V3-0324",
            "deepseek-ai/DeepSeek-R1",
            "deepseek-ai/DeepSeek-R1-0528",
        ),
        "gpt-oss-120b": ("openai/gpt-oss-120b",),
        "llama-4-scout": (
            "meta-llama/Llama-4-Scout-17B-16E",
            "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        ),
        "llama-4-maverick": (
            "meta-llama/Llama-4-Maverick-17B-128E",
            "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        ),
        "gpt-oss-20b": ("openai/gpt-oss-20b",),
        # M2.1 has M2's architecture and config (SGLang's docs/basic_usage/minimax_m2.md:
        # "only need to update the model name"; the same deployment commands)
        "minimax-m2": ("MiniMaxAI/MiniMax-M2", "MiniMaxAI/MiniMax-M2.1"),
        "qwen3-next-80b-a3b": (
            "Qwen/Qwen3-Next-80B-A3B-Instruct",
            "Qwen/Qwen3-Next-80B-A3B-Thinking",
        ),
        "codellama-34b": (
            "codellama/CodeLlama-34b-hf",
            "codellama/CodeLlama-34b-Instruct-hf",
            "codellama/CodeLlama-34b-Python-hf",
        ),
    }.items()
    for full in ids
    for hf in (full, full.split("/")[1])  # with or without the organisation
}


def _digits(name: str) -> str:
    return "".join(c for c in name if c.isdigit())


def _did_you_mean(key: str) -> str:
    """' (did you mean 'x'?)' for the catalog name closest to ``key``, or ''. Only a name with
    the same numbers is offered: llama-3.2-1b is no typo of llama-3.1-8b."""
    names = {**{n: n for n in MODELS}, **HF_IDS}
    squashed = {squash(n): name for n, name in names.items()}
    if squash(key) in squashed:
        return f" (did you mean {squashed[squash(key)]!r}?)"
    same = [n for n in names if _digits(n) == _digits(key)]
    close = difflib.get_close_matches(key, same, n=1, cutoff=0.75)
    return f" (did you mean {names[close[0]]!r}?)" if close else ""


def get_model(name_or_path: str | Path) -> ModelSpec:
    """A catalog model by name (case-insensitive), or the model of a local HF config.json.

    A path may name the file itself or a directory that holds ``config.json``. Nothing is
    ever fetched from a hub.
    """
    if isinstance(name_or_path, Path):
        return load_hf_config(name_or_path)
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ModelError(f"model={name_or_path!r}: must be a catalog name or a path")
    key = name_or_path.strip().lower()
    if key in MODELS:
        return MODELS[key]
    if key in HF_IDS:
        return MODELS[HF_IDS[key]]
    try:
        exists = Path(name_or_path).exists()
    except OSError:  # e.g. a name longer than the file system allows
        exists = False
    if exists:
        return load_hf_config(name_or_path)
    catalog = ", ".join(sorted(MODELS))
    shown = repr(name_or_path) if len(name_or_path) <= 60 else repr(name_or_path[:57]) + "..."
    hint = _did_you_mean(key)
    if "/" in name_or_path or "\\" in name_or_path or key.endswith(".json"):
        raise ModelError(
            f"model={shown}: no such file or directory{hint} (hub ids are not fetched; "
            f"give a local config.json, or a catalog name: {catalog})"
        )
    raise ModelError(
        f"model={shown}: unknown model{hint}; catalog: {catalog} or a path to a config.json"
    )
