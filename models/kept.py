"""The linear layers a quantised checkpoint keeps 16-bit: :class:`KeptModules`.

A quantisation's skip list (``modules_to_not_convert``, ``ignore``, ``exclude_modules``)
may leave some linear layers in the checkpoint's 16-bit dtype beside the quantised ones:
Meta's Llama-3.1-405B-Instruct-FP8 keeps attention on every layer and the MLP of its first
and last layers bf16 (Llama 3 paper, arXiv:2407.21783 sec. 6.2); NVIDIA's ModelOpt NVFP4
exports of MoE models keep attention 16-bit. A serving engine builds each skipped layer
unquantised (vLLM: ``UnquantizedLinearMethod``), so it stores 16-bit weights and runs a
16-bit GEMM at the 16-bit peak.

The unit kept is the GEMM the lowering prices (a group: vLLM fuses q/k/v and gate/up into
one layer, which it refuses to load half-quantised, and a layer's routed experts into one
FusedMoE), on listed layers. :data:`GROUPS` are those GEMMs; ``ModelSpec.kept_16bit`` holds
``(group, layers)`` pairs, in :data:`GROUPS` order, each group once, layers ascending.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tpsim.models.errors import ModelError

#: The GEMMs a checkpoint may keep 16-bit, and what each is in words.
GROUPS: dict[str, str] = {
    "qkv_proj": "attention QKV",  # MLA: q_a|kv_a, q_b (or q), kv_b
    "o_proj": "attention O",
    "mlp_up": "MLP gate/up",
    "mlp_down": "MLP down",
    "shared_up": "shared experts' gate/up",
    "shared_down": "shared experts' down",
    "experts": "routed experts",
}
#: Pairs of groups said as one word when kept on the same layers.
_BOTH = {
    ("qkv_proj", "o_proj"): "attention",
    ("mlp_up", "mlp_down"): "MLP",
    ("shared_up", "shared_down"): "shared experts",
}
#: The lowering's GEMMs (``tpsim.core.lowering``) and the group each belongs to.
GEMMS: dict[str, str] = {
    "qkv_proj": "qkv_proj",
    "qkv_a_proj": "qkv_proj",  # MLA: q_a | kv_a fused
    "q_proj": "qkv_proj",  # MLA without a q latent
    "kv_a_proj": "qkv_proj",
    "q_b_proj": "qkv_proj",
    "kv_b_proj": "qkv_proj",
    "o_proj": "o_proj",
    "mlp_up": "mlp_up",
    "mlp_down": "mlp_down",
    "shared_up": "shared_up",
    "shared_down": "shared_down",
    "experts_up": "experts",
    "experts_down": "experts",
}

Kept = tuple[tuple[str, tuple[int, ...]], ...]


def check_kept(kept: object, num_layers: int, where: str) -> None:
    """ModelError unless ``kept`` is ``(group, layers)`` pairs: known groups in
    :data:`GROUPS` order, each once, with ascending layer indices below ``num_layers``."""
    if not isinstance(kept, tuple):
        raise ModelError(f"kept_16bit={kept!r} {where}: must be a tuple of (group, layers)")
    order = list(GROUPS)
    last = -1
    for pair in kept:
        if not (isinstance(pair, tuple) and len(pair) == 2 and pair[0] in GROUPS):
            raise ModelError(
                f"kept_16bit={pair!r} {where}: must be (group, layers) with a group of "
                f"{', '.join(GROUPS)}"
            )
        group, layers = pair
        if order.index(group) <= last:
            raise ModelError(f"kept_16bit={group!r} {where}: groups once each, in order")
        last = order.index(group)
        ok = (
            isinstance(layers, tuple)
            and layers
            and all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers
                for i in layers
            )
        )
        if not ok or list(layers) != sorted(set(layers)):
            raise ModelError(
                f"kept_16bit[{group!r}]={layers!r} {where}: must be ascending layer indices "
                f"below num_layers={num_layers}"
            )


def layer_text(layers: tuple[int, ...], num_layers: int) -> str:
    """``layers`` in words: 'every layer', 'layer 3', 'layers 0, 125', runs as 'a-b'."""
    if len(layers) == num_layers:
        return "every layer"
    runs: list[str] = []
    start = prev = layers[0]
    for i in (*layers[1:], -2):
        if i == prev + 1:
            prev = i
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(runs)


@dataclass(frozen=True)
class KeptModules:
    """The GEMMs of a model's layers kept 16-bit (``kept``: ``ModelSpec.kept_16bit``), of
    ``num_layers`` layers; empty: every linear layer in the quantised format."""

    kept: Kept = ()
    num_layers: int = 0
    #: (group, layer) of every kept GEMM, for :meth:`has`
    _pairs: frozenset[tuple[str, int]] = field(
        init=False, default=frozenset(), compare=False, repr=False
    )

    def __post_init__(self) -> None:
        pairs = frozenset((g, i) for g, layers in self.kept for i in layers)
        object.__setattr__(self, "_pairs", pairs)

    def __bool__(self) -> bool:
        return bool(self.kept)

    def has(self, gemm: str, layer: int) -> bool:
        """Whether the lowering's GEMM ``gemm`` of ``layer`` is kept 16-bit."""
        group = GEMMS.get(gemm)
        return group is not None and (group, layer) in self._pairs

    def groups_of(self, layer: int) -> tuple[str, ...]:
        """The groups kept 16-bit on ``layer``."""
        return tuple(g for g, layers in self.kept if (g, layer) in self._pairs)

    @property
    def uniform(self) -> bool:
        """Whether every layer keeps the same groups (each on all layers or none)."""
        return all(len(layers) == self.num_layers for _, layers in self.kept)

    def first(self, n: int) -> Kept:
        """``kept`` of the first ``n`` layers only."""
        cut = ((g, tuple(i for i in layers if i < n)) for g, layers in self.kept)
        return tuple((g, layers) for g, layers in cut if layers)

    def describe(self) -> str:
        """The kept groups in words, those on the same layers together: 'attention on
        every layer; MLP on layers 0, 125' ('' when none)."""
        by_layers: dict[tuple[int, ...], list[str]] = {}
        for group, layers in self.kept:
            by_layers.setdefault(layers, []).append(group)
        parts = []
        for layers, groups in by_layers.items():
            words = []
            for group in groups:
                pair = next((p for p in _BOTH if group in p), None)
                if pair and all(g in groups for g in pair):
                    if group == pair[0]:
                        words.append(_BOTH[pair])
                    continue
                words.append(GROUPS[group])
            parts.append(f"{', '.join(words)} on {layer_text(layers, self.num_layers)}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, list[int]]:
        """``{group: [layers]}``: ``config.model.kept_16bit`` in a run's JSON."""
        return {group: list(layers) for group, layers in self.kept}


#: No GEMM kept 16-bit: every linear layer in the quantised format.
NONE_KEPT = KeptModules()

__all__ = ["GEMMS", "GROUPS", "NONE_KEPT", "Kept", "KeptModules", "check_kept", "layer_text"]
