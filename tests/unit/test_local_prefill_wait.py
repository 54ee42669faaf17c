"""How long a prompt given to a decode worker waits for its decodes' slack
(``common.slo.local_prefill``: ``stall_wait_s``, ``start_wait_s``, ``FreshDecodes``), and the
decode engine refusing a prompt whose first token that wait would make late
(``EngineCore.prefill_reserved``), checked against step-by-step and Monte Carlo computations."""

from __future__ import annotations

import random

import grpc
import pytest

from common.engine.config import EngineConfig
from common.engine.core import AdmissionError, EngineCore
from common.model.sampling_params import SamplingParams
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
from common.slo.local_prefill import FreshDecodes, Promise, first_token_s, stall_keeps, stall_wait_s, start_wait_s


def _first_step_that_keeps(promises: list[Promise], now: float, forward_s: float, step_s: float) -> int | None:
    """Brute force: the decodes step on, one token each per ``step_s``, until the forward keeps."""
    for k in range(10_000):
        later = [Promise(p.first_token_at, p.tpot_slo_s, p.tokens_out + k, p.margin) for p in promises]
        if stall_keeps(later, now + k * step_s, forward_s, step_s):
            return k
    return None


def test_the_wait_for_slack_is_the_first_step_at_which_the_forward_keeps_every_promise():
    rng = random.Random(3)
    for _ in range(300):
        now, step = 10.0, rng.uniform(0.002, 0.03)
        promises = [Promise(now - rng.uniform(0, 0.5), rng.uniform(step * 1.05, 0.1), rng.randint(1, 40),
                            rng.uniform(1.0, 1.5)) for _ in range(rng.randint(1, 6))]
        forward = rng.uniform(0.005, 0.2)
        steps = _first_step_that_keeps(promises, now, forward, step)
        assert steps is not None
        assert stall_wait_s(promises, now, forward, step) == pytest.approx(steps * step)


def test_a_request_whose_step_is_as_long_as_its_slo_never_makes_room():
    now = 1.0
    starved = Promise(now, 0.010, 1, 1.3)  # its first token just out, a 10 ms SLO, 10 ms steps
    assert stall_wait_s([starved], now, forward_s=0.02, step_s=0.010) is None
    relaxed = Promise(now - 5.0, 0.010, 1000, 1.3)  # 5 s of slack banked: the forward keeps at once
    assert stall_wait_s([relaxed], now, forward_s=0.02, step_s=0.010) == 0.0


def _simulated_start(rng: random.Random, w0: float, rate: float, gap: float) -> float:
    """The first t >= w0 with no fresh request in (t - gap, t), fresh ones coming as a Poisson process."""
    t, last = w0, 0.0
    arrivals, a = [], rng.expovariate(rate)
    while a < w0 + 100 * gap + 10 / rate:
        arrivals.append(a)
        a += rng.expovariate(rate)
    i = 0
    while True:
        while i < len(arrivals) and arrivals[i] < t:
            last = arrivals[i]
            i += 1
        if last + gap <= t or last == 0.0:
            return t
        t = last + gap  # the forward may start then, unless another one came meanwhile


@pytest.mark.parametrize("w0, rate, gap", [(0.06, 17.0, 0.075), (0.2, 5.0, 0.05), (0.01, 30.0, 0.04), (0.0, 20.0, 0.1),
                                           (0.05, 0.0, 0.1)])
def test_the_expected_start_matches_a_monte_carlo_of_poisson_arrivals(w0, rate, gap):
    rng = random.Random(11)
    runs = 40_000 if rate else 1
    mean = sum(_simulated_start(rng, w0, rate, gap) if rate else w0 for _ in range(runs)) / runs
    assert start_wait_s(w0, rate, gap) == pytest.approx(mean, rel=0.02, abs=1e-4)


def test_a_gap_fresh_decodes_almost_never_leave_is_waited_for_without_end_not_an_overflow():
    # e^{λW} past a float's range: 60 fresh requests a second, each leaving a 12 s gap
    assert start_wait_s(0.5, 60.0, 12.0) == float("inf")
    assert start_wait_s(0.5, 60.0, 11.0) == pytest.approx(0.5 + (2.718281828 ** 660 * (1 - 2.718281828 ** -30) - 30) / 60,
                                                          rel=1e-6)  # just inside it
    # a decode at 3.1 ms beside a fresh 3.2 ms TPOT class: 0.1 ms of slack a step for a 600 ms forward
    promises = [Promise(100.0, 0.0032, 1, 1.3)]
    assert first_token_s(promises, 100.0, 0.6, 0.0031, 60.0, 0.0032, 1.3) is None


