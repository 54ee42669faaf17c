"""API keys, tenant quotas, TLS on the public port and mutual TLS inside the cluster, against
real clusters with certificates made by the test."""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest

from client import Client, SamplingOptions
from pdserve.cluster import LocalCluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc, worker_pb2, worker_pb2_grpc
from tests.integration.conftest import start_cluster
from tests.integration.load import Load
from tests.tls_certs import make_pki

TENANTS = {"tenants": {
    "capped": {"api_keys": ["pk-capped"], "max_concurrency": 2},
    "slow": {"api_keys": ["pk-slow"], "requests_per_s": 0.2, "burst": 1},
    "free": {"api_keys": ["pk-free-1", "pk-free-2"]},
}}


def _generate(stub: gateway_pb2_grpc.GatewayStub, key: str | None, max_tokens: int = 4,
              request_id: str = "") -> list[gateway_pb2.GenerateResponse]:
    metadata = (("authorization", f"Bearer {key}"),) if key else None
    request = gateway_pb2.GenerateRequest(request_id=request_id, text="hi",
                                          sampling=gateway_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    return list(stub.Generate(request, timeout=60, metadata=metadata))


@pytest.fixture(scope="module")
def keyed_cluster(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("keyed")
    keys = tmp / "api-keys.json"
    keys.write_text(json.dumps(TENANTS))
    cluster = start_cluster(tmp, gateway_args=("--api-keys", str(keys)), api_key="pk-free-1")
    yield cluster
    cluster.stop()


@pytest.mark.parametrize("metadata", [None, (("authorization", "Bearer pk-wrong-secret"),),
                                      (("authorization", "Basic pk-free-1"),)], ids=["missing", "wrong", "scheme"])
def test_missing_or_wrong_key_is_unauthenticated(keyed_cluster, metadata):
    with grpc.insecure_channel(keyed_cluster.address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        for call in (lambda: list(stub.Generate(gateway_pb2.GenerateRequest(text="hi"), timeout=30, metadata=metadata)),
                     lambda: stub.Info(gateway_pb2.InfoRequest(), timeout=30, metadata=metadata)):
            with pytest.raises(grpc.RpcError) as err:
                call()
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "pk-wrong-secret" not in (err.value.details() or "")
        assert _generate(stub, "pk-free-2")[-1].finish_reason == "length"


def test_an_over_quota_tenant_is_refused_while_others_are_served(keyed_cluster):
    capped = Load(keyed_cluster.address, max_tokens=60, metadata=(("authorization", "Bearer pk-capped"),))
    free = Load(keyed_cluster.address, max_tokens=60, metadata=(("authorization", "Bearer pk-free-1"),))
    threads = [capped.start(count=6, concurrency=6, prefix="capped"), free.start(count=6, concurrency=6, prefix="free")]
    for t in threads:
        t.join(120)
    refused = [o for o in capped.outcomes if o.code]
    assert refused and all(o.code == "RESOURCE_EXHAUSTED" and "capped" in o.details and "in flight" in o.details
                           for o in refused)
    assert 2 <= sum(o.finish_reason == "length" for o in capped.outcomes) <= 6 - len(refused)
    assert [o.finish_reason for o in free.outcomes] == ["length"] * 6  # unaffected

    with grpc.insecure_channel(keyed_cluster.address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        assert _generate(stub, "pk-slow")[-1].finish_reason == "length"
        with pytest.raises(grpc.RpcError) as err:  # burst 1, 0.2 requests/s
            _generate(stub, "pk-slow")
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "rate limit" in err.value.details()
        assert _generate(stub, "pk-free-2")[-1].finish_reason == "length"


def test_a_tenant_cannot_abort_another_tenants_request(keyed_cluster):
    with grpc.insecure_channel(keyed_cluster.address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        done: list[str] = []
        runner = threading.Thread(target=lambda: done.append(
            _generate(stub, "pk-capped", max_tokens=150, request_id="victim")[-1].finish_reason))
        runner.start()
        time.sleep(0.5)
        with pytest.raises(grpc.RpcError) as err:
            stub.Abort(gateway_pb2.AbortRequest(request_id="victim"), timeout=10,
                       metadata=(("authorization", "Bearer pk-free-1"),))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        runner.join(60)
        assert done == ["length"]


def test_the_client_library_sends_its_api_key(keyed_cluster):
    with Client(keyed_cluster.address, api_key="pk-free-2") as client:
        assert client.complete("hello", SamplingOptions(max_tokens=3, ignore_eos=True)).usage.completion_tokens == 3


def test_tls_on_the_public_port(tmp_path):
    pki = make_pki(tmp_path / "pki")
    cluster = start_cluster(tmp_path, gateway_args=("--tls-cert", str(pki["gateway.crt"]),
                                                    "--tls-key", str(pki["gateway.key"])),
                            worker_args=(*_default_worker_args(), "--tls-ca", str(pki["ca.crt"])),
                            tls_ca=str(pki["ca.crt"]))
    try:
        credentials = grpc.ssl_channel_credentials(pki["ca.crt"].read_bytes())
        with grpc.secure_channel(cluster.address, credentials) as channel:
            assert _generate(gateway_pb2_grpc.GatewayStub(channel), None)[-1].finish_reason == "length"
        with grpc.insecure_channel(cluster.address) as channel:  # plaintext to a TLS port
            with pytest.raises(grpc.RpcError) as err:
                _generate(gateway_pb2_grpc.GatewayStub(channel), None)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        cluster.stop()


def _default_worker_args() -> tuple[str, ...]:
    from tests.integration.conftest import WORKER_ARGS

    return WORKER_ARGS


def _identity(pki: dict, name: str) -> tuple[str, ...]:
    return ("--tls-cert", str(pki[f"{name}.crt"]), "--tls-key", str(pki[f"{name}.key"]), "--tls-ca", str(pki["ca.crt"]))


@pytest.mark.parametrize("kv_transport", ["grpc"])  # the KV bytes cross a TLS channel too (shm's do not)
def test_mutual_tls_inside_the_cluster(tmp_path, kv_transport):
    pki = make_pki(tmp_path / "pki")
    cluster = start_cluster(tmp_path, kv_transport=kv_transport, gateway_args=_identity(pki, "gateway"),
                            prefill_args=_identity(pki, "prefill"), decode_args=_identity(pki, "decode"),
                            tls_ca=str(pki["ca.crt"]), registry_port=True)
    try:
        public = grpc.ssl_channel_credentials(pki["ca.crt"].read_bytes())
        with grpc.secure_channel(cluster.address, public) as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            final = _generate(stub, None, max_tokens=6)[-1]
            assert final.finish_reason == "length" and final.timings.kv_transport == kv_transport
            decode = next(w for w in stub.Info(gateway_pb2.InfoRequest(), timeout=10).workers if w.role == "decode")
        _assert_worker_refuses_strangers(decode.address, pki)
        _assert_impostors_cannot_register(cluster, pki)
    finally:
        cluster.stop()


def _assert_worker_refuses_strangers(address: str, pki: dict) -> None:
    ca = pki["ca.crt"].read_bytes()
    release = worker_pb2.ReleaseRequest(request_id="x", lease_id="y")

    def call(credentials: grpc.ChannelCredentials) -> grpc.RpcError:
        with grpc.secure_channel(address, credentials) as channel:
            with pytest.raises(grpc.RpcError) as err:
                worker_pb2_grpc.DecodeWorkerStub(channel).Release(release, timeout=10)
            return err.value

    # right CA, but not the gateway: refused by role
    wrong_role = call(grpc.ssl_channel_credentials(ca, pki["client.key"].read_bytes(), pki["client.crt"].read_bytes()))
    assert wrong_role.code() == grpc.StatusCode.PERMISSION_DENIED and "client" in wrong_role.details()
    # a prefill worker's certificate may move KV but not drive requests
    prefill = call(grpc.ssl_channel_credentials(ca, pki["prefill.key"].read_bytes(), pki["prefill.crt"].read_bytes()))
    assert prefill.code() == grpc.StatusCode.PERMISSION_DENIED
    # no certificate, or one from another CA: the handshake itself fails
    assert call(grpc.ssl_channel_credentials(ca)).code() == grpc.StatusCode.UNAVAILABLE
    intruder = grpc.ssl_channel_credentials(ca, pki["intruder.key"].read_bytes(), pki["intruder.crt"].read_bytes())
    assert call(intruder).code() == grpc.StatusCode.UNAVAILABLE


def _assert_impostors_cannot_register(cluster: LocalCluster, pki: dict) -> None:
    for name in ("client", "intruder"):
        cluster.spec  # the impostor uses the cluster's flags but its own certificate
        cluster._spawn(f"decode-impostor-{name}", [
            "decode_worker", "--gateway", cluster.registry_address, "--host", "127.0.0.1", "--worker-id", f"impostor-{name}",
            "--preset", "tiny", "--policy", "fcfs", *_default_worker_args(), *_identity(pki, name)])  # fcfs: no profiling
    time.sleep(8)  # warm-up plus several registration attempts
    info = cluster.info()
    assert info is not None and not [w.worker_id for w in info.workers if w.worker_id.startswith("impostor")]
    logs = (cluster.log_dir / "decode-impostor-client.log").read_text()
    assert "PERMISSION_DENIED" in logs or "may not call" in logs
