"""Named studies, one module each, and the registry built from them (``tpsim study NAME``).

Every module here except :mod:`~tpsim.experiments.studies.base` (what they share: the
:class:`~tpsim.experiments.studies.base.Study` a study returns, its grids, table and files)
and :mod:`~tpsim.experiments.studies.serving_rates` (the serving studies' rate sweep)
defines ``STUDY``, a :class:`~tpsim.experiments.studies.base.StudyEntry` named as the module:
the study's name, its place in listings, one line on what it shows, and its function
``run(out=None, *, jobs=1) -> Study``. Adding a study is adding a module here (and its name
to ``STUDY_NAMES`` in tpsim.cli.studies, which ``--help`` reads without importing this).

:data:`STUDIES` lists them by ``order`` (then name), today:

- ``worked_examples``: every worked number of the design;
- ``tp_batch_sweep``: where more TP stops paying for a 70B model on H100 (the headline study,
  what ``tpsim demo`` runs);
- ``in_node_vs_cross_node``: TP 8 in one node against TP 16 over two nodes and TP 8 over two
  nodes with 4 GPUs each;
- ``launch_overhead``: eager against CUDA graphs against torch.compile, across model sizes;
- ``engines``: one model on the ideal engine and on vLLM V0 and V1 across TP;
- ``tp_vs_pp_vs_dp``: all-TP across nodes against TP x PP and replicas on the same GPUs;
- ``moe_tp_vs_ep``: a MoE model's experts tensor-parallel, expert-parallel, or under
  attention data parallelism;
- ``serving_capacity``: Llama-3.1-70B served on 8 and 16 H100s, TTFT and TPOT against
  request rate in four layouts (``tpsim serve``);
- ``moe_serving``: MoE models served on one 8-GPU node with their experts tensor-parallel,
  expert-parallel or under attention data parallelism, against request rate.
"""

from __future__ import annotations

import importlib
import pkgutil

from tpsim.experiments.studies.base import StudyEntry

#: Modules of this package that are no study.
NOT_STUDIES = frozenset({"base", "serving_rates"})


def _discover() -> dict[str, StudyEntry]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name in NOT_STUDIES:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        entry = getattr(module, "STUDY", None)
        if not isinstance(entry, StudyEntry) or entry.name != info.name:
            raise ImportError(f"{module.__name__}: needs STUDY = StudyEntry(name={info.name!r})")
        found.append(entry)
    return {s.name: s for s in sorted(found, key=lambda s: (s.order, s.name))}


#: Every study by name, in listing order; ``tpsim study NAME`` runs ``STUDIES[NAME].run``.
STUDIES: dict[str, StudyEntry] = _discover()
