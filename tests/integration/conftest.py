"""Real clusters on loopback: a gateway and worker processes started by ``LocalCluster``.

The tests here are the ones that start processes or servers or wait on the wall clock (see
tests/unit/__init__.py); some need no cluster: in-process gRPC and HTTP servers, subprocesses."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from common.model.location import ensure_model
from pdserve.cluster import ClusterSpec, LocalCluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc

WORKER_ARGS = ("--num-kv-blocks", "256", "--max-num-tokens", "2048")
# The real default model's clusters: one cost-model measurement (keyed by these flags) serves all
SMOLLM2_WORKER_ARGS = ("--num-kv-blocks", "256", "--max-num-tokens", "512")


def start_cluster(tmp_path: Path, timeout_s: float = 120, **spec: object) -> LocalCluster:
    ensure_model(str(spec.get("preset", "tiny")))  # once, before several processes look for it
    spec = {"port": 0, "worker_args": WORKER_ARGS, **spec}  # cores and threads as `pdserve up` plans them
    return LocalCluster(ClusterSpec(**spec), tmp_path / "logs").start(timeout_s=timeout_s)  # type: ignore[arg-type]


def assert_pools_whole(cluster: LocalCluster, timeout_s: float = 5.0) -> None:
    """Every worker reports free == total blocks in a heartbeat sent after this call began."""
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        info = cluster.info()
        waited_ms = (time.monotonic() - started) * 1000
        fresh = all(w.heartbeat_age_ms < waited_ms for w in info.workers)
        leaks = [(w.worker_id, w.free_blocks, w.total_blocks) for w in info.workers if w.free_blocks != w.total_blocks]
        if fresh and not leaks:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"KV blocks still in use after the test: {leaks}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield running
    running.stop()


@pytest.fixture()
def stub(cluster: LocalCluster) -> Iterator[gateway_pb2_grpc.GatewayStub]:
    with grpc.insecure_channel(cluster.address) as channel:
        yield gateway_pb2_grpc.GatewayStub(channel)
    assert_pools_whole(cluster)
