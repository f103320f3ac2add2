"""DeepEP's MoE all-to-all kernels against their published timings.

    python -m tpsim.experiments.validation.deepep

Low-latency kernels (``deepep_ll``): ``measured/deepep_low_latency_h100.csv``, DeepEP's
``tests/test_low_latency.py`` as AIConfigurator collected it on H100 SXM (EP 8 in one node;
EP 16-64 over RDMA, 2-8 nodes), kernel times of dispatch (fp8 with a scale per 128 values)
and combine (bf16). Normal kernels (``deepep_normal``): the internode rows of DeepEP's
README (``measured/deepep_published.csv``, V1 on H800 with one 400 Gb/s CX7 NIC a GPU,
4096 tokens a rank, hidden 7168, top-8 of 256 experts in at most 4 nodes).

Sizes. A :class:`~tpsim.core.program.CollectiveCall` all-to-all of ``nbytes`` is every
message one rank sends, its own experts' included, spread uniformly over the ranks. The LL
kernels send one message per token-expert pair (DeepEP's test counts the same bytes:
``hidden + hidden/128 * 4 + 16`` per fp8 message, ``2 * hidden`` per bf16 one), so
``nbytes = tokens * top-k * message``, and DeepEP's printed bandwidth is that over the
time: the times are compared. The normal kernels send a token once per destination GPU and,
across nodes, once per node over RDMA; their published "RDMA bandwidth" is DeepEP's logical
count (tokens times the distinct nodes they go to, the sender's own included, times the
token's bytes) over the time. Both counts follow from the benchmark's routing (uniform
scores, the top 4 nodes, then the top 8 experts in them), so the measured time is the
logical bytes over the published bandwidth, and the call is ``nbytes = tokens * E[GPUs a
token goes to] * token bytes`` with ``node_dedup = E[nodes] / E[GPUs]``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from math import comb
from pathlib import Path

from tpsim.calibration import csv_rows, measured
from tpsim.core.collective_bench import collective_sweep

LL_FILE = "deepep_low_latency_h100.csv"
PUBLISHED_FILE = "deepep_published.csv"
GPUS_PER_NODE = 8


def fp8_message(hidden: int) -> int:
    """Bytes of one LL dispatch message: a 16-byte header, fp8 values, an fp32 scale per 128."""
    return 16 + hidden + hidden // 128 * 4


def bf16_message(hidden: int) -> int:
    """Bytes of one LL combine message."""
    return 2 * hidden


@dataclass(frozen=True)
class LLRow:
    nodes: int
    ep: int
    hidden: int
    tokens: int
    topk: int
    experts: int
    dispatch_us: float
    combine_us: float
    version: str


def read_ll(path: Path) -> list[LLRow]:
    """The H100 rows of the low-latency file."""
    return [
        LLRow(
            int(r["node_num"]),
            int(r["ep_size"]),
            int(r["hidden_size"]),
            int(r["num_token"]),
            int(r["num_topk"]),
            int(r["num_experts"]),
            float(r["dispatch_avg_t_us"]),
            float(r["combine_avg_t_us"]),
            r["version"],
        )
        for r in csv_rows(path)
    ]


def compare_ll(multi_node: bool, data: Path | None = None) -> list[dict[str, float | str]]:
    """Rows (label, measured_us, simulated_us) of the LL dispatch and combine times, one
    node (EP 8, ``multi_node=False``) or several over RDMA."""
    rows = [r for r in read_ll((data or measured()) / LL_FILE) if (r.nodes > 1) == multi_node]
    wanted: dict[tuple[int, int, str, int], set[int]] = defaultdict(set)
    for r in rows:
        key = (r.nodes, r.ep)
        wanted[*key, "dispatch", r.experts].add(r.tokens * r.topk * fp8_message(r.hidden))
        wanted[*key, "combine", r.experts].add(r.tokens * r.topk * bf16_message(r.hidden))
    sim: dict[tuple[int, int, str, int, int], float] = {}
    for (nodes, ep, phase, experts), sizes in sorted(wanted.items()):
        ordered = sorted(sizes)
        out = collective_sweep(
            "dgx-h100", ep, ordered, op="all_to_all", algo="deepep_ll", nodes=nodes,
            phase=phase, experts=experts,
        )  # fmt: skip
        for n, row in zip(ordered, out, strict=True):
            sim[nodes, ep, phase, experts, n] = row["time_s"] * 1e6
    result: list[dict[str, float | str]] = []
    for r in rows:
        what = f"EP {r.ep}, hidden {r.hidden}, top-{r.topk} of {r.experts}, {r.tokens} tok"
        for phase, n, us in (
            ("dispatch", r.tokens * r.topk * fp8_message(r.hidden), r.dispatch_us),
            ("combine", r.tokens * r.topk * bf16_message(r.hidden), r.combine_us),
        ):
            result.append(
                {
                    "bytes": f"{what} ({r.version}) {phase}: {n}",
                    "measured_us": us,
                    "simulated_us": sim[r.nodes, r.ep, phase, r.experts, n],
                }
            )
    return result


def routing(ep: int, experts: int = 256, topk: int = 8, groups: int = 4) -> tuple[float, float]:
    """(E[GPUs], E[nodes]) a token goes to under DeepEP's test routing: uniform scores, the
    top ``min(nodes, groups)`` nodes, then the top ``topk`` experts among theirs."""
    nodes = ep // GPUS_PER_NODE
    allowed = min(nodes, groups)
    per_node, per_gpu = experts // nodes, experts // ep
    pool = allowed * per_node
    miss_node = comb(pool - per_node, topk) / comb(pool, topk)
    miss_gpu = comb(pool - per_gpu, topk) / comb(pool, topk)
    return allowed * GPUS_PER_NODE * (1 - miss_gpu), allowed * (1 - miss_node)


def compare_normal(data: Path | None = None) -> list[dict[str, float | str]]:
    """Rows of DeepEP's internode normal kernels (README, H800, EP 16-64)."""
    result: list[dict[str, float | str]] = []
    for r in csv_rows((data or measured()) / PUBLISHED_FILE):
        if r["kernel"] != "normal" or r["ep_topology"] != "internode":
            continue
        ep, tokens, hidden = int(r["ep_size"]), int(r["tokens_per_batch"]), 7168
        token = hidden * (1 + 4 / 128) if r["op"] == "dispatch" else 2 * hidden
        gpus, nodes = routing(ep)
        logical = tokens * nodes * token  # DeepEP's RDMA count: the local node included
        measured_us = logical / (float(r["bandwidth_GBps"]) * 1e9) * 1e6
        n = round(tokens * gpus * token)
        (row,) = collective_sweep(
            "hgx-h800",
            ep,
            [n],
            op="all_to_all",
            algo="deepep_normal",
            nodes=ep // GPUS_PER_NODE,
            phase=r["op"],
            node_dedup=nodes / gpus,
            experts=256,
        )
        result.append(
            {
                "bytes": f"EP {ep} {r['op']} ({r['bandwidth_GBps']} GB/s logical RDMA): {n}",
                "measured_us": measured_us,
                "simulated_us": row["time_s"] * 1e6,
            }
        )
    return result


