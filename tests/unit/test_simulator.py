"""``pdserve simulate`` against schedules computed by hand, and against the cluster's own code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from client.bench.metrics import REJECTED
from client.bench.workload import PlannedRequest, SloClass
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
from simulator.config import SimConfig, call_overhead_from_histogram, factors_from_histogram, gateway_loop_from_points
from simulator.run import simulate

REPO = Path(__file__).resolve().parents[2]
# every prefill step 10 ms, every decode step 5 ms, whatever their size; no hop or copy costs
FLAT = CostModels(PrefillModel(0, 0.010, 0.0), DecodeModel(0.0, 0.0, 0.0, 0.005))


def _request(index: int, at: float, output_len: int, slo: SloClass | None = None, prompt: int = 100) -> PlannedRequest:
    return PlannedRequest(index, [0] * prompt, output_len, slo, at)


def _config(policy: str, **overrides: object) -> SimConfig:
    return SimConfig(policy=policy, hop_s=0.0, transfer_s=0.0, transfer_s_per_token=0.0, **overrides)  # type: ignore[arg-type]


def test_two_requests_follow_the_schedule_worked_out_by_hand():
    # A: prefill 0-10 ms, decode steps 10-15, 15-20 ms. B arrives at 1 ms and waits for the prefill
    # worker (10-20 ms); its commit waits for A's step in progress; it decodes 20-25, 25-30 ms.
    run = simulate([_request(0, 0.0, 3), _request(1, 0.001, 3)], _config("fcfs"), FLAT)
    a, b = run.records
    assert a.token_times == pytest.approx([0.010, 0.020]) and a.tokens_per_message == [1, 2]
    assert b.token_times == pytest.approx([0.020, 0.030])
    assert (a.ttft, a.tpot, b.ttft, b.tpot) == pytest.approx((0.010, 0.005, 0.019, 0.005))
    assert run.duration == pytest.approx(0.030)


def test_a_call_overhead_delays_the_first_token_and_nothing_else():
    # as above, but A's prefill call takes 7 ms more at the gateway than at the worker: its first
    # token comes at 17 ms; B's prefill (10-20 ms) is not delayed by it, its first token is at 27 ms
    run = simulate([_request(0, 0.0, 3), _request(1, 0.001, 3)], _config("scorpio", call_overhead_s=(0.007,)), FLAT)
    a, b = run.records
    assert (a.ttft, b.ttft) == pytest.approx((0.017, 0.026))
    plain = simulate([_request(0, 0.0, 3)], _config("scorpio"), FLAT)
    assert plain.records[0].ttft == pytest.approx(0.010)


def test_a_call_overhead_grows_with_the_load_by_its_law():
    # as above on a simulated host (no front end or own threads to stretch a forward): two requests
    # sent within the last second, so each 7 ms draw × 1.5 · 2^1 = 21 ms; B's prefill ends at 20 ms
    config = _config("scorpio", call_overhead_s=(0.007,), host_cores=2, call_overhead_growth=(1.5, 1.0))
    a, b = simulate([_request(0, 0.0, 3), _request(1, 0.001, 3)], config, FLAT).records
    assert (a.ttft, b.ttft) == pytest.approx((0.031, 0.040))
    with pytest.raises(ValueError, match="host_cores"):
        _config("scorpio", call_overhead_s=(0.007,), call_overhead_growth=(1.5, 1.0))


def test_call_overheads_are_read_back_from_a_histogram_one_per_call():
    # cumulative buckets: 2 calls under 1 ms, 3 more in (1, 4] ms, 1 beyond 4 ms
    values = call_overhead_from_histogram([(0.001, 2), (0.004, 5), (float("inf"), 6)], hops_s=0.0005)
    assert len(values) == 6
    assert values[:2] == pytest.approx([0.0005 - 0.0005] * 2)  # the first bucket's middle, less the hops
    assert values[2:5] == pytest.approx([0.002 - 0.0005] * 3)  # sqrt(1 ms x 4 ms)
    assert values[5] == pytest.approx((0.004 * 0.006) ** 0.5 - 0.0005)


def test_the_gateway_loops_costs_are_fitted_from_runs_of_served_and_refused_requests():
    # 4 ms a served request, 1 ms a refused one, read back from runs with different mixes
    mixes = ((200, 0), (150, 300), (90, 900))
    runs = [(served, refused, served * 0.004 + refused * 0.001) for served, refused in mixes]
    assert gateway_loop_from_points(runs) == pytest.approx((0.004, 0.001))
    # runs that would want a refusal to cost less than nothing: the served cost alone
    assert gateway_loop_from_points([(100, 0, 0.5), (100, 100, 0.45)]) == pytest.approx((0.00475, 0.0))
    assert gateway_loop_from_points([(0, 50, 0.05)]) == pytest.approx((0.0, 0.001))  # nothing served
    assert gateway_loop_from_points([]) == (0.0, 0.0)


def test_decode_step_factors_are_read_back_from_a_worker_histogram_around_their_mean():
    from common.slo.ratio_histogram import BOUNDS, RatioHistogram

    ratios = RatioHistogram()
    observed = [1.0] * 96 + [0.95, 2.2, 5.0, 80.0]  # steps as predicted, and a few stalls
    for r in observed:
        ratios.observe(0.004, 0.004 * r)
    cumulative = ratios.cumulative()
    assert [n for _, n in cumulative] == [sum(r <= le for r in observed) for le in (*BOUNDS, float("inf"))]
    assert ratios.total == pytest.approx(sum(observed))
    factors = factors_from_histogram(cumulative)
    assert len(factors) == 100 and sum(factors) / 100 == pytest.approx(1.0)
    ordered = sorted(factors)
    # the stalls keep their size against an ordinary step: 5x in (4, 6], beyond 50x in +Inf
    assert ordered[-2] / ordered[0] == pytest.approx((4.0 * 6.0) ** 0.5 / (0.9 * 1.0) ** 0.5)
    assert ordered[-1] / ordered[0] == pytest.approx((50.0 * 75.0) ** 0.5 / (0.9 * 1.0) ** 0.5)


def test_each_decode_step_and_prefill_forward_takes_a_factor_drawn_from_the_ones_given():
    # a request of 5 tokens, steps of 5 ms: every factor 3 makes every step 15 ms, as a model 3x
    # slower would; factors of 1 and 3 make steps of 5 or 15 ms and nothing else
    plan = [_request(0, 0.0, 5)]
    tripled = simulate(plan, _config("fcfs", decode_step_factors=(3.0,)), FLAT).records[0]
    slower = simulate(plan, _config("fcfs", decode_scale=3.0), FLAT).records[0]
    assert tripled.token_times == pytest.approx(slower.token_times)
    assert tripled.tpot == pytest.approx(0.015)
    spans = set()
    for seed in range(8):  # four steps after the first token, each 5 or 15 ms
        record = simulate(plan, _config("fcfs", decode_step_factors=(1.0, 3.0), seed=seed), FLAT).records[0]
        spans.add(round((record.token_times[-1] - record.token_times[0]) / 0.010 - 2, 6))
    assert spans <= {0.0, 1.0, 2.0, 3.0, 4.0} and len(spans) > 1  # 20 ms + 10 ms per slow step
    # the prefill worker's forwards draw from their own: a 10 ms prefill twice as long, steps unchanged
    doubled = simulate(plan, _config("fcfs", prefill_forward_factors=(2.0,)), FLAT).records[0]
    assert doubled.ttft == pytest.approx(0.020) and doubled.tpot == pytest.approx(0.005)
    with pytest.raises(ValueError, match="factors"):
        SimConfig(decode_step_factors=(1.0, 0.0))
    with pytest.raises(ValueError, match="factors"):
        SimConfig(prefill_forward_factors=(-1.0,))


def test_credit_batching_gives_tpot_slos_of_2_4_and_6_ms_a_token_every_1_2_and_3_steps():
    one_ms = CostModels(PrefillModel(0, 0.010, 0.0), DecodeModel(0.0, 0.0, 0.0, 0.001))
    plan = [_request(0, 0.0, 200, SloClass("a", 1000, 2)), _request(1, 0.0, 61, SloClass("b", 1000, 4)),
            _request(2, 0.0, 41, SloClass("c", 1000, 6))]
    run = simulate(plan, _config("tpot_guard", work_conserving_credit=False), one_ms)
    assert all(r.ok for r in run.records)
    # a is prefilled alone (0-10 ms), b and c together (10-20 ms). a decodes every 1 ms step from
    # 10 ms. b and c join the step 20-21 ms (their commits wait for the step in progress) and then
    # run when their credit comes: b every 2nd step (tokens at 21, 23, ... 139 ms: 60 of them),
    # c every 3rd (21, 24, ... 138 ms: 40). TPOT = (last token - first token) / (tokens - 1).
    a, b, c = run.records
    assert a.token_times == pytest.approx([0.010, 0.209]) and a.tpot == pytest.approx(0.001)
    assert b.token_times == pytest.approx([0.020, 0.139]) and b.tpot == pytest.approx(0.119 / 60)
    assert c.token_times == pytest.approx([0.020, 0.138]) and c.tpot == pytest.approx(0.118 / 40)


def test_work_conserving_credit_holds_nobody_back_while_a_step_of_all_keeps_the_tightest_slo():
    one_ms = CostModels(PrefillModel(0, 0.010, 0.0), DecodeModel(0.0, 0.0, 0.0, 0.001))
    plan = [_request(0, 0.0, 200, SloClass("a", 1000, 2)), _request(1, 0.0, 61, SloClass("b", 1000, 4)),
            _request(2, 0.0, 41, SloClass("c", 1000, 6))]
    run = simulate(plan, _config("tpot_guard"), one_ms)
    # as above until b and c join at 20-21 ms; then a step of all three costs 1 ms, and 1 ms x 1.3
    # keeps a's 2 ms: everyone runs every step. b's 60 tokens come at 21 .. 80 ms, c's 40 at 21 .. 60 ms.
    a, b, c = run.records
    assert a.token_times == pytest.approx([0.010, 0.209]) and a.tpot == pytest.approx(0.001)
    assert b.token_times == pytest.approx([0.020, 0.080]) and b.tpot == pytest.approx(0.001)
    assert c.token_times == pytest.approx([0.020, 0.060]) and c.tpot == pytest.approx(0.001)


def test_work_conserving_credit_still_holds_back_where_a_step_of_all_would_break_the_tightest():
    # 1 ms a step plus 0.5 ms for every request past the first: all three take 2 ms, x 1.3 > a's 2 ms
    slope = CostModels(PrefillModel(0, 0.010, 0.0), DecodeModel(0.0, 0.0005, 0.0, 0.001, knee=1.0))
    plan = [_request(0, 0.0, 200, SloClass("a", 1000, 2)), _request(1, 0.0, 61, SloClass("b", 1000, 4)),
            _request(2, 0.0, 41, SloClass("c", 1000, 6))]
    held, free = (simulate(plan, _config("tpot_guard", work_conserving_credit=w), slope).records
                  for w in (True, False))
    for with_rule, without in zip(held, free):  # the same cadence as plain credit batching
        assert with_rule.token_times == pytest.approx(without.token_times)
    assert held[1].output_len == 61 and held[1].tpot > 1.5 * held[0].tpot  # b was held back


def test_the_ttft_guard_refuses_at_its_boundary_and_not_before():
    # the first call teaches the guard that a prefill call takes what its model says (10 ms); the
    # closed loop starts its headroom at 1 (TTFT_HEADROOM): the boundary is 10 ms
    warm = _request(0, 0.0, 2)
    late, on_time, exact = (_request(i, 1.0, 2, SloClass(n, ms, 0)) for i, n, ms in
                            ((1, "late", 9.9), (2, "on_time", 10.1), (3, "exact", 10.0)))
    late = PlannedRequest(1, late.prompt, 2, late.slo_class, 1.0)
    on_time = PlannedRequest(2, on_time.prompt, 2, on_time.slo_class, 2.0)
    exact = PlannedRequest(3, exact.prompt, 2, exact.slo_class, 3.0)
    run = simulate([warm, late, on_time, exact], _config("scorpio"), FLAT)
    records = {r.slo_class or "warm": r for r in run.records}
    assert records["late"].error == "RESOURCE_EXHAUSTED"
    assert run.refusals == {"ttft_unattainable": 1}  # counted under the reason the gateway's metric uses
    assert records["on_time"].ok and records["on_time"].ttft == pytest.approx(0.010)
    assert records["exact"].ok  # at the SLO (the headroom relaxed a hair after "on_time"): admitted


def test_calls_wait_for_the_gateways_event_loop_before_their_handlers_run():
    # The loop takes 12 ms at each handler and 18 ms more for each request it serves. Three sent at
    # once reach their handlers at 0, 12 and 24 ms: A prefills 0-10 ms; B's reservation waits for
    # A's decode step (10-15), it prefills 15-25; C prefills 25-35. Their served work keeps the loop
    # busy to 90 ms, so a fourth, sent at 25 ms, is handled at 90: TTFT 75 ms.
    burst = [_request(i, 0.0, 2) for i in range(3)] + [_request(3, 0.025, 2)]
    run = simulate(burst, _config("fcfs", gateway_loop_s=(0.030, 0.012)), FLAT)
    assert [r.ttft for r in run.records] == pytest.approx([0.010, 0.025, 0.035, 0.075])
    # 120 ms of work, done at 120 ms, after the last token (105 ms): busy all along
    assert run.duration == pytest.approx(0.105) and run.gateway_loop_busy == pytest.approx(1.0)
    alone = simulate(burst, _config("fcfs"), FLAT)  # the default: a gateway that is never the bottleneck
    # (B and C prefill together 10-20 ms; D's reservation waits for their decode step, 25-30)
    assert [r.ttft for r in alone.records] == pytest.approx([0.010, 0.020, 0.020, 0.015])
    assert alone.gateway_loop_busy == 0


def test_the_ttft_guard_plans_with_the_wait_for_the_loop_and_refuses_what_it_made_late():
    # 30 ms of the loop at each handler, a 50 ms TTFT: the second request's handler runs at 30 ms,
    # its first token is due at 40, in time; the third's runs at 60 ms, past its deadline: refused
    burst = [_request(i, 0.0, 2, SloClass("fifty", 50.0, 0)) for i in range(3)]
    run = simulate(burst, _config("scorpio", gateway_loop_s=(0.030, 0.030)), FLAT)
    first, second, third = run.records
    assert first.ok and second.ok and (first.ttft, second.ttft) == pytest.approx((0.010, 0.040))
    assert third.error == "RESOURCE_EXHAUSTED" and run.refusals == {"ttft_unattainable": 1}


def test_a_request_arriving_behind_an_as_easy_waiter_queues_without_a_reservation_attempt(monkeypatch):
    from common.engine.core import EngineCore

    calls: list[str] = []
    reserve = EngineCore.reserve

    def counted(core: EngineCore, request_id: str, *args: object, **kwargs: object) -> object:
        calls.append(request_id.removeprefix("req-"))
        return reserve(core, request_id, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(EngineCore, "reserve", counted)
    # a step of one request 5 ms, of two 25 ms: a second request with a 10 ms TPOT never fits beside
    # the first. "0" decodes 20 tokens; "1" arrives at 1 ms, is refused and waits; "2" arrives at
    # 2 ms behind it (as tight) and joins the queue without trying. The queue's rounds give "1" its
    # turns (least slack first) and skip "2"; once "0" is done "1" is admitted, and "2" tried only then.
    pair_costs_more = CostModels(PrefillModel(0, 0.010, 0.0), DecodeModel(0.0, 0.020, 0.0, 0.005, knee=1.0))
    plan = [_request(i, i * 0.001, 20, SloClass("t", 1000, 10)) for i in range(3)]
    run = simulate(plan, _config("scorpio"), pair_costs_more)
    assert all(r.ok for r in run.records)
    first, second, third = run.records
    assert second.ttft > first.e2el and third.ttft > second.e2el  # one at a time, in arrival order
    assert calls[:2] == ["0", "1"]
    assert calls.index("2") > max(i for i, r in enumerate(calls) if r == "1"), calls


def test_the_gateway_loop_flag_reaches_the_simulated_cluster_and_refuses_nonsense():
    import argparse

    from simulator.cli import add_simulate_args, sim_config

    parser = argparse.ArgumentParser()
    add_simulate_args(parser)
    assert sim_config(parser.parse_args(["--gateway-loop-ms", "4.5,0.5"])).gateway_loop_s == pytest.approx((0.0045, 0.0005))
    assert sim_config(parser.parse_args([])).gateway_loop_s == (0.0, 0.0)
    for bad in ("4", "4,x", "-1,0"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--gateway-loop-ms", bad])


# the request's path (``gateway.request_path``), the admission pump, the promise record, the router
POLICY_CODE = ("RequestPath", "on_arrival", "seek", "refused_everywhere", "lost", "all_refused", "admitted_margin",
               "AdmissionPump", "holds_one_no_harder", "prefill_going", "first_token", "heard", "finished", "router_for")


def _called(package: str) -> set[str]:
    """Names called anywhere in a package's modules (plain calls and attribute calls)."""
    names: set[str] = set()
    for path in (REPO / package).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                names.add(func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "")
    return names


