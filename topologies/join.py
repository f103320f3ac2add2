"""The multi-host join: ``nodes`` copies of a one-host topology, their NICs on one switch
(over the network of the host's file or of the catalog's join)."""

from __future__ import annotations

import networkx as nx
from tpsim.calibration.hardware import link_figures
from tpsim.topologies.errors import TopologyError, show
from tpsim.topologies.gpus import GPUSpec
from tpsim.topologies.graph import duplex_link
from tpsim.topologies.link_bandwidths import nic_bandwidth_Bps, pcie_bandwidth_Bps
from tpsim.topologies.network import Network

MAX_NODES = 1024
#: Nodes plus links of a multi-host join (1024 DGX H100 hosts make about 67,000).
MAX_JOINED_ITEMS = 1_000_000


def join_hosts(host: nx.DiGraph, nodes: int, network: Network | None = None) -> nx.DiGraph:
    """`nodes` copies of a one-host graph, their NICs all on one "ib_switch".

    The network is `network` over the host's own (graph attribute ``network``, from its
    file) over the catalog join's: one NIC per GPU of the generation paired with its GPU
    (``links.yaml`` ``nic``), InfiniBand's hop latency on each side. With K NICs per host
    GPU i of g uses NIC ``i * K // g`` (its PCIe link to the NIC is its own); with more NICs
    than GPUs each GPU's K/g NICs are one link of K/g times the bandwidth.
    Node ids get the prefix "n{h}."; ranks are host-major. nodes=1 returns `host` itself.
    """
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= MAX_NODES:
        raise TopologyError(f"nodes={show(nodes)}: must be an integer in 1..{MAX_NODES}")
    if nodes == 1:
        return host
    if host.graph.get("hosts", 1) != 1:
        raise TopologyError(
            f"hosts={show(host.graph.get('hosts'))} in {host.graph.get('name')!r}: "
            "only a one-host topology can be replicated over nodes"
        )
    per_host = sum(1 for _, d in host.nodes(data=True) if d["kind"] == "gpu")
    size = nodes * (host.number_of_nodes() + host.number_of_edges() + 5 * per_host)
    if size > MAX_JOINED_ITEMS:
        raise TopologyError(
            f"nodes={nodes}: {nodes} copies of {host.graph.get('name')!r} make {size} nodes and "
            f"links, more than {MAX_JOINED_ITEMS}; use fewer nodes or a smaller host"
        )
    g = nx.DiGraph(
        name=f"{host.graph['name']}x{nodes}",
        nvls=host.graph.get("nvls", False),
        hosts=nodes,
        gpus_per_host=per_host,
        p2p=host.graph.get("p2p", True),
        p2p_pairs={
            (f"n{h}.{a}", f"n{h}.{b}"): ok
            for h in range(nodes)
            for (a, b), ok in host.graph.get("p2p_pairs", {}).items()
        },
    )
    g.add_node("ib_switch", kind="switch", host=0)
    links = link_figures()
    net = network.over(host.graph.get("network")) if network else host.graph.get("network")
    nics = (net.nics_per_node if net else None) or per_host
    nic_lat = links.infiniband_hop_s if net is None or net.latency_s is None else net.latency_s / 2
    for h in range(nodes):
        prefix = f"n{h}."
        for node, data in host.nodes(data=True):
            attrs = {**data, "host": h}
            if data["kind"] == "gpu":
                attrs["rank"] = h * per_host + data["rank"]
            g.add_node(prefix + node, **attrs)
        for a, b, data in host.edges(data=True):
            g.add_edge(prefix + a, prefix + b, **data)
        for node, data in host.nodes(data=True):
            if data["kind"] != "gpu":
                continue
            spec: GPUSpec = data["gpu"]
            nic = f"{prefix}nic{data['rank'] * nics // per_host}"
            first = nic not in g
            if first:
                g.add_node(nic, kind="nic", host=h)
            duplex_link(
                g, prefix + node, nic, pcie_bandwidth_Bps(spec.pcie_gen), links.pcie_hop_s, "pcie"
            )
            if first:  # more NICs than GPUs: each GPU's share of them pooled on one link
                bw = nic_bandwidth_Bps(spec) if net is None or net.nic_Bps is None else net.nic_Bps
                duplex_link(
                    g, nic, "ib_switch", bw * max(1.0, nics / per_host), nic_lat, "infiniband"
                )
    if net is not None:
        g.graph["network"] = net
    return g
