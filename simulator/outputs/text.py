"""Human-readable text for the CLI: run summaries, collective tables, catalog listings."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from tpsim.calibration.profiles import about, canonical, engines, is_profile_file, profile
from tpsim.core.errors import ConfigError
from tpsim.core.lowering.experts import held_skew
from tpsim.core.metrics import REGIMES
from tpsim.core.summary import Summary
from tpsim.models.catalog import MODELS
from tpsim.topologies.builders import DESCRIPTIONS
from tpsim.topologies.gpus import GPUS

KiB, MiB, GiB = 1024, 1024**2, 1024**3


def seconds(t: float) -> str:
    """A duration with a unit a person reads at a glance."""
    if t >= 1:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3f} ms"
    return f"{t * 1e6:.2f} us"


def size(n: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} B"


def launch_label(config: Mapping[str, Any]) -> str:
    """The launch mode a configuration's step ran in, and why when it is not ``--launch``'s
    (an engine without a CUDA graph for the step runs it eagerly)."""
    asked = str(config["options"]["launch"])
    ran = str(config.get("launch_effective", asked))
    return asked if ran == asked else f"{ran} (no CUDA graph for this step in the engine)"


def hosts(topology: str, nodes: int) -> str:
    """Where a run is, by the name of its (joined) topology: ``dgx-h100x2`` for two catalog
    hosts, ``FILE (2 hosts)`` for a file whose name does not say so."""
    if nodes > 1 and not topology.endswith(f"x{nodes}"):  # a file's own hosts
        return f"{topology} ({nodes} hosts)"
    return topology


def title(s: Mapping[str, Any]) -> str:
    c = s["config"]
    w = c["workload"]
    lengths = (
        f"prompt {w['prompt_len']}" if w["phase"] == "prefill" else f"context {w['context_len']}"
    )
    where = hosts(c["topology"], c["nodes"])
    lay = c.get("layout", {})
    split = f"TP {c['tp']}" + "".join(
        f" x {k.upper()} {lay[k]}" for k in ("pp", "dp") if lay.get(k, 1) > 1
    )
    if lay.get("attention_dp", 1) > 1:
        split += f" x attention-DP {lay['attention_dp']}"
    if lay.get("ep", 1) > 1:
        split += f", EP {lay['ep']}" + (f" x MoE-TP {lay['moe_tp']}" if lay["moe_tp"] > 1 else "")
    return (
        f"{c['model']['name']} on {where}, {split}, {w['phase']} batch {w['batch']}"
        + (" per attention-DP group" if lay.get("attention_dp", 1) > 1 else "")
        + ", "
        f"{lengths}, {c['options']['dtype']}, launch {launch_label(c)}"
        + (
            f", engine {engine_label(c['options']['engine'])}"
            if c["options"]["engine"] != "ideal"
            else ""
        )
    )


def engine_label(engine: str) -> str:
    """A shipped engine's name; a profile file's own ``name:`` with its file in brackets
    (``mine (profiles/mine-v2.yaml)``), not the file name alone."""
    if not is_profile_file(engine):
        return engine
    return f"{profile(engine).engine.name} ({engine})"


#: The regime each part of the critical path stands for (host work and launches both
#: make a pass overhead-bound; a pipeline's fill makes it bubble-bound).
PART_REGIME = REGIMES
#: A runner-up regime within this many points of the first is named beside it.
NEAR_TIE = 0.15


def regime_shares(summary: Mapping[str, Any]) -> list[tuple[str, float]]:
    """Regimes by their share of the critical path, largest first (host and launch
    overhead counted together, as the regime does)."""
    b = summary["breakdown_s"]
    total = summary["latency_s"] or 1.0
    shares: dict[str, float] = {}
    for part, regime in PART_REGIME.items():
        shares[regime] = shares.get(regime, 0.0) + b.get(part, 0.0) / total
    return sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))


def regime_margin(summary: Mapping[str, Any]) -> tuple[float, str, float]:
    """The regime's share of the critical path, the runner-up regime and its share (``""``
    and 0 without one)."""
    regime = summary["regime"]
    shares = regime_shares(summary)
    share = dict(shares).get(regime, 0.0)
    second, share2 = next(((r, v) for r, v in shares if r != regime), ("", 0.0))
    return share, second, share2


def is_near_tie(share: float, share2: float) -> bool:
    """Whether a runner-up's share is within :data:`NEAR_TIE` of the regime's."""
    return share2 > 0 and share - share2 <= NEAR_TIE


def regime_text(summary: Mapping[str, Any]) -> str:
    """``memory-bound (53 %; communication 47 %)``: the regime with its share, and the
    runner-up when it is within :data:`NEAR_TIE` of it."""
    share, second, share2 = regime_margin(summary)
    text = f"{summary['regime']} ({share:.0%}"
    if is_near_tie(share, share2):
        text += f"; {second.removesuffix('-bound')} {share2:.0%}"
    return text + ")"


def chart_title(s: dict[str, Any]) -> str:
    """A chart's title: the run's :func:`title`, its latency and its regime with share."""
    per = "step" if s["config"]["workload"]["phase"] == "decode" else "pass"
    return f"{title(s)}\n{seconds(s['latency_s'])} per {per}, {regime_text(s)}"


def summary_text(s: Summary, assumptions: Mapping[str, str] | None = None) -> str:
    """``tpsim run``'s text: title, latency, throughput, regime, critical path, memory, split,
    assumptions, communication by site and, for stages or replicas, :func:`layout_lines`."""
    c, mem, comm, split = s.config, s.memory, s.communication, s.model_split
    as_dict = s.to_dict()  # title and regime_text also read summaries rebuilt from rows
    per = "step" if c.workload.phase == "decode" else "prefill"
    b = s.breakdown.to_dict()
    total = s.latency_s or 1.0
    parts = " | ".join(f"{k} {seconds(v)} ({v / total:.0%})" for k, v in b.items() if v > 0)
    gb = 1e9
    lines = [
        title(as_dict),
        f"  latency       {seconds(s.latency_s)} per {per}",
        f"  throughput    {s.tokens_per_s:,.0f} tokens/s ({s.tokens_per_s_per_gpu:,.0f} per GPU)",
        f"  regime        {regime_text(as_dict)}",
        f"  critical path {parts}",
        f"  memory/GPU    weights {mem.weights_bytes_per_gpu / gb:.2f} GB + KV cache "
        f"{mem.kv_cache_bytes_per_gpu / gb:.2f} GB + activations "
        f"{mem.activation_bytes_per_gpu / gb:.2f} GB = {mem.total_bytes_per_gpu / gb:.2f}"
        f" of {mem.capacity_bytes_per_gpu / gb:.1f} GB "
        f"({'fits' if mem.fits else 'DOES NOT FIT'})",
        f"  split         {split.heads_per_gpu} heads, {split.kv_heads_per_gpu} KV heads "
        f"per GPU (KV replicated x{split.kv_replication})"
        + (" (the MLA latent cache, whole on every GPU)" if c.model.is_mla else ""),
        *experts_lines(s),
        *([f"  precision     {c.precision_note}"] if c.precision_note else []),
        *(
            [f"  assumptions   {'; '.join(f'{k} {v}' for k, v in assumptions.items())}"]
            if assumptions
            else []
        ),
        f"  collectives   {comm.collectives} per GPU"
        + (f" and {comm.p2p} p2p sends/receives" if comm.p2p else "")
        + f", {size(comm.bytes_sent_per_gpu)} sent per GPU, {seconds(comm.time_s)}",
    ]
    for site, v in comm.by_site:
        each = v.bytes_sent_per_gpu / v.count if v.count else 0
        lines.append(
            f"    {site:<11} {v.count:>5} {'call ' if v.count == 1 else 'calls'}, "
            f"{size(v.bytes_sent_per_gpu):>10} sent in "
            f"all ({size(each)} each), {seconds(v.time_s):>10}"
        )
    if c.layout.pp > 1 or c.layout.dp > 1 or c.layout.attention_dp > 1:
        lines += layout_lines(s)
    return "\n".join(lines)


def experts_lines(s: Summary) -> list[str]:
    """A MoE run's experts: how many each GPU holds, of what width, and the active size."""
    m, lay = s.config.model, s.config.layout
    if not m.is_moe:
        return []
    if not m.num_moe_layers:
        return [f"  experts       none routed: every layer's MLP is dense (of {m.num_experts} "
                "experts in its config, no layer uses them)"]  # fmt: skip
    n, k = m.num_experts, m.experts_per_token
    o = s.config.options
    routing = ""  # uniform at random unless asked otherwise
    if o.routing:
        routing = f", each expert's share as {PurePath(o.routing).name} gives (--routing)"
    elif o.expert_skew:  # as the lowering holds it
        hot = held_skew(o.expert_skew, n, k)
        routing = (
            f", the hottest expert at {hot:g}x the mean load (--expert-skew {o.expert_skew:g})"
        )
    moved = "all-reduce after"
    if lay.attention_dp > 1:
        kernels = {"deepep": "DeepEP's kernels", "nccl": "NCCL"}
        a2a = s.config.options.moe_a2a
        moved = f"tokens dispatched by all-to-all ({kernels.get(a2a, a2a)}, --moe-a2a {a2a})"
    return [
        f"  experts       {n // lay.ep} of {n} routed experts per GPU, 1/{lay.moe_tp} of each "
        f"one's width (EP {lay.ep} x MoE-TP {lay.moe_tp}), top {k}{routing}; {moved}",
        f"  parameters    {m.num_params() / 1e9:.1f} B, {m.active_params() / 1e9:.1f} B active "
        f"per token ({m.active_params(embedding=False) / 1e9:.2f} B counting only the "
        "embedding row a token reads, as DeepSeek and OpenAI quote it)",
    ]


