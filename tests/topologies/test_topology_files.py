"""Tests of topology files: loading, saving, validation of good and bad files."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
from tpsim.topologies import (
    GPUS,
    Routes,
    TopologyError,
    build,
    get_topology,
    load_topology,
    ring_order,
    save_topology,
)

DATA = Path(__file__).parents[1] / "data" / "topologies"


# --- topology files ------------------------------------------------------------------------


def test_load_yaml_pair():
    g = load_topology(DATA / "pair.yaml")
    assert (g.graph["name"], g.graph["nvls"], g.graph["hosts"], g.graph["gpus_per_host"]) == (
        "two-gpus",
        False,
        1,
        2,
    )
    assert g.nodes["gpu1"]["gpu"] is GPUS["h100-sxm"] and g.nodes["gpu1"]["rank"] == 1
    assert g.edges["gpu1", "gpu0"] == {
        "bandwidth_Bps": 300e9,
        "latency_s": 0.5e-6,
        "link": "nvlink",
    }


def test_load_json_ring():
    g = load_topology(str(DATA / "ring4.json"))
    routes = Routes(g)
    assert g.number_of_edges() == 8
    assert routes.bandwidth_Bps(0, 2) == 100e9
    assert routes.latency_s(0, 2) == pytest.approx(4e-6)  # two hops of 2 µs
    assert routes.path(0, 2) == (("gpu0", "gpu1"), ("gpu1", "gpu2"))  # tie: lexicographic
    assert ring_order(routes, range(4)) == [0, 1, 2, 3]


def test_custom_gpu_in_file():
    spec = load_topology(DATA / "fat_ring.yaml").nodes["gpu0"]["gpu"]
    assert (spec.name, spec.bf16_flops, spec.hbm_bytes, spec.matmul_efficiency) == (
        "x",
        100e12,
        16e9,
        0.75,
    )


def _same(a: nx.DiGraph, b: nx.DiGraph) -> None:
    assert a.graph == b.graph
    assert list(a.nodes(data=True)) == list(b.nodes(data=True))
    assert sorted(a.edges(data=True)) == sorted(b.edges(data=True))


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
@pytest.mark.parametrize(
    "source", ["dgx-h100", "pcie-rtx4090", "mi300x", "dgx-a100x2", "fat_ring.yaml", "pair.yaml"]
)
def test_save_load_round_trip(tmp_path, source, suffix):
    if source.endswith(".yaml"):
        g = load_topology(DATA / source)
    elif source == "dgx-a100x2":
        g = build("dgx-a100", 2)
    else:
        g = build(source)
    path = tmp_path / f"saved{suffix}"
    save_topology(g, path)
    _same(g, load_topology(path))


def test_get_topology_names_and_files(tmp_path):
    assert get_topology("DGX-H100").graph["name"] == "dgx-h100"
    assert Routes(get_topology("dgx-h100", nodes=2)).num_ranks == 16
    g = get_topology(str(DATA / "pair.yaml"), nodes=3)
    routes = Routes(g)
    assert routes.num_ranks == 6 and routes.bandwidth_Bps(1, 2) == 50e9  # H100 hosts get NDR NICs


HEAD = "name: t\ngpus: {g: h100-sxm}\n"
TWO = "nodes:\n  - {id: gpu0, kind: gpu, type: g}\n  - {id: gpu1, kind: gpu, type: g}\n"


def _link(**kw: object) -> str:
    fields = {"src": "gpu0", "dst": "gpu1", "bandwidth_GBps": 100, "latency_us": 1, "duplex": True}
    fields.update(kw)
    body = ", ".join(f"{k}: {v}" for k, v in fields.items() if v is not None)
    return "links:\n  - {" + body + "}\n"


GOOD = HEAD + TWO + _link()


def _sub(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


def _spec(body: str) -> str:
    return "name: t\ngpus: {g: {" + body + "}}\n" + TWO + _link()


def _star(gpu: str) -> str:
    """Two GPUs of type ``gpu`` (a catalog name or a full spec) on one NVSwitch node."""
    links = "".join(f"  - {{src: {g}, dst: sw, bandwidth_GBps: 450, latency_us: 0.5, "
                    "duplex: true}\n" for g in ("gpu0", "gpu1"))  # fmt: skip
    return f"name: t\ngpus: {{g: {gpu}}}\n{TWO}  - {{id: sw, kind: nvswitch}}\nlinks:\n{links}"


G0, G1 = "gpu0, kind: gpu, type: g", "gpu1, kind: gpu, type: g"
JSON_TWO = (
    '{"name": "t", "gpus": {"g": "h100-sxm"}, "nodes": [{"id": "g0", "kind": "gpu", "type": "g"}, '
    '{"id": "g1", "kind": "gpu", "type": "g"}], "links": ['
)
# (case id, file name, text, substring the one-line message must contain)
BAD = [
    ("yaml-syntax", "t.yaml", HEAD + "nodes: [\n  {id: gpu0\n", "YAML syntax error in"),
    ("json-syntax", "t.json", '{"name": "t",\n "nodes": [}', "line 2"),
    (
        "top-level-list",
        "t.yaml",
        "- a\n- b\n",
        "top level in t.yaml: must be a mapping with name, nodes, links; got a list",
    ),
    ("empty-file", "t.yaml", "", "got an empty document"),
    ("unknown-top", "t.yaml", GOOD + "nodez: []\n", "nodez in t.yaml: unknown field (did you mean"),
    ("missing-links", "t.yaml", HEAD + TWO, "links in t.yaml: missing field"),
    ("node-field-typo", "t.yaml", _sub("{id: gpu1, kind", "{id: gpu1, kindd"), "nodes[1].kindd"),
    ("link-field-typo", "t.yaml", HEAD + TWO + _link(latency_us=None, latency_s=1), "latency_us"),
    ("bw-string", "t.yaml", HEAD + TWO + _link(bandwidth_GBps="fast"), "bandwidth_GBps='fast'"),
    ("bw-bool", "t.yaml", HEAD + TWO + _link(bandwidth_GBps="true"), "bandwidth_GBps=True"),
    ("bw-negative", "t.yaml", HEAD + TWO + _link(bandwidth_GBps=-5), "bandwidth_GBps=-5 in t.yaml"),
    ("bw-zero", "t.yaml", HEAD + TWO + _link(bandwidth_GBps=0), "links[0].bandwidth_GBps=0"),
    ("bw-nan", "t.yaml", HEAD + TWO + _link(bandwidth_GBps=".nan"), "links[0].bandwidth_GBps=nan"),
    ("bw-inf", "t.yaml", HEAD + TWO + _link(bandwidth_GBps=".inf"), "links[0].bandwidth_GBps=inf"),
    ("bw-huge", "t.yaml", HEAD + TWO + _link(bandwidth_GBps="2.0e+6"), "implausibly large"),
    ("lat-negative", "t.yaml", HEAD + TWO + _link(latency_us=-1), "links[0].latency_us=-1"),
    ("lat-huge", "t.yaml", HEAD + TWO + _link(latency_us=10**7), "links[0].latency_us=10000000"),
    ("duplex-int", "t.yaml", HEAD + TWO + _link(duplex=1), "links[0].duplex=1"),
    ("link-kind", "t.yaml", HEAD + TWO + _link(link="nvlinkk"), "links[0].link='nvlinkk'"),
    ("self-loop", "t.yaml", HEAD + TWO + _link(dst="gpu0"), "links[0].dst='gpu0'"),
    ("unknown-node", "t.yaml", HEAD + TWO + _link(dst="gpu9"), "links[0].dst='gpu9'"),
    (
        "dup-link",
        "t.yaml",
        GOOD + "  - {src: gpu1, dst: gpu0, bandwidth_GBps: 1, latency_us: 1}\n",
        "links[1]",
    ),
    ("dup-id", "t.yaml", _sub("id: gpu1", "id: gpu0"), "nodes[1].id='gpu0'"),
    ("unknown-kind", "t.yaml", _sub("kind: gpu", "kind: gpuu"), "nodes[0].kind='gpuu'"),
    ("gpu-no-type", "t.yaml", _sub(G0, "gpu0, kind: gpu"), "nodes[0].type"),
    ("unknown-type", "t.yaml", _sub(G0, "gpu0, kind: gpu, type: h100"), "nodes[0].type='h100'"),
    ("no-gpus", "t.yaml", HEAD + "nodes: [{id: sw, kind: switch}]\nlinks: []\n", "no GPU nodes"),
    ("unreachable", "t.yaml", HEAD + TWO + _link(duplex=None), "gpu1 cannot reach gpu0 in t.yaml"),
    ("mixed-ranks", "t.yaml", _sub(G0, G0 + ", rank: 0"), "nodes[1].rank"),
    ("dup-ranks", "t.yaml", GOOD.replace("type: g}", "type: g, rank: 1}"), "nodes[1].rank=1"),
    (
        "uneven-hosts",
        "t.yaml",
        _sub(G0, G0 + ", host: 0").replace(G1, G1 + ", host: 2"),
        "nodes[1].host=2",
    ),
    (
        "mixed-hosts",  # gpu0 would silently be on host 0 beside gpu1
        "t.yaml",
        _sub(G1, G1 + ", host: 0"),
        "nodes[0].host in t.yaml: missing on gpu0 while other GPUs give one",
    ),
    ("spec-typo", "t.yaml", _spec("bf16_tflop: 1, hbm_TBps: 1, hbm_GB: 1"), "gpus.g.bf16_tflop in"),
    ("spec-negative", "t.yaml", _spec("bf16_tflops: 1, hbm_TBps: -1, hbm_GB: 1"), "hbm_TBps=-1"),
    (
        "spec-kind",
        "t.yaml",
        _spec("bf16_tflops: 1, hbm_TBps: 1, hbm_GB: 1, scaleup_kind: x"),
        "kind='x'",
    ),
    ("unknown-gpu-name", "t.yaml", _sub("{g: h100-sxm}", "{g: h100-sxn}"), "gpus.g='h100-sxn'"),
    ("nvls-string", "t.yaml", GOOD + "nvls: 'yes'\n", "nvls='yes'"),
    ("nvls-ampere", "t.yaml", _star("a100-sxm-80gb") + "nvls: true\n", "a100-sxm-80gb, ampere"),
    ("nvls-ada", "t.yaml", _star("l40s") + "nvls: true\n", "gpu0 (l40s, ada): NVLink SHARP"),
    (
        "nvls-spec-arch",
        "t.yaml",
        _star("{bf16_tflops: 1, hbm_TBps: 1, hbm_GB: 1, arch: ampere}") + "nvls: true\n",
        "nvls=True in t.yaml: gpu0 (g, ampere)",
    ),
    ("nvls-no-nvswitch", "t.yaml", GOOD + "nvls: true\n", "gpu0 (h100-sxm) has no link to an"),
    ("name-number", "t.yaml", _sub("name: t", "name: 5"), "name=5"),
    ("dup-key", "t.yaml", GOOD + "name: u\n", "duplicate key at line"),
    ("json-dup-key", "t.json", '{"name": "a", "name": "b"}', "key 'name'"),
    (
        "json-nan",
        "t.json",
        JSON_TWO + '{"src": "g0", "dst": "g1", "bandwidth_GBps": NaN, "latency_us": 1}]}',
        "links[0].bandwidth_GBps=nan in t.json",
    ),
    ("json-links-dict", "t.json", JSON_TWO[:-1] + "{}}", "links={} in t.json: must be a list"),
    ("deep-yaml", "t.yaml", "name: " + "[" * 60 + "]" * 60 + "\n", "nested deeper than 50"),
    ("deep-json", "t.json", "[" * 60 + "]" * 60, "nested deeper than 50"),
]


@pytest.mark.parametrize(("fname", "text", "needle"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_files(tmp_path, monkeypatch, fname, text, needle):
    monkeypatch.chdir(tmp_path)  # messages name the file as given: "t.yaml"
    Path(fname).write_text(text, encoding="utf-8")
    with pytest.raises(TopologyError) as e:
        load_topology(fname)
    message = str(e.value)
    assert "\n" not in message and needle in message, message
    assert fname in message


def test_good_corpus_template_loads(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(GOOD, encoding="utf-8")
    assert Routes(load_topology(path)).bandwidth_Bps(0, 1) == 100e9


def test_unreadable_files(tmp_path):
    with pytest.raises(TopologyError, match=r"^topology file .*missing\.yaml: cannot read"):
        load_topology(tmp_path / "missing.yaml")
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(TopologyError, match="not UTF-8"):
        load_topology(tmp_path / "latin1.yaml")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (10 * 10**6 + 1))
    with pytest.raises(TopologyError, match="larger than 10000000 bytes"):
        load_topology(big)
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology(tmp_path)  # a directory


def _two_pairs(tmp_path: Path, extra: str = "") -> Path:
    """Two pairs of GPUs, each GPU with its NIC on one InfiniBand switch, no host: given."""
    nodes = "".join(f"  - {{id: {g}, kind: gpu, type: g}}\n  - {{id: n{g}, kind: nic}}\n"
                    for g in ("a0", "a1", "b0", "b1"))  # fmt: skip
    links = "".join(
        f"  - {{src: {g}, dst: n{g}, bandwidth_GBps: 50, latency_us: 1, duplex: true}}\n"
        f"  - {{src: n{g}, dst: ib, bandwidth_GBps: 25, latency_us: 1, duplex: true, "
        "link: infiniband}\n"
        for g in ("a0", "a1", "b0", "b1")
    )
    pairs = "".join(f"  - {{src: {x}0, dst: {x}1, bandwidth_GBps: 300, latency_us: 0.5, "
                    "duplex: true}\n" for x in ("a", "b"))  # fmt: skip
    path = tmp_path / "pairs.yaml"
    path.write_text(HEAD + "nodes:\n" + nodes + "  - {id: ib, kind: switch}\n" + extra
                    + "links:\n" + pairs + links)  # fmt: skip
    return path


def test_a_file_s_hosts_follow_its_network_when_it_names_none(tmp_path):
    """Without host: the GPUs its non-network links join are a host each (a pair and its
    NICs); the InfiniBand links are then the network."""
    g = load_topology(_two_pairs(tmp_path))
    assert g.graph["hosts"] == 2 and g.graph["gpus_per_host"] == 2
    assert [g.nodes[n]["host"] for n in ("a0", "a1", "na0", "b0", "b1", "nb1")] == [
        0, 0, 0, 1, 1, 1]  # fmt: skip
    r = Routes(g)
    assert r.host(0) == r.host(1) != r.host(2) == r.host(3)


def test_gpus_join_an_nvswitch_by_nvlink_unless_told(tmp_path):
    path = tmp_path / "star.yaml"
    path.write_text(HEAD + "nodes:\n" + "".join(
        f"  - {{id: g{i}, kind: gpu, type: g}}\n" for i in range(4)) +
        "  - {id: sw, kind: nvswitch}\nlinks:\n" + "".join(
        f"  - {{src: g{i}, dst: sw, bandwidth_GBps: 450, latency_us: 0.5, duplex: true}}\n"
        for i in range(4)))  # fmt: skip
    g = load_topology(path)
    assert {d["link"] for _, _, d in g.edges(data=True)} == {"nvlink"}


def test_uneven_network_hosts_are_refused_naming_host(tmp_path):
    """Hosts inferred from the network must hold as many GPUs each, as given ones must."""
    path = _two_pairs(tmp_path, "  - {id: c0, kind: gpu, type: g}\n")
    third = "  - {src: c0, dst: a0, bandwidth_GBps: 300, latency_us: 0.5, duplex: true}\n"
    path.write_text(path.read_text().replace("links:\n", "links:\n" + third))
    with pytest.raises(TopologyError, match=r"hosts of 3, 2.*host:"):
        load_topology(path)


def test_a_network_block_in_a_file_with_its_own_hosts_is_refused(tmp_path):
    """network: describes the join of a one-host file's --nodes copies; a file with its own
    hosts is never copied, so the block would be ignored while its NIC links set the
    network (it was, and the run said 100 Gb/s where the block said 400)."""
    path = _two_pairs(tmp_path)
    path.write_text(path.read_text() + "network: {nic_gbps: 400, nics_per_node: 4}\n")
    with pytest.raises(TopologyError, match=r"^network in .*own 2 hosts.*NIC links"):
        load_topology(path)


def test_network_flags_on_one_host_warn_that_they_are_ignored(capsys):
    from tpsim.cli import main

    assert main(["run", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--tp", "8",
                 "--nic-gbps", "400"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "--nic-gbps describes the network --nodes N > 1" in err and "ignored" in err


def test_a_gpu_forwards_only_over_nvlink(tmp_path):
    """Two hosts whose pairs join by PCIe, plus an NVLink from a1 to b0 across them: a0's
    bytes for b0 go over the network, not over PCIe into a1 and on by its NVLink (NCCL
    forwards through a GPU over NVLink alone); a1's own go over the NVLink."""
    path = _two_pairs(tmp_path)
    text = path.read_text().replace("duplex: true}\n", "duplex: true, link: pcie}\n", 2)
    text = text.replace("links:\n", "links:\n  - {src: a1, dst: b0, bandwidth_GBps: 400, "
                        "latency_us: 0.5, duplex: true, link: nvlink}\n")  # fmt: skip
    path.write_text(text)
    g = load_topology(path)
    r = Routes(g)
    a0, a1, b0 = (g.nodes[n]["rank"] for n in ("a0", "a1", "b0"))
    assert "a1" not in {u for u, _ in r.path(a0, b0)}
    assert "ib" in {v for _, v in r.path(a0, b0)}
    assert r.path(a1, b0) == (("a1", "b0"),)


