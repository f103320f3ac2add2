"""The mixture-of-experts part of a ModelSpec: its checks, and what follows from the
router, the routed experts and the shared experts (parameter counts, experts read).

Every layer not in ``dense_layers`` replaces the MLP with a router [d, E], E routed experts
(gate, up [d, Im], down [Im, d]; each token picks ``experts_per_token`` k of them) and the
shared experts (gate, up [d, Is], down [Is, d], on every token). E = 0 is a dense model.
"""

from __future__ import annotations

from tpsim.models.attention import MAX_MODEL_DIM
from tpsim.models.attention import is_int as _is_int
from tpsim.models.attention import short as _short
from tpsim.models.errors import ModelError

#: Mixture-of-experts sizes: 0 (the default) in a dense model.
MOE_INT_FIELDS = (
    "num_experts",
    "experts_per_token",
    "moe_intermediate_size",
    "shared_intermediate_size",
)


class ExpertShapes:
    """The mixture-of-experts part of a ModelSpec (its fields are the dataclass's)."""

    hidden_size: int
    num_layers: int
    gated_mlp: bool
    mlp_bias: bool
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    shared_intermediate_size: int
    dense_layers: tuple[int, ...]
    expert_dtype: str

    def _check_moe(self, where: str) -> None:
        for field in MOE_INT_FIELDS:
            value = getattr(self, field)
            if not _is_int(value) or value < 0:
                raise ModelError(f"{field}={value!r} {where}: must be a non-negative integer")
            if value > MAX_MODEL_DIM:
                raise ModelError(f"{field}={value!r} {where}: must be at most {MAX_MODEL_DIM}")
        dense = self.dense_layers
        if not isinstance(dense, tuple) or not all(_is_int(i) for i in dense):
            raise ModelError(f"dense_layers={dense!r} {where}: must be a tuple of layer indices")
        if not self.num_experts:
            for field in (*MOE_INT_FIELDS[1:], "dense_layers", "expert_dtype"):
                if getattr(self, field):
                    raise ModelError(
                        f"{field}={getattr(self, field)!r} {where}: needs num_experts > 0"
                    )
            return
        k, experts = self.experts_per_token, self.num_experts
        if not 1 <= k <= experts:
            raise ModelError(
                f"experts_per_token={k!r} {where}: must be from 1 to num_experts={experts}"
            )
        if self.moe_intermediate_size <= 0:
            raise ModelError(
                f"moe_intermediate_size={self.moe_intermediate_size!r} {where}: must be a "
                "positive integer in a mixture-of-experts model"
            )
        if not self.gated_mlp or self.mlp_bias:
            raise ModelError(
                f"num_experts={experts} {where}: experts are modelled as gated, bias-free MLPs "
                "only (gated_mlp true, mlp_bias false)"
            )
        if list(dense) != sorted(set(dense)) or any(not 0 <= i < self.num_layers for i in dense):
            raise ModelError(
                f"dense_layers={_short(dense)} {where}: must be distinct layer indices from 0 "
                f"to {self.num_layers - 1}, in order"
            )

    @property
    def is_moe(self) -> bool:
        """Whether any layer routes its tokens to experts."""
        return self.num_experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        """Whether ``layer`` (0-based) has routed experts instead of the dense MLP."""
        return self.num_experts > 0 and layer not in self.dense_layers

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - len(self.dense_layers) if self.num_experts else 0

    def expert_params(self) -> int:
        """One routed expert: gate, up [d, Im] and down [Im, d]."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    def router_params(self) -> int:
        """The router of one MoE layer: [d, E]."""
        return self.hidden_size * self.num_experts

    def shared_expert_params(self) -> int:
        """The shared experts of one MoE layer: gate, up [d, Is] and down [Is, d]."""
        return 3 * self.hidden_size * self.shared_intermediate_size

    def moe_params_per_layer(self, experts: int | None = None) -> int:
        """The FFN of one MoE layer: router, ``experts`` routed experts (default all E) and the
        shared experts."""
        used = self.num_experts if experts is None else experts
        return self.router_params() + used * self.expert_params() + self.shared_expert_params()

    def experts_read(self, tokens: int) -> float:
        """Expected distinct routed experts that ``tokens`` tokens pick in one MoE layer under
        uniform routing: ``E * (1 - (1 - k/E) ** tokens)`` (each expert is missed by one
        token with probability 1 - k/E). 1 token: k; many tokens: E."""
        if not self.num_experts or tokens <= 0:
            return 0.0
        e, k = self.num_experts, self.experts_per_token
        return e * (1.0 - (1.0 - k / e) ** tokens)

    def expert_weight_params(self) -> int:
        """Parameters of every routed expert of every layer (the MoE weights in
        ``expert_dtype``)."""
        return self.num_moe_layers * self.num_experts * self.expert_params()
