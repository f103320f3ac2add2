"""Constants of the collective model, each with its source.

NCCL predicts ``time = base latency + steps x hop latency + bytes / bandwidth`` for every
(algorithm, protocol) pair and runs the fastest (src/graph/tuning.cc, NCCL 2.28; summarised
in ../shared/calibration/README.md). tpsim uses NCCL's latencies and protocol limits, and
lets the links of the topology graph supply the bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Protocol:
    name: str
    base_s: dict[str, float]  # per algorithm: fixed latency of one collective
    hop_s: dict[str, float]  # per link class: latency of one step ("nvlink", "pci", "net")
    wire_factor: float  # bytes on the wire per payload byte
    max_busbw_Bps: dict[str, float]  # per GPU generation: NCCL's cap on the protocol's busbw


GB = 1e9
US = 1e-6

#: NCCL tuner constants (tuning.cc, ncclTunerConstantsDefaults): ring base latency LL 6.6,
#: LL128 14.0, Simple 8.4 us; tree 6.8 / 14.0 / 8.4 us. Ring hop latency: NVLink .6 / 1.9 /
#: 3.4 us, PCI 1.0 / 2.5 / 5.7 us, network 2.7 / 4.0 / 14.0 us. LL carries 4 bytes of data
#: per 8-byte line (50%), LL128 120 of 128 bytes (92%, as NCCL models it), Simple 100%;
#: what the payload reaches of the link is :func:`payload_share` on top of that.
#: LL's busbw is capped by llMaxBws (Ampere 87.7, Hopper 141, Blackwell 282 GB/s for one
#: node); LL128 by perChMaxRingLL128Bws times the channels, which binds only below 12
#: channels and is left out.
PROTOCOLS: dict[str, Protocol] = {
    "LL": Protocol(
        "LL",
        {"ring": 6.6 * US, "tree": 6.8 * US},
        {"nvlink": 0.6 * US, "pci": 1.0 * US, "net": 2.7 * US},
        2.0,
        {"nvlink3": 87.7 * GB, "nvlink4": 141.0 * GB, "nvlink5": 282.0 * GB},
    ),
    "LL128": Protocol(
        "LL128",
        {"ring": 14.0 * US, "tree": 14.0 * US},
        {"nvlink": 1.9 * US, "pci": 2.5 * US, "net": 4.0 * US},
        1 / 0.92,
        {},
    ),
    "Simple": Protocol(
        "Simple",
        {"ring": 8.4 * US, "tree": 8.4 * US},
        {"nvlink": 3.4 * US, "pci": 5.7 * US, "net": 14.0 * US},
        1.0,
        {},
    ),
}


def payload_share(proto: str, algorithm: str, op: str, multi_host: bool) -> float:
    """Fraction of a path's bandwidth that a protocol's payload reaches in an algorithm:
    NCCL's "model refinements" in tuning.cc (ncclTopoTuneModel, NCCL 2.28). The LL ring
    moves a quarter of the link's bandwidth in an all-reduce or across hosts (each step
    polls, reduces and rewrites 8-byte flag-and-data lines) and a third in a one-host
    all-gather or reduce-scatter; the tree moves 0.92 of it, LL 1/3.8 of that, LL128 7/9
    of it in one host and 120/128 across hosts. LL128's 120-of-128-byte lines and LL's
    half-empty lines are counted as wire bytes (:attr:`Protocol.wire_factor`), not here.
    """
    if algorithm == "tree":
        return 0.92 * {"LL": 1 / 3.8, "LL128": 120 / 128 if multi_host else 7 / 9}.get(proto, 1.0)
    if proto == "LL":
        return 1 / 4 if multi_host or op == "all_reduce" else 1 / 3
    return 1.0


#: The first-principles protocol of ``--ideal``: no fixed latency, no overhead bytes.
IDEAL = Protocol("ideal", {}, {"nvlink": 0.0, "pci": 0.0, "net": 0.0}, 1.0, {})

#: NVLS (NVLink SHARP) latency: NCCL's hwLat for NVLS over NVLink, 25 us, with no base
#: latency (tuning.cc). Its bandwidth efficiency against the ring's NVLink figure: 0.85 on
#: Hopper, 0.74 on Blackwell (nvlsEfficiency in tuning.cc).
NVLS_LATENCY_S = 25.0 * US
NVLS_EFFICIENCY = {"nvlink4": 0.85, "nvlink5": 0.74}

#: One-shot and two-shot all-reduce through peer memory (vLLM / TensorRT-LLM custom
#: all-reduce): a kernel launch and an entry barrier, then reads or writes over NVLink with
#: flag signalling. 8 KiB on 8x H100 takes about 13 us against about 21 us for NCCL
#: (../shared/calibration/README.md); with the 6.4 us per call of torch.distributed (below)
#: that leaves about 6.6 us on the GPU: a 6 us base, and per step the route latency plus a
#: 0.6 us flag (as NCCL's LL hop).
CUSTOM_BASE_S = 6.0 * US
CUSTOM_HOP_S = 0.6 * US
#: Largest message the peer-memory all-reduce takes: vLLM's CustomAllreduce default
#: ``max_size`` of 8 MiB (its registered buffer); larger ones go to NCCL.
CUSTOM_MAX_BYTES = 8 * 1024**2

#: Fraction of a link's raw bandwidth that collective traffic achieves.
#: NVLink: NCCL's own bandwidth figure over the raw per-GPU NVLink bandwidth. Hopper:
#: 20.6 GB/s per link x 18 links = 370.8 of 450 GB/s (../shared/calibration/README.md),
#: which is also the measured ring busbw peak (collective_peaks.csv: 367-370). Ampere: NCCL
#: caps sm80 ring busbw at 235 GB/s, the measured peak (collective_peaks.csv) of 300 GB/s.
#: Blackwell: assumed as Hopper (no measurement here).
#: InfiniBand: practical per-NIC bandwidth, HDR 24 of 25 GB/s, NDR 46-48 of 50 GB/s
#: (collective_peaks.csv). PCIe, UPI, xGMI: 0.80, an estimate (TLP headers and DMA
#: overheads take about a fifth of a PCIe link), not a measurement.
NVLINK_EFFICIENCY = {"nvlink3": 235 / 300, "nvlink4": 20.6 * 18 / 450, "nvlink5": 20.6 * 18 / 450}
LINK_EFFICIENCY = {"pcie": 0.80, "upi": 0.80, "xgmi": 0.80, "infiniband": 0.95}

#: Class of each link kind in NCCL's latency table.
LINK_CLASS = {
    "nvlink": "nvlink",
    "xgmi": "nvlink",
    "pcie": "pci",
    "upi": "pci",
    "infiniband": "net",
}
CLASS_ORDER = ("nvlink", "pci", "net")


@dataclass(frozen=True)
class Launcher:
    """How a benchmark starts a collective on its ranks, which shifts when each rank joins.

    ``stagger_s``: rank i joins ``i * stagger_s`` after rank 0 (one host thread launching
    every GPU in turn); ``call_s``: host time per call before any rank can start.
    """

    name: str
    stagger_s: float
    call_s: float
    about: str


#: ``mpi``: one process per GPU launching together (mpirun -np P all_reduce_perf -g 1).
#: ``threads``: nccl-tests with ``-g P``, one thread launching the P GPUs one after another.
#: Each launch costs cudaLaunchKernel's 2.5-3 us plus NCCL's enqueue; 4.0 us per GPU was
#: fitted to the 32 KiB point of the 8x A100 sweep (nccl_allreduce_a100_8gpu.csv, run with
#: -g 8), 43.8 us, when LL was modelled at half the link; at NCCL's quarter (payload_share)
#: that point comes out at 45.4 us, and the constant is kept rather than refitted.
#: ``torch``: torch.distributed from one process per GPU: 6.4 us per call of dispatch and
#: NCCL enqueue before the kernel runs, fitted to the 8 KiB point of
#: nccl_allreduce_h100_8gpu_small.csv (21.4 us, of which NCCL's LL ring is 15.0).
LAUNCHERS: dict[str, Launcher] = {
    "mpi": Launcher("mpi", 0.0, 0.0, "one process per GPU (mpirun, -g 1)"),
    "threads": Launcher("threads", 4.0 * US, 0.0, "one thread drives all GPUs (nccl-tests -g P)"),
    "torch": Launcher("torch", 0.0, 6.4 * US, "torch.distributed, one process per GPU"),
}


def link_efficiency(link: str, scaleup_kind: str) -> float:
    if link == "nvlink":
        return NVLINK_EFFICIENCY.get(scaleup_kind, NVLINK_EFFICIENCY["nvlink4"])
    return LINK_EFFICIENCY.get(link, 0.80)


#: SMs a collective kernel occupies while it runs: NCCL runs one thread block per channel
#: on an SM of its own, and uses 16 channels for NVLS and up to 32 for rings on Hopper
#: (tuning.cc / NCCL_MAX_NCHANNELS); 16 is taken as typical. Compute kernels that run
#: alongside a collective get the other SMs: a kernel's progress slows by
#: ``sm_count / (sm_count - COMM_SMS)`` (x1.14 on H100, x1.17 on A100) while it overlaps.
COMM_SMS = 16