def test_every_gpu_names_its_host_or_none_does(tmp_path):
    """A file whose GPUs give host: on some only is refused (the others were put on host 0
    silently, a0 and a1 here beside b0 and b1); non-GPU nodes may leave it out (host 0)."""
    path = _two_pairs(tmp_path)
    text = path.read_text()
    for g in ("b0", "b1"):
        text = text.replace(
            f"{{id: {g}, kind: gpu, type: g}}", f"{{id: {g}, kind: gpu, type: g, host: 1}}"
        )
    path.write_text(text)
    with pytest.raises(TopologyError) as e:
        load_topology(path)
    assert str(e.value) == (
        f"nodes[0].host in {path}: missing on a0 while other GPUs give one (every GPU names "
        "its host, or none does)"
    )
    for g in ("a0", "a1"):
        text = text.replace(
            f"{{id: {g}, kind: gpu, type: g}}", f"{{id: {g}, kind: gpu, type: g, host: 0}}"
        )
    path.write_text(text)
    g = load_topology(path)
    assert [g.nodes[n]["host"] for n in ("a0", "a1", "b0", "b1", "ib")] == [0, 0, 1, 1, 0]


def test_a_saved_multi_host_graph_names_every_gpu_s_host(tmp_path):
    """save_topology writes host: on every node of a graph of many hosts (host 0 too), so
    that what it writes is never a file that mixes."""
    path = tmp_path / "saved.yaml"
    save_topology(build("dgx-h100", 2), path)
    assert load_topology(path).graph["hosts"] == 2
    assert path.read_text().count("host: 0") > 8


