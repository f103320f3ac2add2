"""Per-rank programs and point-to-point transfers, checked against numbers worked by hand.

The topologies are tiny: two GPUs joined by one duplex link of 100 GB/s and 1 us, or two
GPUs behind a switch (100 GB/s and 1 us into the switch, 50 GB/s and 2 us out of it).
Fabrics are ideal (raw link bandwidth), so a transfer of n bytes takes the path's latency
plus n over its slowest link.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpsim.calibration import ideal as ideal_calibration
from tpsim.core import metrics
from tpsim.core.comm.group import Comms, connect, run_programs
from tpsim.core.engine.simulation import run
from tpsim.core.errors import ProgramError
from tpsim.core.program import P2P, CollectiveCall, Op, Program, Programs, check
from tpsim.core.records import Record
from tpsim.experiments.plots.gantt import gantt
from tpsim.outputs.export import chrome_trace
from tpsim.topologies.builders import build
from tpsim.topologies.io import load_topology
from tracecheck import check_trace_structure

US = 1e-6

PAIR = """\
name: pair
gpus: {g: h100-sxm}
nodes:
  - {id: gpu0, kind: gpu, type: g}
  - {id: gpu1, kind: gpu, type: g}
links:
  - {src: gpu0, dst: gpu1, bandwidth_GBps: 100, latency_us: 1, duplex: true}
"""

SWITCHED = """\
name: switched
gpus: {g: h100-sxm}
nodes:
  - {id: gpu0, kind: gpu, type: g}
  - {id: gpu1, kind: gpu, type: g}
  - {id: sw, kind: switch}
links:
  - {src: gpu0, dst: sw, bandwidth_GBps: 100, latency_us: 1}
  - {src: sw, dst: gpu1, bandwidth_GBps: 50, latency_us: 2}
  - {src: gpu1, dst: sw, bandwidth_GBps: 50, latency_us: 2}
  - {src: sw, dst: gpu0, bandwidth_GBps: 100, latency_us: 1}
