"""Arrival processes and datasets of the load tester."""

from __future__ import annotations

import numpy as np
import pytest

from client.bench.workload import (BUILTIN_TRACE, gamma_intervals, parse_slo_mix, pick_classes, random_lengths,
                                   read_trace)


@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_gamma_gaps_have_the_requested_rate_and_shape(burstiness):
    gaps = gamma_intervals(200_000, rate=5.0, burstiness=burstiness, rng=np.random.default_rng(0))
    assert 1 / gaps.mean() == pytest.approx(5.0, rel=0.02)
    # gamma(k, θ): coefficient of variation squared is 1/k (1 for Poisson arrivals)
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / burstiness, rel=0.05)


def test_infinite_rate_sends_everything_at_once():
    assert not gamma_intervals(10, float("inf"), 1.0, np.random.default_rng(0)).any()


def test_random_lengths_stay_in_the_range_ratio():
    lengths = random_lengths(5000, 100, 40, 0.5, np.random.default_rng(1))
    inputs, outputs = zip(*lengths)
    assert min(inputs) >= 50 and max(inputs) <= 150 and min(outputs) >= 20 and max(outputs) <= 60
    assert np.mean(inputs) == pytest.approx(100, rel=0.03)


def test_slo_mix_is_parsed_and_drawn_by_weight():
    classes = parse_slo_mix("tight:100:20:1,loose:1000:80:3")
    assert [(c.name, c.ttft_ms, c.tpot_ms, c.weight) for c in classes] == [("tight", 100, 20, 1), ("loose", 1000, 80, 3)]
    picks = pick_classes(20_000, classes, np.random.default_rng(2))
    assert sum(c.name == "loose" for c in picks) / len(picks) == pytest.approx(0.75, abs=0.02)
    with pytest.raises(ValueError, match="name:ttft_ms:tpot_ms"):
        parse_slo_mix("broken:1")


def test_builtin_trace_is_scaled_in_time_and_length():
    raw = read_trace(BUILTIN_TRACE, 5, 1.0, 1.0)
    scaled = read_trace(BUILTIN_TRACE, 5, 0.5, 4.0)
    assert [t * 0.5 for t, _, _ in raw] == [t for t, _, _ in scaled]
    assert [max(1, round(i / 4)) for _, i, _ in raw] == [i for _, i, _ in scaled]
    assert raw[0] == (0.0, 374, 44)


def test_a_shared_prefix_starts_every_prompt_and_keeps_their_lengths():
    import argparse

    from client.bench.plan import build_plan

    args = argparse.Namespace(seed=3, num_prompts=5, dataset_name="random", random_input_len=100,
                              random_output_len=8, random_range_ratio=0.5, burstiness=1.0, slo_mix="",
                              shared_prefix_len=40)
    plan = build_plan(args, rate=2.0)
    assert len({tuple(p.prompt[:40]) for p in plan}) == 1, "one system prompt for all"
    assert len({tuple(p.prompt[40:48]) for p in plan}) == 5, "then each its own tokens"
    unshared = build_plan(argparse.Namespace(**{**vars(args), "shared_prefix_len": 0}), rate=2.0)
    assert [len(p.prompt) for p in plan] == [len(p.prompt) for p in unshared]


def test_sessions_start_at_the_request_rate_divided_by_their_turns():
    from client.bench.sessions import plan_sessions

    sessions = plan_sessions(400, turns=4, first_len=50, turn_len=10, output_len=6, rate=8.0, burstiness=1.0,
                             classes=[], seed=1)
    assert len(sessions) == 100
    assert [len(m) for m in sessions[0].messages] == [50, 10, 10, 10]
    mean_gap = sessions[-1].start_at / (len(sessions) - 1)
    assert 0.8 * 4 / 8.0 < mean_gap < 1.2 * 4 / 8.0, "sessions every turns/rate seconds on average"
