"""DeepEP's communication buffers and the hidden sizes its kernels take, as the V1 API the
serving engines call (``deep_ep.Buffer(group, num_nvl_bytes, num_rdma_bytes, ...)``: vLLM's
``DeepEPHTAll2AllManager`` / ``DeepEPLLAll2AllManager``, SGLang's ``DeepEPBuffer``) sizes
them, and as each engine asks (its profile's ``deepep_*`` keys).

A buffer has two parts: the NVLink buffer (``num_nvl_bytes``, peer memory the normal kernels
use inside a node) and the RDMA buffer (``num_rdma_bytes``, NVSHMEM's symmetric heap: the
normal kernels' across hosts, and the low-latency kernels' wherever they run). DeepEP's size
hints (csrc/config.hpp ``Config::get_nvl_buffer_size_hint``, ``get_rdma_buffer_size_hint``,
``get_low_latency_rdma_size_hint``) follow the normal kernels' per-rank-count configs
(deep_ep/buffer.py ``Buffer.get_dispatch_config`` / ``get_combine_config``): SMs, and the
tokens each channel's receive queue holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpsim.core.config import ceil_div

if TYPE_CHECKING:
    from tpsim.calibration.model import Engine
    from tpsim.core.lowering.experts import ExpertSplit
    from tpsim.models.spec import ModelSpec

#: csrc/kernels/configs.cuh NUM_MAX_NVL_PEERS: the ranks of one node; a group of more is
#: internode to DeepEP, ``ranks / 8`` RDMA ranks of 8 NVLink peers each
NVL_PEERS = 8
#: deep_ep/buffer.py ``Buffer.num_sms = 20``, which vLLM keeps (DeepEPAll2AllManagerBase
#: num_sms = 20, "the DeepEP default") and SGLang unless --deepep-config: 10 channels
NUM_SMS = 20
#: per token, beside its hidden bytes: its source metadata (internode::get_source_meta_bytes,
#: two ints), room for 128 top-k indices (int64) and weights (fp32) and 128 scales (fp32)
META_BYTES = 8 + 128 * 8 + 128 * 4 + 128 * 4
ALIGN = 128  # NUM_BUFFER_ALIGNMENT_BYTES


@dataclass(frozen=True, slots=True)
class Config:
    """``deep_ep.Config``: SMs, and the tokens a channel sends and receives at a time over
    NVLink and over RDMA (its RDMA receive tokens rounded up to a multiple of the sent)."""

    num_sms: int
    nvl_send: int
    nvl_recv: int
    rdma_send: int
    rdma_recv: int

    @property
    def rdma_recv_tokens(self) -> int:
        return ceil_div(self.rdma_recv, self.rdma_send) * self.rdma_send


#: deep_ep/buffer.py (V1, the API vLLM and SGLang call; DeepEP 04b06f7, the ranks vLLM's
#: DeepEPHTPrepareAndFinalize.available_rank_configs lists from DeepEP 9fe9021):
#: ``get_dispatch_config`` and ``get_combine_config`` by the group's ranks; any other count
#: fails there ("Unsupported number of EP ranks")
DISPATCH = {
    2: Config(NUM_SMS, 24, 256, 6, 128),
    4: Config(NUM_SMS, 6, 256, 6, 128),
    8: Config(NUM_SMS, 6, 256, 6, 128),
    16: Config(NUM_SMS, 16, 288, 20, 128),
    24: Config(NUM_SMS, 8, 288, 32, 128),
    32: Config(NUM_SMS, 8, 288, 32, 128),
    64: Config(NUM_SMS, 20, 288, 28, 128),
    128: Config(NUM_SMS, 20, 560, 32, 128),
    144: Config(NUM_SMS, 32, 720, 12, 128),
    160: Config(NUM_SMS, 28, 720, 12, 128),
}
COMBINE = {
    2: Config(NUM_SMS, 10, 256, 6, 128),
    4: Config(NUM_SMS, 9, 256, 6, 128),
    8: Config(NUM_SMS, 4, 256, 6, 128),
    16: Config(NUM_SMS, 2, 288, 28, 128),
    24: Config(NUM_SMS, 1, 288, 20, 128),
    32: Config(NUM_SMS, 1, 288, 20, 128),
    64: Config(NUM_SMS, 1, 288, 20, 128),
    128: Config(NUM_SMS, 1, 560, 12, 128),
    144: Config(NUM_SMS, 2, 720, 8, 128),
    160: Config(NUM_SMS, 2, 720, 8, 128),
}


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def nvl_hint(cfg: Config, hidden_bytes: int, ranks: int) -> int:
    """``Config::get_nvl_buffer_size_hint``: per channel and NVLink peer, its queue heads and
    tails and a receive queue of ``nvl_recv`` tokens with their metadata."""
    rdma_ranks, nvl_ranks = max(ranks // NVL_PEERS, 1), min(ranks, NVL_PEERS)
    per_peer = cfg.num_sms // 2 * nvl_ranks
    return _aligned(
        per_peer * (2 * rdma_ranks + 3) * 4 + per_peer * cfg.nvl_recv * (hidden_bytes + META_BYTES)
    )


def rdma_hint(cfg: Config, hidden_bytes: int, ranks: int) -> int:
    """``Config::get_rdma_buffer_size_hint``: 0 up to 8 ranks (no RDMA peer); else per
    channel and RDMA rank a send and a receive queue of the aligned ``rdma_recv`` tokens
    (metadata, and an int4 a token), their counters, and 1 MiB "to be safe"."""
    if ranks <= NVL_PEERS:
        return 0
    per_rank = cfg.num_sms // 2 * (ranks // NVL_PEERS)
    token = hidden_bytes + META_BYTES + 16
    return _aligned(
        per_rank * (NVL_PEERS * 2 + 2) * 2 * 4 + per_rank * cfg.rdma_recv_tokens * token * 2 + 2**20
    )


def low_latency_hint(tokens: int, hidden: int, experts: int) -> int:
    """``get_low_latency_rdma_size_hint`` (csrc/config.hpp ``LowLatencyLayout``), for
    ``tokens`` a rank: a dispatch message is 16 B of control and the token (bf16, or fp8 with
    a scale per 128 values, the larger), a combine message the token in bf16 and a bf16 pair
    per 128 values; two (odd and even) send buffers of the larger of ``tokens`` dispatch and
    ``experts x tokens`` combine messages, two receive buffers of ``experts x tokens`` of the
    larger message, and two signalling buffers of an int an expert."""
    scales = hidden // 128
    dispatch = 16 + max(2 * hidden, hidden + 4 * scales)
    combine = 4 * scales + 2 * hidden
    send = max(tokens * dispatch, experts * tokens * combine)
    recv = experts * tokens * max(dispatch, combine)
    return (2 * (send + recv + 4 * experts) + ALIGN) // ALIGN * ALIGN


def reserved_bytes(model: ModelSpec, experts: ExpertSplit, engine: Engine) -> int:
    """Bytes per GPU of the DeepEP buffers ``engine`` makes, held for the run whatever the
    batch, as an engine serving with both kernel modes makes them.

    NVLink buffer: the profile's ``deepep_nvl_MiB``, or the larger of DeepEP's hints for the
    dispatch and combine configs of the group's ranks (bf16 tokens). RDMA buffer: with
    ``deepep_rdma_MiB`` (vLLM) the low-latency manager's buffer and, when the group spans
    hosts, the high-throughput manager's own of that size; without it (SGLang) one buffer
    for both modes, the larger of the normal kernels' hint (0 up to 8 ranks) and the
    low-latency one. The low-latency buffer holds the profile's ``deepep_ll_tokens`` a rank
    of the hidden size the engine hands DeepEP (:func:`hidden_for`)."""
    ranks = experts.group
    d = hidden_for(model.hidden_size, engine, low_latency=True)
    low_latency = low_latency_hint(engine.deepep_ll_tokens, d, model.num_experts)
    hidden_bytes = 2 * hidden_for(model.hidden_size, engine, low_latency=False)
    configs = [c[ranks] for c in (DISPATCH, COMBINE) if ranks in c]
    if engine.deepep_nvl_MiB is not None:
        nvl = round(engine.deepep_nvl_MiB * 2**20)
    else:
        nvl = max((nvl_hint(c, hidden_bytes, ranks) for c in configs), default=0)
    if engine.deepep_rdma_MiB is not None:
        across = round(engine.deepep_rdma_MiB * 2**20) if experts.nodes > 1 else 0
        rdma = low_latency + across
    else:
        normal = max((rdma_hint(c, hidden_bytes, ranks) for c in configs), default=0)
        rdma = max(low_latency, normal)
    return nvl + rdma


def hidden_for(hidden: int, engine: Engine, *, low_latency: bool) -> int:
    """The hidden size ``engine`` hands DeepEP's low-latency or normal kernels: the model's,
    or (an engine that pads, vLLM's ``maybe_roundup_layer_hidden_size``) the next size the
    low-latency kernels are compiled for, and for the normal kernels the next multiple of
    512 bytes of bf16 (a warp's 32 int4 copies)."""
    if not engine.deepep_pad_hidden:
        return hidden
    if low_latency:
        return next((h for h in engine.deepep_hidden_sizes if h >= hidden), hidden)
    return ceil_div(hidden * 2, 512) * 512 // 2


def hidden_problem(model: ModelSpec, engine: Engine) -> str | None:
    """Why ``engine``'s DeepEP cannot take ``model``'s hidden size (None: it can): one its
    low-latency kernels were not compiled for, where the engine does not pad (SGLang: DeepEP's
    "Unsupported hidden" assertion at start-up), or one above the largest (vLLM's
    ValueError)."""
    d, sizes = model.hidden_size, engine.deepep_hidden_sizes
    if d in sizes or (engine.deepep_pad_hidden and d <= sizes[-1]):
        return None
    listed = ", ".join(str(h) for h in sizes)
    how = f"at most {sizes[-1]}, padded up to one of" if engine.deepep_pad_hidden else "only"
    return (
        f"--moe-a2a deepep: {model.name}'s hidden size {d} is not one DeepEP's low-latency "
        f"kernels take under engine {engine.name} ({how} {listed})"
    )


def ranks_problem(ranks: int) -> str | None:
    """Why DeepEP's normal kernels have no config for a group of ``ranks`` (None: they do)."""
    if ranks in DISPATCH:
        return None
    listed = ", ".join(str(r) for r in DISPATCH)
    return (
        f"--moe-a2a deepep: DeepEP's normal kernels have configs for groups of {listed} GPUs "
        f"(Buffer.get_dispatch_config), not {ranks}"
    )


__all__ = [
    "COMBINE",
    "DISPATCH",
    "Config",
    "hidden_for",
    "hidden_problem",
    "low_latency_hint",
    "nvl_hint",
    "ranks_problem",
    "rdma_hint",
    "reserved_bytes",
]
