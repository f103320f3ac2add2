"""Hardware topologies for tpsim: GPU catalog, graph builders, topology files, routing.

Pure data and pure functions; never imports simpy, simulator or models.
"""

if __name__ != "tpsim.topologies":  # one name per module
    raise ImportError(f"{__name__}: this folder is tpsim.topologies; import tpsim.topologies")


from tpsim.topologies.builders import DESCRIPTIONS, TOPOLOGIES, build, two_gpus
from tpsim.topologies.errors import TopologyError
from tpsim.topologies.gpus import GPUS, GPUSpec, get_gpu
from tpsim.topologies.graph import TopologyGraph
from tpsim.topologies.io import get_topology, load_topology, save_topology, validate
from tpsim.topologies.join import join_hosts
from tpsim.topologies.routing import Routes, max_inflow, ring_order

__all__ = [
    "DESCRIPTIONS",
    "GPUS",
    "TOPOLOGIES",
    "GPUSpec",
    "Routes",
    "TopologyError",
    "TopologyGraph",
    "build",
    "get_gpu",
    "get_topology",
    "join_hosts",
    "load_topology",
    "max_inflow",
    "ring_order",
    "save_topology",
    "two_gpus",
    "validate",
]
