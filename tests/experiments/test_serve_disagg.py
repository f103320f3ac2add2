"""Disaggregated prefill and decode: the KV cache moves from the prefill worker's GPUs to the
decode worker's over the routed links, TTFT includes the move, transfers share links."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpsim.core.config import ConfigError
from tpsim.core.lowering.mixed import MixedStep
from tpsim.experiments.serve.disagg import Disagg
from tpsim.experiments.serve.run import ServeSetup, serve
from tpsim.experiments.serve.workload import parse_lengths, synthetic

MODEL = "llama-3.1-8b"


def one_request(d: Disagg, nodes: int = 1, prompt: int = 2000, arrivals: tuple = (0.0,)):
    setup = ServeSetup(MODEL, "dgx-h100", d.decode_tp, nodes=nodes, disagg=d)
    reqs = synthetic(0, parse_lengths("p", str(prompt)), parse_lengths("o", "50"),
                     count=len(arrivals), arrival_s=arrivals)  # fmt: skip
    return serve(setup, requests=reqs)


@pytest.mark.parametrize(("d", "nodes"), [(Disagg(1, 1, 1, 1), 1), (Disagg(8, 1, 8, 1), 2),
                                          (Disagg(2, 1, 4, 1), 1)])  # fmt: skip
def test_one_request_ttft_is_prefill_plus_transfer(d: Disagg, nodes: int) -> None:
    """Idle system, one request: TTFT = the prefill step + the transfer: the bytes over the
    busiest link / its bandwidth + the wire latency (flows of different GPU pairs run side
    by side; at prefill TP 2 to decode TP 4 each prefill GPU sends two flows over its one
    link)."""
    from tpsim.core.kv_transfer import KVRoutes, Pool
    from tpsim.core.step_timer import IterationTimer

    r = one_request(d, nodes)
    req = r.requests[0]
    p_it = IterationTimer(MODEL, "dgx-h100", d.prefill_tp, r.timer.plan.options, nodes=nodes)
    prefill = p_it.seconds(MixedStep.of((), ((2000, 0),)))
    per_gpu = 2000 * r.kv.bytes_per_token
    assert r.transfer_bytes == (per_gpu,)
    plan = r.timer.plan
    routes = KVRoutes(plan.routes, plan.gpu, plan.calib, Pool(d.prefill_tp, 1),
                      Pool(d.decode_tp, 1))  # fmt: skip
    flows = routes.flows(0, 0, per_gpu)
    assert sum(b for _, b, _ in flows) == pytest.approx(per_gpu * d.decode_tp)
    load: dict[int, float] = {}
    for links, b, _ in flows:
        for i in links:
            load[i] = load.get(i, 0.0) + b
    assert len({lat for _, _, lat in flows}) == 1
    transfer = max(b / routes.capacities[i] for i, b in load.items()) + flows[0][2]
    assert transfer > 0
    assert req.token_s[0] - req.arrival_s == pytest.approx(prefill + transfer, rel=1e-9)
    if nodes == 2:  # across hosts: the NIC is the bottleneck, not NVLink
        assert (
            routes.gpus("prefill", 0)[0].split("/")[0] != routes.gpus("decode", 0)[0].split("/")[0]
        )


def test_transfers_share_links() -> None:
    """Two prefill workers hand two requests to one decode worker at once: both flows enter
    the decode GPU over its one link, so the pair takes twice as long as one alone."""
    alone = one_request(Disagg(1, 2, 1, 1))
    both = one_request(Disagg(1, 2, 1, 1), arrivals=(0.0, 0.0))
    t1 = alone.requests[0].token_s[0]
    first = [r.token_s[0] for r in both.requests]
    assert first[0] == first[1]  # side by side: the same prefill, then one shared link
    per_gpu = alone.transfer_bytes[0]
    plan = alone.timer.plan
    from tpsim.core.kv_transfer import KVRoutes, Pool

    routes = KVRoutes(plan.routes, plan.gpu, plan.calib, Pool(1, 2), Pool(1, 1))
    links, _, _ = routes.flows(0, 0, per_gpu)[0]
    alone_s = per_gpu / min(routes.capacities[i] for i in links)
    assert first[0] - t1 == pytest.approx(alone_s, rel=1e-6)


def test_a_loaded_run_keeps_littles_law_and_every_request() -> None:
    setup = ServeSetup(MODEL, "dgx-h100", 2, disagg=Disagg(2, 2, 2, 2))
    reqs = synthetic(3, parse_lengths("p", "uniform:200-3000"), parse_lengths("o", "uniform:1-200"),
                     count=200, arrival_s=tuple(i * 0.02 for i in range(200)))  # fmt: skip
    r = serve(setup, requests=reqs)
    s = r.summary()
    assert s["completed"] == 200
    assert s["littles_law_ratio"] == pytest.approx(1.0, abs=0.01)
    assert 0 < s["kv_transfers"] <= 200
    assert all(x.token_s[0] >= x.arrival_s for x in r.requests)


def test_too_many_gpus_are_refused() -> None:
    with pytest.raises(ConfigError, match="prefill_workers=4"):
        one_request(Disagg(2, 4, 2, 1))


def test_same_seed_same_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tpsim.cli import main

    outs = []
    for k in range(2):
        f = tmp_path / f"r{k}.jsonl"
        assert main(["serve", "--model", MODEL, "--topology", "dgx-h100", "--tp", "1",
                     "--prefill-workers", "2", "--decode-tp", "2", "--rate", "12",
                     "--requests", "60", "--prompt-len", "uniform:100-3000", "--seed", "5",
                     "--out", str(f)]) == 0  # fmt: skip
        outs.append((capsys.readouterr().out.split("\nwrote")[0], f.read_bytes()))
    assert outs[0] == outs[1]