def layout_lines(s: Summary) -> list[str]:
    """The layout of a run with stages or replicas: degrees, per-replica throughput, memory
    per stage and which GPU each (dp, pp, tp) rank runs on."""
    lay = s.config.layout
    adp = f" x attention-DP {lay.attention_dp}" if lay.attention_dp > 1 else ""
    out = [
        f"  layout        TP {lay.tp}{adp} x PP {lay.pp} x DP {lay.dp}, "
        f"{lay.micro_batches} micro-batch(es); layers per stage "
        + ",".join(map(str, lay.pp_layers)),
    ]
    if s.tokens_per_s_per_replica is not None:
        out.append(
            f"  per replica   {s.tokens_per_s_per_replica:,.0f} tokens/s "
            f"(x{lay.dp} replicas = {s.tokens_per_s:,.0f})"
        )
    flight = s.in_flight
    if flight is not None and flight.fits:
        out.append(
            f"  in flight     as serving engines run a pipeline, {lay.pp} batches like this "
            f"one at once (one a stage): a token every {seconds(flight.tpot_s)} each, "
            f"{flight.tokens_per_s:,.0f} tokens/s ({flight.tokens_per_s_per_gpu:,.0f} per "
            f"GPU) with {lay.pp}x the KV cache below, as `plan` prices it"
        )
    elif flight is not None:
        room = min(m.capacity_bytes_per_gpu for m in s.memory_per_stage or (s.memory,))
        advice = (
            f"give --batch {flight.largest_batch} or less for {lay.pp} batches in flight"
            if flight.largest_batch
            else f"not even {lay.pp} batches of one sequence fit"
        )
        out.append(
            f"  in flight     as serving engines run a pipeline, {lay.pp} batches like this "
            f"one at once would need {flight.bytes_per_gpu / 1e9:.1f} GB per GPU ({lay.pp}x "
            f"the KV cache below), more than the {room / 1e9:.1f} GB there: {advice}"
        )
    for k, m in enumerate(s.memory_per_stage or ()):
        out.append(
            f"    stage {k:<3} {m.total_bytes_per_gpu / 1e9:7.2f} GB per GPU "
            f"(weights {m.weights_bytes_per_gpu / 1e9:.2f}, "
            f"KV {m.kv_cache_bytes_per_gpu / 1e9:.2f})"
        )
    ranks = "attention-DP and TP ranks" if lay.attention_dp > 1 else "TP ranks"
    out.append(f"  placement     (replica, stage): GPUs of its {ranks} in order")
    groups: dict[tuple[int, int], list[str]] = {}
    for p in s.config.placement or ():
        groups.setdefault((p.dp, p.pp), []).append(str(p.gpu))
    for (d, k), gpus in groups.items():
        out.append(f"    dp {d} pp {k}: {gpu_ranges(gpus)}")
    if not s.config.placement:  # one group: attention-DP groups of one GPU each
        out.append(f"    dp 0 pp 0: {gpu_ranges([str(g) for g in s.config.gpus])}")
    return out


