"""A stream survives a lost decode worker: with 40 streams running (greedy, and every third one
sampled with a seed), one of the two decode workers is killed (SIGKILL); every request resumes on
the other (its prompt and the tokens sent prefilled again, a seeded one's sampling carried on) and
ends OK with exactly the tokens an undisturbed run gives; every pool left is whole. With
``--migration-limit 0`` the same loss ends its streams UNAVAILABLE, as before."""

from __future__ import annotations

import signal
import threading
import time

import grpc

from tests.integration.conftest import assert_pools_whole, start_cluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc

STREAMS, MAX_TOKENS = 40, 160


def _prompt(i: int) -> list[int]:
    return [(13 * k + 7 * i) % 250 + 1 for k in range(24 + i % 9)]


def _run(address: str, seen: dict[int, list[int]], ends: dict[int, str], started: threading.Event | None = None) -> None:
    """The requests at once, each on its own thread: the token ids each received, how each ended."""
    def one(i: int) -> None:
        sampling = gateway_pb2.SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.0)
        if i % 3 == 2:  # sampled, seeded: the same tokens every run
            sampling.temperature, sampling.seed = 0.9, 1000 + i
        request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=_prompt(i)), sampling=sampling)
        seen[i] = []
        with grpc.insecure_channel(address) as channel:
            try:
                for message in gateway_pb2_grpc.GatewayStub(channel).Generate(request, timeout=180):
                    seen[i] += message.token_ids
                    if started is not None and len(seen[i]) >= 8:
                        started.set()
                    if message.finish_reason:
                        ends[i] = message.finish_reason
            except grpc.RpcError as exc:
                ends[i] = exc.code().name

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(STREAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)


def _decode_names(cluster) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(name for name in cluster.processes if name.startswith("decode"))


def _kill_a_decode_worker_mid_stream(cluster, migration_limit: int) -> tuple[dict[int, list[int]], dict[int, str]]:  # type: ignore[no-untyped-def]
    seen: dict[int, list[int]] = {}
    ends: dict[int, str] = {}
    started = threading.Event()
    runner = threading.Thread(target=_run, args=(cluster.address, seen, ends, started))
    runner.start()
    assert started.wait(120), "no stream began"
    time.sleep(0.2)
    cluster.kill(_decode_names(cluster)[0], signal.SIGKILL)
    runner.join(300)
    return seen, ends


def test_forty_streams_survive_a_decode_worker_killed_under_them_with_the_same_tokens(tmp_path):
    cluster = start_cluster(tmp_path, prefill=1, decode=2, worker_args=("--num-kv-blocks", "1024",
                                                                        "--max-num-tokens", "2048"))
    try:
        undisturbed: dict[int, list[int]] = {}
        ends: dict[int, str] = {}
        _run(cluster.address, undisturbed, ends)
        assert set(ends.values()) == {"length"} and all(len(t) == MAX_TOKENS for t in undisturbed.values())

        seen, ends = _kill_a_decode_worker_mid_stream(cluster, 1)
        assert ends == {i: "length" for i in range(STREAMS)}, ends
        for i in range(STREAMS):
            assert seen[i] == undisturbed[i], f"request {i}: its text differs from an undisturbed run"
        migrated = (cluster.log_dir / "gateway.log").read_text().count("resuming request")
        assert migrated >= 1, "no stream was on the killed worker"
        assert_pools_whole(cluster)
    finally:
        cluster.stop()


def test_without_migration_a_lost_decode_worker_ends_its_streams_unavailable(tmp_path):
    cluster = start_cluster(tmp_path, prefill=1, decode=2, gateway_args=("--migration-limit", "0"),
                            worker_args=("--num-kv-blocks", "1024", "--max-num-tokens", "2048"))
    try:
        _, ends = _kill_a_decode_worker_mid_stream(cluster, 0)
        assert "UNAVAILABLE" in ends.values() and set(ends.values()) <= {"UNAVAILABLE", "length"}, ends
        assert_pools_whole(cluster)
    finally:
        cluster.stop()
