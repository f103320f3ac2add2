"""``tpsim collective``: nccl-tests for the simulator.

Each size is one engine run of a lone collective over the group's links (the same group,
fabric, planner and engine path as ``tpsim run``: :mod:`tpsim.core.comm.group`). Benchmarks call
the collective back to back and synchronise once at the end, so an iteration lasts the
longer of two times: the device's (first rank's start to last rank's finish, every rank's
kernel already queued) and the host's, where each thread makes its call (the launcher's
``call_s``) and enqueues the collective on every GPU it drives (:mod:`tpsim.core.comm.enqueue`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from tpsim import calibration
from tpsim.core import metrics
from tpsim.core.comm.algorithms import REGISTRY
from tpsim.core.comm.collectives import OPS
from tpsim.core.comm.enqueue import enqueue_s
from tpsim.core.comm.group import connect, run_programs
from tpsim.core.errors import ConfigError
from tpsim.core.program import PHASES, CollectiveCall, Op, Program, Programs
from tpsim.topologies.graph import TopologyGraph

#: busbw = algbw x this factor (nccl-tests' definition).
BUS_FACTOR = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_to_all": lambda p: (p - 1) / p,  # size: the whole send buffer of a rank
}


#: The simulation of one size costs about this much per rank pair (measured: 128 ranks over
#: 16 DGX H100, 20 s per size), and a sweep may simulate at most MAX_WORK pairs (~10 min).
SECONDS_PER_PAIR = 1.2e-3
MAX_WORK = 500_000


def collective_sweep(
    topology: TopologyGraph | str,
    ranks: int,
    sizes: Sequence[int],
    *,
    op: str = "all_reduce",
    algo: str = "nccl",
    ideal: bool = False,
    nodes: int = 1,
    launcher: str = "mpi",
    calib: calibration.Calibration | None = None,
    phase: str = "",
    node_dedup: float = 1.0,
    experts: int = 0,
) -> list[dict[str, Any]]:
    """One row per size: bytes, time_s, algbw_GBps, busbw_GBps, algorithm, protocol, host_s
    (the launcher thread's time per call) and bound ("host" where that sets the time, else
    "device").

    ``algo="nccl"`` (the default) is what NCCL itself would run, as nccl-tests measures;
    ``"auto"`` adds the custom peer-memory all-reduce kernels of serving engines. ``calib``
    prices it (default: the shipped calibration; with ``ideal``, its ideal variant).
    ``phase`` ("dispatch", "combine") marks an all-to-all as half of an expert-parallel
    exchange (DeepEP's kernels: ``algo="deepep_ll"`` or ``"deepep_normal"``), and
    ``node_dedup`` is the share of the bytes for another node's GPUs that DeepEP's normal
    kernels send over the network, ``experts`` the MoE layer's experts (DeepEP's dispatch
    grid) (:class:`~tpsim.core.program.CollectiveCall`).
    """
    from tpsim.topologies.io import get_topology

    if op not in OPS:
        raise ConfigError(f"op={op!r}: must be one of {', '.join(OPS)}")
    if algo in REGISTRY and op not in REGISTRY[algo].ops:
        raise ConfigError(f"algo={algo}: runs only {', '.join(REGISTRY[algo].ops)}, not {op}")
    if phase not in PHASES:
        raise ConfigError(f"phase={phase!r}: must be dispatch, combine or empty")
    if not 0 < node_dedup <= 1:
        raise ConfigError(f"node_dedup={node_dedup!r}: must be in (0, 1]")
    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 0:
        raise ConfigError(f"experts={experts!r}: must be 0 (not known) or more")
    if calib is None:
        calib = calibration.for_options(ideal)
    elif ideal:
        calib = calib.ideal()
    launchers = calib.collectives.launchers
    if launcher not in launchers:
        raise ConfigError(f"launcher={launcher!r}: must be one of {', '.join(launchers)}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise ConfigError(f"ranks={ranks!r}: a collective needs at least 2 ranks")
    work = len(sizes) * ranks * ranks
    if work > MAX_WORK:  # refused before the topology is built (8000 ranks: 1000 hosts)
        raise ConfigError(
            f"ranks={ranks}: {len(sizes)} sizes x {ranks}² rank pairs = {work:,} to simulate "
            f"(about {work * SECONDS_PER_PAIR / 60:,.0f} min); at most {MAX_WORK:,}: "
            "lower --ranks or give fewer --sizes"
        )
    graph = get_topology(topology, nodes) if isinstance(topology, str) else topology
    gpus = sum(1 for _, kind in graph.nodes(data="kind") if kind == "gpu")
    if ranks > gpus:
        name = graph.graph.get("name", "topology")
        raise ConfigError(
            f"ranks={ranks}: larger than the {gpus} GPUs of {name} "
            "(add hosts: --nodes, or nodes= in the API)"
        )
    if algo == "auto" and calib.engine.allreduce == "nccl":
        algo = "nccl"  # an engine without a custom all-reduce: NCCL's own, as run does
    comms = connect(graph, ranks, calib=calib, algo=algo)
    planner = comms.planner  # an algorithm the group cannot run is refused before any size
    hbm = comms.group.gpu.hbm_bytes
    for n in sizes:  # a buffer (nccl-tests: the send buffer, an all-gather's output) in HBM
        if isinstance(n, int | float) and not isinstance(n, bool) and n > hbm:
            raise ConfigError(
                f"size={n:,}: larger than the {hbm / 2**30:g} GiB of one {comms.group.gpu.name}"
            )
    how = launchers[launcher]
    group = comms.group
    per_host = Counter(group.routes.host(g) for g in group.gpu_ranks)
    per_thread = max(per_host.values()) if how.per_host else 1  # GPUs one thread enqueues
    rows = []
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, int | float) or not n >= 1:
            raise ConfigError(f"size={n!r}: must be a positive number of bytes")
        call = CollectiveCall(op, int(n), phase=phase, node_dedup=node_dedup, experts=experts)
        op_ = Op(
            name=op,
            kind="collective",
            layer=0,
            site=op,
            stream="comm",
            launch_s=0.0,
            seconds=0.0,
            flops=0.0,
            bytes=int(n),
            category="communication",
            detail="",
            deps=(),
            collective=call,
        )
        ran = run_programs(comms, Programs.same(Program((op_,)), ranks))
        sched = planner(call)
        enqueue = enqueue_s(
            calib.collectives,
            group.gpu.arch,
            sched.algorithm,
            sched.protocol,
            int(n),
            ranks,
            comms.fabric.multi_host,
        )
        device_s = metrics.makespan(ran.records)
        host_s = how.call_s + per_thread * enqueue
        # back to back the host runs ahead and the longer of the two sets the pace; a loop
        # that synchronises after every call runs them in series
        t = host_s + device_s if how.sync else max(device_s, host_s)
        algbw = n / t / 1e9
        rows.append(
            {
                "bytes": int(n),
                "time_s": t,
                "algbw_GBps": algbw,
                "busbw_GBps": algbw * BUS_FACTOR[op](ranks),
                "algorithm": sched.algorithm,
                "protocol": sched.protocol,
                "host_s": host_s,  # the benchmark thread's time per call
                "bound": "host+device" if how.sync else "host" if host_s > device_s else "device",
            }
        )
    return rows
