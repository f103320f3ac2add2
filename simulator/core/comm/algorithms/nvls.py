"""NVLS: all-reduce in the NVSwitch (NVLink SHARP, Hopper and later)."""

from __future__ import annotations

from tpsim.core.comm.algorithms import Algorithm, Context
from tpsim.core.comm.fabric import Fabric
from tpsim.core.comm.schedules import steps
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule, Send, Step


def nvls(fab: Fabric, nbytes: int) -> Schedule:
    """In-switch reduction (NVLink SHARP): each GPU's share is reduced by the switch
    (multimem ld_reduce: its n/p comes back to it, n leaves it in all) and the result is
    multicast (multimem st: n/p up, n down). Both directions stream at once, so each link
    carries ``n (p+1)/p``; every rank waits for every rank's contribution.

    NCCL moves it through a pipeline (:func:`pipeline_fill_s`): the last of its stages
    starts after the first has filled it, which comes on top of the link's latency."""
    return Schedule("nvls", "Simple", fab.tuning.nvls_latency_s, in_switch(fab, nbytes))


def in_switch(
    fab: Fabric, nbytes: int, fill: bool = True, efficiency: float | None = None
) -> tuple[tuple[Step, ...], ...]:
    """The steps of an in-switch all-reduce of ``nbytes`` (one each): every rank sends its
    buffer up (reduced in the switch, ``n (p+1)/p`` on the link with its share's result
    coming back) and receives the result down, at ``efficiency`` of the links (default:
    NCCL's NVLS efficiency for the link kind); ``fill``: after NCCL's NVLS pipeline has
    filled (:func:`pipeline_fill_s`)."""
    assert fab.nvswitch is not None
    p = fab.ranks
    wire = nbytes * (p + 1) / p
    eff = efficiency or fab.tuning.nvls_efficiency_of(fab.gpu.scaleup_kind)
    everyone = tuple(range(p))
    sends = []
    for up, down in fab.nvswitch:
        rate = fab.capacities[up] * eff * p / (p + 1)
        wait = pipeline_fill_s(fab, nbytes, rate) if fill else 0.0
        sends.append(
            [
                [
                    Send(
                        (up,),
                        nbytes,
                        wire,
                        fab.latencies[up] + wait,
                        fab.capacities[up] * eff,
                        everyone,
                    ),
                    Send((down,), 0, wire, fab.latencies[down], fab.capacities[down] * eff, ()),
                ]
            ]
        )
    return steps(sends, [[p]] * p)


def pipeline_fill_s(fab: Fabric, nbytes: int, rate_Bps: float) -> float:
    """Seconds NCCL's NVLS pipeline takes to fill for an all-reduce of ``nbytes`` that
    streams at ``rate_Bps`` (a rank's payload rate): each of its NVLS channels moves
    1/channels of it, and the last of the pipeline's stages starts once the stages before
    it have passed on one loop (a chunk per rank, NCCL's chunk for this size) at one
    channel's rate (``nccl.yaml`` ``nvls.pipeline``; 0 without it)."""
    pipe = fab.tuning.nvls_pipeline
    channels = fab.tuning.nvls_channels
    if pipe is None or channels < 1 or nbytes <= 0:
        return 0.0
    loop = pipe.fill_bytes(nbytes, channels, fab.ranks)
    return (pipe.stages - 1) * loop / (rate_Bps / channels)


def _why_not(fab: Fabric, op: str) -> str | None:
    if fab.nvswitch is None:
        return (
            "needs GPUs on one NVSwitch that reduces in the switch (H100/H200/B200 "
            "systems; a topology file says so with nvls: true)"
        )
    return None


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [nvls(ctx.fab, call.nbytes)]


ALGORITHM = Algorithm(
    name="nvls",
    order=60,
    about="in-switch reduction and multicast (NVLink SHARP)",
    nccl=True,
    ops=("all_reduce",),
    why_not=_why_not,
    build=_build,
    max_steps=lambda p: 1,
)
