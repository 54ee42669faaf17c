"""Operations against real clusters: health, reflection, metrics, JSON logs, SIGTERM drain,
``kill -9`` of each role under load with recovery, a restarted worker rejoining by itself."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from common.process.scrape import scrape_metrics
from pdserve.cluster import LocalCluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc
from tests.integration.conftest import WORKER_ARGS, assert_pools_whole, start_cluster
from tests.integration.load import Load, Outcome

# Short leases and quarantines, so that blocks a failure strands come back within the test.
RECOVERY_ARGS = (*WORKER_ARGS, "--lease-timeout-s", "4", "--quarantine-s", "1")


def _total(samples: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in samples.items() if k.startswith(prefix))


def _health(address: str, service: str = "") -> str:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def _workers(cluster: LocalCluster) -> dict[str, gateway_pb2.WorkerStatus]:
    info = cluster.info()
    assert info is not None
    return {w.worker_id: w for w in info.workers}


def _final_statuses_are_clear(outcomes: list[Outcome], sent: int) -> None:
    assert len(outcomes) == sent, f"{sent - len(outcomes)} request(s) never ended"
    for o in outcomes:
        assert o.final or o.cancelled_by_client, f"{o.request_id} ended without a status"
        if o.code:
            assert o.code in ("UNAVAILABLE", "CANCELLED") and o.details, (o.request_id, o.code, o.details)


def test_health_reflection_metrics_and_json_logs(tmp_path):
    cluster = start_cluster(tmp_path, metrics=True, gateway_args=("--log-format", "json"))
    try:
        assert _health(cluster.address) == "SERVING"
        deadline = time.monotonic() + 2  # re-evaluated every heartbeat period (500 ms)
        while _health(cluster.address, "pdserve.v1.Gateway") != "SERVING" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _health(cluster.address, "pdserve.v1.Gateway") == "SERVING"  # it has workers to route to
        for worker in _workers(cluster).values():
            service = "pdserve.v1.PrefillWorker" if worker.role == "prefill" else "pdserve.v1.DecodeWorker"
            assert _health(worker.address, service) == "SERVING"
        probe = subprocess.run([sys.executable, "-m", "pdserve.cli", "health", "--address", cluster.address],
                               capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0 and "SERVING" in probe.stdout

        with grpc.insecure_channel(cluster.address) as channel:
            services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
            assert {"pdserve.v1.Gateway", "grpc.health.v1.Health"} <= services
            stub = gateway_pb2_grpc.GatewayStub(channel)
            for i in range(3):
                request = gateway_pb2.GenerateRequest(request_id=f"metrics-{i}", text="hello there",
                                                      sampling=gateway_pb2.SamplingParams(max_tokens=5, ignore_eos=True))
                assert list(stub.Generate(request, timeout=60))[-1].finish_reason == "length"

        gateway = scrape_metrics(cluster.metrics_ports["gateway"])
        assert gateway['pdserve:requests_total{role="gateway",status="length"}'] >= 3
        assert gateway['pdserve:time_to_first_token_seconds_count{role="gateway"}'] >= 3
        assert gateway['pdserve:generation_tokens_total{role="gateway"}'] >= 15
        assert gateway['pdserve:workers{role="gateway",state="ready",worker_role="decode"}'] == 1
        prefill_name = next(n for n in cluster.processes if n.startswith("prefill"))
        decode_name = next(n for n in cluster.processes if n.startswith("decode"))
        prefill = scrape_metrics(cluster.metrics_ports[prefill_name])
        assert _total(prefill, "pdserve:kv_transfer_bytes_total") > 0
        assert prefill['pdserve:prompt_tokens_total{role="prefill"}'] >= 3 * len("hello there")
        decode = scrape_metrics(cluster.metrics_ports[decode_name])
        assert decode['pdserve:generation_tokens_total{role="decode"}'] >= 3 * 4
        assert 'pdserve:kv_cache_usage_perc{role="decode"}' in decode

        lines = [json.loads(line) for line in (cluster.log_dir / "gateway.log").read_text().splitlines()
                 if line.startswith("{")]
        tagged = {line.get("request_id") for line in lines if line["msg"].startswith("finished")}
        assert {"metrics-0", "metrics-1", "metrics-2"} <= tagged
        assert all(line["role"] == "gateway" for line in lines)
    finally:
        cluster.stop()


def test_sigterm_drains_a_worker_and_the_gateway_without_losing_requests(tmp_path):
    cluster = start_cluster(tmp_path, prefill=1, decode=2, worker_args=RECOVERY_ARGS)
    try:
        load = Load(cluster.address, max_tokens=60)
        running = load.start(count=12, concurrency=6, prefix="drain")
        for _ in range(6):
            assert load.first_tokens.acquire(timeout=60)
        decode0 = next(n for n in cluster.processes if n.startswith("decode-0"))
        assert cluster.kill(decode0, signal.SIGTERM) == 0  # drains, then exits cleanly
        running.join(120)
        _final_statuses_are_clear(load.outcomes, 12)
        assert all(o.finish_reason == "length" and o.tokens == 60 for o in load.outcomes), \
            [(o.request_id, o.code, o.details) for o in load.outcomes if o.code]
        assert decode0 not in _workers(cluster)  # left routing

        # the gateway drains too: in-flight streams finish; it refuses nothing it had accepted
        load = Load(cluster.address, max_tokens=60)
        running = load.start(count=4, concurrency=4, prefix="gateway-drain")
        for _ in range(4):
            assert load.first_tokens.acquire(timeout=60)
        assert cluster.kill("gateway", signal.SIGTERM) == 0
        running.join(120)
        assert [o.finish_reason for o in load.outcomes] == ["length"] * 4
    finally:
        cluster.stop()


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_kill_9_of_a_worker_under_load_then_it_restarts_and_rejoins(tmp_path, role):
    cluster = start_cluster(tmp_path, prefill=2, decode=2, worker_args=RECOVERY_ARGS)
    try:
        load = Load(cluster.address, max_tokens=40)
        running = load.start(count=24, concurrency=8, prefix=f"kill-{role}")
        for _ in range(6):
            assert load.first_tokens.acquire(timeout=60)
        victim = next(n for n in cluster.processes if n.startswith(f"{role}-0"))
        cluster.kill(victim)
        running.join(180)
        _final_statuses_are_clear(load.outcomes, 24)
        failed = [o for o in load.outcomes if o.code]
        if role == "prefill":
            # nothing had reached those clients yet: retried on the other prefill worker
            assert not failed, [(o.request_id, o.details) for o in failed]
        else:  # only requests that were decoding there may fail, and with UNAVAILABLE
            assert all(o.code == "UNAVAILABLE" and victim in o.details for o in failed), failed
        assert sum(o.finish_reason == "length" for o in load.outcomes) >= 24 - 8

        # the dead worker left routing; new requests are served by the survivors
        deadline = time.monotonic() + 5
        while victim in _workers(cluster) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert victim not in _workers(cluster)
        after = Load(cluster.address, max_tokens=8).run(count=4, concurrency=4, prefix=f"after-{role}")
        assert all(o.finish_reason == "length" for o in after)

        # restarted under the same id, it rejoins by itself and takes work again
        cluster.start_worker(role, victim)
        cluster.wait_ready(timeout_s=120)
        assert _workers(cluster)[victim].state == "ready"
        rejoined = Load(cluster.address, max_tokens=8).run(count=16, concurrency=8, prefix=f"rejoined-{role}")
        assert all(o.finish_reason == "length" for o in rejoined), [(o.code, o.details) for o in rejoined]
        served_by = {o.prefill_worker if role == "prefill" else o.decode_worker for o in rejoined}
        assert victim in served_by
        assert_pools_whole(cluster, timeout_s=15)  # leases and quarantines gave back every block
    finally:
        cluster.stop()


def test_kill_9_of_the_gateway_then_workers_rejoin_a_new_one(tmp_path):
    cluster = start_cluster(tmp_path, worker_args=RECOVERY_ARGS)
    try:
        load = Load(cluster.address, max_tokens=200)
        running = load.start(count=4, concurrency=4, prefix="gateway-kill")
        for _ in range(4):
            assert load.first_tokens.acquire(timeout=60)
        cluster.kill("gateway")
        running.join(60)
        assert [o.code for o in load.outcomes] == ["UNAVAILABLE"] * 4
        cluster.start_gateway()  # same address: the workers find it and register again
        cluster.wait_ready(timeout_s=60)
        after = Load(cluster.address, max_tokens=8).run(count=4, concurrency=4, prefix="new-gateway")
        assert all(o.finish_reason == "length" for o in after), [(o.code, o.details) for o in after]
        # the old gateway's requests were aborted on the workers (stream gone) or their leases expired
        assert_pools_whole(cluster, timeout_s=15)
    finally:
        cluster.stop()
