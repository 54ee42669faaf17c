"""Bad input, cancellation and a lost worker, against a real cluster."""

from __future__ import annotations

import time

import grpc
import pytest

from wire.v1 import gateway_pb2, gateway_pb2_grpc
from tests.integration.conftest import assert_pools_whole, start_cluster


def _request(prompt: str | list[int] = "hello", **sampling: object) -> gateway_pb2.GenerateRequest:
    params = gateway_pb2.SamplingParams(**sampling)
    if isinstance(prompt, list):
        return gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=prompt), sampling=params)
    return gateway_pb2.GenerateRequest(text=prompt, sampling=params)


@pytest.mark.parametrize(
    "request_, code, words",
    [
        (_request(""), grpc.StatusCode.INVALID_ARGUMENT, "prompt is empty"),
        (_request([]), grpc.StatusCode.INVALID_ARGUMENT, "prompt is empty"),
        (_request([7] * 5000), grpc.StatusCode.INVALID_ARGUMENT, "exceeds the model's limit"),
        (_request(max_tokens=0), grpc.StatusCode.INVALID_ARGUMENT, "max_tokens"),
        (_request(max_tokens=-3), grpc.StatusCode.INVALID_ARGUMENT, "max_tokens"),
        (_request(temperature=-1.0), grpc.StatusCode.INVALID_ARGUMENT, "temperature"),
        (_request(top_p=0.0), grpc.StatusCode.INVALID_ARGUMENT, "top_p"),
        (_request(top_p=1.5), grpc.StatusCode.INVALID_ARGUMENT, "top_p"),
        (_request([999999]), grpc.StatusCode.INVALID_ARGUMENT, "token_ids"),
    ],
    ids=["empty-text", "empty-ids", "too-long", "max-tokens-0", "max-tokens-negative", "temperature",
         "top-p-0", "top-p-above-1", "token-out-of-vocab"],
)
def test_bad_input_gets_a_clear_status_and_the_cluster_keeps_serving(stub, request_, code, words):
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Generate(request_, timeout=30))
    assert err.value.code() == code and words in err.value.details()
    served = list(stub.Generate(_request(max_tokens=3, ignore_eos=True), timeout=30))
    assert sum(len(m.token_ids) for m in served) == 3


def test_abort_of_an_unknown_id_is_not_found(stub):
    with pytest.raises(grpc.RpcError) as err:
        stub.Abort(gateway_pb2.AbortRequest(request_id="no-such-request"), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "no-such-request" in err.value.details()


def test_abort_by_id_ends_the_stream_with_reason_abort(stub):
    request = _request(max_tokens=2000, ignore_eos=True)
    request.request_id = "to-abort"
    stream = stub.Generate(request, timeout=60)
    first = next(stream)
    assert first.token_ids
    stub.Abort(gateway_pb2.AbortRequest(request_id="to-abort"), timeout=10)
    rest = list(stream)
    assert rest[-1].finish_reason == "abort"


def test_cancelled_stream_frees_its_blocks_within_a_second(cluster, stub):
    stream = stub.Generate(_request([5] * 200, max_tokens=3000, ignore_eos=True), timeout=60)
    next(stream)
    assert _wait_for(lambda: any(w.role == "decode" and w.free_blocks < w.total_blocks
                                 for w in cluster.info().workers)), "the running request should hold decode blocks"
    stream.cancel()
    cancelled_at = time.monotonic()
    assert_pools_whole(cluster, timeout_s=1.0 + 0.6)  # one second, plus one heartbeat for the report
    assert time.monotonic() - cancelled_at < 1.6


def test_client_deadline_aborts_the_request_everywhere(cluster, stub):
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Generate(_request([9] * 100, max_tokens=3000, ignore_eos=True), timeout=1.0))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert_pools_whole(cluster, timeout_s=2.0)


def _wait_for(condition, timeout_s: float = 3.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