"""


def comms(tmp_path: Path, text: str) -> Comms:
    path = tmp_path / "topo.yaml"
    path.write_text(text)
    return connect(load_topology(path), 2, calib=ideal_calibration())


def kernel(name: str, seconds: float, deps: tuple[int, ...] = ()) -> Op:
    return Op(name, "gemm", 0, "", "compute", 0.0, seconds, 0.0, 0, "compute", "", deps)


def p2p(name: str, direction: str, peer: int, nbytes: int, deps: tuple[int, ...] = ()) -> Op:
    return Op(name, "p2p", 0, "pp", "comm", 0.0, 0.0, 0.0, nbytes, "communication", "", deps,
              p2p=P2P(direction, peer, nbytes))  # fmt: skip


def all_reduce(nbytes: int, deps: tuple[int, ...] = ()) -> Op:
    call = CollectiveCall("all_reduce", nbytes)
    return Op("ar", "collective", 0, "ar", "comm", 0.0, 0.0, 0.0, nbytes, "communication", "",
              deps, call)  # fmt: skip


def test_compute_send_recv_compute_whole_record_list(tmp_path: Path) -> None:
    # rank 0: a (10 us), then sends 1 MB to rank 1; rank 1: receives it, then b (20 us).
    n = 1_000_000
    stage0 = Program((kernel("a", 10 * US), p2p("pp.send", "send", 1, n, deps=(0,))))
    stage1 = Program((p2p("pp.recv", "recv", 0, n), kernel("b", 20 * US, deps=(0,))))
    ran = run_programs(comms(tmp_path, PAIR), Programs((stage0, stage1)))
    sent = 10 * US
    arrived = sent + 1 * US + n / 100e9  # the link's latency, then 1 MB at 100 GB/s: 11 us
    assert arrived == pytest.approx(21 * US, rel=1e-12)
    # (id, rank, stream, name, kind, category, layer, site, op, start, end, flops, bytes,
    #  cause, detail); ids in canonical order: rank, then cpu/compute/comm, then start
    assert ran.records == [
        Record(0, 0, "compute", "a", "gemm", "compute", 0, "", 0, 0.0, sent, 0.0, 0, -1, ""),
        Record(1, 0, "comm", "pp.send", "p2p", "communication", 0, "pp", 1, sent, arrived,
               0.0, n, 0, "send 1000000 B to rank 1 (tag 0)"),
        Record(2, 1, "compute", "b", "gemm", "compute", 0, "", 1, arrived, arrived + 20 * US,
               0.0, 0, 3, ""),
        # posted at 0, it waited for the send's bytes: released by the send as they land
        # (it had started at 10 us, released by a, and the path skipped the send)
        Record(3, 1, "comm", "pp.recv", "p2p", "communication", 0, "pp", 0, arrived, arrived,
               0.0, 0, 1, "recv 1000000 B from rank 0 (tag 0); posted at 0.000 us, waited "
               "21.000 us"),
    ]  # fmt: skip
    assert ran.ranks_simulated == 2
    path = metrics.critical_path(ran.records)
    assert [r.name for r in path] == ["a", "pp.send", "pp.recv", "b"]  # across the transfer
    assert metrics.breakdown(ran.records)["communication"] == pytest.approx(11 * US)
    comm = metrics.communication(ran.records, rank=0)
    assert (comm["collectives"], comm["p2p"], comm["bytes_sent_per_gpu"]) == (0, 1, n)
    assert comm["by_site"]["pp"]["time_s"] == pytest.approx(11 * US)
    assert metrics.communication(ran.records, rank=1)["bytes_sent_per_gpu"] == 0


@pytest.mark.parametrize("nbytes", [1, 4096, 8_000_000])
def test_send_takes_latency_plus_bytes_over_bandwidth(tmp_path: Path, nbytes: int) -> None:
    # gpu0 -> sw -> gpu1: latency 1 + 2 us; the 50 GB/s link out of the switch is the
    # bottleneck. The other way round takes the same path's mirror.
    c = comms(tmp_path, SWITCHED)
    for src, dst in ((0, 1), (1, 0)):
        progs = [Program(()), Program(())]
        progs[src] = Program((p2p("send", "send", dst, nbytes),))
        progs[dst] = Program((p2p("recv", "recv", src, nbytes),))
        ran = run_programs(c, Programs(tuple(progs)))
        expected = 3 * US + nbytes / 50e9
        assert metrics.makespan(ran.records) == pytest.approx(expected, rel=1e-12)
        assert {r.end_s for r in ran.records} == {metrics.makespan(ran.records)}


def test_both_directions_at_once_use_both_halves_of_a_duplex_link(tmp_path: Path) -> None:
    n = 2_000_000  # 20 us at 100 GB/s each way, not 40: the link is duplex
    prog = [Program((p2p("send", "send", 1 - r, n), p2p("recv", "recv", 1 - r, n))) for r in (0, 1)]
    ran = run_programs(comms(tmp_path, PAIR), Programs(tuple(prog)))
    assert metrics.makespan(ran.records) == pytest.approx(1 * US + n / 100e9, rel=1e-12)


def test_recv_after_arrival_ends_at_once(tmp_path: Path) -> None:
    # rank 1 computes 50 us before it posts the receive: the 1 KB is long there
    n = 1000
    stage0 = Program((p2p("send", "send", 1, n),))
    stage1 = Program((kernel("c", 50 * US), p2p("recv", "recv", 0, n, deps=(0,))))
    ran = run_programs(comms(tmp_path, PAIR), Programs((stage0, stage1)))
    (recv,) = [r for r in ran.records if r.name == "recv"]
    assert (recv.start_s, recv.end_s) == (50 * US, 50 * US)
    (send,) = [r for r in ran.records if r.name == "send"]
    assert send.end_s == pytest.approx(1 * US + n / 100e9, rel=1e-12)


def test_recv_without_a_sender_is_refused(tmp_path: Path) -> None:
    lonely = Programs((Program((kernel("a", US),)), Program((p2p("recv", "recv", 0, 64),))))
    with pytest.raises(ProgramError, match=r"rank 1 op 0 receives from rank 0.*sends nothing"):
        run_programs(comms(tmp_path, PAIR), lonely)


@pytest.mark.parametrize(
    ("programs", "message"),
    [
        ((Program((p2p("s", "send", 1, 64),)), Program(())), r"rank 1 never receives"),
        (
            (Program((p2p("s", "send", 1, 64),)), Program((p2p("r", "recv", 0, 32),))),
            r"sends 64 B to rank 1 .* expects 32 B",
        ),
        ((Program((p2p("s", "send", 0, 64),)), Program(())), r"peer=0 must be another rank"),
        ((Program((p2p("s", "send", 2, 64),)), Program(())), r"peer=2 must be another rank"),
        (
            (Program((all_reduce(64),)), Program((kernel("a", US),))),
            r"rank 1 issues collectives that rank 0 does not",
        ),
    ],
)
def test_programs_that_do_not_fit_together(programs: tuple[Program, ...], message: str) -> None:
    with pytest.raises(ProgramError, match=message):
        check(Programs(programs))


def test_p2p_needs_a_router() -> None:
    progs = Programs((Program((p2p("s", "send", 1, 8),)), Program((p2p("r", "recv", 0, 8),))))
    with pytest.raises(ProgramError, match="router"):
        run(progs, planner=lambda call: None)  # type: ignore[arg-type,return-value]


def test_receives_both_first_is_a_deadlock_not_a_hang(tmp_path: Path) -> None:
    # each rank waits to receive before it sends: matched, but neither can start
    prog = [
        Program((p2p("recv", "recv", 1 - r, 8), p2p("send", "send", 1 - r, 8, deps=(0,))))
        for r in (0, 1)
    ]
    with pytest.raises(RuntimeError, match=r"deadlock: rank 0 op 0 \(recv\) never finished"):
        run_programs(comms(tmp_path, PAIR), Programs(tuple(prog)))


def _layer(compute_s: float) -> Program:
    return Program((kernel("mlp", compute_s), all_reduce(1 << 20, deps=(0,))))


def test_identical_programs_take_the_symmetry_fast_path() -> None:
    # 8 GPUs alike on one NVSwitch: one rank stands for all when every rank runs one program
    c = connect(build("dgx-h100"), 8)
    shared = run_programs(c, Programs.same(_layer(10 * US), 8))
    assert shared.ranks_simulated == 1
    equal = run_programs(c, Programs(tuple(_layer(10 * US) for _ in range(8))))  # equal copies
    assert equal.ranks_simulated == 1 and equal.records == shared.records
    full = run_programs(c, Programs.same(_layer(10 * US), 8), use_symmetry=False)
    assert full.ranks_simulated == 8 and full.records == shared.records
    # one rank computes longer: the programs differ, so every rank runs
    uneven = Programs((_layer(30 * US),) + (_layer(10 * US),) * 7)
    slow = run_programs(c, uneven)
    assert slow.ranks_simulated == 8
    ends = [max(r.end_s for r in slow.records if r.rank == k) for k in range(8)]
    assert min(ends) > 30 * US  # every rank's all-reduce waits for rank 0's data
    assert Programs.same(_layer(US), 3).shared() is not None and uneven.shared() is None


def test_p2p_records_export_and_draw(tmp_path: Path) -> None:
    n = 1_000_000
    stage0 = Program((kernel("a", 10 * US), p2p("pp.send", "send", 1, n, deps=(0,))))
    stage1 = Program((p2p("pp.recv", "recv", 0, n), kernel("b", 20 * US, deps=(0,))))
    ran = run_programs(comms(tmp_path, PAIR), Programs((stage0, stage1)))
    trace = chrome_trace(ran.records, title="p2p")
    assert check_trace_structure(trace) == []
    cats = {e["name"]: e["cat"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert cats["pp.send"] == cats["pp.recv"] == "p2p"
    json.dumps(trace)
    gantt(ran.records, tmp_path / "p2p.svg", title="p2p")
    assert "p2p" in (tmp_path / "p2p.svg").read_text()


def test_op_builder_fills_per_rank_programs_with_p2p(tmp_path: Path) -> None:
    # Two pipeline stages as later work would build them: stage 0 runs its layer and sends
    # the activations [T, d] = [4, 1024] in bf16 (8 KiB) to stage 1, which receives them and
    # runs its layer. Eager launches: 8 us of host time per kernel, 20 us per p2p call, and
    # a 2.75 us dispatch gap in each kernel's slot.
    from tpsim.calibration import default
    from tpsim.core.kernels.costs import KernelCost
    from tpsim.core.lowering.opbuild import OpBuilder

    layer = KernelCost(50 * US, 0.0, 0, "memory")
    acts = 4 * 1024 * 2
    stage0 = OpBuilder(default().launch["eager"], ranks=2)
    stage0.kernel(0, "layer0", "gemm", 0, layer, "[4, 1024]")
    stage0.p2p(0, "send", 1, acts, name="pp.send", layer=0, site="pp")
    stage1 = OpBuilder(default().launch["eager"], ranks=2)
    stage1.p2p(0, "recv", 0, acts, name="pp.recv", layer=1, site="pp")
    stage1.kernel(0, "layer1", "gemm", 1, layer, "[4, 1024]")
    programs = Programs((stage0.program(), stage1.program()))
    assert programs.shared() is None and programs.has_p2p()
    assert [op.deps for op in programs[1].ops] == [(), (0,)]
    ran = run_programs(comms(tmp_path, PAIR), programs)
    by_name = {r.name: r for r in ran.records}
    kernel_s = 50 * US + 2.75 * US
    sent = 8 * US + kernel_s  # layer0 launched at 8 us, done a kernel slot later
    assert by_name["layer0"].end_s == pytest.approx(sent, rel=1e-12)
    assert by_name["pp.send"].start_s == pytest.approx(sent, rel=1e-12)
    arrived = sent + 1 * US + acts / 100e9
    assert by_name["pp.recv"].end_s == pytest.approx(arrived, rel=1e-12)
    assert by_name["layer1"].end_s == pytest.approx(arrived + kernel_s, rel=1e-12)
    assert ran.ranks_simulated == 2
