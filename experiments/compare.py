"""Configurations side by side, with the answer in words (``tpsim compare``).

A comparison is two or more simulated passes: the table of their latency, tokens/s (total
and per GPU), memory, regime with its share and the breakdown of the critical path, the
ratios against the first, the assumptions each rests on (GPU, scale-up links, NICs,
engine, launch mode), and one sentence: which wins, by how much, and what causes the
difference (the part of the critical path that changes most).

Pure functions of the summaries :func:`tpsim.simulate` returns, plus the topology graph
for the assumptions; no matplotlib. The regime's share is :mod:`tpsim.outputs.text`'s
(``run`` prints it too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpsim.experiments.compare_assumptions import assumptions, tp_spans_hosts
from tpsim.outputs.text import engine_label, regime_shares, regime_text
from tpsim.topologies.graph import TopologyGraph

#: Parts of the critical path, in the order the table prints them.
PARTS = ("compute", "memory", "communication", "launch_overhead", "host", "bubble", "idle")
#: What each part means in a sentence.
PART_WORDS = {
    "compute": "compute-bound kernel time",
    "memory": "memory-bound kernel time",
    "communication": "communication",
    "launch_overhead": "kernel launch overhead",
    "host": "engine host work",
    "bubble": "pipeline bubbles",
    "idle": "idle gaps",
}


@dataclass(frozen=True)
class Entry:
    """One configuration of a comparison: its label, its run summary, its assumptions."""

    label: str
    summary: Mapping[str, Any]
    assumptions: Mapping[str, str]
    #: whether its first TP group sits on several hosts, read from its topology graph
    #: (None: from its GPUs' ids, :func:`~.compare_assumptions.tp_spans_hosts`)
    tp_spans_hosts: bool | None = None

    @classmethod
    def of(cls, label: str, graph: TopologyGraph, summary: Mapping[str, Any]) -> Entry:
        """A configuration's entry: its summary, what it rests on and where its TP group
        sits, read from its topology graph."""
        spans = tp_spans_hosts(summary["config"], graph)
        return cls(label, summary, assumptions(graph, summary), spans)


#: The assumptions every configuration has, then those only some have (a kernel table),
#: which a table of several shows as "modelled" where one has none.
ASSUMPTIONS = ("gpu", "links", "network", "engine", "launch")
OPTIONAL_ASSUMPTIONS = {"kernels": "modelled"}


def assumption_keys(entries: Sequence[Entry]) -> list[str]:
    """The assumption rows of a table of ``entries``: every one's, and those some have."""
    some = [k for k in OPTIONAL_ASSUMPTIONS if any(k in e.assumptions for e in entries)]
    return [*ASSUMPTIONS, *some]


def assumption_of(e: Entry, key: str) -> str:
    return e.assumptions.get(key, OPTIONAL_ASSUMPTIONS.get(key, ""))


def load(summary: Mapping[str, Any]) -> int:
    """Sequences a configuration serves per step: its batch per replica times its replicas
    (the load it carries; tokens/s of different loads are not a like-for-like answer)."""
    c = summary["config"]
    lay = c.get("layout", {})
    return int(c["workload"]["batch"]) * int(lay.get("dp", 1)) * int(lay.get("attention_dp", 1))


def load_note(entries: Sequence[Entry]) -> str:
    """'' when every configuration carries the same load; else one plain sentence saying
    that they differ, by how much, and how to compare them at equal load."""
    loads = [load(e.summary) for e in entries]
    if len(set(loads)) == 1:
        return ""
    each = ", ".join(f"{n} ({e.label})" for e, n in zip(entries, loads, strict=True))
    return (
        f"The configurations carry different loads, in sequences per step: {each}. --batch is "
        "per replica, so their tokens/s differ by load as much as by layout; "
        f"--load {max(loads)} compares them at equal load."
    )


def common_title(entries: Sequence[Entry]) -> str:
    """What every configuration shares, in run's words (model, topology, phase, length,
    dtype, launch, engine): the varying ones are the table's columns."""
    configs = [e.summary["config"] for e in entries]

    def same(get: Any) -> Any:
        values = {str(get(c)) for c in configs}
        return get(configs[0]) if len(values) == 1 else None

    parts = [str(same(lambda c: c["model"]["name"]) or "models differ")]
    topology = same(lambda c: c["topology"])
    if topology is not None:
        parts[0] += f" on {topology}"
    phase = same(lambda c: c["workload"]["phase"])
    if phase is not None:
        key = "prompt_len" if phase == "prefill" else "context_len"
        length = same(lambda c, k=key: c["workload"].get(k))
        words = "prompt" if phase == "prefill" else "context"
        parts.append(phase + (f", {words} {length}" if length is not None else ""))
    batch = same(lambda c: c["workload"]["batch"])
    loads = {load(e.summary) for e in entries}
    if len(loads) == 1:
        n = loads.pop()
        parts.append(f"{n} sequence{'s' if n != 1 else ''} per step")
    elif batch is not None:
        parts.append(f"batch {batch} per replica")
    for name, get in (
        ("dtype", lambda c: c["options"]["dtype"]),
        ("launch", lambda c: c["options"]["launch"]),
        ("engine", lambda c: c["options"]["engine"]),
    ):
        value = same(get)
        if value is not None:
            parts.append(f"{name} {value}" if name != "dtype" else str(value))
    return ", ".join(parts)


