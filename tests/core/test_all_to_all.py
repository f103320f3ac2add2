"""All-to-all (issue #24): NCCL's grouped send/receive (``pairwise``) and DeepEP's kernels
(``deepep_ll``, ``deepep_normal``): bytes per rank under uniform routing, closed forms on an
ideal uniform fabric, NCCL's P2P channel and protocol rules, DeepEP's paths across nodes,
and the per-call algorithm override."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from tpsim.calibration import default as default_calibration
from tpsim.calibration import ideal as ideal_calibration
from tpsim.core.api import simulate
from tpsim.core.collective_bench import collective_sweep
from tpsim.core.comm.algorithms import REGISTRY, Context
from tpsim.core.comm.algorithms.pairwise import (
    channel_rate,
    p2p_protocol,
    pairwise,
    peer_channels,
    per_peer_bytes,
)
from tpsim.core.comm.collectives import make_planner
from tpsim.core.comm.enqueue import enqueue_s
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.group import tp_group
from tpsim.core.comm.schedules import predict
from tpsim.core.config import Layout, Options, Workload
from tpsim.core.errors import ConfigError, ProgramError
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule
from tpsim.topologies.io import get_topology

KiB, MiB = 1024, 1024**2
H100_LINK = 450e9  # raw NVLink per GPU per direction
H100_HOP = 0.7e-6  # GPU -> NVSwitch -> GPU


def fabric(topology: str, ranks: int, nodes: int = 1, ideal: bool = False) -> Fabric:
    calib = ideal_calibration() if ideal else default_calibration()
    return tp_group(get_topology(topology, nodes), ranks).fabric(calib)


def schedule(fab: Fabric, algo: str, call: CollectiveCall) -> Schedule:
    group_order = list(range(fab.ranks))
    ctx = Context(fab, group_order, fab.tuning.protocols_over(True), choosing=False)
    (sched,) = REGISTRY[algo].build(ctx, call)
    return sched


def sent_per_rank(sched: Schedule) -> list[int]:
    return [sum(s.payload for step in steps for s in step.sends) for steps in sched.steps]


# ------------------------------------------------------------------ bytes per rank (uniform)
@pytest.mark.parametrize("algo", ["pairwise", "deepep_ll", "deepep_normal"])
@pytest.mark.parametrize(("n", "p"), [(64 * MiB, 8), (8 * KiB + 3, 8), (1000, 4)])
def test_each_rank_sends_all_but_its_own_block(algo: str, n: int, p: int) -> None:
    # nbytes is a rank's whole send buffer, uniform over the ranks, its own block included:
    # it sends n - n/p (to the byte: blocks differ by at most one byte) and keeps its own
    blocks = per_peer_bytes(n, p)
    assert sum(blocks) == n and max(blocks) - min(blocks) <= 1
    sched = schedule(fabric("dgx-h100", p), algo, CollectiveCall("all_to_all", n))
    assert sent_per_rank(sched) == [n - blocks[t] for t in range(p)]


def test_deepep_normal_across_nodes_sends_each_node_its_share_once_over_the_network() -> None:
    # 2 nodes x 8: a rank's RDMA bytes are node_dedup x what it has for the other node's 8
    # GPUs; the forwarders then deliver every GPU n/p from each of the 16 ranks
    n, p, dedup = 16 * MiB, 16, 0.25
    fab = fabric("dgx-h100", p, nodes=2)
    sched = schedule(fab, "deepep_normal", CollectiveCall("all_to_all", n, node_dedup=dedup))
    b = n // p
    for steps in sched.steps:
        sends = [s for step in steps for s in step.sends]
        assert sum(s.payload for s in sends if s.net) == round(8 * b * dedup)
        # forwarding: 2 sources (one per node) x n/p to each of the 7 other local GPUs
        assert sum(s.payload for s in sends if not s.net) == 7 * 2 * b


# ------------------------------------------------------------------ ideal closed forms
@pytest.mark.parametrize("algo", ["nccl", "deepep_ll", "deepep_normal"])
@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("n", [8 * KiB, 64 * MiB])
def test_ideal_all_to_all_is_its_alpha_beta_closed_form(algo: str, p: int, n: int) -> None:
    # uniform switch, ideal calibration: alpha (GPU -> NVSwitch -> GPU) + (p-1)/p n / B, and
    # the engine's time is the schedule's closed form (predict) to 1e-9
    (row,) = collective_sweep("dgx-h100", p, [n], op="all_to_all", algo=algo, ideal=True)
    fab = fabric("dgx-h100", p, ideal=True)
    plan = make_planner(fab, list(range(p)), algo=algo)
    sched = plan(CollectiveCall("all_to_all", n))
    assert row["time_s"] == pytest.approx(predict(fab, sched), rel=1e-9)
    assert row["time_s"] == pytest.approx(H100_HOP + (p - 1) / p * n / H100_LINK, rel=1e-9)


# ------------------------------------------------------------------ NCCL's P2P rules
@pytest.mark.parametrize(
    ("per_peer", "p", "channels"),
    [
        (512, 8, 1),  # one part of at least 64 KiB (chunk / 8)
        (64 * KiB, 2, 1),
        (128 * KiB, 2, 2),  # one channel per 64 KiB part ...
        (8 * MiB, 2, 16),  # ... up to nChannelsMin: 32 per peer halved to 16 for 2 ranks
        (8 * MiB, 8, 4),  # 32 / 8 ranks
        (256 * MiB, 2, 16),  # 16 parts of 16 MiB (32 chunks): not above the largest
        (256 * MiB, 8, 16),  # 4 parts of 64 MiB: doubled while above 16 MiB
    ],
)
def test_nccl_p2p_channels_per_peer(per_peer: int, p: int, channels: int) -> None:
    # enqueue.cc addP2pToPlan on a DGX H100 (32 P2P channels, 32 per peer)
    assert peer_channels(fabric("dgx-h100", p), per_peer) == channels


def test_p2p_channels_across_hosts_follow_the_net_peer_rule() -> None:
    # NCCL_NCHANNELS_PER_NET_PEER 2 for every peer of a group spanning hosts; parts of at
    # most one 128 KiB net chunk
    fab = fabric("dgx-h100", 16, nodes=2)
    assert peer_channels(fab, 16 * KiB) == 1
    assert peer_channels(fab, 64 * MiB) == 2


@pytest.mark.parametrize("p", [2, 8])
def test_ll_while_the_bytes_per_peer_fit_its_channels_times_the_threshold(p: int) -> None:
    fab = fabric("dgx-h100", p)
    ctx = Context(fab, list(range(p)), fab.tuning.protocols_over(True), choosing=True)
    threshold = fab.tuning.p2p_ll_threshold
    assert p2p_protocol(ctx, p * threshold).name == "LL"
    assert p2p_protocol(ctx, p * threshold + p).name == "Simple"
    # LL128 never runs P2P
    assert all(p2p_protocol(ctx, p * k).name != "LL128" for k in (8, 4 * KiB, 4 * MiB))


def tuned_for(topology: str, p: int, version: str) -> Fabric:
    """``p`` GPUs of ``topology`` priced with NCCL ``version``'s P2P rules."""
    calib = default_calibration()
    p2p = calib.collectives.p2p
    assert p2p is not None
    tuned = replace(calib, collectives=replace(calib.collectives, p2p=p2p.for_nccl(version)))
    return tp_group(get_topology(topology), p).fabric(tuned)


