"""Which KV transport a worker pair uses, decided from where each pool lives."""

from __future__ import annotations

import pytest

from common.kv_transfer.pairing import PoolLocation, TransportMismatch, decode_receives, pair_transport

CPU_A = PoolLocation("prefill-0", "host-a", "cpu")
CPU_A_DECODE = PoolLocation("decode-0", "host-a", "cpu")
CPU_B_DECODE = PoolLocation("decode-1", "host-b", "cpu")
GPU0_PREFILL = PoolLocation("prefill-0", "host-a", "cuda", "GPU-0")
GPU0_DECODE = PoolLocation("decode-0", "host-a", "cuda", "GPU-0")
GPU1_DECODE = PoolLocation("decode-1", "host-a", "cuda", "GPU-1")
GPU_REMOTE_DECODE = PoolLocation("decode-2", "host-b", "cuda", "GPU-9")


@pytest.mark.parametrize("prefill, decode, receives, expected", [
    (CPU_A, CPU_A_DECODE, decode_receives("cpu", True), "shm"),
    (CPU_A, CPU_A_DECODE, decode_receives("cpu", False), "nccl"),  # no /dev/shm pool: gloo on one host
    (CPU_A, CPU_B_DECODE, decode_receives("cpu", True), "nccl"),
    (GPU0_PREFILL, GPU0_DECODE, decode_receives("cuda", False), "cuda_ipc"),
    (GPU0_PREFILL, GPU1_DECODE, decode_receives("cuda", False), "cuda_ipc"),
    (GPU0_PREFILL, GPU_REMOTE_DECODE, decode_receives("cuda", False), "nccl"),
    (CPU_A, GPU_REMOTE_DECODE, decode_receives("cuda", False), "grpc"),  # mixed devices across hosts
], ids=["cpu-one-host", "cpu-no-shm", "cpu-two-hosts", "one-gpu", "two-gpus-one-host", "two-hosts", "mixed"])
def test_auto_picks_the_best_transport_that_works(prefill, decode, receives, expected):
    assert pair_transport("auto", prefill, decode, receives) == expected


def test_nccl_is_never_tried_between_two_workers_on_one_gpu():
    receives = decode_receives("cuda", False)
    assert pair_transport("auto", GPU0_PREFILL, GPU0_DECODE, receives) != "nccl"
    with pytest.raises(TransportMismatch, match="same GPU") as err:
        pair_transport("nccl", GPU0_PREFILL, GPU0_DECODE, receives)
    assert "--kv-transport nccl" in str(err.value) and "--kv-transport auto (here: cuda_ipc)" in str(err.value)


@pytest.mark.parametrize("requested, prefill, decode, receives, words", [
    ("shm", GPU0_PREFILL, GPU0_DECODE, decode_receives("cuda", False), "cannot receive by shm"),
    ("shm", CPU_A, CPU_B_DECODE, decode_receives("cpu", True), "different hosts"),
    ("cuda_ipc", CPU_A, CPU_A_DECODE, decode_receives("cpu", True), "cannot receive by cuda_ipc"),
    ("cuda_ipc", GPU0_PREFILL, GPU_REMOTE_DECODE, decode_receives("cuda", False), "different hosts"),
    ("nccl", CPU_A, GPU_REMOTE_DECODE, decode_receives("cuda", False), "one kind of device"),
])
def test_an_explicit_transport_that_cannot_work_is_refused_with_the_flag_and_the_alternative(
        requested, prefill, decode, receives, words):
    with pytest.raises(TransportMismatch) as err:
        pair_transport(requested, prefill, decode, receives)
    message = str(err.value)
    assert words in message and f"--kv-transport {requested}" in message
    assert f"(here: {pair_transport('auto', prefill, decode, receives)})" in message


def test_grpc_works_between_any_pair():
    for decode in (CPU_A_DECODE, CPU_B_DECODE, GPU0_DECODE, GPU_REMOTE_DECODE):
        assert pair_transport("grpc", CPU_A, decode, ("grpc",)) == "grpc"
