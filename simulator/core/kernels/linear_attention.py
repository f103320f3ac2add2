"""The gated delta rule of a linear-attention (Gated DeltaNet) layer: its FLOPs and bytes, as
vLLM runs it (gdn_linear_attn.py, the FLA kernels of vllm/model_executor/layers/fla/ops).

Decode, one token a sequence: ``fused_recurrent_gated_delta_rule_fwd_kernel``, one program
per sequence and value head, holding the state h [dk, dv] in fp32: it reads the state, per
token decays it by exp(g) (dk dv), subtracts k^T h from v (2 dk dv), scales by beta, adds
the outer product k v^T (2 dk dv), reads out q^T h (2 dk dv): 7 dk dv FLOPs a head and token,
and writes the state back. Its bytes are the state's, read and written, whatever the
context: a decode's cost does not grow with the tokens before it.

Prefill: ``chunk_gated_delta_rule_fwd`` (fla/ops/chunk.py), chunks of :data:`CHUNK` tokens:
``chunk_scaled_dot_kkt_fwd`` (beta K K^T of each chunk, 2 C dk a token), ``solve_tril``
((I + A)^-1, C^3 / 3 multiply-adds a chunk), ``recompute_w_u_fwd`` (w = A K, u = A V:
2 C (dk + dv)), ``chunk_gated_delta_rule_fwd_h`` (the state carried from chunk to chunk:
v_new = u - w h and h += K^T v_new, 4 dk dv), ``chunk_fwd_o`` (q h, 2 dk dv, and the
chunk's own causal part q K^T v_new, 2 C (dk + dv)). Per token and value head:
``6 dk dv + 6 C dk + 4 C dv + 2 C^2 / 3``, linear in the prompt (a sequence's last chunk
padded to C). Its bytes: q, k, v in, the chunk matrices A (fp32, then the activation dtype),
w, u, v_new written and read back, one state per chunk written and read, o out, and the
sequence's initial and final state.
"""

from __future__ import annotations

from tpsim.core.kernels import costs
from tpsim.core.kernels.costs import Hardware, KernelCost

#: Tokens of a chunk of the chunked delta rule (chunk.py: chunk_local_cumsum(g,
#: chunk_size=64); the kkt, solve_tril and w/u kernels' BT = 64)
CHUNK = 64
#: FLOPs of the recurrent delta rule per token, value head and state element (dk dv)
RECURRENT_FLOPS = 7


def recurrent_flops(tokens: int, heads: int, dk: int, dv: int) -> float:
    """FLOPs of the recurrent delta rule over ``tokens`` tokens, ``heads`` value heads."""
    return float(RECURRENT_FLOPS * tokens * heads * dk * dv)


def chunk_flops(batch: int, prompt: int, heads: int, dk: int, dv: int) -> float:
    """FLOPs of the chunked delta rule over ``batch`` prompts of ``prompt`` tokens (each
    padded to whole chunks of :data:`CHUNK`), ``heads`` value heads."""
    c = CHUNK
    padded = -(-prompt // c) * c
    per = 6 * dk * dv + 6 * c * dk + 4 * c * dv + 2 * c * c / 3
    return float(batch * padded * heads * per)


def decode(batch: int, heads: int, key_heads: int, dk: int, dv: int, hw: Hardware, *,
           act_bytes: float, state_bytes: float) -> KernelCost:  # fmt: skip
    """One new token per sequence through the recurrent delta rule on one rank: ``heads``
    value heads (``key_heads`` q/k heads shared by them). Bytes: each sequence's state
    [heads, dk, dv] read and written, q and k of the key heads, v, the output, g and beta
    (fp32) of the value heads."""
    state = 2 * batch * heads * dk * dv * state_bytes
    io = batch * (2 * key_heads * dk + 2 * heads * dv) * act_bytes + batch * heads * 8
    return costs.elementwise(state + io, recurrent_flops(batch, heads, dk, dv), hw)


def prefill(batch: int, prompt: int, heads: int, key_heads: int, dk: int, dv: int,
            hw: Hardware, *, act_bytes: float, state_bytes: float) -> KernelCost:  # fmt: skip
    """``batch`` prompts of ``prompt`` tokens through the chunked delta rule on one rank (its
    five kernels and the q/k L2 norms as one cost: they run back to back on the same data)."""
    c, a = CHUNK, act_bytes
    tokens = batch * -(-prompt // c) * c
    per_head = (
        c * (8 + 2 * a)  # A: fp32 written and read, then written and read in the act dtype
        + (2 * dk + dv) * a  # w and u written (w read below with u)
        + (dk + 2 * dv) * a  # w, u read; v_new written
        + (dv + dv) * a  # v_new read, o written
        + 2 * dk * dv * a / c  # a state per chunk written, then read by chunk_fwd_o
        + 8  # g (cumsum) and beta
    )
    # q, k read by the L2 norm and written back, then k read by kkt, w/u, h and o, q by o
    qk = key_heads * dk * a * (4 + 4 + 1)
    nbytes = tokens * (heads * per_head + qk + heads * dv * a)  # and v read once
    nbytes += 2 * batch * heads * dk * dv * state_bytes  # initial state read, final written
    return costs.elementwise(nbytes, chunk_flops(batch, prompt, heads, dk, dv), hw)


__all__ = ["CHUNK", "RECURRENT_FLOPS", "chunk_flops", "decode", "prefill", "recurrent_flops"]