@pytest.mark.parametrize(
    ("version", "rule"), [("2.23", "per_peer"), ("2.27.3", "per_peer"), ("2.28.9", "per_peer"),
                          ("2.29.2", "parts"), ("2.30", "parts"), ("", "parts")],
)  # fmt: skip
def test_the_ll_rule_follows_the_nccl_release(version: str, rule: str) -> None:
    # enqueue.cc addP2pToPlan: nChannelsMax x NCCL_P2P_LL_THRESHOLD up to 2.28, the parts'
    # channels from 2.29; the shipped calibration is the current release's
    p2p = default_calibration().collectives.p2p
    assert p2p is not None
    assert p2p.ll_rule == "parts"
    assert p2p.for_nccl(version).ll_rule == rule


@pytest.mark.parametrize(
    ("per_peer", "p", "proto", "channels"),
    [
        # LL parts of at least 8 KiB: the LL buffer's step (64 KiB of 16-byte lines) / 8
        (8 * KiB, 2, "LL", 1),
        (64 * KiB, 2, "LL", 8),  # 8 parts of 8 KiB (Simple: one of 64 KiB)
        (512 * KiB, 2, "LL", 16),  # nChannelsMin: 16 parts of 32 KiB
        (512 * KiB, 8, "LL", 4),  # 4 parts of 128 KiB
        (512 * KiB, 2, "Simple", 8),  # Simple parts of at least 64 KiB
    ],
)
def test_nccl_228_sizes_parts_by_the_protocols_step(
    per_peer: int, p: int, proto: str, channels: int
) -> None:
    fab = tuned_for("dgx-h100", p, "2.27.3")
    assert peer_channels(fab, per_peer, proto) == channels
    # NCCL 2.29 sizes every part for Simple before it picks the protocol
    assert peer_channels(fabric("dgx-h100", p), per_peer, proto) == peer_channels(
        fab, per_peer, "Simple"
    )


