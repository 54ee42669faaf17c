"""A worker whose engine thread dies stops serving and exits non-zero; the cluster goes on
without it."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from wire.v1 import gateway_pb2, gateway_pb2_grpc
from tests.integration.conftest import assert_pools_whole, start_cluster


def _request(i: int) -> gateway_pb2.GenerateRequest:
    return gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=[5 + i] * 20),
                                       sampling=gateway_pb2.SamplingParams(max_tokens=8, ignore_eos=True))


def test_a_dead_engine_thread_takes_its_worker_out_and_the_cluster_routes_around_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # decode-1's engine thread raises after its third step (workers inherit this environment)
    monkeypatch.setenv("PDSERVE_FAULTS", "engine_thread_dies:decode-1-:3")
    cluster = start_cluster(tmp_path, decode=2)
    try:
        doomed = next(name for name in cluster.processes if name.startswith("decode-1-"))
        with grpc.insecure_channel(cluster.address) as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)

            def generate(i: int) -> str:
                try:
                    messages = list(stub.Generate(_request(i), timeout=60))
                    assert sum(len(m.token_ids) for m in messages) == 8
                    return messages[-1].timings.decode_worker
                except grpc.RpcError as exc:  # the requests it held end with a status that says why
                    assert exc.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE), exc.details()
                    return f"{exc.code().name}: {exc.details()}"

            # Rounds of concurrent requests until decode-1 has served some: the router spreads
            # by in-flight count, and one at a time, equal free blocks may pick one worker always.
            outcomes: list[str] = []
            with ThreadPoolExecutor(max_workers=4) as pool:
                for first in range(0, 80, 4):
                    outcomes += pool.map(generate, range(first, first + 4))
                    if any(not o.startswith("decode") for o in outcomes) or cluster.processes[doomed].poll() is not None:
                        break
            code = cluster.processes[doomed].wait(30)
            cluster._ended.add(doomed)  # ended as the test intends
            assert code != 0, "a worker that can no longer step must exit with a failure status"
            log = (cluster.log_dir / f"{doomed}.log").read_text()
            assert "engine thread died" in log and "InjectedFault" in log
            deadline = time.monotonic() + 10
            while any(w.worker_id == doomed for w in cluster.info().workers) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert all(w.worker_id != doomed for w in cluster.info().workers), "the gateway forgets it"
            after = [list(stub.Generate(_request(i), timeout=60)) for i in range(5)]
        assert all(sum(len(m.token_ids) for m in messages) == 8 for messages in after)
        assert {messages[-1].timings.decode_worker for messages in after} == {
            next(name for name in cluster.processes if name.startswith("decode-0-"))}
        print(outcomes)
        assert any(not o.startswith("decode") for o in outcomes), "a request was on decode-1 when it died"
        assert_pools_whole(cluster)
    finally:
        cluster.stop()
