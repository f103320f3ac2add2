"""Where a mixture-of-experts layer's tokens go: the expert-parallel split and each rank's load.

A MoE group of ``tp * attention_dp`` GPUs holds one copy of every MoE layer: its ``N`` routed
experts are split ``ep`` ways (``N / ep`` experts per expert-parallel rank) and each expert's
width ``moe_tp`` ways (``ep * moe_tp`` = the group), as TensorRT-LLM and AIConfigurator
name it. Two ways of moving tokens follow from the layout:

- **replicated tokens** (``attention_dp == 1``; vLLM's ``--enable-expert-parallel`` without
  data parallelism, TensorRT-LLM without attention DP): after the attention all-reduce every
  rank of the group holds the same ``T`` tokens; each computes the token-expert pairs routed
  to its own experts (its slice of their width) and one all-reduce sums the partial outputs,
  as with tensor-parallel experts (``ep == 1``: every rank holds ``1/tp`` of every expert);
- **dispatched tokens** (``attention_dp > 1``): every attention group holds its own tokens;
  each rank sends its share (``T / tp`` when the attention group has ``tp`` ranks) to the
  ranks holding their experts (the dispatch all-to-all), the experts compute, and the
  combine all-to-all brings each pair's output back (DeepEP, NCCL all-to-all, pplx).

Routing: each token picks ``k`` of the ``N`` experts. ``Options.expert_skew == 0`` routes
uniformly at random, and since the layer ends in a collective every rank waits for the one
the draw loads most: each rank runs at the expected maximum over the ``ep`` ranks of its
token-expert pairs (``Binomial(T k, 1/ep)`` each) and of the experts it reads
(``Binomial(N/ep, 1 - (1 - k/N)^T)``), :func:`expected_max`. ``expert_skew = S >= 1`` is a
deterministic load: the hottest expert takes ``S`` times the mean and every other expert an
even share of the rest, on the rank holding it (the layer's index modulo ``ep``, so each
rank is hot in its turn); ``S = 1`` is perfect balance. A routing histogram
(``Options.routing``, :func:`read_histogram`) gives each expert's share of the pairs, the
same in every layer or one row per layer: a rank's pairs are its experts' shares of ``T k``
and an expert is read when some token picks it (``1 - (1 - k share)^T``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from tpsim.core.errors import ConfigError
from tpsim.models.spec import ModelSpec


@dataclass(frozen=True)
class Load:
    """One rank's work in one MoE layer: token-expert ``pairs`` (rows of its grouped GEMMs)
    and the distinct ``experts_read`` whose weights it streams (a float: an expectation)."""

    pairs: int
    experts_read: float


@dataclass(frozen=True)
class ExpertSplit:
    """A MoE layer's split over its group (see the module's docstring)."""

    experts: int  # N routed experts
    top_k: int  # k experts per token
    tp: int  # attention tensor parallel
    attention_dp: int  # attention data-parallel groups sharing the MoE layers
    ep: int  # expert-parallel ranks
    moe_tp: int  # ranks splitting each expert's width
    skew: float = 0.0  # Options.expert_skew
    #: each expert's share of the pairs, per layer (one row: every layer); () when none
    histogram: tuple[tuple[float, ...], ...] = ()
    #: hosts the MoE group spans (set once the group is placed)
    nodes: int = 1
    #: DeepSeek's grouped routing: expert groups, and the groups a token may pick from
    groups: int = 0
    topk_groups: int = 0
    #: the hidden size DeepEP's low-latency and normal kernels carry a token in (an engine
    #: that pads it: tpsim.core.deepep_buffers.hidden_for); 0: the model's
    deepep_hidden: tuple[int, int] = (0, 0)
    #: the routed experts as the engine builds them (tpsim.core.expert_shapes): each
    #: expert's width per rank rounded up to a multiple of ``width_align``, and the hidden
    #: size their weights are built at and their GEMMs run at (0: the model's)
    width_align: int = 1
    expert_hidden: int = 0
    #: the tokens the engine's fused MoE kernels take at a time with replicated tokens
    #: (calibration Engine.fused_moe_chunk_tokens; 0: all of the step's at once)
    chunk_tokens: int = 0

    def nodes_hit(self) -> float:
        """Expected distinct hosts one token's ``k`` experts sit on (experts spread evenly
        over the group's hosts): ``n (1 - C(N - N/n, k) / C(N, k))``; with grouped routing
        whose groups nest in hosts, the token's ``topk_group`` groups decide it."""
        return self._parts_hit(self.nodes)

    def ranks_hit(self) -> float:
        """Expected distinct expert-parallel ranks one token's ``k`` experts sit on (1 when
        every rank holds a slice of every expert): what a dispatch that sends a token once
        to each rank holding some of its experts sends, per width slice."""
        return self._parts_hit(self.ep)

    def _parts_hit(self, n: int) -> float:
        """Expected distinct parts of ``n`` even parts of the experts one token's ``k``
        experts fall in."""
        if n <= 1 or not self.experts:
            return 1.0
        if self.groups and self.topk_groups and self.groups % n == 0:
            g = self.groups // n  # groups per host
            miss = math.comb(self.groups - g, self.topk_groups) / math.comb(
                self.groups, self.topk_groups
            )
        else:
            per = self.experts // n
            miss = math.comb(self.experts - per, self.top_k) / math.comb(self.experts, self.top_k)
        return n * (1.0 - miss)

    def node_dedup(self) -> float:
        """Network bytes per byte bound for another host when a token crosses to each host
        once and is forwarded inside it (DeepEP's normal kernels): the distinct remote hosts
        a token reaches over its remote token-expert pairs."""
        if self.nodes <= 1 or not self.top_k:
            return 1.0
        return min(1.0, self.nodes_hit() / self.top_k)

    @property
    def group(self) -> int:
        return self.tp * self.attention_dp

    @property
    def local_experts(self) -> int:
        """Routed experts each rank holds (its expert-parallel rank's share)."""
        return self.experts // self.ep

    @property
    def uneven(self) -> bool:
        """Whether expert-parallel ranks carry different loads (a skew or a histogram)."""
        return self.ep > 1 and (self.skew > 0 or bool(self.histogram))

    @property
    def dispatch(self) -> bool:
        """Whether tokens travel by all-to-all (attention data parallelism)."""
        return self.attention_dp > 1

    def ep_rank(self, group_rank: int) -> int:
        """The expert-parallel rank of a rank of the group: ranks ``e * moe_tp ..`` share
        expert slice ``e`` (its ``moe_tp`` width slices on neighbouring GPUs)."""
        return group_rank // self.moe_tp

    def routed_tokens(self, tokens: int) -> int:
        """Distinct tokens the group routes when each attention group holds ``tokens``."""
        return tokens * self.attention_dp

    def _hot_experts(self, ep_rank: int, layer: int) -> float:
        """Under ``expert_skew``: the mean loads (in experts' worth of pairs) that rank
        ``ep_rank``'s experts take in ``layer``: the hot expert ``s`` times the mean on the
        rank ``layer % ep``, the others the rest evenly."""
        n, local = self.experts, self.local_experts
        s = held_skew(self.skew, n, self.top_k)
        rest = (n - s) / (n - 1) if n > 1 else 1.0  # the others' share of the mean
        return s + (local - 1) * rest if ep_rank == layer % self.ep else local * rest

    def _histogram_rows(self, ep_rank: int, layer: int) -> tuple[float, ...]:
        """Under a routing histogram: the shares of the pairs rank ``ep_rank``'s experts take
        in ``layer``."""
        row = self.histogram[layer % len(self.histogram)]
        local = self.local_experts
        return row[ep_rank * local : (ep_rank + 1) * local]

    def rank_shares(self, layer: int) -> tuple[float, ...]:
        """Per rank of the group, its share of the bytes MoE layer ``layer``'s dispatch
        sends: its expert-parallel rank's experts' share of the token-expert pairs, over the
        ``moe_tp`` width slices of those experts (each pair goes to every slice); () under
        uniform routing (every rank alike)."""
        if not self.uneven:
            return ()
        if self.histogram:
            per_ep = [math.fsum(self._histogram_rows(r, layer)) for r in range(self.ep)]
        else:
            per_ep = [self._hot_experts(r, layer) / self.experts for r in range(self.ep)]
        return tuple(per_ep[self.ep_rank(g)] / self.moe_tp for g in range(self.group))

    def load(self, tokens: int, ep_rank: int, layer: int) -> Load:
        """The load of expert-parallel rank ``ep_rank`` in MoE layer ``layer`` when the group
        routes ``tokens`` distinct tokens."""
        n, k, e = self.experts, self.top_k, self.ep
        if tokens <= 0:
            return Load(0, 0.0)
        per_expert = tokens * k / n  # mean pairs per expert
        hit = 1.0 - (1.0 - k / n) ** tokens  # an expert is picked by some token
        local = self.local_experts
        if self.histogram:
            mine = self._histogram_rows(ep_rank, layer)
            pairs = tokens * k * sum(mine)
            read = sum(1.0 - (1.0 - min(1.0, k * x)) ** tokens for x in mine)
        elif not self.skew:
            # the busiest rank: the expected largest count over the ranks, each drawn alone;
            # it reads one expert at least (some rank holds each token's experts), which the
            # independent draws miss at a token or two (Mixtral, EP 8, one token: 0.90)
            pairs = expected_max(tokens * k, 1.0 / e, e)
            read = max(1.0, expected_max(local, hit, e))
        else:
            pairs = per_expert * self._hot_experts(ep_rank, layer)
            read = (1.0 + (local - 1) * hit) if ep_rank == layer % e else local * hit
        # rows are a GEMM's M (whole tokens); the experts read stay a mean, held to the
        # pairs (an expert read has a pair at least), not to their rounding: 1.375 pairs
        # rounded to 1 row read one expert where 1.42 are (Mixtral, EP 2, one token)
        rows = max(1, round(pairs)) if pairs > 0 else 0
        return Load(rows, min(read, max(pairs, 1.0) if pairs > 0 else 0.0))