@pytest.mark.parametrize(
    "gpu", ["h100-sxm", "h200-sxm", "b200", "{bf16_tflops: 1, hbm_TBps: 1, hbm_GB: 1}"]
)
def test_nvls_loads_with_hopper_or_later_gpus_on_an_nvswitch(tmp_path, gpu):
    """nvls: true is kept for sm90+ GPUs on an NVSwitch, and for a full spec that gives no
    arch (nothing says it cannot); nvls: false loads on any GPU."""
    path = tmp_path / "t.yaml"
    path.write_text(_star(gpu) + "nvls: true\n")
    assert load_topology(path).graph["nvls"] is True
    path.write_text(_star("a100-sxm-80gb") + "nvls: false\n")
    assert load_topology(path).graph["nvls"] is False


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (_sub(G1, G1 + ", host: 0"), "nodes[0].host in t.yaml: missing on gpu0"),
        (_star("a100-sxm-80gb") + "nvls: true\n", "nvls=True in t.yaml: gpu0 (a100-sxm-80gb"),
    ],
    ids=["mixed-hosts", "nvls-ampere"],
)
def test_run_refuses_mixed_hosts_and_nvls_before_hopper_in_one_line(
    tmp_path, monkeypatch, capsys, text, needle
):
    from tpsim.cli import main

    monkeypatch.chdir(tmp_path)
    Path("t.yaml").write_text(text, encoding="utf-8")
    rc = main(["run", "--model", "llama-3.1-8b", "--topology", "t.yaml", "--tp", "2"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "", (rc, out)
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == [tmp_path / "t.yaml"]  # no partial output


def test_a_node_s_host_follows_its_own_links_and_they_stay_in_it(tmp_path):
    """With hosts given, a NIC that gives none sits in the host of the GPU it is cabled to
    (it had gone to host 0 beside host 1's GPUs); one given host 0 but cabled to host 1's
    GPUs is refused (it ran as if on host 1, its host's NIC count wrong)."""
    path = _two_pairs(tmp_path)
    text = path.read_text()
    for g, h in (("a0", 0), ("a1", 0), ("b0", 1), ("b1", 1)):
        text = text.replace(f"{{id: {g}, kind: gpu, type: g}}",
                            f"{{id: {g}, kind: gpu, type: g, host: {h}}}")  # fmt: skip
    path.write_text(text)
    g = load_topology(path)
    assert [g.nodes[n]["host"] for n in ("na0", "na1", "nb0", "nb1", "ib")] == [0, 0, 1, 1, 0]
    path.write_text(text.replace("{id: nb0, kind: nic}", "{id: nb0, kind: nic, host: 0}"))
    with pytest.raises(TopologyError) as e:
        load_topology(path)
    assert str(e.value) == (
        f"links in {path}: b0 (host 1) and nb0 (host 0) are joined by a pcie link between "
        "hosts 0 and 1: only infiniband links join hosts (give each node the host it sits in)"
    )
    # a switch that gives no host, cabled to both hosts' GPUs: no host it could give fits
    both = text + "  - {src: zsw, dst: a1, bandwidth_GBps: 50, latency_us: 1, duplex: true}\n"
    both += "  - {src: zsw, dst: b1, bandwidth_GBps: 50, latency_us: 1, duplex: true}\n"
    ib = "  - {id: ib, kind: switch}\n"
    path.write_text(both.replace(ib, ib + "  - {id: zsw, kind: switch}\n"))
    with pytest.raises(TopologyError, match=r"zsw \(no host given\) and b1 \(host 1\)"):
        load_topology(path)
