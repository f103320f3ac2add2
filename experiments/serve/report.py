"""A serving run as text (the layout ``vllm bench serve`` prints), JSON and one line per
request (``--out requests.jsonl``)."""

from __future__ import annotations

import json
from typing import Any

from tpsim.experiments.serve.metrics import METRICS
from tpsim.experiments.serve.run import ServeResult

_TITLES = {
    "ttft": ("Time to First Token", "TTFT"),
    "tpot": ("Time per Output Token (excl. 1st token)", "TPOT"),
    "itl": ("Inter-token Latency", "ITL"),
    "e2el": ("End-to-end Latency", "E2EL"),
}
WIDTH = 50


def _line(label: str, value: str) -> str:
    return f"{label:<40} {value}"


def _rule(title: str = "", fill: str = "-") -> str:
    return f"{title:{fill}^{WIDTH}}" if title else fill * WIDTH


def text(s: dict[str, Any], result: ServeResult, setup_line: str) -> str:
    """The run as ``vllm bench serve`` prints it, then what tpsim adds (scheduler, KV
    cache, preemptions, whether the queue kept up)."""
    out = [_rule(" Serving Benchmark Result ", "="), setup_line]
    out += [
        _line("Successful requests:", f"{s['completed']}"),
        _line("Benchmark duration (s):", f"{s['duration_s']:.2f}"),
        _line("Total input tokens:", f"{s['total_input_tokens']}"),
        _line("Total generated tokens:", f"{s['total_output_tokens']}"),
        _line("Request throughput (req/s):", f"{s['request_throughput']:.2f}"),
    ]
    if "goodput" in s:
        out.append(_line("Request goodput (req/s):", f"{s['goodput']:.2f}"))
    out += [
        _line("Output token throughput (tok/s):", f"{s['output_throughput']:.2f}"),
        _line("Total Token throughput (tok/s):", f"{s['total_token_throughput']:.2f}"),
    ]
    for name in METRICS:
        title, short = _TITLES[name]
        out.append(_rule(title))
        for label in ("mean", "median", "p90", "p99"):
            shown = label.capitalize() if label in ("mean", "median") else label.upper()
            out.append(_line(f"{shown} {short} (ms):", f"{s[f'{label}_{name}_ms']:.2f}"))
    spec, kv = result.spec, result.kv
    out.append(_rule("Engine (simulated)"))
    ahead = ", async scheduling" if spec.async_scheduling else ""
    out += [
        _line("Scheduler:", f"{spec.engine}, {spec.policy}{ahead}"),
        _line(
            "max_num_seqs / max_num_batched_tokens:",
            f"{spec.max_num_seqs} / {spec.max_num_batched_tokens}",
        ),
        _line(
            f"KV cache per {result.instance} (tokens):",
            f"{kv.tokens} ({kv.blocks} blocks of {kv.block_size})",
        ),
    ]
    if result.prefill_kv is not None:
        pk = result.prefill_kv
        out[-1] = _line("KV cache per decode worker (tokens):",
                        f"{kv.tokens} ({kv.blocks} blocks of {kv.block_size})")  # fmt: skip
        out += [
            _line("KV cache per prefill worker (tokens):", f"{pk.tokens}"),
            _line(
                "KV transfers / mean MB per GPU:",
                f"{s['kv_transfers']} / {s['mean_kv_transfer_mb']:.1f}",
            ),
        ]
    swa = kv.blocks_layout.swa_pool * kv.block_size
    if swa:  # SGLang's sliding layers' pool beside the full layers' one
        out.append(_line("Sliding-window pool (tokens):", f"{swa}"))
    out += [
        _line("Preemptions:", f"{result.preemptions}"),
        _line("Iterations:", f"{result.iterations}"),
        _line("Mean requests in system:", f"{s['mean_in_system']:.2f}"),
        # outside the engine loop: tpsim's TTFT starts when the engine has the request
        _line("Not simulated (add to TTFT, E2EL):", "API server, tokenizer, client"),
    ]
    out.append(_rule(fill="="))
    if s["saturated"]:
        out.append(
            f"SATURATED: the queue grows by {s['queue_growth_per_s']:.2f} requests/s while "
            "requests arrive: the engine cannot keep up with this rate, and the latencies "
            "above grow with the run's length (they are not a steady state)"
        )
    return "\n".join(out)


def requests_jsonl(result: ServeResult) -> str:
    """One JSON object per request, in request order (times in seconds from the start,
    latencies in ms)."""
    lines = []
    for r in result.requests:
        ttft = r.token_s[0] - r.arrival_s
        tpot = (r.done_s - r.token_s[0]) / (r.output - 1) if r.output > 1 else None
        row = {
            "id": r.id,
            "arrival_s": r.arrival_s,
            "prompt_tokens": r.prompt,
            "output_tokens": r.output,
            "first_token_s": r.token_s[0],
            "finish_s": r.done_s,
            "ttft_ms": ttft * 1e3,
            "tpot_ms": None if tpot is None else tpot * 1e3,
            "e2el_ms": (r.done_s - r.arrival_s) * 1e3,
            "preemptions": r.preemptions,
        }
        lines.append(json.dumps(row, allow_nan=False))
    return "\n".join(lines) + ("\n" if lines else "")


__all__ = ["requests_jsonl", "text"]
