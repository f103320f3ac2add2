"""Trace/CSV export and the Gantt chart, on small hand-made record lists."""

from __future__ import annotations

import csv
import io
import itertools
import json
import time
import typing
from pathlib import Path

import pytest
from tpsim.core.records import Record
from tpsim.experiments.plots.gantt import gantt
from tpsim.experiments.plots.gantt_view import gantt_view
from tpsim.outputs.export import (
    chrome_trace,
    records_csv,
    write_json,
    write_text,
)
from tracecheck import check_trace_structure, us_to_ns

US = 1e-6


def rec(
    i: int,
    rank: int,
    stream: str,
    name: str,
    kind: str,
    start_us: float,
    end_us: float,
    *,
    layer: int = 0,
    op: int = 0,
    cause: int = -1,
    site: str = "",
) -> Record:
    category = {
        "launch": "launch_overhead",
        "collective": "communication",
        "elementwise": "memory",
        "attention": "memory",
    }.get(kind, "compute")
    return Record(
        id=i,
        rank=rank,
        stream=stream,
        name=name,
        kind=kind,
        category=category,
        layer=layer,
        site=site,
        op=op,
        start_s=start_us * US,
        end_s=end_us * US,
        flops=2.0e9 * (kind == "gemm"),
        bytes=4096,
        cause=cause,
        detail="",
    )


def tiny() -> list[Record]:
    """2 ranks: launch -> gemm -> 2 ring all-reduce steps; times chosen by hand."""
    out: list[Record] = []
    for rank in (0, 1):
        b = 10 * rank  # ids 0..4 on rank 0, 10..14 on rank 1
        out += [
            rec(b + 0, rank, "cpu", "qkv_proj", "launch", 0.0, 4.0, op=0),
            rec(b + 1, rank, "cpu", "attn_out.allreduce", "launch", 4.0, 8.0, op=1),
            rec(b + 2, rank, "compute", "qkv_proj", "gemm", 4.0, 20.0, op=0, cause=b + 0),
            rec(
                b + 3,
                rank,
                "comm",
                "attn_out.allreduce[0]",
                "collective",
                20.0,
                26.5,
                op=1,
                cause=b + 2,
                site="attn_out",
            ),
            rec(
                b + 4,
                rank,
                "comm",
                "attn_out.allreduce[1]",
                "collective",
                26.5,
                33.0,
                op=1,
                cause=b + 3,
                site="attn_out",
            ),
        ]
    return out


def layered(ranks: int = 2, layers: int = 2) -> list[Record]:
    """A realistic-looking forward pass: per layer norm, qkv, attn, o_proj, then a ring
    all-reduce of 2(p-1) steps; each kernel waits for its launch and the previous kernel."""
    out: list[Record] = []
    for rank in range(ranks):
        cpu_t = compute_t = comm_t = 0.0
        op = 0
        for layer in range(layers):
            for name, kind, dur in (
                ("input_norm", "elementwise", 3.0),
                ("qkv_proj", "gemm", 18.0),
                ("attn", "attention", 12.0),
                ("o_proj", "gemm", 8.0),
            ):
                launch = rec(
                    len(out), rank, "cpu", name, "launch", cpu_t, cpu_t + 5.0, layer=layer, op=op
                )
                out.append(launch)
                cpu_t += 5.0
                start = max(launch.end_s / US, compute_t, comm_t)
                out.append(
                    rec(
                        len(out),
                        rank,
                        "compute",
                        name,
                        kind,
                        start,
                        start + dur,
                        layer=layer,
                        op=op,
                        cause=launch.id,
                    )
                )
                compute_t = start + dur
                op += 1
            launch = rec(
                len(out),
                rank,
                "cpu",
                "attn_out.allreduce",
                "launch",
                cpu_t,
                cpu_t + 5.0,
                layer=layer,
                op=op,
            )
            out.append(launch)
            cpu_t += 5.0
            comm_t = max(compute_t, launch.end_s / US)
            for step in range(2 * (ranks - 1)):
                out.append(
                    rec(
                        len(out),
                        rank,
                        "comm",
                        f"attn_out.allreduce[{step}]",
                        "collective",
                        comm_t,
                        comm_t + 6.5,
                        layer=layer,
                        op=op,
                        site="attn_out",
                    )
                )
                comm_t += 6.5
            op += 1
    return out


