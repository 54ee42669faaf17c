"""Prefix caching through a real 2P2D cluster: the next turn of a conversation goes to the prefill
worker that holds its history, skips that much prefill, and answers as transformers does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from common.model.location import ensure_model
from pdserve.cluster import LocalCluster
from tests.checkpoints import random_prompts, reference_greedy
from tests.integration.conftest import assert_pools_whole, scrape_metrics, start_cluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc

CONVERSATIONS = 4
FIRST_LEN, ANSWER_LEN, NEXT_LEN = 100, 12, 30  # 100 prompt tokens: 6 full blocks cached on the prefill worker


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = start_cluster(tmp_path_factory.mktemp("prefix"), prefill=2, decode=2, metrics=True)
    yield running
    running.stop()


def _generate(stub: gateway_pb2_grpc.GatewayStub, prompt: list[int], max_tokens: int) -> gateway_pb2.GenerateResponse:
    """The last message, its token ids replaced by all the request's tokens."""
    request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=prompt),
                                          sampling=gateway_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    messages = list(stub.Generate(request, timeout=120))
    last = gateway_pb2.GenerateResponse()
    last.CopyFrom(messages[-1])
    del last.token_ids[:]
    last.token_ids.extend(t for m in messages for t in m.token_ids)
    return last


def test_the_next_turn_goes_where_its_history_is_cached_and_answers_as_transformers(cluster):
    firsts = random_prompts([FIRST_LEN] * CONVERSATIONS, seed=21)
    news = random_prompts([NEXT_LEN] * CONVERSATIONS, seed=22)
    first_replies: dict[int, gateway_pb2.GenerateResponse] = {}
    with grpc.insecure_channel(cluster.address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)

        def first_turn(i: int) -> None:
            first_replies[i] = _generate(stub, firsts[i], ANSWER_LEN)

        threads = [threading.Thread(target=first_turn, args=(i,)) for i in range(CONVERSATIONS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        served_first = {i: r.timings.prefill_worker for i, r in first_replies.items()}
        assert len(set(served_first.values())) == 2, "first turns at once spread over both prefill workers"
        time.sleep(1.2)  # two heartbeats: each worker's digest now names its cached blocks
        seconds = [firsts[i] + list(first_replies[i].token_ids) + news[i] for i in range(CONVERSATIONS)]
        second_replies = [_generate(stub, seconds[i], 8) for i in range(CONVERSATIONS)]  # one at a time
    assert {i: r.timings.prefill_worker for i, r in enumerate(second_replies)} == served_first
    assert [r.usage.cached_tokens for r in second_replies] == [96] * CONVERSATIONS
    assert [r.usage.cached_tokens for r in first_replies.values()] == [0] * CONVERSATIONS
    model = ensure_model("tiny")
    assert [list(first_replies[i].token_ids) for i in range(CONVERSATIONS)] == reference_greedy(
        model, firsts, [ANSWER_LEN] * CONVERSATIONS)
    assert [list(r.token_ids) for r in second_replies] == reference_greedy(model, seconds, [8] * CONVERSATIONS)
    hits = sum(scrape_metrics(port).get('pdserve:prefix_cache_hits_total{role="prefill"}', 0.0)
               for name, port in cluster.metrics_ports.items() if name.startswith("prefill"))
    assert hits == 96 * CONVERSATIONS
    assert_pools_whole(cluster)