@lru_cache(maxsize=4096)
def expected_max(trials: int, p: float, ranks: int) -> float:
    """The expected largest of ``ranks`` independent ``Binomial(trials, p)`` counts:
    ``sum over m >= 0 of 1 - F(m) ** ranks``. Exact summation while the counts are small
    (mean under 4096), else the normal approximation ``mu + sigma * z(ranks)`` with
    ``z(ranks)`` the expected largest of ``ranks`` standard normals. One rank: the mean."""
    mean = trials * p
    if ranks <= 1 or p <= 0.0 or p >= 1.0:
        return mean
    var = trials * p * (1.0 - p)
    if mean >= 4096:
        return min(float(trials), mean + math.sqrt(var) * _normal_max(ranks))
    # the pmf term by term from m = 0 (in logs: trials may be large), to where F ~ 1
    top = min(trials, int(mean + 12.0 * math.sqrt(var) + 12))
    log_q, log_p = math.log1p(-p), math.log(p)
    log_pmf = trials * log_q
    cdf, total = 0.0, 0.0
    for m in range(top + 1):
        if m:
            log_pmf += math.log(trials - m + 1) - math.log(m) + log_p - log_q
        cdf = min(1.0, cdf + math.exp(log_pmf))
        total += 1.0 - cdf**ranks
    return total


