"""Multi-host all-reduce: the network as a topology parameter (NIC bandwidth, count,
latency; --nic-gbps / --nics-per-node; a topology file's network), NCCL's multi-host
algorithms (tree channels over every NIC, NVLSTree) and the three 2-node x 8-GPU nccl-tests
tables they are judged by."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache

import pytest
import yaml
from tpsim import calibration
from tpsim.cli import main
from tpsim.core.collective_bench import collective_sweep
from tpsim.core.comm.group import connect
from tpsim.core.comm.schedules import predict
from tpsim.core.program import CollectiveCall
from tpsim.experiments.validation.collectives import (
    MULTINODE,
    MultiNode,
    compare_multinode,
    data_dir,
)
from tpsim.topologies.errors import TopologyError
from tpsim.topologies.io import get_topology, load_topology
from tpsim.topologies.network import Network, network_named

GiB = 2**30


# --------------------------------------------------------------------- the 2-node tables
@cache
def _errors(slug: str) -> tuple[float, str]:
    curve: MultiNode = next(c for c in MULTINODE if c.slug == slug)
    _rows, err, worst = compare_multinode(curve, data_dir())
    return err, f"worst {worst['bytes']} B: {worst['simulated_us']:.1f} vs {worst['measured_us']}"


@pytest.mark.slow
def test_h100_over_infiniband_within_15_percent() -> None:
    err, worst = _errors("h100_ib")
    assert err < 0.15, (err, worst)


@pytest.mark.slow
def test_b200_over_infiniband_within_15_percent() -> None:
    err, worst = _errors("b200_ib")
    assert err < 0.15, (err, worst)


@pytest.mark.xfail(strict=True, reason="A3 Mega's 1-64 MiB regime is not modelled (issue #14)")
@pytest.mark.slow
def test_h100_on_a3_mega_within_15_percent() -> None:
    err, worst = _errors("h100_a3mega")
    assert err < 0.15, (err, worst)


@pytest.mark.slow
def test_the_miss_stays_where_it_is() -> None:
    """Regression bound on today's figure of the table still outside 15% (A3 Mega runs
    Google's tuner plugin, whose choices are not NCCL's own)."""
    assert _errors("h100_a3mega")[0] < 0.25


def test_trees_fall_short_of_their_model_at_medium_sizes() -> None:
    """NCCL's treeCorrectionFactor: the tree's bandwidth at 1 MiB is 0.6 of its model under
    LL128 and whole again at 1 GiB; a 2-host tree all-reduce at 2 MiB is slower for it."""
    calib = calibration.default()
    assert calib.collectives.tree_efficiency("LL128", 2**20) == pytest.approx(0.6)
    assert calib.collectives.tree_efficiency("LL", 64) == 1.0
    assert calib.collectives.tree_efficiency("Simple", 2**30) == 1.0
    flat = replace(calib, collectives=replace(calib.collectives, tree_size_efficiency={}))
    call = CollectiveCall("all_reduce", 2 * 2**20)
    times = []
    for c in (calib, flat):
        comms = connect(get_topology("dgx-h100", 2), 16, calib=c, algo="tree")
        times.append(predict(comms.fabric, comms.planner(call)))
    assert times[0] > times[1] * 1.02


def test_nccl_picks_tree_for_small_and_nvlstree_for_large_across_two_h100_hosts() -> None:
    rows = collective_sweep("dgx-h100", 16, [8, 8 * GiB], nodes=2)
    assert (rows[0]["algorithm"], rows[0]["protocol"]) == ("tree", "LL")
    assert (rows[1]["algorithm"], rows[1]["protocol"]) == ("nvlstree", "Simple")
    # NVLink-bound: NVLS at 0.85 less one of 16 channels, 370.8 GB/s per direction, the
    # (g+1)/g bytes of NVLS on each link: algbw <= 370.8 * 0.85 * 15/16 * 8/9, busbw x 15/8
    bound = 370.8 * 0.85 * 15 / 16 * 8 / 9 * 15 / 8
    assert 0.95 * bound < rows[1]["busbw_GBps"] < bound


def test_b200_large_messages_are_network_bound_one_copy_across() -> None:
    """NVLSTree sends one copy of the buffer between hosts: 8 NICs of 50 GB/s at 0.95
    bound algbw at 380 GB/s (busbw 712), where a ring of 8 channels gets 8 x 47.5 busbw."""
    row = collective_sweep("dgx-b200", 16, [8 * GiB], nodes=2)[0]
    assert row["algorithm"] == "nvlstree"
    assert 0.9 * 712.5 < row["busbw_GBps"] < 712.5


def test_b200_constants_are_blackwells() -> None:
    k = calibration.default().collectives
    assert k.nvls_efficiency_of("nvlink5") == 0.74
    assert k.protocols["LL"].max_busbw_Bps["nvlink5"] == 282e9
    assert k.tree_channel_cap("Simple", "nvlink5", 2) == 42.8e9
    assert k.tree_channel_cap("Simple", "nvlink4", 2) == 41.4e9
    assert k.tree_channel_cap("LL128", "nvlink5", 1) == 55.6e9
    # used: B200 NVLS is slower than H100's per link share, so a B200 host's NVLS part is
    # NCCL's 18 x 40.1 GB/s (SM100_NVLINK_BW) x 0.74 against H100's 18 x 20.6 x 0.85
    h100 = collective_sweep("dgx-h100", 8, [4 * GiB], algo="nvls")[0]["busbw_GBps"]
    b200 = collective_sweep("dgx-b200", 8, [4 * GiB], algo="nvls")[0]["busbw_GBps"]
    assert b200 / h100 == pytest.approx(40.1 / 20.6 * 0.74 / 0.85, rel=0.01)


# ------------------------------------------------------------------------- the network
def _nic_links(g) -> list[dict]:  # type: ignore[no-untyped-def]
    return [d for a, b, d in g.edges(data=True) if a == "ib_switch"]


def test_network_overrides_the_catalog_join() -> None:
    base = _nic_links(get_topology("dgx-h100", 2))
    assert len(base) == 16 and {d["bandwidth_Bps"] for d in base} == {50e9}
    g = get_topology("dgx-h100", 2, Network(nic_Bps=25e9, nics_per_node=4, latency_s=10e-6))
    links = _nic_links(g)
    assert len(links) == 8 and {d["bandwidth_Bps"] for d in links} == {25e9}
    assert {d["latency_s"] for d in links} == {5e-6}  # half of NIC to NIC on each side
    # GPUs 0 and 1 share NIC 0
    assert g.has_edge("n0.gpu0", "n0.nic0") and g.has_edge("n0.gpu1", "n0.nic0")


def test_a3_mega_is_described_as_data() -> None:
    net = network_named("gcp-tcpxo")
    assert (net.nic_Bps, net.nics_per_node, net.protocols) == (25e9, 8, ("Simple", "LL128"))
    links = _nic_links(get_topology("a3-mega", 2))
    assert {d["bandwidth_Bps"] for d in links} == {25e9}
    rows = collective_sweep("a3-mega", 16, [8], nodes=2)
    assert rows[0]["protocol"] != "LL"  # NCCL_PROTO=Simple,LL128


@pytest.mark.slow
def test_fewer_or_slower_nics_are_slower() -> None:
    def t(*flags: str) -> float:
        net = Network(
            nic_Bps=float(flags[0]) * 1e9 / 8 if flags[0] else None,
            nics_per_node=int(flags[1]) if flags[1] else None,
        )
        graph = get_topology("dgx-h100", 2, net)
        return collective_sweep(graph, 16, [GiB], nodes=2)[0]["time_s"]

    assert t("", "") < t("", "4") < t("200", "4")


def test_a_topology_file_states_its_network(tmp_path) -> None:  # type: ignore[no-untyped-def]
    doc = {
        "name": "two",
        "gpus": {"g": "h100-sxm"},
        "network": {"nic_gbps": 100, "nics_per_node": 1, "latency_us": 20},
        "nodes": [
            {"id": "gpu0", "kind": "gpu", "type": "g"},
            {"id": "gpu1", "kind": "gpu", "type": "g"},
        ],
        "links": [
            {"src": "gpu0", "dst": "gpu1", "bandwidth_GBps": 300, "latency_us": 0.5, "duplex": True}
        ],
    }
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert load_topology(path).graph["network"] == Network(12.5e9, 1, 20e-6)
    links = _nic_links(get_topology(str(path), 2))
    assert len(links) == 2 and {d["bandwidth_Bps"] for d in links} == {12.5e9}
    # the command line wins field by field
    g = get_topology(str(path), 2, Network(nic_Bps=50e9))
    assert {d["bandwidth_Bps"] for d in _nic_links(g)} == {50e9}
    assert {d["latency_s"] for d in _nic_links(g)} == {10e-6}


@pytest.mark.parametrize(
    ("network", "match"),
    [
        ({"nic_gbps": 0}, "network.nic_gbps in .*=0"),
        ({"nic_gbps": -4}, "network.nic_gbps"),
        ({"nic_gbps": "fast"}, "network.nic_gbps"),
        ({"nic_gbps": 1e9}, "network.nic_gbps"),
        ({"nics_per_node": 0}, "network.nics_per_node"),
        ({"nics_per_node": 2.5}, "network.nics_per_node"),
        ({"latency_us": -1}, "network.latency_us"),
        ({"nccl_protocols": ["LL", "Fast"]}, "network.nccl_protocols"),
        ({"nic_gpbs": 100}, "did you mean 'nic_gbps'"),
        ([100], "network=.*must be a mapping"),
    ],
)
def test_bad_network_fields_are_one_line_errors(tmp_path, network, match) -> None:  # type: ignore[no-untyped-def]
    doc = {
        "name": "one",
        "network": network,
        "nodes": [{"id": "gpu0", "kind": "gpu", "type": "h100-sxm"}],
        "links": [],
    }
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(TopologyError, match=match) as e:
        load_topology(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "flags",
    [
        ["--nic-gbps", "0"],
        ["--nic-gbps", "-100"],
        ["--nic-gbps", "abc"],
        ["--nic-gbps", "inf"],
        ["--nic-gbps", "1e12"],
        ["--nics-per-node", "0"],
        ["--nics-per-node", "-1"],
        ["--nics-per-node", "two"],
        ["--nics-per-node", "100000"],
    ],
)
@pytest.mark.parametrize("command", ["collective", "run"])
def test_bad_nic_flags_exit_2_with_one_line(command, flags, capsys) -> None:  # type: ignore[no-untyped-def]
    if command == "collective":
        argv = ["collective", "--topology", "dgx-h100", "--nodes", "2", "--ranks", "16"]
    else:
        argv = ["run", "--model", "llama-2-7b", "--topology", "dgx-h100", "--nodes", "2"]
        argv += ["--tp", "16"]
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flags[0] in err and "Traceback" not in err


@pytest.mark.slow
def test_nic_flags_change_the_collective(capsys) -> None:  # type: ignore[no-untyped-def]
    argv = ["collective", "--topology", "dgx-h100", "--nodes", "2", "--ranks", "16"]
    argv += ["--sizes", "1G", "--json"]
    assert main(argv) == 0
    base = yaml.safe_load(capsys.readouterr().out)["results"][0]["time_s"]
    assert main([*argv, "--nic-gbps", "200", "--nics-per-node", "4"]) == 0
    slow = yaml.safe_load(capsys.readouterr().out)["results"][0]["time_s"]
    assert slow > 2 * base  # 100 GB/s of NICs against NVLSTree's NVLink-bound ~250
    assert math.isfinite(slow)


# ------------------------------------------------------- a ring's latency chain across hosts
@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_a_ring_over_two_hosts_pays_the_network_latency_where_chunks_cross(op: str) -> None:
    """16 ranks on 2 hosts, a 1 ms network: a ring's chunk crosses hosts at most twice, so
    its p - 1 = 15 steps take about 2 ms, not 15 (each rank's next step waits for what it
    receives, and a send across the network is handed to the NIC: the boundary rank does
    not wait for it to land before its next step). The closed form agrees."""
    slow = Network(latency_s=1e-3)
    (row,) = collective_sweep(
        get_topology("dgx-h100", 2, slow), 16, [8 * 1024], op=op, algo="ring", ideal=True
    )
    assert 1.9e-3 < row["time_s"] < 2.2e-3, row["time_s"]
    comms = connect(get_topology("dgx-h100", 2, slow), 16, calib=calibration.ideal(), algo="ring")
    sched = comms.planner(CollectiveCall(op, 8 * 1024))
    assert predict(comms.fabric, sched) == pytest.approx(row["time_s"], rel=0.02)


def test_a_file_with_hosts_of_its_own_reports_its_network(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two hosts of two GPUs each, NICs on a switch of the file's own (no join): the run's
    config names that network, as its text does (it was null: only a join's ib_switch was
    looked for)."""
    from tpsim.core.api import network_of
    from tpsim.topologies.io import load_topology

    nodes, links = ["  - {id: ibsw, kind: switch}"], []
    for h in range(2):
        nodes.append(f"  - {{id: h{h}sw, kind: nvswitch, host: {h}}}")
        for g in range(2):
            gpu, nic = f"h{h}g{g}", f"h{h}n{g}"
            nodes += [f"  - {{id: {gpu}, kind: gpu, type: g, host: {h}}}",
                      f"  - {{id: {nic}, kind: nic, host: {h}}}"]  # fmt: skip
            both = "duplex: true"
            links += [
                f"  - {{src: {gpu}, dst: h{h}sw, bandwidth_GBps: 450, latency_us: 0.5, {both}}}",
                f"  - {{src: {gpu}, dst: {nic}, bandwidth_GBps: 64, latency_us: 0.5, {both}}}",
                f"  - {{src: {nic}, dst: ibsw, bandwidth_GBps: 25, latency_us: 1, {both}, "
                "link: infiniband}",
            ]
    path = tmp_path / "two_hosts.yaml"
    text = ["name: two-hosts", "gpus:", "  g: h100-sxm", "nodes:", *nodes, "links:", *links]
    path.write_text("\n".join(text) + "\n")
    net = network_of(load_topology(path))
    assert net == {"nics_per_node": 2, "nic_gbps": 200.0, "latency_us": 2.0}