def gpus(summary: Mapping[str, Any]) -> int:
    """GPUs a configuration uses: TP x attention-DP x PP x DP."""
    c = summary["config"]
    lay = c.get("layout", {})
    return (
        int(c["tp"])
        * int(lay.get("attention_dp", 1))
        * int(lay.get("pp", 1))
        * int(lay.get("dp", 1))
    )


def _per(summary: Mapping[str, Any]) -> str:
    return "step" if summary["config"]["workload"]["phase"] == "decode" else "pass"


def ratio_text(r: float) -> str:
    """A winner's ratio over another configuration, as ``1.23x``: with a third decimal
    where two would print 1.00x and hide which one leads (``1.004x``)."""
    return f"{r:.2f}x" if round(r, 2) != 1.0 else f"{r:.3f}x"


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms"


#: The facts every configuration of a comparison states, in this order.
FACTS = ("model", "topology", "phase", "batch", "prompt", "context", "dtype", "engine")


def _fact_values(summary: Mapping[str, Any]) -> dict[str, str]:
    c = summary["config"]
    w = c["workload"]
    where = str(c["topology"])
    if int(c.get("nodes", 1)) > 1 and not where.endswith(f"x{c['nodes']}"):
        where += f" x{c['nodes']} nodes"
    return {
        "model": str(c["model"]["name"]),
        "topology": where,
        "phase": str(w["phase"]),
        "batch": str(w["batch"]),
        "prompt": f"{w['prompt_len']} tokens",
        "context": f"{w['context_len']} tokens",
        "dtype": str(c["options"]["dtype"]),
        "engine": engine_label(str(c["options"]["engine"])),
    }


def facts(entries: Sequence[Entry]) -> dict[str, str]:
    """What the configurations are about (model, topology, phase, batch, prompt and context
    length, dtype, engine): one value when they share it, else each configuration's
    (``TP 8: 1; TP 16: 8``)."""
    each = [_fact_values(e.summary) for e in entries]
    out = {}
    for key in FACTS:
        values = [v[key] for v in each]
        if len(set(values)) == 1:
            out[key] = values[0]
        else:
            out[key] = "; ".join(f"{e.label}: {v}" for e, v in zip(entries, values, strict=True))
    return out


def gantt_title(entries: Sequence[Entry]) -> str:
    """``compare --gantt``'s title: the verdict, then the model, phase, batch, lengths, dtype
    and engine (each configuration's where they differ)."""
    f = facts(entries)
    phase = f["phase"]
    length = f"prompt {f['prompt']}" if phase == "prefill" else f"context {f['context']}"
    about = (
        f"{f['model']}, {phase}, batch {f['batch']}, {length}, {f['dtype']}, engine {f['engine']}"
    )
    return f"{headline(entries)}\n{about}"


def headline(entries: Sequence[Entry]) -> str:
    """The verdict in a title's words: which configuration gives the most tokens/s a step,
    by how much over each other one, and, where another one leads with each pipeline kept
    full (``in_flight``, as plan prices it), that one."""
    best = max(entries, key=lambda e: (e.summary["tokens_per_s"], -entries.index(e)))
    ratios = [
        f"{ratio_text(best.summary['tokens_per_s'] / e.summary['tokens_per_s'])} {e.label}"
        for e in entries
        if e is not best
    ]
    if len(ratios) == 1:
        text = f"{best.label} gives {ratios[0].replace('x ', 'x the tokens/s of ', 1)}"
    else:
        text = f"{best.label} gives the most tokens/s a step ({', '.join(ratios)})"
    rates = [(r, -entries.index(e), e) for e in entries if (r := served(e.summary)) is not None]
    if rates:
        rate, _, lead = max(rates)
        if lead is not best:
            text += (f";\nwith each pipeline kept full, {lead.label} gives the most: "
                     f"{rate:,.0f} tokens/s")  # fmt: skip
    return text