@lru_cache(maxsize=256)
def _normal_max(ranks: int) -> float:
    """The expected largest of ``ranks`` standard normals (numerical integration of
    ``1 - Phi(x) ** ranks`` minus ``Phi(x) ** ranks`` over x < 0)."""
    step, total = 1e-3, 0.0
    for i in range(-8000, 8000):
        x = (i + 0.5) * step
        cdf = 0.5 * math.erfc(-x / math.sqrt(2.0))
        total += (1.0 - cdf**ranks) if x >= 0 else -(cdf**ranks)
    return total * step


def read_histogram(
    path: str, experts: int, layers: int, top_k: int = 1
) -> tuple[tuple[float, ...], ...]:
    """A routing histogram file: tokens (or any weights) per expert, comma- or
    whitespace-separated, one line for every layer or one line per MoE layer (``#``
    comments and blank lines skipped); each line normalised to shares. A token picks an
    expert at most once among its ``top_k``, so no expert takes more than ``1 / top_k`` of
    the pairs. ConfigError naming the file and what is wrong."""
    from tpsim.calibration.bounded import ReadRefused, read_text, shorten

    where = f"routing={shorten(path, 80)}"
    try:
        text = read_text(path, 16 << 20)
    except ReadRefused as e:
        raise ConfigError(f"{where}: {e}") from None
    rows: list[tuple[float, ...]] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        cells = [c for c in line.replace(",", " ").split() if c]
        try:
            values = [float(c) for c in cells]
        except ValueError:
            raise ConfigError(f"{where} line {number}: not a list of numbers") from None
        if len(values) != experts:
            raise ConfigError(
                f"{where} line {number}: {len(values)} values, the model has {experts} experts"
            )
        bad = next((j for j, v in enumerate(values) if not (math.isfinite(v) and v >= 0)), None)
        if bad is not None:
            raise ConfigError(f"{where} line {number}: expert {bad}'s count is {cells[bad]}; "
                              "needs non-negative finite counts")  # fmt: skip
        total = sum(values)
        if not 0 < total < math.inf:
            raise ConfigError(f"{where} line {number}: every count is 0 (or they overflow)")
        shares = tuple(v / total for v in values)
        hot = max(range(experts), key=lambda e: shares[e])
        if shares[hot] > 1.0 / top_k + 1e-9:
            raise ConfigError(
                f"{where} line {number}: expert {hot} takes {shares[hot]:.1%} of the pairs; "
                f"with top-{top_k} routing a token picks an expert at most once, so at most "
                f"{1 / top_k:.1%}"
            )
        rows.append(shares)
    if not rows:
        raise ConfigError(f"{where}: no histogram in it (one line of {experts} counts)")
    if len(rows) not in (1, layers):
        raise ConfigError(f"{where}: {len(rows)} lines; give one, or one per MoE layer ({layers})")
    return tuple(rows)