@pytest.mark.parametrize("function", POLICY_CODE)
def test_the_simulator_and_the_gateway_both_call_the_policy_code(function):
    assert function in _called("gateway"), f"the gateway no longer calls {function}"
    assert function in _called("simulator"), f"the simulator no longer calls {function}"


@pytest.mark.parametrize("order", ["prefill_order", "decode_order_by_vbs", "least_loaded_order", "RoundRobin"])
def test_the_simulator_orders_workers_only_through_the_gateways_router(order):
    assert order not in _called("simulator"), f"the simulator calls {order} itself: a second router"


def test_the_simulated_and_the_real_workers_run_one_engine_core():
    from common.engine.core import EngineCore
    from common.engine.llm_engine import LLMEngine
    from simulator.workers import SimWorker

    assert issubclass(LLMEngine, EngineCore)
    assert "EngineCore(" in (REPO / "simulator" / "workers.py").read_text()
    assert SimWorker.__init__.__code__.co_names.count("EngineCore") == 1


def test_the_call_overhead_flag_reaches_the_simulated_cluster_and_refuses_nonsense():
    import argparse

    from simulator.cli import add_simulate_args, sim_config

    parser = argparse.ArgumentParser()
    add_simulate_args(parser)
    args = parser.parse_args(["--call-overhead-ms", "1,2.5,60"])
    assert sim_config(args).call_overhead_s == pytest.approx((0.001, 0.0025, 0.060))
    assert sim_config(parser.parse_args([])).call_overhead_s == ()
    for bad in ("1,x", "-3"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--call-overhead-ms", bad])


def test_a_first_token_after_the_reservations_lease_ran_out_ends_the_request_unavailable():
    # fcfs, prefill 40 s a prompt, decode 10 ms a step: B (reserved at 1 ms, its lease 60 s) waits
    # for A's prefill and has its first token at 80 s, while A's decode steps (40-90 s) have
    # expired B's lease; the decode worker refuses the commit, as the real one does
    slow = CostModels(PrefillModel(0, 40.0, 0.0), DecodeModel(0.0, 0.0, 0.0, 0.010))
    run = simulate([_request(0, 0.0, 5000), _request(1, 0.001, 3)], _config("fcfs"), slow)
    a, b = run.records
    assert a.ok and a.output_len == 5000
    assert b.error == "UNAVAILABLE" and b.ttft == pytest.approx(80.0 - 0.001) and not b.good()


def test_a_request_no_prefill_worker_can_serve_in_time_is_prefilled_by_its_decode_worker():
    # prefill forwards of 0.1 ms a token (100 tokens: 10 ms), decode steps of 5 ms. A (TTFT 1 s) is
    # prefilled 0-10 ms on the prefill worker. B arrives at 1 ms with a 15 ms TTFT: behind A there
    # it would be predicted 20 ms, so its decode worker, idle, computes it: 1-11 ms (TTFT 10 ms).
    # A's commit waits for that step; both then decode 11-16 and 16-21 ms.
    per_token = CostModels(PrefillModel(0, 0.0, 1e-4), DecodeModel(0.0, 0.0, 0.0, 0.005))
    plan = [_request(0, 0.0, 3, SloClass("a", 1000, 50)), _request(1, 0.001, 3, SloClass("b", 15, 50))]
    a, b = simulate(plan, _config("scorpio"), per_token).records
    assert a.token_times == pytest.approx([0.010, 0.021]) and a.tokens_per_message == [1, 2]
    assert b.token_times == pytest.approx([0.011, 0.021])
    assert (a.ttft, b.ttft) == pytest.approx((0.010, 0.010))
    # without local prefill the TTFT guard refuses B
    a, b = simulate(plan, _config("scorpio", local_prefill=False), per_token).records
    assert a.ok and b.error == REJECTED


def test_a_decode_worker_refuses_a_prompt_its_decodes_slack_would_make_late():
    # prefill forwards of 0.1 ms a token, decode steps of 5 ms. A (TPOT 7 ms) is prefilled 0-10 ms
    # and decodes from 10 ms on; C (1,000 tokens) holds the prefill worker 10-110 ms. B (TTFT 15
    # ms) comes at 11 ms: the prefill worker would take until 120 ms, its decode worker's guard
    # predicts 10 ms. But A, fresh, has no slack for a 10 ms forward: (10 + 2·5) × 1.3 = 26 ms
    # against the 7 ms its next token is due in, 2 ms gained a step; B's first token would come
    # after some 50 ms of waiting. The decode worker refuses it (the gateway's guard alone had let
    # it in, and it would have been late), and A decodes on undisturbed.
    per_token = CostModels(PrefillModel(0, 0.0, 1e-4), DecodeModel(0.0, 0.0, 0.0, 0.005))
    plan = [_request(0, 0.0, 30, SloClass("a", 1000, 7)), _request(1, 0.011, 3, SloClass("b", 15, 50)),
            _request(2, 0.010, 3, SloClass("c", 1000, 50), prompt=1000)]
    run = simulate(plan, _config("scorpio"), per_token)
    a, b, c = run.records
    assert b.error == REJECTED and run.refusals.get("ttft_unattainable") == 1
    assert a.good() and c.good()
    assert a.token_times[0] == pytest.approx(0.010) and a.tpot <= 0.007
