"""The Python client's request conversion (against an in-process fake gateway:
tests/integration/test_client_fake_gateway.py)."""

from __future__ import annotations

import pytest

from client import SLO, SamplingOptions
from client.convert import generate_request


def test_unset_optional_sampling_fields_stay_unset_and_text_goes_in_text() -> None:
    request = generate_request("hi", SamplingOptions())
    assert request.WhichOneof("prompt") == "text" and request.text == "hi"
    for name in ("max_tokens", "top_p", "seed"):
        assert not request.sampling.HasField(name)
    assert not request.HasField("slo") and request.request_id == "" and request.tenant == ""


def test_given_optional_fields_are_set_even_when_falsy_and_token_ids_go_in_token_ids() -> None:
    options = SamplingOptions(max_tokens=8, temperature=0.7, top_k=5, top_p=0.5, seed=0, min_tokens=2,
                              stop_token_ids=(7, 9), stop=("\n",), ignore_eos=True)
    request = generate_request([3, 4, 5], options, SLO(ttft_ms=200, tpot_ms=20, name="chat"), "r1", "acme")
    s = request.sampling
    assert request.WhichOneof("prompt") == "token_ids" and list(request.token_ids.ids) == [3, 4, 5]
    assert all(s.HasField(name) for name in ("max_tokens", "top_p", "seed"))
    assert (s.max_tokens, s.top_p, s.seed, s.top_k, s.min_tokens) == (8, 0.5, 0, 5, 2)
    assert s.temperature == pytest.approx(0.7) and s.ignore_eos
    assert list(s.stop_token_ids) == [7, 9] and list(s.stop) == ["\n"]
    assert (request.slo.ttft_ms, request.slo.tpot_ms, request.slo.name) == (200, 20, "chat")
    assert (request.request_id, request.tenant) == ("r1", "acme")


def test_logprobs_choices_and_structured_output_travel_both_ways() -> None:
    from client.convert import chunk, one_choice
    from wire.v1 import gateway_pb2

    options = SamplingOptions(logprobs=0, prompt_logprobs=2, n=3, structured=("regex", "[a-z]+"))
    s = generate_request("hi", options).sampling
    assert (s.logprobs, s.prompt_logprobs, s.n) == (0, 2, 3) and s.HasField("logprobs")
    assert (s.structured.kind, s.structured.spec) == ("regex", "[a-z]+")
    plain = generate_request("hi", SamplingOptions()).sampling
    assert not any(plain.HasField(f) for f in ("logprobs", "prompt_logprobs", "n", "structured"))
    message = gateway_pb2.GenerateResponse(token_ids=[5, 6], choice_index=2, logprobs=[
        gateway_pb2.TokenLogprobs(logprob=-0.5, top_token_ids=[5, 9], top_logprobs=[-0.5, -1.5]),
        gateway_pb2.TokenLogprobs(logprob=-2.0)])
    got = chunk(message, 0.0)
    assert got.choice_index == 2 and got.logprobs[0].top == ((5, -0.5), (9, -1.5)) and got.logprobs[1].logprob == -2.0
    with pytest.raises(ValueError, match="choice_index"):
        one_choice(options)