def table_rows(entries: Sequence[Entry]) -> list[tuple[str, list[str]]]:
    """The side-by-side table as rows (name, one cell per configuration); a section
    heading is a row with no cells. The first row is the header (the labels)."""
    base = entries[0].summary
    rows: list[tuple[str, list[str]]] = [("", [e.label for e in entries])]
    lat = [e.summary["latency_s"] for e in entries]
    tps = [e.summary["tokens_per_s"] for e in entries]
    per_gpu = [e.summary["tokens_per_s_per_gpu"] for e in entries]
    rows.append((f"latency per {_per(base)}", [_ms(x) for x in lat]))
    rows.append(("  ratio to first", [f"{x / lat[0]:.2f}x" for x in lat]))
    rows.append(("tokens/s", [f"{x:,.0f}" for x in tps]))
    rows.append(("  ratio to first", [f"{x / tps[0]:.2f}x" for x in tps]))
    rows.append(("tokens/s per GPU", [f"{x:,.1f}" for x in per_gpu]))
    rows.append(("  ratio to first", [f"{x / per_gpu[0]:.2f}x" for x in per_gpu]))
    if any(e.summary.get("in_flight") for e in entries):  # a pipeline as engines serve it
        rows.append(("tokens/s, pipelines full", [_served_text(e.summary) for e in entries]))
        per = [served(e.summary) for e in entries]
        rows.append(("  per GPU", [f"{r / gpus(e.summary):,.1f}" if r is not None else "-"
                                   for r, e in zip(per, entries, strict=True)]))  # fmt: skip
    rows.append(("GPUs", [str(gpus(e.summary)) for e in entries]))
    rows.append(("sequences per step", [str(load(e.summary)) for e in entries]))
    mem = [e.summary["memory"] for e in entries]
    rows.append(
        (
            "memory per GPU",
            [
                f"{m['total_bytes_per_gpu'] / 1e9:.1f}/{m['capacity_bytes_per_gpu'] / 1e9:.0f} GB"
                for m in mem
            ],
        )
    )
    rows.append(("regime", [e.summary["regime"] for e in entries]))
    rows.append(("  share", [regime_text(e.summary).partition("(")[2][:-1] for e in entries]))
    rows.append(("critical path:", []))
    for part in PARTS:
        vals = [e.summary["breakdown_s"].get(part, 0.0) for e in entries]
        if any(v > 0 for v in vals):
            rows.append((f"  {part}", [_ms(v) for v in vals]))
    rows.append(("assumptions:", []))
    for key in assumption_keys(entries):
        rows.append((f"  {key}", [assumption_of(e, key) for e in entries]))
    return rows


def served(summary: Mapping[str, Any]) -> float | None:
    """Tokens/s with a pipeline kept full as serving engines run it (``in_flight``: its
    stages' batches in flight at once), the step's own without a pipeline; None where the
    batches in flight do not fit."""
    flight = summary.get("in_flight")
    if flight is None:
        return float(summary["tokens_per_s"])
    return float(flight["tokens_per_s"]) if flight["fits"] else None


def _served_text(summary: Mapping[str, Any]) -> str:
    rate = served(summary)
    if rate is not None:
        return f"{rate:,.0f}"
    return f"needs {summary['in_flight']['bytes_per_gpu'] / 1e9:.1f} GB/GPU"


def table(entries: Sequence[Entry]) -> str:
    """The side-by-side table: one column per configuration, ratios against the first."""
    rows = table_rows(entries)
    longest = max(len(c) for _, cells in rows for c in cells)  # every cell, the share's too
    width = max(14, longest + 2)
    return "\n".join(
        f"{name:<24}" + "".join(f"{c:>{width}}" for c in cells) if cells else name
        for name, cells in rows
    )


def _network_note(win: Entry, lose: Entry) -> str:
    """Which of the two configurations crosses the network, and over what."""
    used = [e for e in (win, lose) if not e.assumptions["network"].startswith("not used")]
    if len(used) == 1:
        return f": {used[0].label} crosses {used[0].assumptions['network']}"
    spans = [
        e.tp_spans_hosts if e.tp_spans_hosts is not None else tp_spans_hosts(e.summary["config"])
        for e in (win, lose)
    ]
    if len(used) == 2 and spans == [False, True]:  # the TP group, not the NICs, decides
        return (
            f": {lose.label}'s TP group all-reduces across hosts; {win.label}'s stays in "
            "one, only its pipeline's sends crossing the network"
        )
    if len(used) == 2 and win.assumptions["network"] != lose.assumptions["network"]:
        return f": {win.assumptions['network']} against {lose.assumptions['network']}"
    return ""


