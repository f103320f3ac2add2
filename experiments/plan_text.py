"""``tpsim plan`` (static) in words and in a figure: the ranked table, the recommendation and
why it beats the runner-up, and the Pareto front of tokens/s per GPU against TPOT. The
planning itself is :mod:`tpsim.experiments.plan`."""

from __future__ import annotations

from pathlib import Path

from tpsim.experiments.plan import PlanRequest, PlanRow


def table(rows: list[PlanRow], req: PlanRequest) -> str:
    """The ranked table, then the recommendation."""
    width = max(20, *(len(r.label) for r in rows))
    slos = ["met" if r.slo_ok else ("TTFT missed" if r.tpot_ok else "TPOT missed") for r in rows]
    # the SLO column as wide as its widest entry where $/Mtok follows it (its figures had
    # stood 8 characters right of the others' after 'TPOT missed')
    slo_w = max(3, *(len(s) for s in slos)) if req.gpu_hour_usd is not None else 0
    head = (
        f"{'#':>2}  {'layout':<{width}} {'batch':>5} {'TTFT ms':>9} {'TPOT ms':>9} "
        f"{'tok/s':>9} {'tok/s/GPU':>9} {'free GB':>8}  {'regime':<20} {'SLO':<{slo_w}}"
    )
    if req.gpu_hour_usd is not None:
        head += "   $/Mtok"
    lines = [head]
    for k, (r, slo) in enumerate(zip(rows, slos, strict=True), 1):
        line = (
            f"{k:>2}  {r.label:<{width}} {r.batch:>5} {r.ttft_s * 1e3:>9.2f} "
            f"{r.tpot_s * 1e3:>9.2f} "
            f"{r.tokens_per_s:>9,.0f} {r.tokens_per_s_per_gpu:>9,.1f} "
            f"{r.headroom_bytes / 1e9:>8.1f}  {r.regime:<20} {slo:<{slo_w}}"
        )
        if r.usd_per_mtok is not None:
            line += f"  {r.usd_per_mtok:>7.3f}"
        lines.append(line)
    lines.append("")
    lines.append(recommendation(rows))
    piped = next((r for r in rows if r.pp > 1), None)
    if piped is not None:  # its batch is what it holds in flight, not one run's --batch
        b = piped.batch // piped.pp
        lines.append(
            f"A pipeline's batch is its sequences in flight, one batch a stage: "
            f"{piped.label} at {piped.batch} is {piped.pp} batches of {b} (tpsim run --pp "
            f"{piped.pp} --batch {b} times one, and its 'in flight' line gives the rest)."
        )
    return "\n".join(lines)


def recommendation(rows: list[PlanRow]) -> str:
    best = rows[0]
    if not best.slo_ok:
        return (
            f"No layout meets the SLOs. The closest is {best.label} at batch {best.batch} "
            f"{best.batch_unit}: TTFT {best.ttft_s * 1e3:.1f} ms and TPOT "
            f"{best.tpot_s * 1e3:.1f} ms, "
            f"{best.miss:.2f}x the SLO it misses most ({best.tokens_per_s:,.0f} tokens/s); "
            "relax the SLOs, or add GPUs."
        )
    what = (
        f"Recommended: {best.label} at batch {best.batch} {best.batch_unit}, "
        f"{best.tokens_per_s:,.0f} tokens/s in total ({best.tokens_per_s_per_gpu:,.1f} per GPU) "
        f"at TPOT {best.tpot_s * 1e3:.1f} ms and TTFT {best.ttft_s * 1e3:.1f} ms"
        + ", meeting the SLOs"
    )
    if len(rows) < 2:
        return what + "."
    second = rows[1]
    why = _why(best, second)
    return (
        f"{what}; {why}. Runner-up: {second.label} at batch {second.batch}, "
        f"{second.tokens_per_s:,.0f} tokens/s at TPOT {second.tpot_s * 1e3:.1f} ms."
    )


def _why(best: PlanRow, other: PlanRow) -> str:
    ratio = best.tokens_per_s / other.tokens_per_s if other.tokens_per_s else float("inf")
    if best.slo_ok and not other.slo_ok:
        return f"the runner-up misses an SLO ({'TPOT' if not other.tpot_ok else 'TTFT'})"
    reasons = []
    sb, so = best.in_flight, other.in_flight
    if sb > so:
        reasons.append(
            f"it decodes {sb} sequences at once ({best.batch} {best.batch_unit}, limited by "
            f"{best.batch_limit}) against {so} ({other.batch} {other.batch_unit}, limited by "
            f"{other.batch_limit})"
        )
    if best.tpot_s < other.tpot_s:
        mine, theirs = dict(best.breakdown), dict(other.breakdown)
        diffs = {k: theirs.get(k, 0.0) - v for k, v in mine.items()}
        k = max(diffs, key=lambda c: (diffs[c], c))
        what = f"{diffs[k] * 1e3:.1f} ms less {_SPENT.get(k, k)}" if diffs[k] > 0 else ""
        same = " at the same sequences in flight" if sb == so else ""
        step = f"its decode step is {best.tpot_s * 1e3:.1f} ms against {other.tpot_s * 1e3:.1f} ms"
        reasons.append(step + same + (f", {what}" if what else ""))
    reason = "; ".join(reasons) or f"its step is {best.regime}"
    return f"it gives {ratio:.2f}x the runner-up's tokens/s ({reason})"


#: How each breakdown category reads after "less".
_SPENT = {
    "communication": "in communication (all-reduces, sends)",
    "memory": "reading memory",
    "compute": "computing",
    "bubble": "in pipeline bubbles",
    "host": "on the host",
    "launch_overhead": "launching kernels",
    "idle": "idle",
}


def short_label(r: PlanRow) -> str:
    """``TP 4 x DP 2 b64``: the degrees above 1 (TP always) and the batch per replica."""
    degrees = (("ADP", r.attention_dp), ("PP", r.pp), ("DP", r.dp), ("EP", r.ep))
    parts = [f"TP {r.tp}"] + [f"{k} {v}" for k, v in degrees if v > 1]
    return " x ".join(parts) + f" b{r.batch}"


def plot_front(rows: list[PlanRow], req: PlanRequest, out: Path) -> Path:
    """``out/plan_pareto.png``: tokens/s per GPU against TPOT, the front joined, the layouts
    labelled, the recommendation (``rows[0]``) marked."""
    from tpsim.experiments.plots.pareto import ParetoPoint, pareto_plot

    points = [
        ParetoPoint(r.tpot_s, r.tokens_per_s_per_gpu, short_label(r), best=k == 0)
        for k, r in enumerate(rows)
    ]
    gpus = rows[0].gpus
    slo = f", TPOT SLO {req.slo_tpot_ms:g} ms" if req.slo_tpot_ms else ""
    title = (
        f"{req.model} on {gpus} GPUs of {req.topology} x{req.nodes}: decode, context "
        f"{req.context_len}{slo} (ringed: recommended)"
    )
    slo_s = req.slo_tpot_ms / 1e3 if req.slo_tpot_ms else None
    return pareto_plot(points, out / "plan_pareto.png", title=title, slo_x=slo_s)


__all__ = ["plot_front", "recommendation", "short_label", "table"]
