"""The routers' orders and the admission queue's rounds, as the gateway and the simulator run them."""

from __future__ import annotations

import pytest

from common.slo.admission_round import AdmissionRound, Demand, queues_behind
from common.slo.cost_models import PrefillModel
from common.slo.class_margins import ClassMargins
from common.slo.routing import RoundRobin, decode_order_by_vbs, least_loaded_order, prefill_order
from common.slo.tpot_guard import DecodeView
from common.slo.ttft_guard import TtftGuard
from gateway.prefix_view import PromptBlocks

MODEL = PrefillModel(threshold=100, base_s=0.010, per_token_s=1e-4)


def _guard(queued: dict[str, tuple[float, int]]) -> TtftGuard:
    guard = TtftGuard(MODEL, headrooms=ClassMargins(1.0))
    guard.queued.update({rid: (*q, 0.0) for rid, q in queued.items()})
    guard.calibration.observe(0.010, 0.010)
    return guard


def test_prefill_order_is_least_predicted_ttft_with_workers_it_would_make_late_last():
    idle, busy = _guard({}), _guard({"a": (10.0, 2000)})
    crowded = _guard({"due": (0.050, 300)})  # 30 ms of work due at 50 ms: 250 more tokens make it late
    assert prefill_order([busy, idle], [250, 250], deadline=0.020, now=0.0) == [1, 0]
    assert prefill_order([crowded, busy], [250, 250], deadline=0.020, now=0.0) == [1, 0]


def test_decode_order_prefers_the_most_vbs_headroom_then_free_blocks():
    light, heavy, empty = DecodeView(), DecodeView(), DecodeView()
    light.routed.update({"a": 0.1})
    heavy.routed.update({"b": 0.02, "c": 0.02})
    # new request at 20 ms: light = 1 + 0.2 = 1.2, heavy = 3, empty = 1
    assert decode_order_by_vbs([light, heavy, empty], [10, 10, 5], tpot_s=0.02) == [2, 0, 1]
    assert decode_order_by_vbs([DecodeView(), DecodeView()], [3, 9], tpot_s=0.02) == [1, 0]


def test_least_loaded_and_round_robin_orders():
    assert least_loaded_order([2, 0, 1], [0, 5, 0]) == [1, 2, 0]
    rr = RoundRobin()
    assert [rr.order(3) for _ in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]


def test_a_round_gives_turns_least_slack_first_and_skips_waiters_as_tight_as_one_refused():
    waiters = [("loose", 3.0, 100.0), ("tight", 1.0, 20.0), ("tighter", 2.0, 10.0), ("none", 4.0, 0.0),
               ("mid", 5.0, 50.0)]
    turns = AdmissionRound(waiters, deadline=lambda w: w[1], demand=lambda w: Demand(w[2]))
    given = []
    while (w := turns.next(lambda _: True)) is not None:
        given.append(w[0])
        turns.report(w, admitted=w[0] != "tight")  # "tight" (20 ms) is refused
    # "tighter" (10 ms) is skipped after "tight" was refused; looser ones still get turns
    assert given == ["tight", "loose", "none", "mid"]


def test_refusing_a_waiter_without_a_tpot_slo_ends_the_round():
    waiters = [("none", 1.0, 0.0), ("loose", 2.0, 100.0)]
    turns = AdmissionRound(waiters, deadline=lambda w: w[1], demand=lambda w: Demand(w[2]))
    first = turns.next(lambda _: True)
    turns.report(first, admitted=False)
    assert first[0] == "none" and turns.next(lambda _: True) is None


def test_a_newcomer_queues_behind_a_waiter_no_harder_to_admit_and_tries_first_otherwise():
    def behind(tpot_ms: float, waiting: list[float]) -> bool:
        return queues_behind(Demand(tpot_ms), [Demand(t) for t in waiting])

    assert behind(50.0, [50.0])  # as easy: the worker that refused it refuses this one
    assert behind(50.0, [20.0, 100.0])  # one looser waiter is enough
    assert behind(50.0, [0.0])  # a waiter without a TPOT SLO is the easiest of all
    assert behind(0.0, [0.0])
    assert not behind(50.0, [20.0, 10.0])  # every waiter tighter: it may fit where they did not
    assert not behind(0.0, [100.0])  # without a TPOT SLO it is easier than any waiter with one
    assert not behind(50.0, [])
    # sizes count: a waiter with a longer prompt or a larger output budget may be refused for its
    # KV blocks or its projected decode where a smaller newcomer of its class fits
    newcomer = Demand(50.0, prompt_tokens=400, max_tokens=64)
    assert queues_behind(newcomer, [Demand(50.0, 300, 64)]) and queues_behind(newcomer, [Demand(100.0, 400, 32)])
    assert not queues_behind(newcomer, [Demand(50.0, 3000, 64)])
    assert not queues_behind(newcomer, [Demand(100.0, 100, 500)])


