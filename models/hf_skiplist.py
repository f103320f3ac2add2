"""The linear layers a quantised checkpoint's skip lists keep 16-bit, read into
``ModelSpec.kept_16bit`` (:mod:`tpsim.models.kept`).

A quantisation names the modules it leaves unquantised under one of :data:`SKIP_KEYS`, in
one of three syntaxes, each matched as its loader matches it:

- a module name (transformers' and vLLM's fp8 and fbgemm_fp8, AWQ): the module itself and
  every module inside it (``model.layers.0.mlp.down_proj``, ``model.layers.0`` for a whole
  layer, ``self_attn`` anywhere);
- ``re:`` and a regular expression (llm-compressor's compressed-tensors ``ignore``:
  ``re.match`` on each linear layer's name, and on a layer's FusedMoE ``experts``, as
  vLLM's ``should_ignore_layer`` does: ``re:.*self_attn.*``; at most :data:`MAX_REPEATS`
  repeats, each of one character, as Python's backtracking ``re`` runs them in bounded
  time);
- a pattern with ``*`` (ModelOpt's ``exclude_modules``: ``model.layers.*.self_attn*``).

Each entry is matched against the names the model's linear layers have in its checkpoint
(:func:`_module_names`: llama-style ``self_attn.q_proj`` ... ``mlp.down_proj``, MLA's
projections, ``mlp.experts`` and Mixtral's ``block_sparse_moe.experts.N.w1``, the shared
experts). What it covers must be whole GEMMs: q, k and v together (vLLM refuses a fused
layer whose shards differ), gate and up together, all of a layer's routed experts (one
FusedMoE). An entry that names only part of one, or nothing tpsim prices (a module it does
not know), is refused naming it; the LM head, embedding, routers, vision and MTP modules
(16-bit in tpsim already, or not loaded) are passed over.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from re import _parser  # type: ignore[attr-defined]  # the parsed form, to vet a regex
from typing import Any

from tpsim.models.hf_reader import Reader, quant_method
from tpsim.models.kept import GROUPS
from tpsim.models.spec import ModelSpec

#: The keys under which a quantisation method lists the modules it leaves in 16 bits:
#: transformers' and vLLM's fp8, fbgemm_fp8, AWQ (``modules_to_not_convert``),
#: llm-compressor's compressed-tensors (``ignore``), ModelOpt (``exclude_modules``, and
#: ``ignore`` in newer exports), vLLM's own fp8 config (``ignored_layers``).
SKIP_KEYS = ("modules_to_not_convert", "ignore", "exclude_modules", "ignored_layers")
#: A skip-list entry that names no linear layer tpsim prices but one it keeps 16-bit
#: already, or does not load: the LM head and embedding, an MoE router (``mlp.gate``,
#: ``block_sparse_moe.gate``, Qwen2-MoE's ``shared_expert_gate``, DeepSeek's
#: ``e_score_correction_bias``, gpt-oss's and Llama 4's ``router``), norms, and vision
#: (Llama 4's ``vision_model`` and ``multi_modal_projector``) or MTP modules.
_KEPT_16BIT = re.compile(
    r"lm_head|embed_tokens|e_score_correction_bias|router|visual|vision|multi_modal_projector"
    r"|mtp|norm"
    r"|(^|[.*:])(shared_expert_)?gate[$*]*$"
)
#: A checkpoint name's pieces of one GEMM: (group, layer, pieces).
Hit = tuple[str, int, frozenset[str]]


def _proj(prefix: str, up: str, gate: str, down: str) -> dict[str, tuple[str, set[str]]]:
    """A gated MLP's checkpoint names under ``prefix``: (group suffix, pieces)."""
    return {
        f"{prefix}.{gate}": ("up", {"gate"}),
        f"{prefix}.{up}": ("up", {"up"}),
        f"{prefix}.gate_up_proj": ("up", {"gate", "up"}),
        f"{prefix}.{down}": ("down", {"down"}),
    }