def compare_normal_nvlink(data: Path | None = None) -> list[dict[str, float | str]]:
    """Rows of DeepEP's intranode normal kernels (README, H800, EP 8 over NVLink): the
    logical bandwidth counts every token a GPU receives, its own included (``test_intranode``
    's ``nvl_recv_bytes``), so the time is tokens x GPUs a token reaches x token bytes over
    it; simulated as the all-to-all of those bytes (a GPU's own block stays local)."""
    result: list[dict[str, float | str]] = []
    for r in csv_rows((data or measured()) / PUBLISHED_FILE):
        if r["kernel"] != "normal" or r["ep_topology"] != "intranode":
            continue
        ep, tokens, hidden = int(r["ep_size"]), int(r["tokens_per_batch"]), 7168
        token = hidden * (1 + 4 / 128) if r["op"] == "dispatch" else 2 * hidden
        gpus, _ = routing(ep)
        n = round(tokens * gpus * token)
        measured_us = n / (float(r["bandwidth_GBps"]) * 1e9) * 1e6
        (row,) = collective_sweep("hgx-h800", ep, [n], op="all_to_all", algo="deepep_normal",
                                  nodes=1, phase=r["op"], experts=256)  # fmt: skip
        result.append(
            {
                "bytes": f"EP {ep} {r['op']} ({r['bandwidth_GBps']} GB/s logical NVLink): {n}",
                "measured_us": measured_us,
                "simulated_us": row["time_s"] * 1e6,
            }
        )
    return result


def main() -> None:
    for title, rows in (
        ("DeepEP low-latency, H100, EP 8", compare_ll(False)),
        ("DeepEP low-latency, H100, EP 16-64 over RDMA", compare_ll(True)),
        ("DeepEP normal, H800, internode (README)", compare_normal()),
        ("DeepEP normal, H800, intranode (README)", compare_normal_nvlink()),
    ):
        print(title)
        for o in rows:
            m, s = float(o["measured_us"]), float(o["simulated_us"])
            print(f"  {o['bytes']:<70} {m:9.1f} {s:9.1f} us {s / m - 1:+.0%}")


if __name__ == "__main__":
    main()
