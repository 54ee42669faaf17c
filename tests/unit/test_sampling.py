from __future__ import annotations

import pytest
import torch

from common.model.batch import ScheduledSeq
from common.model.sampler import Sampler, exponential_noise, uniform_of_hash
from common.model.sampling_params import SamplingParams


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"seed": -3}, "seed"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
        ({"stop_token_ids": (1, -2)}, "stop_token_ids"),
        ({"logprobs": -1}, "logprobs"),
        ({"logprobs": 21}, "logprobs"),
    ],
)
def test_bad_sampling_values_raise_value_error_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def _seq(params: SamplingParams, outputs: int = 0) -> ScheduledSeq:
    return ScheduledSeq("r", [1], 0, [0], True, params, outputs)


def test_top_k_samples_only_among_the_k_most_likely_tokens():
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0, 3.0, 2.0]])
    drawn = {Sampler(())(logits, [_seq(SamplingParams(temperature=5.0, top_k=2, seed=i))])[0] for i in range(200)}
    assert drawn == {1, 3}


def test_top_p_keeps_the_smallest_set_reaching_p_by_brute_force():
    logits = torch.log(torch.tensor([[0.5, 0.05, 0.3, 0.15]]))
    drawn = {Sampler(())(logits, [_seq(SamplingParams(temperature=1.0, top_p=0.75, seed=i))])[0] for i in range(300)}
    # sorted: 0.5, 0.3 (cum 0.8 >= 0.75) -> tokens {0, 2}
    assert drawn == {0, 2}


def test_sampled_frequencies_follow_the_tempered_distribution():
    logits = torch.tensor([[1.0, 2.0, 0.0]])
    counts = torch.zeros(3)
    for i in range(4000):
        counts[Sampler(())(logits, [_seq(SamplingParams(temperature=2.0), outputs=i)])[0]] += 1
    expected = torch.softmax(logits[0] / 2.0, dim=0)
    # unseeded draws are random: each frequency within five standard deviations of a binomial's
    # (a fixed 0.03 was 3.8 of them and failed about once in 5,000 runs); ignoring the temperature
    # would move the frequencies by 0.06-0.16
    tolerance = 5 * torch.sqrt(expected * (1 - expected) / counts.sum())
    assert ((counts / counts.sum() - expected).abs() <= tolerance).all(), (counts / counts.sum(), expected)


def test_min_tokens_suppresses_eos_and_stop_tokens_until_reached():
    logits = torch.tensor([[0.0, 9.0, 8.0, 1.0]])
    params = SamplingParams(min_tokens=2, stop_token_ids=(2,))
    sampler = Sampler(eos_token_ids=(1,))
    assert sampler(logits, [_seq(params, outputs=1)]) == [3]
    assert sampler(logits, [_seq(params, outputs=2)]) == [1]


def test_greedy_picks_the_argmax_for_every_row():
    logits = torch.tensor([[0.0, 1.0, 3.0], [5.0, 1.0, 3.0]])
    seqs = [_seq(SamplingParams()), _seq(SamplingParams())]
    assert Sampler(())(logits, seqs) == [2, 0]


def test_a_seeded_token_depends_only_on_the_seed_and_its_index():
    logits = torch.randn(1, 50)
    params = SamplingParams(temperature=1.0, seed=11)
    draws = [Sampler(())(logits, [_seq(params, outputs=i)])[0] for i in range(30)]
    assert draws == [Sampler(())(logits, [_seq(params, outputs=i)])[0] for i in range(30)]
    assert len(set(draws)) > 5


def test_logprobs_are_the_raw_logits_log_softmax_for_the_rows_asking_only():
    torch.manual_seed(0)
    logits = torch.randn(4, 50) * 3
    seqs = [_seq(SamplingParams(logprobs=3)), _seq(SamplingParams()),
            _seq(SamplingParams(temperature=2.0, top_k=4, seed=5, logprobs=0)), _seq(SamplingParams(logprobs=20))]
    sampler = Sampler(())
    tokens, logprobs = sampler.with_logprobs(logits, seqs)
    assert tokens == sampler(logits, seqs)  # the same draws as without logprobs (the seeded row too)
    reference = torch.log_softmax(logits.double(), dim=-1)
    assert logprobs[1] is None
    for row in (0, 2, 3):
        got = logprobs[row]
        assert got is not None and got.logprob == pytest.approx(reference[row, tokens[row]].item(), abs=1e-5)
        k = seqs[row].params.logprobs or 0
        top = reference[row].topk(k) if k else None
        assert [t for t, _ in got.top] == ([] if top is None else top.indices.tolist())
        assert [lp for _, lp in got.top] == pytest.approx([] if top is None else top.values.tolist(), abs=1e-5)
    assert tokens[0] == logits[0].argmax().item() and logprobs[0].top[0][0] == tokens[0]


def test_a_step_asking_no_logprobs_computes_none():
    logits = torch.randn(2, 10)
    seqs = [_seq(SamplingParams()), _seq(SamplingParams(temperature=1.0, seed=1))]
    tokens, logprobs = Sampler(()).with_logprobs(logits, seqs)
    assert logprobs == [None, None] and tokens == Sampler(())(logits, seqs)


def test_the_noise_is_strictly_positive_even_for_the_largest_hash():
    """A uniform of exactly 1 makes a token's noise 0 and its p / E infinite (or NaN where a mask
    made p 0): that token would be drawn whatever its probability."""
    u = uniform_of_hash(torch.tensor([0, 1, 0xFFFFFF00, 0xFFFFFFFF], dtype=torch.int64))
    assert (u > 0).all() and (u < 1).all(), u.tolist()
    noise = exponential_noise(torch.arange(64, dtype=torch.int64) * 0x9E3779B1, 49152)
    assert (noise > 0).all() and torch.isfinite(noise).all()
