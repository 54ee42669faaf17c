"""Several gateways over one worker pool, on real processes: every worker registers with each,
load goes through both, and a gateway killed with SIGKILL takes nothing from the other: the
requests running there finish, and a client given both addresses fails over for new ones."""

from __future__ import annotations

import signal
import threading

import grpc

from client import Client, SamplingOptions
from tests.integration.conftest import assert_pools_whole, start_cluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc


def _prompt(i: int) -> list[int]:
    return [(11 * k + 5 * i) % 250 + 1 for k in range(48)]


def _generate(address: str, i: int, max_tokens: int, outcomes: list[str]) -> None:
    request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=_prompt(i)),
                                          sampling=gateway_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    with grpc.insecure_channel(address) as channel:
        try:
            tokens, reason = 0, ""
            for message in gateway_pb2_grpc.GatewayStub(channel).Generate(request, timeout=120):
                tokens += len(message.token_ids)
                reason = message.finish_reason or reason
            outcomes.append(f"{reason} {tokens}")
        except grpc.RpcError as exc:
            outcomes.append(f"{exc.code().name}: {exc.details()}")


def test_two_gateways_share_the_pool_and_one_killed_takes_nothing_from_the_other(tmp_path):
    cluster = start_cluster(tmp_path, prefill=1, decode=2, gateways=2)
    try:
        first, second = cluster.addresses
        for address in (first, second):  # each keeps the whole registry
            info = cluster.info(address=address)
            assert info is not None and sorted(w.role for w in info.workers) == ["decode", "decode", "prefill"]

        # load through both at once: every request finishes whole
        outcomes: list[str] = []
        threads = [threading.Thread(target=_generate, args=(address, i, 12, outcomes))
                   for i, address in enumerate([first, second] * 6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert outcomes == ["length 12"] * 12, outcomes

        # requests running on the second while the first is killed: untouched
        running: list[str] = []
        threads = [threading.Thread(target=_generate, args=(second, 100 + i, 64, running)) for i in range(6)]
        for t in threads:
            t.start()
        cluster.kill("gateway", signal.SIGKILL)
        for t in threads:
            t.join(120)
        assert running == ["length 64"] * 6, running

        # a client given both addresses, the dead one first, is served by the live one
        with Client([first, second], timeout_s=60) as client:
            done = [client.complete(_prompt(200 + i), SamplingOptions(max_tokens=8, ignore_eos=True)) for i in range(4)]
            assert [d.finish_reason for d in done] == ["length"] * 4
            assert client.address == second
        cluster.addresses, cluster.address = [second], second  # the pools as the live gateway sees them
        assert_pools_whole(cluster)
    finally:
        cluster.stop()
