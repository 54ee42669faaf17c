"""Conditional disaggregation on a real cluster: a decode worker computing prompts itself.

A cluster of one decode worker and no prefill worker, local prefill on: every request with a TTFT
SLO is prefilled by the decode worker in its own steps, beside the others' decodes, and its
greedy output must still be transformers' own; a request without a TTFT SLO has nowhere to go.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from common.model.location import ensure_model
from tests.checkpoints import random_prompts, reference_greedy
from tests.integration.conftest import assert_pools_whole, start_cluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc

LENGTHS = [3, 40, 130, 17, 260, 64]
MAX_TOKENS = [14, 9, 20, 25, 6, 12]


@pytest.fixture(scope="module")
def decode_only(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    cluster = start_cluster(tmp_path_factory.mktemp("local"), prefill=0, decode=1,
                            gateway_args=("--local-prefill", "on"))
    yield cluster
    cluster.stop()


def generate(address: str, prompt: list[int], max_tokens: int, slo: gateway_pb2.SLO) -> tuple[list[int], gateway_pb2.Timings]:
    with grpc.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=prompt), slo=slo,
                                              sampling=gateway_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        tokens: list[int] = []
        timings = gateway_pb2.Timings()
        for message in stub.Generate(request, timeout=120):
            tokens += message.token_ids
            if message.finish_reason:
                timings = message.timings
        return tokens, timings


def test_the_decode_worker_prefills_concurrent_requests_exactly(decode_only):
    prompts = random_prompts(LENGTHS, seed=21)
    expected = reference_greedy(ensure_model("tiny"), prompts, MAX_TOKENS)
    slo = gateway_pb2.SLO(ttft_ms=60_000, tpot_ms=5_000)
    with ThreadPoolExecutor(len(prompts)) as pool:
        results = list(pool.map(lambda a: generate(decode_only.address, *a, slo), zip(prompts, MAX_TOKENS)))
    assert [tokens for tokens, _ in results] == expected
    for _, timings in results:
        assert timings.kv_transport == "local"
        assert timings.prefill_worker == timings.decode_worker != ""
    assert_pools_whole(decode_only)


def test_a_request_without_a_ttft_slo_has_no_prefill_worker(decode_only):
    with pytest.raises(grpc.RpcError) as err:
        generate(decode_only.address, [1, 2, 3], 4, gateway_pb2.SLO())
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "no prefill worker" in err.value.details()
    assert_pools_whole(decode_only)
