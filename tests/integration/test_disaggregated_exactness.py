"""Output through gateway → prefill → decode equals transformers' and the single engine's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.model.location import ensure_model
from common.model.sampling_params import SamplingParams
from wire.v1 import gateway_pb2, gateway_pb2_grpc
from tests.checkpoints import random_prompts, reference_greedy
from tests.integration.conftest import assert_pools_whole, start_cluster

LENGTHS = [1, 9, 30, 64, 100, 170, 250, 300]
MAX_TOKENS = [12, 20, 7, 16, 25, 9, 14, 18]


@pytest.fixture(scope="module")
def reference() -> list[list[int]]:
    return reference_greedy(ensure_model("tiny"), random_prompts(LENGTHS, seed=11), MAX_TOKENS)


def generate(address: str, prompt: list[int], sampling: gateway_pb2.SamplingParams) -> tuple[list[int], str, str]:
    """(tokens, finish reason, KV transport used) of one streamed request."""
    with grpc.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=prompt), sampling=sampling)
        tokens, reason, transport = [], "", ""
        for message in stub.Generate(request, timeout=120):
            tokens += message.token_ids
            reason = message.finish_reason or reason
            transport = message.timings.kv_transport or transport
        return tokens, reason, transport


def generate_all(address: str, prompts: list[list[int]], samplings: list[gateway_pb2.SamplingParams],
                 transport: str | None = None) -> list[list[int]]:
    with ThreadPoolExecutor(len(prompts)) as pool:
        results = list(pool.map(lambda a: generate(address, *a), zip(prompts, samplings)))
    assert all(reason == "length" for _, reason, _ in results)
    if transport is not None:
        assert {used for _, _, used in results} == {transport}
    return [tokens for tokens, _, _ in results]


# every transport at 1P1D; routing across two of each over one of them
@pytest.mark.parametrize("transport, prefill, decode", [("shm", 1, 1), ("grpc", 1, 1), ("nccl", 1, 1), ("shm", 2, 2)],
                         ids=["1P1D-shm", "1P1D-grpc", "1P1D-nccl", "2P2D-shm"])
def test_concurrent_greedy_output_matches_transformers(tmp_path, reference, transport, prefill, decode):
    cluster = start_cluster(tmp_path, prefill=prefill, decode=decode, kv_transport=transport)
    try:
        samplings = [gateway_pb2.SamplingParams(max_tokens=n, ignore_eos=True) for n in MAX_TOKENS]
        assert generate_all(cluster.address, random_prompts(LENGTHS, seed=11), samplings, transport) == reference
        assert_pools_whole(cluster)
    finally:
        cluster.stop()


def test_seeded_sampling_through_the_cluster_matches_the_single_engine(cluster):
    prompts = random_prompts([5, 50, 120], seed=12)
    params = [SamplingParams(max_tokens=15, temperature=0.9, top_p=0.9, seed=s, ignore_eos=True) for s in (1, 2, 3)]
    expected = LLMEngine(EngineConfig(num_kv_blocks=64)).generate(prompts, params)
    samplings = [gateway_pb2.SamplingParams(max_tokens=15, temperature=0.9, top_p=0.9, seed=s, ignore_eos=True)
                 for s in (1, 2, 3)]
    assert generate_all(cluster.address, prompts, samplings) == expected
    assert_pools_whole(cluster)


def test_scorpio_policy_with_mixed_slos_keeps_greedy_output_exact(tmp_path, reference):
    from tests.integration.conftest import WORKER_ARGS

    cluster = start_cluster(tmp_path, worker_args=(*WORKER_ARGS, "--policy", "scorpio"))
    try:
        prompts = random_prompts(LENGTHS, seed=11)
        with ThreadPoolExecutor(len(prompts)) as pool:
            def one(i: int) -> list[int]:
                with grpc.insecure_channel(cluster.address) as channel:
                    request = gateway_pb2.GenerateRequest(
                        token_ids=gateway_pb2.TokenIds(ids=prompts[i]),
                        sampling=gateway_pb2.SamplingParams(max_tokens=MAX_TOKENS[i], ignore_eos=True),
                        slo=gateway_pb2.SLO(ttft_ms=1000 * (1 + i % 3), tpot_ms=20 * (1 + i % 3)))
                    stub = gateway_pb2_grpc.GatewayStub(channel)
                    return [t for m in stub.Generate(request, timeout=120) for t in m.token_ids]
            assert list(pool.map(one, range(len(prompts)))) == reference
        assert_pools_whole(cluster)
    finally:
        cluster.stop()


def test_held_token_messages_carry_the_same_tokens_and_never_hold_the_first(tmp_path):
    """With the gateway holding each stream's messages 40 ms apart (``--stream-interval-ms``), the
    concatenated tokens still equal transformers', the first message is the first token alone,
    the last carries the finish, and the tokens in between came in fewer messages than tokens."""
    lengths, max_tokens = [20, 90, 200], [60, 48, 40]
    prompts = random_prompts(lengths, seed=23)
    expected = reference_greedy(ensure_model("tiny"), prompts, max_tokens)
    cluster = start_cluster(tmp_path, gateway_args=("--stream-interval-ms", "40"))
    try:
        def stream(i: int) -> list[gateway_pb2.GenerateResponse]:
            with grpc.insecure_channel(cluster.address) as channel:
                request = gateway_pb2.GenerateRequest(
                    token_ids=gateway_pb2.TokenIds(ids=prompts[i]),
                    sampling=gateway_pb2.SamplingParams(max_tokens=max_tokens[i], ignore_eos=True))
                return list(gateway_pb2_grpc.GatewayStub(channel).Generate(request, timeout=120))

        with ThreadPoolExecutor(len(prompts)) as pool:
            streams = list(pool.map(stream, range(len(prompts))))
        for messages, want in zip(streams, expected):
            assert [t for m in messages for t in m.token_ids] == want
            assert len(messages[0].token_ids) == 1 and not messages[0].finish_reason
            assert messages[-1].finish_reason == "length" and not any(m.finish_reason for m in messages[:-1])
            assert len(messages) <= len(want) // 2, f"{len(messages)} messages for {len(want)} tokens"
        assert_pools_whole(cluster)
    finally:
        cluster.stop()
