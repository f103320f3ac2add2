"""Multimem: all-reduce in the NVSwitch through torch symmetric memory (vLLM's
``SymmMemCommunicator``, between its custom kernels and NCCL on Hopper and Blackwell)."""

from __future__ import annotations

from tpsim.core.comm.algorithms import Algorithm, Context
from tpsim.core.comm.algorithms._peer import why_not as peer_why_not
from tpsim.core.comm.algorithms.nvls import in_switch
from tpsim.core.comm.fabric import Fabric
from tpsim.core.program import CollectiveCall
from tpsim.core.schedule import Schedule


def multimem(fab: Fabric, nbytes: int) -> Schedule:
    """``torch.ops.symm_mem.multimem_all_reduce_``: one kernel, between two barriers over the
    group's signal pads, in which each rank reduces its ``1/p`` share in the switch
    (``multimem.ld_reduce``) and multicasts the result (``multimem.st``): NVLS's wire
    pattern (:func:`tpsim.core.comm.algorithms.nvls.in_switch`) at the kernel's own share
    of the links, without NCCL's channel pipeline; its fixed time is the kernel's and the
    barriers' per peer (``custom_allreduce.symm_mem`` of the engine's profile)."""
    symm = fab.tuning.symm_mem
    assert symm is not None
    base = symm.base_s + 2 * fab.tuning.custom_barrier_s(fab.ranks)
    steps = in_switch(fab, nbytes, fill=False, efficiency=symm.efficiency)
    return Schedule("multimem", "p2p", base, steps)


def _why_not(fab: Fabric, op: str) -> str | None:
    if fab.tuning.symm_mem is None:
        return "the engine runs no symmetric-memory all-reduce (profile vllm does)"
    if fab.nvswitch is None:
        return "needs GPUs on one NVSwitch that reduces in the switch (H100/H200/B200 systems)"
    return peer_why_not(fab, op)


def _build(ctx: Context, call: CollectiveCall) -> list[Schedule]:
    return [multimem(ctx.fab, call.nbytes)]


ALGORITHM = Algorithm(
    name="multimem",
    order=55,
    about="in-switch reduction through torch symmetric memory (vLLM between its custom "
    "all-reduce and NCCL)",
    nccl=False,
    ops=("all_reduce",),
    why_not=_why_not,
    build=_build,
    max_steps=lambda p: 1,
    explicit_only=True,
)
