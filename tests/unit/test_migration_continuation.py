"""What a request resumed on another decode worker asks for (``gateway.migration``): its prompt and
the tokens already sent, the tokens still owed, and a seeded sampling that goes on unchanged."""

from __future__ import annotations

from common.model.sampling_params import SamplingParams
from common.model.seeds import continuation_seed, token_seed
from gateway.migration import continuation
from gateway.validation import ValidatedRequest


def test_a_seeded_continuation_keys_each_token_as_the_first_request_would_have():
    for seed in (0, 1, 12345, (1 << 63) - 1):
        for produced in (1, 7, 300):
            resumed = continuation_seed(seed, produced)
            assert 0 <= resumed < 1 << 63
            assert [token_seed(resumed, i) for i in range(20)] == [token_seed(seed, produced + i) for i in range(20)]


def test_the_continuation_asks_for_what_is_still_owed_on_the_prompt_and_the_tokens_sent():
    req = ValidatedRequest("r", [1, 2, 3], SamplingParams(max_tokens=10, min_tokens=4, seed=9, temperature=0.8),
                           ("stop",), 200.0, 30.0, "tenant", received_at=1.0, delivery_s=0.05)
    resumed = continuation(req, [7, 8, 9])
    assert resumed.prompt_token_ids == [1, 2, 3, 7, 8, 9] and resumed.request_id == "r"
    assert (resumed.params.max_tokens, resumed.params.min_tokens) == (7, 1)
    assert resumed.params.seed == continuation_seed(9, 3) and resumed.params.temperature == 0.8
    assert (resumed.ttft_ms, resumed.tpot_ms, resumed.delivery_s) == (0.0, 0.0, 0.0)  # no guard refuses it
    assert resumed.stop == ("stop",) and resumed.tenant == "tenant"
    unseeded = continuation(ValidatedRequest("u", [1], SamplingParams(max_tokens=4), (), 0.0, 0.0, ""), [5, 6, 7])
    assert unseeded.params.seed is None and unseeded.params.max_tokens == 1 and unseeded.params.min_tokens == 0