@pytest.mark.parametrize("p", [2, 4, 8])
def test_nccl_228_runs_ll_up_to_the_per_peer_channels_times_the_threshold(p: int) -> None:
    # thresholdLL = nChannelsMax (p2pnChannelsPerPeer: 32 on a DGX A100 or H100) x 16 KiB,
    # whatever the channels the transfer then runs on; 2.29: 16 KiB for one 64 KiB part
    threshold = default_calibration().collectives.p2p_ll_threshold
    for version, per_peer_max in (("2.27.3", 32 * threshold), ("2.29.2", threshold)):
        for topo in ("dgx-a100", "dgx-h100"):
            fab = tuned_for(topo, p, version)
            ctx = Context(fab, list(range(p)), fab.tuning.protocols_over(True), choosing=True)
            assert p2p_protocol(ctx, p * per_peer_max).name == "LL", (version, topo)
            assert p2p_protocol(ctx, p * per_peer_max + p).name == "Simple", (version, topo)


def test_nccl_228_ll_parts_grow_with_the_bytes_once_every_channel_is_in_use() -> None:
    # 2 GPUs of NCCL 2.27: 16 channels of 8 KiB LL parts at 128 KiB a peer, then the parts
    # (and the time) grow: 16 KiB at 256 KiB, 32 KiB at 512 KiB
    fab = tuned_for("dgx-a100", 2, "2.27.3")
    ll = fab.tuning.protocols["LL"]
    times = []
    for per_peer in (128 * KiB, 256 * KiB, 512 * KiB):
        assert peer_channels(fab, per_peer, "LL") == 16
        times.append(predict(fab, pairwise(fab, 2 * per_peer, ll)))
    assert times[0] < times[1] < times[2]


def test_simple_parts_pay_one_chunk_of_fill_at_a_half_sm_channel_rate() -> None:
    fab = fabric("dgx-h100", 2)
    simple = fab.tuning.protocols["Simple"]
    rate = channel_rate(fab, simple)
    # half of NCCL's one-host Simple per-channel cap on Hopper (38.7 GB/s)
    assert rate == pytest.approx(38.7e9 / 2)
    n = 32 * MiB  # 16 MiB a peer: 16 channels of 1 MiB, two 512 KiB chunks each
    (snd,) = pairwise(fab, n, simple).steps[0][0].sends
    assert snd.cap_Bps == pytest.approx(16 * rate)
    assert snd.latency_s == pytest.approx(512 * KiB / rate)  # the fill exceeds the hop
    ll = fab.tuning.protocols["LL"]
    (small,) = pairwise(fab, 16 * KiB, ll).steps[0][0].sends
    assert small.latency_s < 1e-6  # LL: no chunk to fill, the hop only


def test_large_two_rank_all_to_all_runs_at_its_channels_rate() -> None:
    # 2 ranks: 16 channels of 19.35 GB/s each (310 GB/s), not the 371 GB/s of the port,
    # after Simple's P2P base latency and one 512 KiB chunk of fill
    n = 512 * MiB
    (row,) = collective_sweep("dgx-h100", 2, [n], op="all_to_all", algo="nccl")
    rate = 38.7e9 / 2
    expected = 8.4e-6 + 512 * KiB / rate + n / 2 / (16 * rate)
    assert row["time_s"] == pytest.approx(expected, rel=1e-6)


def test_a_grouped_call_costs_host_time_per_send_and_receive_task() -> None:
    c = default_calibration().collectives
    assert c.p2p is not None
    task = c.p2p.task_s["default"]
    two, eight = (enqueue_s(c, "hopper", "pairwise", "LL", 512, p) for p in (2, 8))
    assert eight - two == pytest.approx(2 * 6 * task)  # a send and a receive per rank
    assert enqueue_s(ideal_calibration().collectives, "hopper", "pairwise", "LL", 512, 8) == 0


