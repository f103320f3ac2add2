"""Per-rank shard sizes of a Megatron tensor-parallel split: the one place they are computed.

Column-parallel QKV splits the query heads (and the KV heads, replicated when ``tp`` exceeds
them); column-parallel gate/up and row-parallel down split the MLP width; the embedding and
LM head split the vocabulary. Mixture-of-experts layers run their experts tensor-parallel
(no expert parallelism): every rank holds 1/tp of every routed and shared expert's width,
and the router [d, E] whole. Widths that ``tp`` does not divide are padded up, as
Megatron-LM and vLLM pad them. Multi-head latent attention's cache has no head to split:
one latent "KV head", held whole by every rank (replication ``tp``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpsim.core.config import ceil_div, kv_split
from tpsim.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Shard:
    """What one rank of a ``tp``-way group holds of each split dimension."""

    tp: int
    heads: int  # query heads per rank: num_heads / tp
    kv_heads: int  # KV heads per rank (1 when tp exceeds num_kv_heads)
    kv_replication: int  # ranks holding a copy of each KV head
    mlp_width: int  # MLP intermediate width per rank, ceil(I / tp) (padded)
    vocab: int  # vocabulary rows per rank, ceil(V / tp) (padded)
    expert_width: int = 0  # each routed expert's FFN width per rank, ceil(Im / tp)
    shared_width: int = 0  # the shared experts' FFN width per rank, ceil(Is / tp)


def shard(model: ModelSpec, tp: int) -> Shard:
    """The per-rank sizes of ``model`` split ``tp`` ways (``tp`` must split the heads:
    :func:`tpsim.core.config.tp_problem`)."""
    kv, replication = kv_split(tp, model.num_kv_heads)
    if model.is_mla:  # the latent cache is one KV "head" every rank holds whole
        kv, replication = 1, tp
    return Shard(
        tp=tp,
        heads=model.num_heads // tp,
        kv_heads=kv,
        kv_replication=replication,
        mlp_width=ceil_div(model.intermediate_size, tp),
        vocab=ceil_div(model.vocab_size, tp),
        expert_width=ceil_div(model.moe_intermediate_size, tp),
        shared_width=ceil_div(model.shared_intermediate_size, tp),
    )


__all__ = ["Shard", "shard"]