def _module_names(
    spec: ModelSpec, model_type: str | None
) -> tuple[dict[str, list[Hit]], dict[tuple[str, int], frozenset[str]]]:
    """The checkpoint names of ``spec``'s linear layers, each with the GEMM pieces it holds,
    and the pieces each (group, layer) has. Routed experts: the layer's ``experts`` module
    and its first and last experts' projections (an entry covering some experts only
    covers part of the pieces)."""
    leaves: dict[str, list[Hit]] = {}
    need: dict[tuple[str, int], frozenset[str]] = {}

    def add(name: str, group: str, layer: int, pieces: set[str]) -> None:
        leaves.setdefault(name, []).append((group, layer, frozenset(pieces)))
        need[group, layer] = need.get((group, layer), frozenset()) | frozenset(pieces)

    # Mixtral's and MiniMax-M2's experts: block_sparse_moe.experts.N.w1/w3/w2
    moe = "block_sparse_moe" if model_type in ("mixtral", "minimax_m2") else "mlp"
    shared = "shared_expert" if model_type == "qwen2_moe" else "shared_experts"
    # Llama 4 (Llama4ForConditionalGeneration's checkpoint): the language model under
    # language_model.model, its MLPs and experts under feed_forward (a bare text model's
    # model.layers names are tails of these)
    llama4 = model_type == "llama4_text"
    mlp = "feed_forward" if llama4 else "mlp"  # the dense MLP's and shared experts' parent
    if llama4:
        moe, shared = "feed_forward", "shared_expert"
    for i in range(spec.num_layers):
        p = f"language_model.model.layers.{i}" if llama4 else f"model.layers.{i}"
        if spec.is_mla:
            qs = ("q_a_proj", "q_b_proj") if spec.q_lora_rank else ("q_proj",)
            for proj in (*qs, "kv_a_proj_with_mqa", "kv_b_proj"):
                add(f"{p}.self_attn.{proj}", "qkv_proj", i, {proj})
        else:
            for proj in "qkv":
                add(f"{p}.self_attn.{proj}_proj", "qkv_proj", i, {proj})
            add(f"{p}.self_attn.qkv_proj", "qkv_proj", i, {"q", "k", "v"})
        add(f"{p}.self_attn.o_proj", "o_proj", i, {"o"})
        if not spec.is_moe_layer(i):
            for name, (part, pieces) in _proj(f"{p}.{mlp}", "up_proj", "gate_proj",
                                              "down_proj").items():  # fmt: skip
                if spec.gated_mlp or pieces == {"up"} or part == "down":
                    add(name, f"mlp_{part}", i, pieces)
            continue
        every = {f"{e}.{w}" for e in ("first", "last") for w in ("gate", "up", "down")}
        add(f"{p}.{moe}.experts", "experts", i, every)
        for e, which in ((0, "first"), (spec.num_experts - 1, "last")):
            ws = ("w3", "w1", "w2") if moe == "block_sparse_moe" else ("up_proj", "gate_proj",
                                                                        "down_proj")  # fmt: skip
            for name, (_, pieces) in _proj(f"{p}.{moe}.experts.{e}", *ws).items():
                add(name, "experts", i, {f"{which}.{w}" for w in pieces})
        if spec.shared_intermediate_size:
            for name, (part, pieces) in _proj(f"{p}.{mlp}.{shared}", "up_proj", "gate_proj",
                                              "down_proj").items():  # fmt: skip
                add(name, f"shared_{part}", i, pieces)
    return leaves, need


def _tree(leaves: dict[str, list[Hit]]) -> tuple[dict[str, list[Hit]], dict[str, list[Hit]]]:
    """Every name and every module above it, with the pieces of the leaves inside; and the
    same by every dotted tail of those names (``self_attn``, ``3.mlp``: a module named
    anywhere)."""
    tree: dict[str, list[Hit]] = {}
    for name, hits in leaves.items():
        parts = name.split(".")
        for n in range(1, len(parts) + 1):
            tree.setdefault(".".join(parts[:n]), []).extend(hits)
    tails: dict[str, list[Hit]] = {}
    for name, hits in tree.items():
        parts = name.split(".")
        for n in range(len(parts)):
            tails.setdefault(".".join(parts[n:]), []).extend(hits)
    return tree, tails


#: At most this many regular expressions and ``*`` patterns in a checkpoint's skip lists
#: (each is tried on every name; real lists hold a handful), and entries in all.
MAX_PATTERNS, MAX_ENTRIES = 64, 20_000
#: At most this many unbounded repeats in one regular expression (``.*`` and ``\d+``: two
#: in every list seen), and none of a group: Python's ``re`` backtracks, and ``(.*)*x``
#: takes exponential time on a 30-character name.
MAX_REPEATS = 2
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def _repeats(items: Any) -> int | None:
    """Unbounded repeats in a parsed regular expression, or None where one repeats more
    than one character (a group, an alternation)."""
    count = 0
    for op, av in items:
        name, subs = str(op), []
        if name in _REPEATS and av[1] > 1:
            body = list(av[2])
            if len(body) != 1 or str(body[0][0]) not in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
                return None
            count += 1
        elif name in _REPEATS:
            subs = [av[2]]
        elif name == "SUBPATTERN":
            subs = [av[3]]
        elif name == "BRANCH":
            subs = list(av[1])
        elif name in ("ASSERT", "ASSERT_NOT"):
            subs = [av[1]]
        elif name == "ATOMIC_GROUP":
            subs = [av]
        elif name == "GROUPREF_EXISTS":
            subs = [s for s in av[1:] if s is not None]
        for sub in subs:
            inner = _repeats(sub)
            if inner is None:
                return None
            count += inner
    return count


def _regex(entry: str, r: Reader, where: str) -> re.Pattern[str]:
    try:
        pattern = re.compile(entry[3:])
        repeats = _repeats(_parser.parse(entry[3:]))
    except re.error as err:
        raise r.fail(where, entry, f"not a regular expression ({err})") from None
    if repeats is None or repeats > MAX_REPEATS:
        raise r.fail(where, entry,
                     f"a regular expression tpsim does not run: at most {MAX_REPEATS} "
                     "repeats, each of one character (.*, \\d+), none of a group (they "
                     "backtrack exponentially)")  # fmt: skip
    return pattern


