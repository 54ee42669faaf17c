"""Prefix caching through a real 2P2D cluster: the next turn of a conversation goes to the prefill
worker that holds its history and skips that much prefill, goes to the decode worker that served
the last turn and receives only the KV it lacks, and answers as transformers does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from common.model.location import ensure_model
from common.process.scrape import scrape_metrics
from pdserve.cluster import LocalCluster
from tests.checkpoints import random_prompts, reference_greedy
from tests.integration.conftest import assert_pools_whole, start_cluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc

CONVERSATIONS = 4
FIRST_LEN, ANSWER_LEN, NEXT_LEN = 100, 12, 30  # 100 prompt tokens: 6 full blocks cached on the prefill worker


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # fcfs routing: idle workers tie on load, so the cached prefix alone decides, every time. Under
    # the TTFT guard the same choice weighs predicted times, whose calibration differs from worker
    # to worker (tests/unit/test_prefix_digest.py checks that router on planted figures).
    running = start_cluster(tmp_path_factory.mktemp("prefix"), prefill=2, decode=2, metrics=True,
                            gateway_args=("--policy", "fcfs"))
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


def _cached_by_role(cluster: LocalCluster) -> dict[str, int]:
    totals = {"prefill": 0, "decode": 0}
    for w in cluster.info().workers:
        totals[w.role] += w.cached_blocks
    return totals


def _wait_for_digests(cluster: LocalCluster, at_least: dict[str, int], timeout_s: float = 30) -> None:
    """Until the gateway's copy of every worker's prefix digest is current and each role's
    together hold ``at_least`` blocks."""
    deadline = time.monotonic() + timeout_s
    while True:
        workers = cluster.info().workers
        if all(w.prefix_in_step for w in workers) and all(
                n >= at_least[role] for role, n in _cached_by_role(cluster).items()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"digests not in step: {[(w.worker_id, w.prefix_in_step, w.cached_blocks) for w in workers]}")
        time.sleep(0.1)


def test_the_next_turn_goes_where_its_history_is_cached_and_answers_as_transformers(cluster):
    firsts = random_prompts([FIRST_LEN] * CONVERSATIONS, seed=21)
    news = random_prompts([NEXT_LEN] * CONVERSATIONS, seed=22)
    first_replies: dict[int, gateway_pb2.GenerateResponse] = {}
    before = _cached_by_role(cluster)  # what warm-up left named
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
        # each first turn left 6 full blocks named on its prefill worker and 6 on its decode worker
        _wait_for_digests(cluster, {role: n + 6 * CONVERSATIONS for role, n in before.items()})
        seconds = [firsts[i] + list(first_replies[i].token_ids) + news[i] for i in range(CONVERSATIONS)]
        second_replies = [_generate(stub, seconds[i], 8) for i in range(CONVERSATIONS)]  # one at a time
    assert {i: r.timings.prefill_worker for i, r in enumerate(second_replies)} == served_first
    assert [r.usage.cached_tokens for r in second_replies] == [96] * CONVERSATIONS
    # the decode side: turn 1 left 100 + 11 tokens of KV there (6 full blocks); turn 2's prompt
    # (142 tokens, 9 blocks) needs only its last 3 copied
    assert [r.timings.decode_worker for r in second_replies] == [first_replies[i].timings.decode_worker
                                                                  for i in range(CONVERSATIONS)]
    assert [r.timings.decode_cached_tokens for r in second_replies] == [96] * CONVERSATIONS
    block_bytes = first_replies[0].timings.kv_transfer_bytes // 7  # turn 1 copied all 7 of its blocks
    assert [r.timings.kv_transfer_bytes for r in second_replies] == [3 * block_bytes] * CONVERSATIONS
    assert [r.usage.cached_tokens for r in first_replies.values()] == [0] * CONVERSATIONS
    model = ensure_model("tiny")
    assert [list(first_replies[i].token_ids) for i in range(CONVERSATIONS)] == reference_greedy(
        model, firsts, [ANSWER_LEN] * CONVERSATIONS)
    assert [list(r.token_ids) for r in second_replies] == reference_greedy(model, seconds, [8] * CONVERSATIONS)
    hits = sum(scrape_metrics(port).get('pdserve:prefix_cache_hits_total{role="prefill"}', 0.0)
               for name, port in cluster.metrics_ports.items() if name.startswith("prefill"))
    assert hits == 96 * CONVERSATIONS
    assert_pools_whole(cluster)
