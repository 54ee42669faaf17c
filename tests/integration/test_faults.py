"""Faults on real processes under load, and what each request's client gets: a prefill worker
killed mid-prefill (its requests retried elsewhere, never blamed on the client), a decode worker
killed mid-decode (its streams end UNAVAILABLE naming it, never hang), clients that go away
(gRPC cancel, HTTP disconnect, streaming or not: aborted everywhere within a second). After each,
every pool is whole."""

from __future__ import annotations

import collections
import http.client
import json
import threading
import time
import urllib.request

import grpc
import pytest

from common.process.scrape import scrape_metrics
from pdserve.cluster import LocalCluster
from tests.integration.conftest import assert_pools_whole, start_cluster
from tests.integration.load import Load
from wire.v1 import gateway_pb2, gateway_pb2_grpc

BIG_POOL = ("--num-kv-blocks", "4096", "--max-num-tokens", "2048")
# A long prompt each, all at once: the kill lands while most are queued or in a forward. (The issue's
# 1,500 tokens take this 2-core CPU some 3 s a prefill; 600 keep the suite short and still queue.)
PROMPT_LEN = 600


def _prompt(n: int, salt: int) -> list[int]:
    return [(7 * i + 13 * salt) % 250 + 1 for i in range(n)]


def _send_together(cluster: LocalCluster, count: int, prompt_len: int, max_tokens: int) -> tuple[list[str], list[threading.Thread]]:
    """``count`` requests at once, each on its own thread; their outcomes (a finish reason or a
    gRPC status name, with its details) are appended as they end."""
    outcomes: list[str] = []

    def one(i: int) -> None:
        request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=_prompt(prompt_len, i)),
                                              sampling=gateway_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        with grpc.insecure_channel(cluster.address) as channel:
            try:
                reason = ""
                for message in gateway_pb2_grpc.GatewayStub(channel).Generate(request, timeout=120):
                    reason = message.finish_reason or reason
                outcomes.append(reason)
            except grpc.RpcError as exc:
                outcomes.append(f"{exc.code().name}: {exc.details()}")

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    return outcomes, threads


def test_a_prefill_worker_killed_mid_prefill_loses_no_request_and_blames_no_client(tmp_path):
    cluster = start_cluster(tmp_path, prefill=2, decode=1, worker_args=BIG_POOL)
    try:
        outcomes, threads = _send_together(cluster, 40, PROMPT_LEN, 8)
        time.sleep(0.3)
        cluster.kill(next(n for n in cluster.processes if n.startswith("prefill-0")))
        for t in threads:
            t.join(180)
        counts = collections.Counter(o.split(":")[0] for o in outcomes)
        assert len(outcomes) == 40 and counts["length"] >= 38, counts
        assert not [o for o in outcomes if o.startswith("INVALID_ARGUMENT")], outcomes
        assert_pools_whole(cluster, timeout_s=15)
    finally:
        cluster.stop()


def test_a_decode_worker_killed_mid_decode_ends_only_its_streams_unavailable_naming_it(tmp_path):
    cluster = start_cluster(tmp_path, prefill=1, decode=2, worker_args=BIG_POOL)
    try:
        load = Load(cluster.address, max_tokens=200)
        running = load.start(count=40, concurrency=40, prefix="decode-kill", timeout_s=60)
        for _ in range(30):
            assert load.first_tokens.acquire(timeout=60)
        victim = next(n for n in cluster.processes if n.startswith("decode-0"))
        cluster.kill(victim)
        running.join(90)
        assert not running.is_alive(), "a stream hung after its decode worker died"
        assert len(load.outcomes) == 40
        failed = [o for o in load.outcomes if o.code]
        assert all(o.code == "UNAVAILABLE" and victim in o.details for o in failed), [(o.code, o.details) for o in failed]
        assert sum(o.finish_reason == "length" for o in load.outcomes) >= 40 - 30  # those on the other worker
        assert_pools_whole(cluster, timeout_s=5)
        with grpc.insecure_channel(cluster.address) as channel:  # and the survivor serves new requests
            served = list(gateway_pb2_grpc.GatewayStub(channel).Generate(gateway_pb2.GenerateRequest(
                text="after", sampling=gateway_pb2.SamplingParams(max_tokens=4, ignore_eos=True)), timeout=30))
        assert sum(len(m.token_ids) for m in served) == 4
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def http_cluster(tmp_path_factory: pytest.TempPathFactory) -> LocalCluster:
    cluster = start_cluster(tmp_path_factory.mktemp("drops"), http_port=0, metrics=True, worker_args=BIG_POOL)
    yield cluster
    cluster.stop()


def _gateway_running(cluster: LocalCluster) -> float:
    samples = scrape_metrics(cluster.metrics_ports["gateway"])
    return next(v for k, v in samples.items() if k.startswith("pdserve:num_requests_running{"))


def _served_model(cluster: LocalCluster) -> str:
    with urllib.request.urlopen(f"http://{cluster.http_address}/v1/models", timeout=10) as reply:
        return json.loads(reply.read())["data"][0]["id"]


def _drop_after(cluster: LocalCluster, stream: bool, seconds: float) -> None:
    """One long completion whose client leaves after ``seconds``, without a word, as one that timed out."""
    host, port = cluster.http_address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    body = {"model": _served_model(cluster), "prompt": "the sea and the wind", "stream": stream, "ignore_eos": True,
            "max_tokens": 1000}
    connection.request("POST", "/v1/completions", json.dumps(body), {"content-type": "application/json"})
    time.sleep(seconds)
    connection.sock.close()


def _until(condition, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_http_clients_that_go_away_have_their_requests_aborted_everywhere(http_cluster, stream):
    threads = [threading.Thread(target=_drop_after, args=(http_cluster, stream, 1.0)) for _ in range(30)]
    for t in threads:
        t.start()
    assert _until(lambda: _gateway_running(http_cluster) >= 10, 5.0), "the requests never ran"
    for t in threads:
        t.join(30)
    left = time.monotonic()
    assert _until(lambda: _gateway_running(http_cluster) == 0, 3.0), "requests still running for nobody"
    assert_pools_whole(http_cluster, timeout_s=3.0 - (time.monotonic() - left) + 0.5)


def test_grpc_clients_that_cancel_mid_stream_have_their_requests_aborted_everywhere(http_cluster):
    load = Load(http_cluster.address, max_tokens=400, cancel_fraction=1.0)
    load.run(count=30, concurrency=30, prefix="cancel")
    assert all(o.cancelled_by_client or o.finish_reason for o in load.outcomes)
    assert _until(lambda: _gateway_running(http_cluster) == 0, 3.0)
    assert_pools_whole(http_cluster, timeout_s=3.0)
