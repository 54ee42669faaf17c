"""A worker's registrations with several gateways: the ``--gateway`` list, and a name that
resolves to several addresses (a headless Service) followed as it changes."""

from __future__ import annotations

import asyncio

import pytest

from common.worker.gateways import GatewayRegistrations, gateway_entries, resolve
from common.worker.prefix_digest import DigestPublisher
from wire.v1 import worker_pb2


def test_the_gateway_list_is_host_port_entries_separated_by_commas():
    assert gateway_entries("a:50051, b:50052,") == ["a:50051", "b:50052"]
    for bad in ("a", "a:", ":50051", "a:x"):
        with pytest.raises(ValueError, match="host:port"):
            gateway_entries(bad)


def test_a_name_of_one_address_is_dialled_by_name_and_an_unknown_one_is_kept_to_retry():
    assert resolve("localhost:50051") in (["localhost:50051"], ["127.0.0.1:50051", "[::1]:50051"])
    assert resolve("127.0.0.1:7") == ["127.0.0.1:7"]
    assert resolve("no-such-host.invalid:50051") == ["no-such-host.invalid:50051"]


async def test_a_gateway_that_joins_the_name_is_registered_with_and_one_that_leaves_is_dropped():
    addresses = {"svc:50051": ["10.0.0.1:50051"]}
    registrations = GatewayRegistrations("svc:50051", worker_pb2.WorkerDescriptor(worker_id="w"),
                                         lambda digest: worker_pb2.WorkerLoad(), DigestPublisher(None),
                                         period_s=60.0, resolve_s=0.01, resolver=lambda entry: list(addresses[entry]))
    registrations.start()
    try:
        await asyncio.sleep(0.05)
        assert sorted(registrations.registrars) == ["10.0.0.1:50051"]
        addresses["svc:50051"] = ["10.0.0.1:50051", "10.0.0.2:50051"]  # a second gateway replica
        await asyncio.sleep(0.05)
        assert sorted(registrations.registrars) == ["10.0.0.1:50051", "10.0.0.2:50051"]
        addresses["svc:50051"] = ["10.0.0.2:50051"]  # the first one went away
        await asyncio.sleep(0.05)
        assert sorted(registrations.registrars) == ["10.0.0.2:50051"]
        assert len(registrations.digests._subscriptions) == 1  # its digests went with it
    finally:
        await registrations.stop()
    assert registrations.registrars == {}
