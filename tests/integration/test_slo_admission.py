"""TPOT guard across real processes: a request no decode worker admits waits at the gateway,
is served when capacity frees, and is refused only when its TTFT deadline makes waiting useless.

The decode worker loads a cost model that makes each running request cost 100 ms of step
time, so with a TPOT SLO of 150 ms it admits one request at a time (1 × 100 ms × 1.3 fits,
2 × 100 ms × 1.3 does not) whatever this machine's real speed: the file turns calibration off,
so the steps really run do not correct the model.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from common.model.location import ensure_model
from pdserve.cluster import LocalCluster
from wire.request_start import HEADER
from wire.v1 import gateway_pb2, gateway_pb2_grpc
from tests.checkpoints import random_prompts, reference_greedy
from tests.integration.conftest import WORKER_ARGS, assert_pools_whole, start_cluster

TPOT_MS = 150
COST_MODEL = {"prefill": {"threshold": 0.0, "base_s": 0.001, "per_token_s": 0.0, "r2": 1.0},
              "decode": {"alpha": 0.0, "beta": 0.100, "gamma": 0.0, "delta": 0.0, "r2": 1.0}, "calibrate": False}


@pytest.fixture(scope="module")
def scorpio_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    work = tmp_path_factory.mktemp("scorpio")
    cost_model = work / "cost_model.json"
    cost_model.write_text(json.dumps(COST_MODEL))
    cluster = start_cluster(work, policy="scorpio", worker_args=(*WORKER_ARGS, "--cost-model", str(cost_model)))
    yield cluster
    cluster.stop()


class Stream:
    """One Generate call on its own thread, with the client-side time of every message."""

    def __init__(self, address: str, prompt: list[int], max_tokens: int, ttft_ms: int) -> None:
        self.channel = grpc.insecure_channel(address)
        request = gateway_pb2.GenerateRequest(
            token_ids=gateway_pb2.TokenIds(ids=prompt), slo=gateway_pb2.SLO(ttft_ms=ttft_ms, tpot_ms=TPOT_MS),
            sampling=gateway_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        self.call = gateway_pb2_grpc.GatewayStub(self.channel).Generate(request, timeout=120)
        self.tokens: list[int] = []
        self.times: list[float] = []
        self.reason = ""
        self.error: grpc.RpcError | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for message in self.call:
                self.tokens += message.token_ids
                self.times.append(time.monotonic())
                self.reason = message.finish_reason or self.reason
        except grpc.RpcError as exc:
            self.error = exc

    def join(self) -> Stream:
        self.thread.join(120)
        self.channel.close()
        return self


def _wait_for_first_token(stream: Stream, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not stream.times and time.monotonic() < deadline and stream.error is None:
        time.sleep(0.005)
    assert stream.times, f"no first token: {stream.error}"


def test_a_request_the_decode_worker_cannot_admit_waits_and_is_served_when_capacity_frees(scorpio_cluster):
    prompts = random_prompts([20, 35], seed=21)
    expected = reference_greedy(ensure_model("tiny"), prompts, [40, 40])
    first = Stream(scorpio_cluster.address, prompts[0], 40, ttft_ms=20_000)
    _wait_for_first_token(first)
    second = Stream(scorpio_cluster.address, prompts[1], 40, ttft_ms=20_000)
    first.join(), second.join()
    assert first.error is None and second.error is None, (first.error, second.error)
    assert [first.tokens, second.tokens] == expected
    assert first.reason == second.reason == "length"
    # admitted only after the first one finished: never two requests decoding at once
    assert second.times[0] >= first.times[-1]
    assert_pools_whole(scorpio_cluster)


def test_a_waiting_request_is_refused_when_its_ttft_deadline_leaves_no_time_to_prefill(scorpio_cluster):
    long_one = Stream(scorpio_cluster.address, random_prompts([10], seed=22)[0], 2000, ttft_ms=20_000)
    _wait_for_first_token(long_one)
    started = time.monotonic()
    refused = Stream(scorpio_cluster.address, random_prompts([10], seed=23)[0], 10, ttft_ms=300).join()
    waited_s = time.monotonic() - started
    assert refused.error is not None and refused.error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "no decode worker admits the request" in refused.error.details()
    assert long_one.reason == "" and long_one.error is None  # still decoding when the refusal came
    assert waited_s >= 0.1  # it waited for capacity instead of being turned away at once
    long_one.call.cancel()
    long_one.join()
    assert_pools_whole(scorpio_cluster)



def _stamped_call(address: str, prompt: list[int], ttft_ms: int, sent_ago_s: float) -> tuple[list[int], grpc.RpcError | None]:
    request = gateway_pb2.GenerateRequest(
        token_ids=gateway_pb2.TokenIds(ids=prompt), slo=gateway_pb2.SLO(ttft_ms=ttft_ms, tpot_ms=TPOT_MS),
        sampling=gateway_pb2.SamplingParams(max_tokens=4, ignore_eos=True))
    with grpc.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        tokens: list[int] = []
        try:
            for message in stub.Generate(request, timeout=60,
                                         metadata=((HEADER, f"t={time.time() - sent_ago_s:.6f}"),)):
                tokens += message.token_ids
        except grpc.RpcError as exc:
            return tokens, exc
    return tokens, None


def test_a_request_stamped_by_its_client_is_planned_from_its_stamp(scorpio_cluster):
    prompt = random_prompts([12], seed=24)[0]
    # sent 50 ms before it reached the gateway: 250 ms of its 300 are left, a 1 ms prefill fits
    tokens, error = _stamped_call(scorpio_cluster.address, prompt, 300, sent_ago_s=0.05)
    assert error is None and len(tokens) == 4, error
    # sent 400 ms ago: its 300 ms TTFT is already gone, whatever the gateway could do now
    tokens, error = _stamped_call(scorpio_cluster.address, prompt, 300, sent_ago_s=0.4)
    assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and not tokens
    assert "TTFT" in error.details(), error.details()
    assert_pools_whole(scorpio_cluster)
