"""The network between hosts of a multi-host join: NIC bandwidth, NICs per host, latency.

A one-host topology says nothing about the network its copies are joined over; the join
(:func:`tpsim.topologies.builders.join_hosts`) takes a :class:`Network`. Each field left
``None`` falls back to the catalog join: one NIC per GPU, the NIC generation paired with the
GPU's scale-up fabric (``links.yaml`` ``nic``) and InfiniBand's hop latency on each side.

The same fields come from three places, later ones winning field by field: a catalog entry
(``links.yaml`` ``networks``, e.g. ``gcp-tcpxo``), a topology file's ``network:`` mapping,
and the command line (``--nic-gbps``, ``--nics-per-node``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from tpsim.calibration.hardware import link_figures
from tpsim.topologies.errors import TopologyError, did_you_mean, show
from tpsim.topologies.gpus import scale

__all__ = [
    "MAX_NICS_PER_NODE",
    "MAX_NIC_GBPS",
    "NETWORK_FIELDS",
    "Network",
    "network_from_dict",
    "network_named",
]

#: Limits of a plausible NIC (Gb/s per NIC; 1.6 Tb/s NICs exist, 100 Tb/s do not) and host.
MAX_NIC_GBPS = 100_000.0
#: The slowest NIC taken, Gb/s (1 Mb/s; below, a link of the join would fall under the 1 B/s
#: a topology's links are held to, and the refusal would name an internal edge).
MIN_NIC_GBPS = 0.001
MAX_NICS_PER_NODE = 1024
MAX_NETWORK_LATENCY_US = 1e6
#: File fields (units in the name), in the order they are written.
NETWORK_FIELDS = ("nic_gbps", "nics_per_node", "latency_us", "nccl_protocols")
#: NCCL's protocols, which a platform's NCCL configuration may restrict (NCCL_PROTO).
NCCL_PROTOCOLS = ("LL", "LL128", "Simple")


@dataclass(frozen=True)
class Network:
    """The network of a multi-host join; ``None`` fields: the catalog join's.

    ``nic_Bps``: one NIC's bandwidth per direction. ``nics_per_node``: NICs per host, shared
    by its GPUs in turn (GPU i uses NIC ``i * K // g``). ``latency_s``: one-way NIC-to-NIC
    latency of a message (the wire, the switches and the NIC's own processing), split
    evenly over the two NIC-switch links. ``protocols``: the NCCL protocols the platform's
    NCCL configuration allows (``NCCL_PROTO``; None: all).
    """

    nic_Bps: float | None = None
    nics_per_node: int | None = None
    latency_s: float | None = None
    protocols: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_nic_gbps(None if self.nic_Bps is None else self.nic_Bps * 8 / 1e9, "nic_Bps")
        check_nics_per_node(self.nics_per_node, "nics_per_node")
        lat = self.latency_s
        if lat is not None and (_not_number(lat) or not 0 <= lat <= MAX_NETWORK_LATENCY_US * 1e-6):
            raise TopologyError(
                f"latency_s={show(lat)}: must be a non-negative number of seconds up to 1"
            )

    def over(self, base: Network | None) -> Network:
        """This network's fields where set, ``base``'s elsewhere."""
        if base is None:
            return self
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(base, **{k: v for k, v in given.items() if v is not None})

    def to_dict(self) -> dict[str, float | int | list[str]]:
        """The file form (``nic_gbps``, ``nics_per_node``, ``latency_us``) of the set fields."""
        out: dict[str, float | int | list[str]] = {}
        if self.nic_Bps is not None:
            out["nic_gbps"] = _round(self.nic_Bps * 8 / 1e9)
        if self.nics_per_node is not None:
            out["nics_per_node"] = self.nics_per_node
        if self.latency_s is not None:
            out["latency_us"] = _round(self.latency_s * 1e6)
        if self.protocols is not None:
            out["nccl_protocols"] = list(self.protocols)
        return out


def _round(x: float) -> float:
    return float(f"{x:.12g}")


def _not_number(value: object) -> bool:
    return not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value)


def check_nic_gbps(value: object, flag: str = "--nic-gbps") -> float | None:
    """A NIC's bandwidth in Gb/s (None: not given); TopologyError naming ``flag`` if bad."""
    if value is None:
        return None
    if _not_number(value) or not MIN_NIC_GBPS <= value <= MAX_NIC_GBPS:  # type: ignore[operator]
        raise TopologyError(
            f"{flag}={show(value)}: must be a NIC bandwidth in Gb/s from {MIN_NIC_GBPS:g} to "
            f"{MAX_NIC_GBPS:g}"
        )
    return float(value)  # type: ignore[arg-type]


def check_nics_per_node(value: object, flag: str = "--nics-per-node") -> int | None:
    """NICs per host (None: one per GPU); TopologyError naming ``flag`` if bad."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_NICS_PER_NODE:
        raise TopologyError(f"{flag}={show(value)}: must be an integer in 1..{MAX_NICS_PER_NODE}")
    return value


def network_from_dict(d: object, where: str) -> Network:
    """A topology file's ``network:`` mapping (fields :data:`NETWORK_FIELDS`)."""
    if not isinstance(d, dict):
        raise TopologyError(
            f"network={show(d)} in {where}: must be a mapping with fields "
            f"{', '.join(NETWORK_FIELDS)}"
        )
    for key in d:
        if key not in NETWORK_FIELDS:
            hint = did_you_mean(key, list(NETWORK_FIELDS))
            raise TopologyError(f"network.{show(key)} in {where}: unknown field{hint}")
    gbps = check_nic_gbps(d.get("nic_gbps"), f"network.nic_gbps in {where}")
    count = check_nics_per_node(d.get("nics_per_node"), f"network.nics_per_node in {where}")
    lat = d.get("latency_us")
    if lat is not None and (_not_number(lat) or not 0 <= lat <= MAX_NETWORK_LATENCY_US):
        raise TopologyError(
            f"network.latency_us={show(lat)} in {where}: must be a non-negative number of "
            f"microseconds up to {MAX_NETWORK_LATENCY_US:g}"
        )
    protos = d.get("nccl_protocols")
    if protos is not None and (
        not isinstance(protos, list)
        or not protos
        or any(p not in NCCL_PROTOCOLS for p in protos)
        or len(set(protos)) != len(protos)
    ):
        raise TopologyError(
            f"network.nccl_protocols={show(protos)} in {where}: must be a list of distinct "
            f"protocols among {', '.join(NCCL_PROTOCOLS)}"
        )
    return Network(
        None if gbps is None else scale(gbps, 9) / 8,
        count,
        None if lat is None else scale(float(lat), -6),
        None if protos is None else tuple(protos),
    )


def network_named(name: str) -> Network:
    """A catalog network (``links.yaml`` ``networks``)."""
    known: dict[str, Any] = link_figures().networks
    if name not in known:
        hint = did_you_mean(name, list(known))
        raise TopologyError(
            f"network={show(name)}: unknown network{hint}; known: {', '.join(known)}"
        )
    return network_from_dict(known[name], f"links.yaml networks.{name}")
