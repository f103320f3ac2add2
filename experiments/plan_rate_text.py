"""``tpsim plan --rate`` / ``--concurrency`` in words: the ranked table of serving units
and the verdict (:mod:`tpsim.experiments.plan_rate` finds them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpsim.experiments.serve.workload import parse_lengths

if TYPE_CHECKING:
    from tpsim.experiments.plan_rate import RateRequest, RateRow

#: The lowest rate tried (req/s): a unit failing there meets the SLOs at no load.
MIN_RATE = 1 / 64


def _what(req: RateRequest) -> str:
    if req.rate is not None:
        return f"{req.rate:g} req/s"
    return f"{req.concurrency} concurrent clients"


def _load(req: RateRequest, x: float) -> str:
    if req.rate is None:
        return f"{x:.0f} clients"
    return f"{x:.2f} req/s" if x >= 1 else f"{x:.3g} req/s"


def table(rows: list[RateRow], req: RateRequest) -> str:
    """The ranked units (aggregated and disaggregated side by side), then the verdict."""
    q = f"p{req.percentile:g}"
    unit = "req/s" if req.rate is not None else "clients"
    width = max(16, *(len(r.label) for r in rows))
    head = (f"{'#':>2}  {'unit':<{width}} {'kind':<13} {'GPUs':>4} {'max ' + unit:>12} "
            f"{q + ' TTFT ms':>13} {q + ' TPOT ms':>13} {'batch':>6} {'limit':<12} "
            f"{'units':>5} {'GPUs':>5}")  # fmt: skip
    if req.gpu_hour_usd is not None:
        head += "   $/Mtok"
    lines = [head]
    for k, r in enumerate(rows, 1):
        line = (f"{k:>2}  {r.label:<{width}} {r.kind:<13} {r.unit_gpus:>4} "
                f"{r.max_load:>12.2f} {r.ttft_ms:>13.1f} {r.tpot_ms:>13.2f} "
                f"{r.mean_batch:>6.1f} {r.limit:<12} {r.units or '-':>5} "
                f"{r.gpus or '-':>5}")  # fmt: skip
        if req.gpu_hour_usd is not None:
            line += f"  {r.usd_per_mtok:>7.3f}" if r.usd_per_mtok is not None else "        -"
        lines.append(line)
    lines += ["", verdict(rows, req)]
    fixed = all(
        parse_lengths(flag, str(x)).kind == "fixed"
        for flag, x in (("--prompt-len", req.prompt_len), ("--output-len", req.output_len))
    )
    if req.concurrency is not None and fixed:
        lines.append(
            "Note: with one prompt and one output length the clients stay in step, each "
            "wave's prompts arriving together (as vllm bench serve --max-concurrency runs "
            "them); for users who are not, give --prompt-len and --output-len as "
            "distributions (uniform:A-B, ...)."
        )
    return "\n".join(lines)


def _gpus(n: int) -> str:
    return f"{n} GPU" + ("s" if n != 1 else "")


def _limit_text(limit: str) -> str:
    """What fails above a unit's load, in words."""
    if limit == "saturation":
        return "its queue grows without bound"
    if limit == "none found":
        return "nothing failed up to the highest load tried"
    return f"its {limit} exceeds the SLO"


def verdict(rows: list[RateRow], req: RateRequest) -> str:
    best = rows[0]
    q = f"p{req.percentile:g}"
    if not best.ok:
        return (f"No unit meets the SLOs even at the lowest load tried "
                f"({_load(req, MIN_RATE if req.rate is not None else 1)}): the closest is "
                f"{best.label} ({_gpus(best.unit_gpus)}), {q} TTFT {best.ttft_ms:.1f} ms and "
                f"{q} TPOT {best.tpot_ms:.2f} ms, {best.miss:.2f}x the tighter SLO; "
                "relax the SLOs, shorten the prompts or use faster GPUs.")  # fmt: skip
    cost = f" (${best.usd_per_mtok:.3f} per million output tokens)" if best.usd_per_mtok else ""
    what = (f"Recommended: {best.units} x {best.label} ({best.kind}), {_gpus(best.gpus)} for "
            f"{_what(req)}{cost}: one unit of {_gpus(best.unit_gpus)} sustains "
            f"{_load(req, best.max_load)} under the SLOs (batch {best.mean_batch:.0f}), "
            f"beyond which {_limit_text(best.limit)}")  # fmt: skip
    others = [r for r in rows[1:] if r.ok]
    if not others:
        return what + "; no other unit meets the SLOs."
    second = others[0]
    per_best = best.max_load / best.unit_gpus
    per_second = second.max_load / second.unit_gpus
    if best.gpus < second.gpus:
        why = (f"the runner-up, {second.label}, needs {_gpus(second.gpus)} "
               f"({_load(req, second.max_load)} per unit of {_gpus(second.unit_gpus)}; beyond "
               f"that {_limit_text(second.limit)})")  # fmt: skip
    elif per_second < per_best * (1 - 1e-9):
        why = (f"the runner-up, {second.label}, needs as many GPUs ({second.gpus}) but "
               f"sustains less per GPU ({_load(req, per_second)} against "
               f"{_load(req, per_best)}; beyond its load {_limit_text(second.limit)})")  # fmt: skip
    else:  # a tie: the smaller unit ranks first (the traffic grows in finer steps of it)
        order = ("the smaller unit ranks first: it scales in finer steps"
                 if second.unit_gpus > best.unit_gpus else "the two rank by name")  # fmt: skip
        why = (f"the runner-up, {second.label}, needs as many GPUs ({second.gpus}) and "
               f"sustains as much per GPU ({_load(req, per_best)}; beyond its load "
               f"{_limit_text(second.limit)}): {order}")  # fmt: skip
    return f"{what}; {why}."


__all__ = ["MIN_RATE", "table", "verdict"]
