"""TLS flags and the caller-role rules, without servers (the integration tests run real ones)."""

from __future__ import annotations

import pytest

from common.process.options import ProcessOptions
from common.rpc.tls import PeerRoleInterceptor, TlsConfig
from common.worker.process import WORKER_CALLERS


def test_tls_flags_are_checked_together_and_must_exist(tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("y")
    with pytest.raises(ValueError, match="--tls-key is required"):
        TlsConfig(cert=str(cert))
    with pytest.raises(ValueError, match="--tls-ca: no such file"):
        TlsConfig(str(cert), str(key), str(tmp_path / "missing.pem"))
    with pytest.raises(ValueError, match="--tls-cert is required"):
        ProcessOptions(tls_key=str(key))
    assert TlsConfig(str(cert), str(key)).enabled and not TlsConfig(str(cert), str(key)).mutual
    assert TlsConfig(str(cert), str(key), str(cert)).mutual


def test_the_longest_prefix_decides_who_may_call_a_worker_method():
    rules = PeerRoleInterceptor(WORKER_CALLERS)
    assert rules.roles_for("/pdserve.v1.DecodeWorker/Reserve") == {"gateway"}
    assert rules.roles_for("/pdserve.v1.DecodeWorker/WriteBlocks") == {"prefill"}
    assert rules.roles_for("/pdserve.v1.DecodeWorker/TransportInfo") == {"gateway", "prefill"}
    assert rules.roles_for("/pdserve.v1.PrefillWorker/Prefill") == {"gateway"}
    assert rules.roles_for("/grpc.health.v1.Health/Check") is None  # probes need no role