# ------------------------------------------------------------------ DeepEP's paths
def test_deepep_normal_crosses_hosts_only_between_same_local_index_over_the_nics() -> None:
    fab = fabric("dgx-h100", 16, nodes=2)
    sched = schedule(fab, "deepep_normal", CollectiveCall("all_to_all", 16 * MiB))
    local = {r: fab.hosts[:r].count(fab.hosts[r]) for r in range(16)}
    for t, steps in enumerate(sched.steps):
        for snd in (s for step in steps for s in step.sends):
            if snd.net:  # stage 1: RDMA to the GPU of the same local index on the other node
                assert fab.hosts[snd.peer] != fab.hosts[t] and local[snd.peer] == local[t]
                assert snd.links == fab.path(t, snd.peer).links
                assert fab.path(t, snd.peer).link_class == "net"
            else:  # stage 2: NVLink forwarding inside the node, after the RDMA latency
                assert fab.hosts[snd.peer] == fab.hosts[t]
                assert snd.latency_s > fab.path(t, snd.peer).latency_s
        assert sum(s.net for step in steps for s in step.sends) == 1


def test_deepep_low_latency_writes_every_remote_gpu_directly() -> None:
    fab = fabric("dgx-h100", 16, nodes=2)
    sched = schedule(fab, "deepep_ll", CollectiveCall("all_to_all", 16 * MiB))
    for t, steps in enumerate(sched.steps):
        peers = {s.peer: s.net for step in steps for s in step.sends}
        assert sorted(peers) == [u for u in range(16) if u != t]
        assert all(net == (fab.hosts[u] != fab.hosts[t]) for u, net in peers.items())


def test_deepep_dispatch_grid_has_one_sm_per_expert() -> None:
    ep = default_calibration().collectives.deepep
    assert ep is not None
    ll = ep.low_latency
    assert [ll.grid_sms(e, 132) for e in (8, 16, 256, 512, 0)] == [8, 16, 128, 128, 0]
    # few experts: the grid, not NVLink, bounds dispatch; combine has no such limit
    n = 8 * MiB
    times = {
        (phase, experts): collective_sweep(
            "dgx-h100", 8, [n], op="all_to_all", algo="deepep_ll", phase=phase, experts=experts
        )[0]["time_s"]
        for phase in ("dispatch", "combine")
        for experts in (8, 256)
    }
    assert times["dispatch", 8] > 3 * times["dispatch", 256]
    assert times["combine", 8] == pytest.approx(times["combine", 256])


# ------------------------------------------------------------------ choice and override
def test_auto_and_nccl_never_choose_deepep_but_a_call_or_algo_can() -> None:
    fab = fabric("dgx-h100", 8)
    order = list(range(8))
    for choice in ("auto", "nccl"):
        plan = make_planner(fab, order, algo=choice)
        for n in (8 * KiB, 64 * MiB):
            assert plan(CollectiveCall("all_to_all", n)).algorithm == "pairwise"
            named = plan(CollectiveCall("all_to_all", n, algo="deepep_ll", phase="dispatch"))
            assert named.algorithm == "deepep_ll"
        # the override leaves the group's other collectives alone
        assert plan(CollectiveCall("all_reduce", MiB)).algorithm != "deepep_ll"
    plan = make_planner(fab, order, algo="deepep_normal")
    assert plan(CollectiveCall("all_to_all", MiB)).algorithm == "deepep_normal"