def test_a_round_skips_only_waiters_at_least_as_hard_as_one_refused():
    waiters = [("long", 1.0, Demand(50.0, 3000, 64)), ("short", 2.0, Demand(50.0, 200, 64)),
               ("longer", 3.0, Demand(50.0, 3500, 64)), ("tight-long", 4.0, Demand(20.0, 3200, 100))]
    turns = AdmissionRound(waiters, deadline=lambda w: w[1], demand=lambda w: w[2])
    given = []
    while (w := turns.next(lambda _: True)) is not None:
        given.append(w[0])
        turns.report(w, admitted=w[0] == "short")  # "long" refused: no KV blocks for it
    assert given == ["long", "short"]  # the short one still gets its turn; the harder ones do not


def test_where_load_ties_the_worker_holding_the_prompt_wins_before_free_blocks():
    # a heartbeat's free count still shows the last turn's blocks on the worker that holds them
    assert decode_order_by_vbs([DecodeView(), DecodeView()], [240, 256], tpot_s=0.0, held=[6, 0]) == [0, 1]
    assert least_loaded_order([0, 0], [-240, -256], held=[6, 0]) == [0, 1]
    assert least_loaded_order([1, 0], [-240, -256], held=[6, 0]) == [1, 0], "load still decides first"


@pytest.mark.parametrize("policy", ["scorpio", "fcfs", "ttft_guard", "tpot_guard", "round_robin"])
def test_the_simulated_gateway_routes_by_the_gateways_own_router(policy):
    """The simulator routes by ``gateway.router`` over its own worker state: on one state where
    VBS headroom and least-loaded disagree, the simulated gateway of every policy picks what the
    gateway's router for that policy picks over registry records of the same state (under
    ``ttft_guard`` too, which the simulator once ordered by load alone)."""
    from types import SimpleNamespace

    from common.slo.admission_round import Demand
    from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
    from common.slo.load_report import LoadReport
    from gateway.request_path import RequestPath
    from gateway.router import router_for
    from simulator.config import SimConfig
    from simulator.events import Simulation
    from simulator.gateway import SimGateway
    from simulator.workers import SimDecodeWorker, SimPrefillWorker

    config = SimConfig(policy=policy, prefill=2, decode=3)
    models = CostModels(PrefillModel(0, 0.010, 0.0), DecodeModel(0.0, 0.001, 0.0, 0.005))
    sim = Simulation()
    prefills = [SimPrefillWorker(sim, f"p{i}", config, models) for i in range(2)]
    decodes = [SimDecodeWorker(sim, f"d{i}", config, models) for i in range(3)]
    gateway = SimGateway(sim, config, prefills, decodes, lambda flight: None)
    # d0: three loose requests (VBS 0.6 for a tight one), d1: two tight (VBS 2), d2: none, fewer blocks
    gateway.views["d0"].routed.update({"a": 0.1, "a2": 0.1, "a3": 0.1})
    gateway.views["d1"].routed.update({"b": 0.02, "c": 0.02})
    for wid, free in (("d0", 10), ("d1", 10), ("d2", 5)):
        gateway.states[wid].load = LoadReport(free_blocks=free)
    gateway.guards["p0"].queued["q"] = (10.0, 2000, 0.0)
    path = RequestPath(gateway.router, gateway.pool, PromptBlocks([0] * 250), 0.020, 0.02, Demand(20.0, 250, 8), 0.0,
                       lambda: 0.0)

    records = {wid: SimpleNamespace(worker_id=wid, inflight=0, free_blocks=s.free_blocks, prefix=None,
                                    guard=s.ttft, view=s.decode_view) for wid, s in gateway.states.items()}
    pool = SimpleNamespace(routable=lambda role: [records[w.worker_id] for w in (prefills if role == "prefill" else decodes)])
    real = router_for(config.ttft_guard, "round_robin" if policy == "round_robin" else "kv_aware", clock=lambda: 0.0)
    ids = lambda order: [w.worker_id for w in order]  # noqa: E731
    decode_order = ids(path.reserve().candidates)  # as the simulated gateway's requests are routed
    assert decode_order == ids(real.decode_candidates(pool, 0.02))
    assert path.prefill(gateway.states["d2"], 0, 0.0).worker.worker_id == ids(real.prefill_candidates(
        pool, PromptBlocks([0] * 250), 0.020, 0.020))[0]
    # VBS headroom first under a TTFT guard; else the fewest routed there
    assert decode_order == (["d2", "d0", "d1"] if config.ttft_guard else ["d2", "d1", "d0"])