def expert_split(
    model: ModelSpec,
    tp: int,
    attention_dp: int,
    ep: int,
    moe_tp: int,
    skew: float = 0.0,
    histogram: tuple[tuple[float, ...], ...] = (),
) -> ExpertSplit:
    """The split of ``model``'s MoE layers; ConfigError when it does not divide them."""
    if not model.is_moe:
        for name, value in (("ep", ep), ("attention_dp", attention_dp)):
            if value > 1:
                raise ConfigError(
                    f"{name}={value}: {model.name} has no experts (a dense model; use "
                    "--tp, --pp and --dp)"
                )
        if skew:
            raise ConfigError(f"expert_skew={skew:g}: {model.name} has no experts to skew")
        return ExpertSplit(0, 0, tp, 1, 1, tp)
    n = model.num_experts
    if n % ep:
        raise ConfigError(f"ep={ep}: must divide {model.name}'s {n} routed experts")
    if histogram and skew:
        raise ConfigError(f"expert_skew={skew:g}: give a skew or a routing histogram, not both")
    if len(histogram) > 1:  # one row per MoE layer: indexed by layer (dense layers unused)
        moe = iter(histogram)
        first = histogram[0]
        histogram = tuple(next(moe) if model.is_moe_layer(i) else first
                          for i in range(model.num_layers))  # fmt: skip
    return ExpertSplit(n, model.experts_per_token, tp, attention_dp, ep, moe_tp, skew, histogram,
                       groups=model.n_group, topk_groups=model.topk_group)  # fmt: skip


def held_skew(skew: float, experts: int, top_k: int) -> float:
    """The expert skew routing allows: an expert takes each token at most once, so the
    hottest of ``experts`` takes at most ``experts / top_k`` times the mean load."""
    return min(skew, experts / top_k)


__all__ = [
    "ExpertSplit",
    "Load",
    "expected_max",
    "expert_split",
    "held_skew",
    "read_histogram",
]
