"""What a configuration of ``tpsim compare`` rests on, read from its topology graph and its
summary: GPU, scale-up links, the network (when a replica's GPUs cross hosts), engine and
launch mode; and where its GPUs sit (whether a replica, or its TP group, spans hosts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpsim.outputs.text import launch_label
from tpsim.topologies.graph import TopologyGraph


def _host(gpu: str, graph: TopologyGraph | None = None) -> object:
    """A GPU's host: the graph's ``host`` of its node (a topology file's, or a join's copy),
    else the copy its id names (``n1.gpu0``)."""
    if graph is not None and gpu in graph.nodes:
        return graph.nodes[gpu].get("host", 0)
    return gpu.split(".", 1)[0] if "." in gpu else ""


def _rate(bps: float) -> str:
    gbit = bps * 8 / 1e9
    return f"{gbit:.0f} Gb/s" if gbit < 1000 else f"{gbit / 1000:.1f} Tb/s"


def crosses_hosts(config: Mapping[str, Any], graph: TopologyGraph | None = None) -> bool:
    """Whether one replica's GPUs (its TP group and pipeline stages) sit on more than one
    host, so that its traffic crosses the network (replicas on hosts of their own do not).
    A GPU's host is the graph's ``host`` of its node (a topology file's, or a join's
    copy), else the copy its id names (``n1.gpu0``)."""
    if "spans_hosts" in config:  # a summary rebuilt from a results row
        return bool(config["spans_hosts"])

    def host(gpu: str) -> object:
        return _host(gpu, graph)

    placement = config.get("placement")
    if not placement:  # one group: TP, or attention-DP groups of one GPU sharing the MoE
        adp = int(config.get("layout", {}).get("attention_dp", 1))
        gpus = config.get("gpus", [])[: int(config["tp"]) * adp]
        return len({host(str(g)) for g in gpus}) > 1
    hosts: dict[int, set[object]] = {}
    for p in placement:
        hosts.setdefault(int(p["dp"]), set()).add(host(str(p["gpu"])))
    return any(len(h) > 1 for h in hosts.values())


def assumptions(graph: TopologyGraph, summary: Mapping[str, Any]) -> dict[str, str]:
    """What a configuration's numbers rest on, read from its topology graph and options:
    GPU, the links between GPUs (kind and per-direction bandwidth), the network (NICs per
    host and their rate, when the group spans hosts), engine and launch mode."""
    c = summary["config"]
    links: dict[str, set[float]] = {}
    for u, v, d in graph.edges(data=True):
        kinds = graph.nodes[u].get("kind"), graph.nodes[v].get("kind")
        if "nic" in kinds and d.get("link") != "infiniband":
            continue  # the NIC's own PCIe attachment
        links.setdefault(str(d.get("link", "link")), set()).add(float(d["bandwidth_Bps"]))
    nics = sum(1 for _, k in graph.nodes(data="kind") if k == "nic")
    hosts = max(1, int(graph.graph.get("hosts", c.get("nodes", 1))))
    out = {"gpu": str(c["gpu"])}
    scale = [
        f"{kind} {'/'.join(f'{b / 1e9:g}' for b in sorted(bws))} GB/s"
        for kind, bws in sorted(links.items())
        if kind != "infiniband"
    ]
    out["links"] = ", ".join(scale) or "none"
    if "infiniband" in links and crosses_hosts(c, graph):
        rate = "/".join(_rate(b) for b in sorted(links["infiniband"]))
        per_host = nics // hosts
        out["network"] = f"{per_host} NIC{'s' if per_host != 1 else ''} per host at {rate}"
    elif hosts > 1 and c.get("nodes", 1) > 1:
        dp = int(c.get("layout", {}).get("dp", 1))
        out["network"] = (
            "not used (each replica within one host)" if dp > 1 else "not used (within one host)"
        )
    else:
        out["network"] = "not used (one host)"
    opts = c["options"]
    out["engine"] = str(opts["engine"])
    out["launch"] = launch_label(c)
    if opts.get("kernel_table"):
        out["kernels"] = f"measured where {opts['kernel_table']} has them, else modelled"
    return out


def tp_spans_hosts(config: Mapping[str, Any], graph: TopologyGraph | None = None) -> bool:
    """Whether the first TP group (replica 0, stage 0; with attention DP, its MoE group)
    sits on more than one host: its collectives, not only a pipeline's sends, cross the
    network. Hosts as :func:`crosses_hosts` reads them (the graph's, else the GPUs' ids); a
    summary rebuilt from a results row, which names no GPU, gives its TP group's hosts."""
    if "tp_hosts" in config:
        return int(config["tp_hosts"]) > 1
    placement = config.get("placement")
    if placement:
        gpus = [str(p["gpu"]) for p in placement if p["dp"] == 0 and p["pp"] == 0]
    else:
        adp = int(config.get("layout", {}).get("attention_dp", 1))
        gpus = [str(g) for g in config.get("gpus", [])[: int(config["tp"]) * adp]]
    return len({_host(g, graph) for g in gpus}) > 1


__all__ = ["assumptions", "crosses_hosts", "tp_spans_hosts"]