def _is_pattern(entry: object) -> bool:
    """A regular expression or a ``*`` pattern (tried on every name)."""
    return isinstance(entry, str) and (entry.startswith("re:") or any(c in entry for c in "*?["))


def _hits(entry: str, names: tuple[dict[str, list[Hit]], ...], r: Reader,
          where: str) -> list[Hit]:  # fmt: skip
    """What ``entry`` covers, matched in its syntax (the module docstring)."""
    leaves, tree, tails = names
    if entry.startswith("re:"):
        pattern = _regex(entry, r, where)
        return [h for name, hs in leaves.items() if pattern.match(name) for h in hs]
    if _is_pattern(entry):
        pattern = re.compile(fnmatch.translate(entry))
        return [h for name, hs in tree.items() if pattern.match(name) for h in hs]
    return tails.get(entry, [])


def with_skip_lists(r: Reader, spec: ModelSpec, model_type: str | None) -> ModelSpec:
    """``spec`` with the GEMMs its ``quantization_config``'s skip lists keep 16-bit
    (``kept_16bit``); refuses an entry that keeps part of a GEMM or names a module tpsim
    does not price. A checkpoint whose quantisation is its routed experts' own (gpt-oss's
    MXFP4: the rest is 16-bit already) is left as it is."""
    q = r.cfg.get("quantization_config")
    if quant_method(r) is None or spec.expert_dtype or not isinstance(q, dict):
        return spec
    lists = [(key, q[key]) for key in SKIP_KEYS if q.get(key) is not None]
    if not lists:
        return spec
    leaves, need = _module_names(spec, model_type)
    names = (leaves, *_tree(leaves))
    patterns = sum(_is_pattern(e) for _, es in lists if isinstance(es, list) for e in es)
    total = sum(len(es) for _, es in lists if isinstance(es, list))
    if patterns > MAX_PATTERNS or total > MAX_ENTRIES:
        key = "quantization_config." + lists[0][0]
        raise r.fail(key, f"{total} entries, {patterns} patterns",
                     f"at most {MAX_ENTRIES} entries and {MAX_PATTERNS} regular expressions "
                     "or patterns in its skip lists")  # fmt: skip
    covered: dict[tuple[str, int], set[str]] = {}
    named: dict[tuple[str, int], tuple[str, str]] = {}  # the first entry covering each
    for key, entries in lists:
        where = f"quantization_config.{key}"
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise r.fail(where, entries, "must be a list of module names")
        for entry in entries:
            hits = _hits(entry, names, r, where)
            if not hits:
                _not_priced(r, spec, where, entry)
            for group, layer, pieces in hits:
                covered.setdefault((group, layer), set()).update(pieces)
                named.setdefault((group, layer), (where, entry))
    kept: dict[str, list[int]] = {}
    for (group, layer), have in sorted(covered.items(), key=lambda kv: kv[0][1]):
        if have != need[group, layer]:
            where, entry = named[group, layer]
            raise r.fail(where, entry, _partial(group, layer))
        kept.setdefault(group, []).append(layer)
    pairs = tuple((g, tuple(kept[g])) for g in GROUPS if g in kept)
    return dataclasses.replace(spec, kept_16bit=pairs)


def _not_priced(r: Reader, spec: ModelSpec, where: str, entry: str) -> None:
    """Pass over an entry that covers none of the linear layers tpsim prices if it names a
    module tpsim keeps 16-bit already or does not load (:data:`_KEPT_16BIT`, a layer past
    ``num_hidden_layers``: an MTP layer); refuse any other."""
    if _KEPT_16BIT.search(entry):
        return
    index = re.search(r"layers\.(\d+)", entry)
    if index and int(index.group(1)) >= spec.num_layers:
        return
    if re.search(r"experts\.\d+", entry):
        raise r.fail(where, entry,
                     "keeps one routed expert 16-bit; a layer's experts load as one FusedMoE "
                     "in one format (vLLM): listed one by one, not modelled")  # fmt: skip
    raise r.fail(where, entry,
                 "names no attention, MLP or expert projection tpsim prices (nor an LM "
                 "head, embedding, router or MTP layer): what it leaves 16-bit is not "
                 "modelled")  # fmt: skip


def _partial(group: str, layer: int) -> str:
    what = GROUPS[group]
    if group == "experts":
        return (f"keeps some of layer {layer}'s {what} 16-bit; a layer's experts load as "
                "one FusedMoE in one format (vLLM), so this mix is not modelled")  # fmt: skip
    return (f"keeps part of layer {layer}'s {what} 16-bit; vLLM refuses a fused layer "
            "(q|k|v, gate|up) whose shards differ in format: not modelled")  # fmt: skip


__all__ = ["SKIP_KEYS", "with_skip_lists"]
