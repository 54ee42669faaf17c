"""One request must not hurt the others: a huge prompt, storms of cancellations and expiring
deadlines, against a real cluster."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from pdserve.cluster import LocalCluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc
from tests.integration.conftest import assert_pools_whole, start_cluster

# A pool large enough that a storm of requests really holds blocks on both sides; prompts this
# long let the gateway read 6 MB, so the huge prompt below is tokenized (off the event loop).
HARDENING_WORKERS = ("--num-kv-blocks", "2048", "--max-num-tokens", "2048")
HUGE_PROMPT_BYTES = 5_000_000


@pytest.fixture(scope="module")
def storm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = start_cluster(tmp_path_factory.mktemp("hardening"), worker_args=HARDENING_WORKERS,
                            gateway_args=("--max-prompt-bytes", str(HUGE_PROMPT_BYTES + 1_000_000)))
    yield running
    running.stop()


def _ids_request(length: int, max_tokens: int, seed: int) -> gateway_pb2.GenerateRequest:
    rng = random.Random(seed)
    return gateway_pb2.GenerateRequest(
        token_ids=gateway_pb2.TokenIds(ids=[rng.randrange(3, 250) for _ in range(length)]),
        sampling=gateway_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True))


def test_a_huge_prompt_is_refused_and_no_other_stream_fails(storm_cluster: LocalCluster) -> None:
    outcomes: dict[int, object] = {}

    def stream(i: int, stub: gateway_pb2_grpc.GatewayStub) -> None:
        try:
            messages = list(stub.Generate(_ids_request(50 + 10 * i, 48, seed=i), timeout=120))
            outcomes[i] = sum(len(m.token_ids) for m in messages)
        except grpc.RpcError as exc:
            outcomes[i] = f"{exc.code().name}: {exc.details()}"

    with grpc.insecure_channel(storm_cluster.address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        streams = [threading.Thread(target=stream, args=(i, stub)) for i in range(20)]
        for t in streams:
            t.start()
        huge = gateway_pb2.GenerateRequest(text="a" * HUGE_PROMPT_BYTES,
                                           sampling=gateway_pb2.SamplingParams(max_tokens=4))
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Generate(huge, timeout=120))
        for t in streams:
            t.join(150)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "exceeds the model's limit" in err.value.details()
    assert outcomes == {i: 48 for i in range(20)}, "every other stream must finish whole"
    info = storm_cluster.info()
    assert info is not None and {w.state for w in info.workers} == {"ready"}, "no worker left routing"
    assert_pools_whole(storm_cluster)


def _storm(address: str, count: int, start: Callable[[gateway_pb2_grpc.GatewayStub, int], None]) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        threads = [threading.Thread(target=start, args=(stub, i)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)


def test_200_cancellations_leave_every_pool_whole_within_2_s(storm_cluster: LocalCluster) -> None:
    rng = random.Random(7)
    moments = [rng.uniform(0.0, 0.5) for _ in range(200)]
    lengths = [rng.randrange(10, 900) for _ in range(200)]

    def cancel_soon(stub: gateway_pb2_grpc.GatewayStub, i: int) -> None:
        call = stub.Generate(_ids_request(lengths[i], 500, seed=i), timeout=120)
        time.sleep(moments[i])
        call.cancel()

    _storm(storm_cluster.address, 200, cancel_soon)
    assert_pools_whole(storm_cluster, timeout_s=2.0 + 0.6)  # two seconds, plus one heartbeat to report it


def test_150_expiring_deadlines_leave_every_pool_whole_within_2_s(storm_cluster: LocalCluster) -> None:
    rng = random.Random(8)
    lengths = [rng.randrange(10, 900) for _ in range(150)]
    codes: list[grpc.StatusCode] = []

    def short_deadline(stub: gateway_pb2_grpc.GatewayStub, i: int) -> None:
        try:
            list(stub.Generate(_ids_request(lengths[i], 500, seed=i), timeout=0.3))
        except grpc.RpcError as exc:
            codes.append(exc.code())

    _storm(storm_cluster.address, 150, short_deadline)
    assert len(codes) == 150 and set(codes) <= {grpc.StatusCode.DEADLINE_EXCEEDED,
                                                grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert_pools_whole(storm_cluster, timeout_s=2.0 + 0.6)
    with grpc.insecure_channel(storm_cluster.address) as channel:
        served = list(gateway_pb2_grpc.GatewayStub(channel).Generate(_ids_request(30, 5, seed=1), timeout=60))
    assert sum(len(m.token_ids) for m in served) == 5, "the cluster serves as before"
