"""NCCL's protocols as the calibration holds them: each one's latencies (those of NCCL's
tuning model, by which it chooses, and those measured where they differ), its wire overhead
and bandwidth caps, and the share of a path's bandwidth its payload reaches.

Part of the collectives calibration (:mod:`tpsim.calibration.model_collectives`), filled
from ``data/nccl.yaml`` by :mod:`tpsim.calibration.loader_nccl`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol: latencies, wire overhead and bandwidth cap."""

    name: str
    base_s: Mapping[str, float]  # per algorithm family ("ring", "tree"): fixed latency
    hop_s: Mapping[str, float]  # per link class ("nvlink", "pci", "net"): one step's latency
    wire_factor: float  # bytes on the wire per payload byte
    max_busbw_Bps: Mapping[str, float]  # per scale-up kind: the protocol's busbw cap
    nvlink_only: bool = False  # NCCL enables it only over NVLink (LL128)
    #: per link class: one tree step's latency (NCCL prices tree hops apart from ring hops);
    #: empty: the ring's ``hop_s``
    tree_hop_s: Mapping[str, float] = field(default_factory=dict)
    #: a network step also waits for a flush of the received data (GPUDirect RDMA), one more
    #: network latency (NCCL adds the net device's latency twice for Simple)
    net_flush: bool = False
    #: per algorithm family: the fixed latency its kernels take, measured, where it differs
    #: from NCCL's model (``base_s``, by which NCCL chooses); empty: the model's
    measured_base_s: Mapping[str, float] = field(default_factory=dict)
    #: per link class: a ring step's latency as measured, where it differs from the model's
    #: ``hop_s``; empty: the model's
    measured_hop_s: Mapping[str, float] = field(default_factory=dict)

    def hop(self, family: str, link_class: str) -> float:
        """One step's latency over a path of ``link_class`` in an algorithm ``family`` (a
        ring's as measured where the calibration has it)."""
        if family == "tree" and link_class in self.tree_hop_s:
            return self.tree_hop_s[link_class]
        if family == "ring" and link_class in self.measured_hop_s:
            return self.measured_hop_s[link_class]
        return self.hop_s[link_class]

    @property
    def measured(self) -> bool:
        """Whether some latency it takes differs from the one NCCL's model gives it."""
        return bool(self.measured_base_s or self.measured_hop_s)

    def modelled(self) -> Protocol:
        """This protocol as NCCL's tuning model prices it (what NCCL chooses by): its
        measured latencies replaced by the model's."""
        if not self.measured:
            return self
        return replace(self, measured_base_s={}, measured_hop_s={})

    def clocked(self, factor: float) -> Protocol:
        """This protocol on a GPU whose SM runs ``1 / factor`` times the reference clock: the
        fixed latency and an NVLink-class hop (a flag written to the peer and polled by the
        kernel's threads) take ``factor`` times as long; a PCI hop (the PCIe round trip) and
        a network hop (the NIC's) do not change."""
        if factor == 1.0:
            return self

        def scaled(hops: Mapping[str, float]) -> dict[str, float]:
            return {k: v * factor if k == "nvlink" else v for k, v in hops.items()}

        return replace(
            self,
            base_s={k: v * factor for k, v in self.base_s.items()},
            hop_s=scaled(self.hop_s),
            tree_hop_s=scaled(self.tree_hop_s),
            measured_base_s={k: v * factor for k, v in self.measured_base_s.items()},
            measured_hop_s=scaled(self.measured_hop_s),
        )

    def base(self, family: str) -> float:
        """Fixed latency of one collective of an algorithm family (as measured where the
        calibration has it); an unknown family is a defect of the calibration, never a
        silent 0."""
        if family in self.measured_base_s:
            return self.measured_base_s[family]
        try:
            return self.base_s[family]
        except KeyError:
            raise KeyError(f"protocol {self.name} has no base latency for {family!r}") from None


@dataclass(frozen=True)
class PayloadShares:
    """Fraction of a path's bandwidth a protocol's payload reaches (NCCL's tuning model)."""

    ring_ll_all_reduce: float  # ring LL in an all-reduce, or across hosts
    ring_ll_gather: float  # ring LL in a one-host all-gather or reduce-scatter
    tree: float  # any tree
    tree_ll: float  # LL on a tree, on top of ``tree``
    tree_ll128_one_host: float
    tree_ll128_multi_host: float

    def share(self, proto: str, algorithm: str, op: str, multi_host: bool) -> float:
        if algorithm == "tree":
            if proto == "LL":
                return self.tree * self.tree_ll
            if proto == "LL128":
                ll128 = self.tree_ll128_multi_host if multi_host else self.tree_ll128_one_host
                return self.tree * ll128
            return self.tree * 1.0
        if proto == "LL":
            return (
                self.ring_ll_all_reduce if multi_host or op == "all_reduce" else self.ring_ll_gather
            )
        return 1.0