# ---- Chrome trace ---------------------------------------------------------------------


def test_trace_structure_is_clean() -> None:
    trace = chrome_trace(tiny(), title="tiny", rank_labels={0: "n0.gpu0", 1: "n0.gpu1"})
    assert check_trace_structure(trace) == []
    assert trace["displayTimeUnit"] == "ns"
    assert trace["otherData"] == {"title": "tiny"}
    names = {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"
    }
    assert names == {1: "GPU 0 (n0.gpu0)", 2: "GPU 1 (n0.gpu1)"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["name"] == "thread_name"
    }
    assert threads[(1, 1)] == "CPU launch"
    assert threads[(1, 2)] == "compute stream"
    assert threads[(2, 3)] == "comm stream"


def test_trace_slices_in_microseconds() -> None:
    trace = chrome_trace(tiny(), title="t", critical={2, 3})
    xs = {e["args"]["id"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
    assert len(xs) == 10
    gemm = xs[2]
    assert (gemm["name"], gemm["cat"], gemm["pid"], gemm["tid"]) == ("qkv_proj", "gemm", 1, 2)
    assert (gemm["ts"], gemm["dur"]) == (4.0, 16.0)
    assert xs[13]["ts"] == 20.0 and xs[13]["dur"] == 6.5 and xs[13]["pid"] == 2
    assert xs[3]["args"]["site"] == "attn_out" and xs[3]["args"]["cause"] == 2
    assert [xs[i]["args"]["on_critical_path"] for i in (2, 3, 4)] == [True, True, False]
    plain = chrome_trace(tiny(), title="t")
    assert all("on_critical_path" not in e["args"] for e in plain["traceEvents"] if e["ph"] == "X")


def test_rounding_never_overlaps_neighbours() -> None:
    # Back-to-back slices at awkward float times: 0.1 + 0.2 style sums, sub-ns parts.
    t = [0.0, 0.1e-6, 0.30000000000000004e-6, 0.3000004e-6, 1.23456789e-3, 1.2345679e-3]
    records = [
        rec(i, 0, "compute", f"k{i}", "gemm", t[i] / US, t[i + 1] / US) for i in range(len(t) - 1)
    ]
    trace = chrome_trace(records, title="r")
    assert check_trace_structure(trace) == []
    xs = sorted((e for e in trace["traceEvents"] if e["ph"] == "X"), key=lambda e: e["args"]["id"])
    assert [e["dur"] for e in xs][2] == 0.0  # 0.4 ns rounds away; never negative
    for a, b in itertools.pairwise(xs):
        assert us_to_ns(a["ts"]) + us_to_ns(a["dur"]) <= us_to_ns(b["ts"])
        assert len(repr(a["ts"]).split(".")[-1]) <= 3


def test_flows_link_launch_to_first_kernel() -> None:
    trace = chrome_trace(tiny(), title="t")
    flows = [e for e in trace["traceEvents"] if e["ph"] in ("s", "f") and e["cat"] == "launch"]
    by_id: dict[int, dict[str, dict]] = {}
    for e in flows:
        by_id.setdefault(e["id"], {})[e["ph"]] = e
    assert sorted(by_id) == [0, 1, 10, 11]  # one per launch
    # launch 1 (op 1) -> first collective step (id 3, starts at 20 us), not the second
    s, f = by_id[1]["s"], by_id[1]["f"]
    assert (s["tid"], f["tid"], f["bp"], s["cat"]) == (1, 3, "e", "launch")
    assert 20.0 <= f["ts"] <= 26.5


def test_flow_needs_both_ends() -> None:
    lone = [rec(0, 0, "cpu", "x", "launch", 0, 1, op=7), rec(1, 0, "compute", "y", "gemm", 1, 2)]
    trace = chrome_trace(lone, title="t")
    assert not [e for e in trace["traceEvents"] if e["ph"] in ("s", "f")]


def test_checker_catches_bad_traces() -> None:
    good = chrome_trace(tiny(), title="t")
    events = good["traceEvents"]
    overlap = [
        *events,
        {
            **events[-1],
            "ph": "X",
            "name": "bad",
            "ts": 10.0,
            "dur": 15.0,
            "pid": 1,
            "tid": 2,
            "args": {},
        },
    ]
    assert any("overlaps" in p for p in check_trace_structure({"traceEvents": overlap}))
    no_meta = [e for e in events if e.get("name") != "thread_name"]
    assert any("thread_name" in p for p in check_trace_structure({"traceEvents": no_meta}))
    half_flow = [e for e in events if not (e["ph"] == "f" and e["id"] == 0)]
    assert any("flow 0" in p for p in check_trace_structure({"traceEvents": half_flow}))
    negative = [{**e, "dur": -1.0} if e["ph"] == "X" else e for e in events]
    assert any("< 0" in p for p in check_trace_structure({"traceEvents": negative}))
    assert check_trace_structure({}) == ["traceEvents is not a list"]


def test_trace_json_is_deterministic(tmp_path: Path) -> None:
    records = layered(2, 2)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_json(a, chrome_trace(records, title="det", critical={1, 2}))
    write_json(b, chrome_trace(list(reversed(records)), title="det", critical=[2, 1]))
    assert a.read_bytes() == b.read_bytes()
    assert check_trace_structure(json.loads(a.read_text())) == []


def test_unknown_stream_is_an_error() -> None:
    with pytest.raises(ValueError, match="stream='gpu'"):
        chrome_trace([rec(0, 0, "gpu", "x", "gemm", 0, 1)], title="t")


# ---- atomic writes and CSV ------------------------------------------------------------


def test_atomic_writes_leave_no_temp_files(tmp_path: Path) -> None:
    write_json(tmp_path / "t.json", {"a": [1, 2.5]})
    write_text(tmp_path / "t.csv", "x\n")
    write_text(tmp_path / "t.csv", "y\n")  # overwrite in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.json"]
    assert (tmp_path / "t.json").read_text() == '{"a":[1,2.5]}\n'
    assert (tmp_path / "t.csv").read_text() == "y\n"


def test_failed_write_keeps_old_file(tmp_path: Path) -> None:
    target = tmp_path / "t.json"
    write_json(target, {"ok": 1})
    with pytest.raises(ValueError):
        write_json(target, {"bad": float("nan")})
    with pytest.raises(TypeError):
        write_json(target, {"bad": object()})
    assert target.read_text() == '{"ok":1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_csv_round_trips_every_field() -> None:
    records = [*tiny(), tiny()[0]._replace(id=99, start_s=0.1 + 0.2, detail='a,"b"\nc')]
    rows = list(csv.DictReader(io.StringIO(records_csv(records))))
    types = {k: v.__name__ for k, v in typing.get_type_hints(Record).items()}  # int/float/str
    assert list(rows[0]) == list(types)
    convert = {"int": int, "float": float, "str": str}
    back = [Record(**{k: convert[types[k]](v) for k, v in row.items()}) for row in rows]
    assert back == records


# ---- Gantt ----------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_gantt_png_and_svg(tmp_path: Path) -> None:
    records = layered(2, 2)
    crit = {r.id for r in records if r.rank == 0 and r.stream != "cpu"}
    for name in ("g1.png", "g2.png", "g1.svg", "g2.svg"):
        gantt(records, tmp_path / name, title="2 ranks", critical=crit, rank_labels={0: "n0"})
    png = (tmp_path / "g1.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    assert png == (tmp_path / "g2.png").read_bytes()
    svg = (tmp_path / "g1.svg").read_bytes()
    assert svg.startswith(b"<?xml") and svg == (tmp_path / "g2.svg").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g1.png", "g1.svg", "g2.png", "g2.svg"]


def test_gantt_rejects_bad_suffix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"chart\.pdf"):
        gantt(tiny(), tmp_path / "chart.pdf")
    assert list(tmp_path.iterdir()) == []


def test_gantt_selection_on_16_ranks(tmp_path: Path) -> None:
    same = layered(16, 4)
    collapsed = gantt_view(same)  # every rank runs the same timeline: one is enough
    assert collapsed.ranks == (0,) and collapsed.note == "all 16 GPUs run this same timeline"
    # rank r starts r us late (launch skew): ranks differ, so 0, 1 and the last are shown
    records = [
        r._replace(start_s=r.start_s + r.rank * US, end_s=r.end_s + r.rank * US) for r in same
    ]
    default = gantt_view(records)
    assert default.ranks == (0, 1, 15) and default.note == "showing 3 of 16 GPUs"
    picked = gantt_view(records, ranks=[5, 3])
    assert picked.ranks == (3, 5) and picked.note == "showing 2 of 16 GPUs"
    zoom = gantt_view(records, layers=(1, 2))
    in_window = [
        r for r in records if r.rank in zoom.ranks and 1 <= r.layer <= 2 and r.stream != "cpu"
    ]
    assert zoom.t0_s == min(r.start_s for r in in_window)
    assert zoom.t1_s == max(r.end_s for r in in_window)
    assert 0 < zoom.t0_s < zoom.t1_s < max(r.end_s for r in records)
    assert gantt_view(records[: len(records) // 16]).note == ""  # rank 0 only
    with pytest.raises(ValueError, match="16"):
        gantt_view(records, ranks=[0, 16])
    with pytest.raises(ValueError, match="layers"):
        gantt_view(records, layers=(7, 9))
    gantt(records, tmp_path / "all.png")
    gantt(records, tmp_path / "zoom.png", ranks=[3, 5], layers=(1, 2))
    a, b = (tmp_path / "all.png").read_bytes(), (tmp_path / "zoom.png").read_bytes()
    assert a.startswith(PNG_MAGIC) and b.startswith(PNG_MAGIC) and a != b


def test_gantt_handles_50k_records(tmp_path: Path) -> None:
    records = layered(8, 400)  # ~52k records
    assert len(records) > 50_000
    t = time.perf_counter()
    gantt(records, tmp_path / "big.png", critical=range(0, len(records), 7))
    assert time.perf_counter() - t < 10.0
    assert (tmp_path / "big.png").read_bytes().startswith(PNG_MAGIC)


def test_dependency_arrows_cross_streams_and_graph_mode_has_them() -> None:
    """A graph-mode pass has no per-kernel launches: its arrows are the dependencies (the
    replay to the first kernel, a GEMM to the all-reduce after it, and back)."""
    from tpsim import Layout, Options, Workload, simulate

    r = simulate("llama-3.1-8b", "dgx-h100", Layout(2), Workload(1), Options(launch="graph"))
    trace = chrome_trace(r.records, title="g")
    assert check_trace_structure(trace) == []
    deps: dict[int, dict[str, dict]] = {}
    for e in trace["traceEvents"]:
        if e["ph"] in ("s", "f") and e["cat"] == "dependency":
            deps.setdefault(e["id"], {})[e["ph"]] = e
    assert deps and all(set(v) == {"s", "f"} for v in deps.values())
    assert all(
        v["s"]["tid"] != v["f"]["tid"] and v["s"]["pid"] == v["f"]["pid"] for v in deps.values()
    )
    tids = {(v["s"]["tid"], v["f"]["tid"]) for v in deps.values()}
    assert {(1, 2), (2, 3), (3, 2)} <= tids  # cpu -> compute, compute -> comm, comm -> compute


def test_link_counters_are_not_pid_0_and_never_repeat() -> None:
    samples = [(0.0, "a->b", 1e9), (0.0, "a->b", 2e9), (1e-6, "a->b", 2e9), (2e-6, "a->b", 0.0)]
    trace = chrome_trace(tiny(), title="t", link_usage=samples)
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert all(e["pid"] > 0 for e in trace["traceEvents"])
    assert [(e["ts"], e["args"]["GB/s"]) for e in counters] == [(0.0, 2.0), (2.0, 0.0)]
    gpu_pids = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert counters[0]["pid"] not in gpu_pids


# ---- Pipeline point-to-point: one row in the Gantt, their own threads in the trace ------
