"""Per-rank shard sizes of a Megatron tensor-parallel split: the one place they are computed.

Column-parallel QKV splits the query heads (and the KV heads, replicated when ``tp`` exceeds
them); column-parallel gate/up and row-parallel down split the MLP width; the embedding and
LM head split the vocabulary. Mixture-of-experts layers follow their
:class:`~tpsim.core.lowering.experts.ExpertSplit`: each rank holds ``N / ep`` routed experts
of ``1 / moe_tp`` of their width (by default ``ep = 1``, ``moe_tp = tp``: tensor-parallel
experts), the router [d, E] whole, and the shared experts split like the dense MLP (whole,
replicated, when tokens are dispatched: each rank runs them on its own tokens). Widths that
do not divide are padded up, as Megatron-LM and vLLM pad them; the routed experts also as the
engine rounds their width and hidden size for its MoE kernel (``ExpertSplit.width_align``,
``expert_hidden``: :mod:`tpsim.core.expert_shapes`). Multi-head latent
attention's cache has no head to split: one latent "KV head", held whole by every rank
(replication ``tp``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpsim.core.config import ceil_div, kv_split
from tpsim.core.lowering.experts import ExpertSplit
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
    expert_width: int = 0  # each routed expert's FFN width per rank, ceil(Im / moe_tp)
    shared_width: int = 0  # the shared experts' FFN width per rank, ceil(Is / tp)
    local_experts: int = 0  # routed experts per rank, N / ep
    #: the hidden size the routed experts' weights and GEMMs take: the model's, or as the
    #: engine pads it (ExpertSplit.expert_hidden)
    expert_hidden: int = 0


def shard(model: ModelSpec, tp: int, experts: ExpertSplit | None = None) -> Shard:
    """The per-rank sizes of ``model`` split ``tp`` ways (``tp`` must split the heads:
    :func:`tpsim.core.config.tp_problem`), its experts as ``experts`` says (default:
    tensor-parallel over the ``tp`` ranks)."""
    kv, replication = kv_split(tp, model.num_kv_heads)
    if model.is_mla:  # the latent cache is one KV "head" every rank holds whole
        kv, replication = 1, tp
    moe_tp, local = (experts.moe_tp, experts.local_experts) if experts else (tp, model.num_experts)
    align = experts.width_align if experts else 1
    shared_tp = 1 if experts and experts.dispatch else tp
    return Shard(
        tp=tp,
        heads=model.num_heads // tp,
        kv_heads=kv,
        kv_replication=replication,
        mlp_width=ceil_div(model.intermediate_size, tp),
        vocab=ceil_div(model.vocab_size, tp),
        expert_width=ceil_div(ceil_div(model.moe_intermediate_size, moe_tp), align) * align,
        shared_width=ceil_div(model.shared_intermediate_size, shared_tp),
        local_experts=local,
        expert_hidden=((experts.expert_hidden if experts else 0) or model.hidden_size)
        if model.is_moe
        else 0,
    )


__all__ = ["Shard", "shard"]
