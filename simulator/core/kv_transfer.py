"""Where disaggregated serving's KV cache travels: prefill workers' GPUs to decode workers'.

Disaggregated prefill and decode (vLLM's P/D connectors over NIXL, Dynamo, Mooncake) run
prompts on one pool of engine instances and decodes on another; once a prompt is prefilled,
its KV cache moves from the prefill worker's GPUs to the decode worker's. Each decode GPU
needs the KV heads it will hold (its share of the heads, replicated as the decode TP
replicates them) and receives them from the prefill GPUs that hold those heads, over the
routed path between the two GPUs (NVLink inside a host, the NIC across hosts, as
:class:`tpsim.topologies.routing.Routes` routes it): one flow per pair of GPUs, each after
its path's wire latency. The flows run in the serving loop's flow network
(:func:`tpsim.core.engine.serving.run_loop`), so transfers sharing a link share its
bandwidth (max-min fair, :mod:`tpsim.core.engine.flows`).

:class:`KVRoutes` places the workers (prefill workers first, then decode workers, each a
TP group of consecutive GPUs host after host, as :func:`tpsim.core.comm.layout.place`
places ranks) and lists each transfer's flows.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from tpsim.calibration import Calibration
from tpsim.core.comm.fabric import Fabric, build_fabric
from tpsim.core.comm.layout import place
from tpsim.core.errors import ConfigError
from tpsim.topologies.gpus import GPUSpec
from tpsim.topologies.routing import Routes

#: One flow of a transfer: the links it crosses, its bytes, its wire latency (s).
Flow = tuple[tuple[int, ...], float, float]


@dataclass(frozen=True)
class Pool:
    """A pool of ``workers`` engine instances of ``tp`` GPUs each."""

    tp: int
    workers: int

    @property
    def gpus(self) -> int:
        return self.tp * self.workers


class KVRoutes:
    """The GPUs of a prefill pool and a decode pool on one topology, and the flows that
    move a KV cache from a prefill worker to a decode worker."""

    def __init__(
        self,
        routes: Routes,
        gpu: GPUSpec,
        calib: Calibration,
        prefill: Pool,
        decode: Pool,
        gpus_per_node: int = 0,
    ) -> None:
        need = prefill.gpus + decode.gpus
        if need > routes.num_ranks:
            name = routes.graph.graph.get("name", "topology")
            # the larger pool's larger factor named: the most likely surprise
            kind, pool = ("decode", decode) if decode.gpus >= prefill.gpus else ("prefill", prefill)
            big = (f"{kind}_workers", pool.workers) if pool.workers > pool.tp else (
                f"{kind}_tp", pool.tp)  # fmt: skip
            raise ConfigError(
                f"{big[0]}={big[1]}: {prefill.workers}x{prefill.tp} prefill "
                f"and {decode.workers}x{decode.tp} decode GPUs = {need}, more than the "
                f"{routes.num_ranks} GPUs of {name} (add hosts: --nodes)"
            )
        ranks = place(routes, 1, 1, need, gpus_per_node)
        self.prefill, self.decode = prefill, decode
        self.fabric: Fabric = build_fabric(routes, ranks, gpu, calib)
        self.routes = routes

    @property
    def capacities(self) -> list[float]:
        """Every link's capacity (B/s), indexed as the flows' links."""
        return self.fabric.capacities

    def gpus(self, pool: str, worker: int) -> tuple[str, ...]:
        """The GPU names of a worker of ``pool`` ("prefill" or "decode")."""
        return tuple(self.routes.node(self.fabric.gpu_ranks[r]) for r in self._ranks(pool, worker))

    def _ranks(self, pool: str, worker: int) -> range:
        p = self.prefill if pool == "prefill" else self.decode
        first = (0 if pool == "prefill" else self.prefill.gpus) + worker * p.tp
        return range(first, first + p.tp)

    def flows(self, prefill_worker: int, decode_worker: int, bytes_per_gpu: float) -> list[Flow]:
        """The flows moving one request's KV cache: ``bytes_per_gpu`` to each decode GPU
        (what it holds of the request: its heads, replicated as its TP replicates them),
        each decode GPU's share from the prefill GPUs holding those heads, in proportion to
        how much of its share of the heads each holds (heads split evenly over the TP
        ranks, as the fraction of the whole)."""
        src = self._ranks("prefill", prefill_worker)
        dst = self._ranks("decode", decode_worker)
        ptp, dtp = len(src), len(dst)
        out: list[Flow] = []
        for j, d in enumerate(dst):
            lo, hi = Fraction(j, dtp), Fraction(j + 1, dtp)
            for i, s in enumerate(src):
                overlap = min(hi, Fraction(i + 1, ptp)) - max(lo, Fraction(i, ptp))
                if overlap <= 0:
                    continue
                path = self.fabric.path(s, d)
                out.append((path.links, bytes_per_gpu * float(overlap * dtp), path.latency_s))
        return out


__all__ = ["Flow", "KVRoutes", "Pool"]