def _cause(win: Entry, lose: Entry) -> str:
    """What makes ``win`` faster than ``lose``: the part of the critical path it saves
    most on, and the part it pays more for when that eats a quarter or more of the gain."""
    bw, bl = win.summary["breakdown_s"], lose.summary["breakdown_s"]
    diff = {p: bl.get(p, 0.0) - bw.get(p, 0.0) for p in PARTS}
    gain = max(PARTS, key=lambda p: (diff[p], -PARTS.index(p)))
    loss = min(PARTS, key=lambda p: (diff[p], PARTS.index(p)))

    def words(part: str) -> str:
        note = _network_note(win, lose) if part == "communication" else ""
        return (
            f"{PART_WORDS[part]} ({_ms(bw.get(part, 0.0))} against {_ms(bl.get(part, 0.0))}{note})"
        )

    lat_w, lat_l = win.summary["latency_s"], lose.summary["latency_s"]
    per_w = win.summary["tokens_per_s"] * lat_w  # tokens per step: batch, x replicas
    per_l = lose.summary["tokens_per_s"] * lat_l
    parts = []
    if per_w > per_l * 1.001:  # it wins on work per step (batch, replicas)
        parts.append(f"more tokens per step ({per_w:,.0f} against {per_l:,.0f})")
    if lat_w < lat_l:
        text = f"less {words(gain)}"
        if diff[loss] < 0 and -diff[loss] >= 0.25 * diff[gain]:
            text += f", offset in part by more {words(loss)}"
        parts.append(text)
    elif lat_w > lat_l:
        parts.append(f"despite a step longer by {_ms(lat_w - lat_l)}, mostly more {words(loss)}")
    return ", ".join(parts) or "the same step time and tokens per step"


def verdict(entries: Sequence[Entry]) -> str:
    """One plain sentence: which configuration gives the most tokens/s, by how much over
    each other one, and what causes the difference; per-GPU efficiency when it disagrees."""
    best = max(entries, key=lambda e: (e.summary["tokens_per_s"], -entries.index(e)))
    others = [e for e in entries if e is not best]
    per = _per(best.summary)
    parts = []
    for e in others:
        r = best.summary["tokens_per_s"] / e.summary["tokens_per_s"]
        parts.append(
            f"{ratio_text(r)} the tokens/s of {e.label} "
            f"({_ms(best.summary['latency_s'])} against {_ms(e.summary['latency_s'])} per {per}), "
            f"from {_cause(best, e)}"
        )
    text = f"{best.label} gives " + "; and ".join(parts)
    efficient = max(entries, key=lambda e: (e.summary["tokens_per_s_per_gpu"], -entries.index(e)))
    r = efficient.summary["tokens_per_s_per_gpu"] / best.summary["tokens_per_s_per_gpu"]
    if efficient is not best and r >= 1.005:  # 1.00x would compare a tie with itself
        text += f"; but {efficient.label} gives {r:.2f}x the tokens/s per GPU"
    if any(e.summary.get("in_flight") for e in entries):
        text += _served_clause(entries)
    return text + "."


def _served_clause(entries: Sequence[Entry]) -> str:
    """The verdict's words on pipelines kept full (``in_flight``), as `plan` prices them:
    which configuration then gives the most tokens/s, and by how much over the next."""
    rates = [(served(e.summary), e) for e in entries]
    ok = sorted(((r, -entries.index(e), e) for r, e in rates if r is not None), reverse=True)
    if not ok:
        return "; no pipeline here holds its stages' batches in flight in memory"
    rate, _, lead = ok[0]

    def per_gpu(r: float, e: Entry) -> str:
        return f"{r / gpus(e.summary):,.1f} per GPU"

    text = (f"; with each pipeline kept full, as serving engines run one (a batch like this "
            f"in each stage, as plan prices it), {lead.label} gives the most: {rate:,.0f} "
            f"tokens/s ({per_gpu(rate, lead)})")  # fmt: skip
    if len(ok) > 1:
        nxt = ok[1]
        text += f", {ratio_text(rate / nxt[0])} {nxt[2].label} ({per_gpu(nxt[0], nxt[2])})"
    efficient = max(ok, key=lambda t: (t[0] / gpus(t[2].summary), t[1]))
    if efficient[2] is not lead:
        text += f", though {efficient[2].label} gives the most per GPU"
    return text


def comparison(entries: Sequence[Entry]) -> dict[str, Any]:
    """The comparison as JSON: each configuration's label, assumptions and summary (without
    the per-layer list), the ratios against the first, and the verdict."""
    base = entries[0].summary
    out = []
    for e in entries:
        s = {k: v for k, v in e.summary.items() if k not in ("layers", "engine")}
        out.append(
            {
                "label": e.label,
                "assumptions": dict(e.assumptions),
                "regime_shares": dict(regime_shares(e.summary)),
                "ratios": {
                    k: e.summary[k] / base[k]
                    for k in ("latency_s", "tokens_per_s", "tokens_per_s_per_gpu")
                },
                "summary": s,
            }
        )
    loads = {load(e.summary) for e in entries}
    return {
        "configurations": out,
        "equal_load": len(loads) == 1,
        "load_note": load_note(entries),
        "verdict": verdict(entries),
    }