def gpu_ranges(gpus: list[str]) -> str:
    """``n0.gpu0-7, n1.gpu0-3``: consecutive GPUs of one host folded into a range."""
    runs: list[tuple[str, int, int]] = []
    for g in gpus:
        host, _, tail = g.rpartition(".")
        digits = tail.lstrip("abcdefghijklmnopqrstuvwxyz_")
        stem = tail[: len(tail) - len(digits)]
        if not digits.isdigit():
            runs.append((g, -1, -1))
            continue
        n = int(digits)
        key = f"{host}.{stem}" if host else stem
        if runs and runs[-1][0] == key and runs[-1][2] == n - 1:
            runs[-1] = (key, runs[-1][1], n)
        else:
            runs.append((key, n, n))
    return ", ".join(
        k if lo < 0 else (f"{k}{lo}" if lo == hi else f"{k}{lo}-{hi}") for k, lo, hi in runs
    )


#: What the collective table's header says each ``--algo`` choice means.
ALGO_HEADER = {
    "nccl": "NCCL's own choice, as nccl-tests measures (--algo nccl)",
    "auto": "the engine's: its custom peer-memory kernels where it picks them (its own rule, "
    "as vLLM's first tier that applies), else NCCL's; NCCL's alone for an engine without "
    "them (--algo auto)",
}