def test_a_bad_override_or_call_is_refused_in_one_line() -> None:
    fab = fabric("dgx-h100", 8)
    plan = make_planner(fab, list(range(8)), algo="auto")
    with pytest.raises(ConfigError, match="algo='bogus'"):
        plan(CollectiveCall("all_to_all", MiB, algo="bogus"))
    with pytest.raises(ConfigError, match="algo=deepep_ll: deepep_ll runs only all_to_all"):
        plan(CollectiveCall("all_reduce", MiB, algo="deepep_ll"))
    pcie = fabric("pcie-l40s", 4)
    with pytest.raises(ConfigError, match="needs NVLink"):
        make_planner(pcie, list(range(4)), algo="auto")(
            CollectiveCall("all_to_all", MiB, algo="deepep_ll")
        )
    uneven = fabric("dgx-h100", 12, nodes=2)  # 8 + 4 GPUs
    with pytest.raises(ConfigError, match="same number of GPUs on every node"):
        make_planner(uneven, list(range(12)), algo="deepep_normal")
    with pytest.raises(ProgramError, match="phase='prefill'"):
        CollectiveCall("all_to_all", MiB, phase="prefill")
    with pytest.raises(ProgramError, match="node_dedup=0"):
        CollectiveCall("all_to_all", MiB, node_dedup=0)
    with pytest.raises(ConfigError, match="phase='x'"):
        collective_sweep("dgx-h100", 8, [MiB], op="all_to_all", phase="x")


def test_the_cli_runs_deepep_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    from tpsim.cli import main

    argv = ["collective", "--topology", "dgx-h100", "--ranks", "8", "--op", "all_to_all"]
    assert main([*argv, "--algo", "deepep_ll", "--sizes", "1M", "--json"]) == 0
    out = capsys.readouterr().out
    (row,) = json.loads(out)["results"]
    assert row["algorithm"] == "deepep_ll" and math.isfinite(row["time_s"])
    assert main([*argv, "--algo", "deepep_ll", "--topology", "pcie-l40s", "--ranks", "4"]) == 2


# ------------------------------------------------------------------ the switch port's share
def _with_share(eff: float):
    calib = default_calibration()
    return replace(calib, collectives=replace(calib.collectives, switch_all_to_all_efficiency=eff))


@pytest.mark.parametrize("p", [4, 8])
def test_a_link_bound_all_to_all_through_a_switch_takes_the_port_share_longer(p: int) -> None:
    # 512 MiB a rank on a DGX H100: every rank's port is the bottleneck (its channels could
    # move more), so the data part stretches by exactly 1 / share; the fixed part does not
    def time_s(eff: float, n: int) -> float:
        (row,) = collective_sweep("dgx-h100", p, [n], op="all_to_all", calib=_with_share(eff))
        return row["time_s"]

    big, small = 512 * MiB, 256 * MiB
    for eff in (0.5, 0.885):
        slope = time_s(eff, big) - time_s(eff, small)
        assert slope == pytest.approx((time_s(1.0, big) - time_s(1.0, small)) / eff, rel=1e-6)


def test_the_port_share_leaves_one_peer_direct_links_and_channel_bound_flows_alone() -> None:
    def time_s(topology: str, p: int, n: int, eff: float) -> float:
        (row,) = collective_sweep(topology, p, [n], op="all_to_all", calib=_with_share(eff))
        return row["time_s"]

    # two GPUs: one peer, the flow is a ring's; MI300X: direct xGMI links, no switch
    for topology, p, n in (("dgx-h100", 2, 512 * MiB), ("mi300x", 8, 512 * MiB)):
        assert time_s(topology, p, n, 0.5) == time_s(topology, p, n, 1.0)
    # 8 GPUs at 1 MiB a rank (16 KiB a peer under LL): each flow runs at its channels' rate,
    # far below the port's, and keeps it
    assert time_s("dgx-h100", 8, MiB, 0.885) == pytest.approx(time_s("dgx-h100", 8, MiB, 1.0))


def test_the_ideal_calibration_loses_nothing_at_the_switch() -> None:
    assert ideal_calibration().collectives.switch_all_to_all_efficiency == 1.0
    assert 0 < default_calibration().collectives.switch_all_to_all_efficiency < 1


def test_deepep_on_width_split_experts_is_refused_naming_it() -> None:
    """DeepEP sends a token to the rank holding a whole expert; attention DP 8 with EP 1
    (each expert split 8 ways by width) had run through its kernels, one message per slice,
    a layout no engine runs with DeepEP."""
    with pytest.raises(ConfigError, match=r"^moe_a2a=deepep: .*needs ep=tp\*attention_dp=8 "):
        simulate("qwen3-30b-a3b", "dgx-h100", Layout(1, ep=1, attention_dp=8), Workload(4),
                 Options(moe_a2a="deepep"))  # fmt: skip
    simulate("qwen3-30b-a3b", "dgx-h100", Layout(1, ep=8, attention_dp=8), Workload(4),
             Options(moe_a2a="deepep"))  # fmt: skip