def test_fresh_decodes_counts_a_rate_and_the_tightest_slo_over_its_window():
    fresh = FreshDecodes(window_s=5.0)
    assert fresh.rate(0.0) == 0.0 and fresh.tightest_s(0.0) == 0.0
    for i in range(20):
        fresh.observe(10.0 + 0.25 * i, 0.05 if i % 2 else 0.03)  # 4 a second for 5 s
    assert fresh.rate(14.75) == pytest.approx(20 / 4.75)
    assert fresh.tightest_s(14.75) == 0.03
    fresh.observe(20.0, 0.05)  # the others are more than 5 s old by then
    assert fresh.tightest_s(20.0) == 0.05 and fresh.rate(20.0) == pytest.approx(1 / 5.0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _core(clock: Clock) -> EngineCore:
    core = EngineCore(EngineConfig(policy="scorpio", num_kv_blocks=64), 64, 2048, vocab_size=1000, eos_token_ids=(),
                      clock=clock)
    # a 400-token forward: 30 ms; a decode step: 2 ms
    core.cost_models = CostModels(PrefillModel(0, 0.030, 0.0), DecodeModel(0.0, 0.0, 0.0, 0.002))
    core.unloaded_step_s = 0.002
    return core


def _reserve_and_prefill(core: EngineCore, ttft_left_ms: float) -> None:
    lease = core.reserve("local", 400, 8, tpot_slo_ms=50)
    assert lease is not None
    core.prefill_reserved("local", lease.lease_id, list(range(1, 401)), SamplingParams(max_tokens=8, ignore_eos=True),
                          ttft_slo_ms=1000, tpot_slo_ms=50, ttft_left_ms=ttft_left_ms)


def _one_fresh_decode(core: EngineCore) -> None:
    lease = core.reserve("tight", 8, 64, tpot_slo_ms=15)
    assert lease is not None
    core.commit("tight", lease.lease_id, list(range(1, 9)), 5, SamplingParams(max_tokens=64, ignore_eos=True),
                tpot_slo_ms=15)


# A fresh 15 ms request: (30 + 2·2) ms × 1.3 is 29.2 ms past its next token's due time; its slack
# grows 13 ms a 2 ms step, so the forward waits 3 steps (6 ms). One fresh request in the last
# second (the rate's shortest span) adds (e^{λW}(1 − e^{−λW}) − λW)/λ with λ = 1/s, W = 6 ms:
# 0.036 ms. Its first token: 6.036 + 30 (forward) + 2 (the step it rides) = 38.04 ms.
FIRST_TOKEN_MS = 6 + (2.718281828 ** 0.006 * (1 - 2.718281828 ** -0.006) - 0.006) * 1000 + 30 + 2


def test_the_decode_engine_predicts_the_wait_its_decodes_impose():
    clock = Clock()
    core = _core(clock)
    _one_fresh_decode(core)
    assert core.local_prompts.first_token_s(400, 400 * 400) * 1000 == pytest.approx(FIRST_TOKEN_MS, rel=1e-6)


def test_a_request_reserved_here_and_not_yet_committed_counts_as_a_fresh_decode():
    """Its first token is on the way: once committed it has no slack, and the prompt waits for it
    as for one that began decoding now (with no decode running, the forward alone otherwise)."""
    clock = Clock()
    core = _core(clock)
    assert core.reserve("tight", 8, 64, tpot_slo_ms=15) is not None
    # a fresh 15 ms promise, as in FIRST_TOKEN_MS but without the Poisson term (nothing began lately)
    assert core.local_prompts.first_token_s(400, 400 * 400) * 1000 == pytest.approx(6 + 30 + 2, rel=1e-6)
    assert core.local_prompts.stall_keeps(400, 400 * 400)  # the scheduler's rule reads only what decodes


def test_a_prompt_whose_first_token_would_be_late_is_refused_and_its_lease_freed():
    clock = Clock()
    core = _core(clock)
    _one_fresh_decode(core)
    free_before = core.pool.num_free
    with pytest.raises(AdmissionError, match="predicted in 38 ms, 37 ms left"):
        _reserve_and_prefill(core, ttft_left_ms=FIRST_TOKEN_MS - 1)
    assert core.pool.num_free == free_before and "local" not in core.scheduler.requests
    core.check_integrity()
    _reserve_and_prefill(core, ttft_left_ms=FIRST_TOKEN_MS + 1)  # in time: it queues
    assert "local" in core.scheduler.requests


def test_a_prediction_that_fails_frees_the_reservation_and_leaves_the_engine_whole(monkeypatch):
    clock = Clock()
    core = _core(clock)
    free_before = core.pool.num_free

    def fails(tokens: int, attention: int) -> float:
        raise ArithmeticError("planted")

    monkeypatch.setattr(core.local_prompts, "first_token_s", fails)
    with pytest.raises(ArithmeticError, match="planted"):
        _reserve_and_prefill(core, ttft_left_ms=1000)
    assert core.pool.num_free == free_before and "local" not in core.scheduler.requests
    assert core.load.free_blocks == free_before  # what the heartbeat tells the gateway
    core.check_integrity()


def test_the_time_a_call_waited_for_the_engine_counts_against_its_budget():
    from common.engine.request import left_on_arrival

    assert left_on_arrival(50.0, received_at=100.0, now=100.005) == pytest.approx(45.0)
    assert left_on_arrival(50.0, received_at=100.0, now=100.2) == 0.001  # spent: nothing in time
    assert left_on_arrival(0.0, received_at=100.0, now=100.2) == 0.0  # no TTFT SLO


def test_an_idle_decode_engine_predicts_the_forward_alone():
    core = _core(Clock())
    assert core.local_prompts.first_token_s(400, 400 * 400) == pytest.approx(0.030)


def test_the_gateway_refuses_a_request_its_decode_worker_would_not_prefill_in_time():
    from gateway import retries
    from gateway.errors import RequestError
    from gateway.request_state import Progress

    class Refused(grpc.aio.AioRpcError):
        def __init__(self) -> None:
            super().__init__(grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                             details="TTFT SLO 100 ms cannot be met by this decode worker")

    worker = object()
    p = Progress(prefill=worker, decode=worker)  # type: ignore[arg-type]
    error = retries.prefill_error(Refused(), p)
    assert isinstance(error, RequestError)
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason == "ttft_unattainable"


def _step_taking(core: EngineCore, clock: Clock, seconds: float) -> None:
    _, batch = core.schedule_step()
    started = clock.now
    clock.now += seconds
    core.finish_step(batch, {s.request_id: 7 for s in batch.seqs if s.sample}, started, clock.now)


def test_local_prompts_that_came_late_make_the_check_refuse_what_the_expectation_alone_admits():
    """Every local prompt's first token came twice its expectation (its forward beside a decode,
    which the prefill forwards' calibration never sees): the check scales the next expectation by
    that, so a budget 1.5x the expectation, which a fresh engine admits, is refused; a budget past
    twice it is not."""
    clock = Clock()
    core = _core(clock)
    _one_loose_decode(core)
    expected_ms = 30 + 2  # the forward beside one decode step; a 1 s TPOT leaves slack for it at once
    assert core.local_prompts.first_token_s(400, 400 * 400) * 1000 == pytest.approx(expected_ms)
    for i in range(20):
        lease = core.reserve(f"p{i}", 400, 2, tpot_slo_ms=1000)
        assert lease is not None
        core.prefill_reserved(f"p{i}", lease.lease_id, list(range(1, 401)), SamplingParams(max_tokens=2, ignore_eos=True),
                              ttft_slo_ms=1000, tpot_slo_ms=1000, ttft_left_ms=1000)
        _step_taking(core, clock, 2 * expected_ms / 1000)  # its first token, beside the loose decode
        _step_taking(core, clock, 0.002)  # its second, and its end
        assert f"p{i}" not in core.scheduler.requests
    assert core.forward_calibration.ratio == 1.0  # no forward ran alone
    assert core.local_prompts.first_token_calibration.ratio == pytest.approx(2.0, rel=0.01)
    with pytest.raises(AdmissionError, match="predicted in 64 ms, 48 ms left"):
        _reserve_and_prefill(core, ttft_left_ms=1.5 * expected_ms)
    core.check_integrity()
    _reserve_and_prefill(core, ttft_left_ms=2.1 * expected_ms)
    assert "local" in core.scheduler.requests
    fresh = _core(Clock())
    _one_loose_decode(fresh)
    _reserve_and_prefill(fresh, ttft_left_ms=1.5 * expected_ms)
    assert "local" in fresh.scheduler.requests


def _one_loose_decode(core: EngineCore) -> None:
    lease = core.reserve("loose", 8, 100, tpot_slo_ms=1000)
    assert lease is not None
    core.commit("loose", lease.lease_id, list(range(1, 9)), 5, SamplingParams(max_tokens=100, ignore_eos=True),
                tpot_slo_ms=1000)


def test_a_local_prompt_aborted_before_its_first_token_is_forgotten_not_calibrated_by():
    clock = Clock()
    core = _core(clock)
    _reserve_and_prefill(core, ttft_left_ms=1000)
    core.abort("local")
    core.schedule_step()
    clock.now += 120.0
    lease = core.reserve("later", 400, 1, tpot_slo_ms=50)
    assert lease is not None
    core.prefill_reserved("later", lease.lease_id, list(range(1, 401)), SamplingParams(max_tokens=1, ignore_eos=True),
                          ttft_slo_ms=1000, tpot_slo_ms=50, ttft_left_ms=1000)
    assert set(core.local_prompts._expected) == {"later"}
    assert core.local_prompts.first_token_calibration.ratio == 1.0