def collective_table(
    rows: list[dict[str, Any]], op: str, ranks: int, *, algo: str = "nccl", launcher: str = "mpi"
) -> str:
    chosen = ALGO_HEADER.get(algo, f"{algo} only (--algo {algo})")
    head = (
        f"# {op}, {ranks} ranks; busbw = algbw x "
        f"{'2(p-1)/p' if op == 'all_reduce' else '(p-1)/p'} (as nccl-tests)\n"
        f"# algorithm: {chosen}; launcher {launcher}\n"
        f"{'size (B)':>14} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}"
        f"  {'algorithm':<10} {'protocol':<8} bound"
    )
    body = [
        f"{r['bytes']:>14} {r['time_s'] * 1e6:>12.2f} {r['algbw_GBps']:>13.2f} "
        f"{r['busbw_GBps']:>13.2f}  {r['algorithm']:<10} {r['protocol']:<8} {r['bound']}"
        for r in rows
    ]
    return "\n".join([head, *body])


def catalog_text(what: str) -> str:
    """The one-line-per-entry list of ``tpsim list WHAT`` (long descriptions cut short; the
    whole one is ``tpsim list WHAT NAME``)."""
    if what == "engines":
        return "\n".join(f"{name:<18} {textwrap.shorten(about(name), 100)}" for name in engines())
    if what == "models":
        rows = [
            f"{'name':<16} {'params':>8} {'active':>8} {'layers':>6} {'hidden':>6} "
            f"{'heads':>5} {'kv':>3} {'experts':>7}"
        ]
        for name, m in sorted(MODELS.items()):
            experts = f"{m.experts_per_token}/{m.num_experts}" if m.is_moe else "-"
            rows.append(
                f"{name:<16} {m.num_params() / 1e9:>7.1f}B {m.active_params() / 1e9:>7.1f}B "
                f"{m.num_layers:>6} {m.hidden_size:>6} {m.num_heads:>5} {m.num_kv_heads:>3} "
                f"{experts:>7}"
            )
        return "\n".join(rows)
    if what == "gpus":
        rows = [
            f"{'name':<14} {'bf16 TFLOP/s':>12} {'fp8':>6} {'fp4':>6} {'HBM TB/s':>8} "
            f"{'HBM GB':>6} {'SMs':>4} {'scale-up GB/s':>13}"
        ]
        for name, g in sorted(GPUS.items()):
            fp8 = f"{g.fp8_flops / 1e12:.0f}" if g.fp8_flops else "-"
            fp4 = f"{g.fp4_flops / 1e12:.0f}" if g.fp4_flops else "-"
            rows.append(
                f"{name:<14} {g.bf16_flops / 1e12:>12.0f} {fp8:>6} {fp4:>6} "
                f"{g.hbm_Bps / 1e12:>8.2f} {g.hbm_bytes / 1e9:>6.0f} {g.sm_count:>4} "
                f"{g.scaleup_Bps / 1e9:>13.0f}"
            )
        return "\n".join(rows)
    return "\n".join(f"{name:<14} {desc}" for name, desc in sorted(DESCRIPTIONS.items()))


def entry_text(what: str, name: str) -> str:
    """``tpsim list WHAT NAME``: one catalog entry in full. An engine: its name, where its
    profile comes from and its whole description, wrapped; a model, a GPU or a topology:
    its row of the list with its header."""
    if what == "engines":
        engine = canonical(name)
        text = about(engine)  # an unknown name is refused here, naming the known ones
        wrapped = "\n".join(
            textwrap.fill(p, 92, break_on_hyphens=False) for p in text.split("\n\n")
        )
        return f"{engine}\n\n{wrapped}"
    lines = catalog_text(what).splitlines()
    header = lines[:1] if what in ("models", "gpus") else []
    rows = [line for line in lines[len(header) :] if line.split()[:1] == [name.lower()]]
    if not rows:
        known = ", ".join(line.split()[0] for line in lines[len(header) :] if line.strip())
        raise ConfigError(f"{what[:-1]}={name!r}: not in the catalog; known: {known}")
    if what == "models":  # what the row's numbers rest on (MLA, window, MTP, ...)
        rows += [f"  {note}" for note in MODELS[rows[0].split()[0]].notes()]
    return "\n".join([*header, *rows])
