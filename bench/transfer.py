"""KV transfer bandwidth between two processes, per transport, against an in-process memcpy.

A real decode worker process (its pool in /dev/shm) receives; this process plays the
prefill worker and moves ``--mib`` MiB of KV blocks into reserved blocks with each transport's
sender, through the same reserve → write path the prefill worker uses. Both pools hold the
dtype ``--dtype`` resolves to on this machine (the decode worker is started with it), as a
prefill worker's must to be paired with it.

    python bench/transfer.py [--mib 64] [--repeats 3] [--dtype auto] [--out bench/results/transfer-cpu.json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import best_of, device_name, emit, progress  # noqa: E402
from common.model.kv_cache import PagedKVCache  # noqa: E402
from common.kv_transfer.base import TransferTarget  # noqa: E402
from common.kv_transfer.select import make_sender  # noqa: E402
from common.engine.config import DTYPES, resolve_dtype  # noqa: E402
from common.model.config import load_model_config  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from common.rpc.server import channel  # noqa: E402
from pdserve.cluster import ClusterSpec, LocalCluster  # noqa: E402
from wire.v1 import worker_pb2, worker_pb2_grpc  # noqa: E402

TRANSPORTS = ("shm", "grpc", "nccl")
LEASE_BLOCKS = 256  # one reservation covers at most max_model_len tokens


def memcpy_gb_s(nbytes: int, repeats: int) -> float:
    src = torch.randn(nbytes // 4)
    dst = torch.empty_like(src)
    return nbytes / best_of(lambda: dst.copy_(src), repeats) / 1e9


async def move_once(sender, cache: PagedKVCache, stub, decode_id: str, address: str, total_blocks: int) -> float:  # type: ignore[no-untyped-def]
    """Reserves, writes and releases ``total_blocks`` blocks; returns the seconds spent writing."""
    seconds = 0.0
    for start in range(0, total_blocks, LEASE_BLOCKS):
        n = min(LEASE_BLOCKS, total_blocks - start)
        rid = f"bench-{time.monotonic_ns()}"
        lease = await stub.Reserve(worker_pb2.ReserveRequest(request_id=rid, prompt_tokens=n * 16 - 1,
                                                             max_tokens=1, stream_id="bench"))
        target = TransferTarget(decode_id, address, rid, lease.lease_id, list(lease.block_ids[:n]),
                                time.monotonic() + 30)
        stats = await sender.send(cache, list(range(start, start + n)), target, stub)
        seconds += stats.seconds
        await stub.Release(worker_pb2.ReleaseRequest(request_id=rid, lease_id=lease.lease_id))
    return seconds


async def measure(cluster: LocalCluster, mib: int, repeats: int, dtype: torch.dtype) -> dict[str, dict[str, float]]:
    decode = next(w for w in cluster.info().workers if w.role == "decode")
    model = load_model_config(ensure_model("tiny"))
    block_bytes = PagedKVCache.bytes_per_block(model, 16, dtype)
    total_blocks = (mib << 20) // block_bytes
    cache = PagedKVCache(model, total_blocks, 16, dtype, torch.device("cpu"))
    cache.data.normal_()
    stub = worker_pb2_grpc.DecodeWorkerStub(channel(decode.address))
    stream = stub.Stream(worker_pb2.StreamRequest(stream_id="bench"))
    await stream.read()  # handshake: reservations name this stream
    results = {}
    for name in TRANSPORTS:
        sender = make_sender(name, "bench-prefill")
        await move_once(sender, cache, stub, decode.worker_id, decode.address, LEASE_BLOCKS)  # set-up, warm-up
        best = min([await move_once(sender, cache, stub, decode.worker_id, decode.address, total_blocks)
                    for _ in range(repeats)])
        results[name] = {"gb_s": total_blocks * block_bytes / best / 1e9, "seconds": best}
        progress(f"[{name}] {results[name]['gb_s']:.2f} GB/s for {mib} MiB")
    stream.cancel()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="auto", choices=DTYPES, help="both pools' (auto: the engine's default here)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    dtype_name = resolve_dtype(args.dtype, "cpu")
    dtype = getattr(torch, dtype_name)
    ensure_model("tiny")
    block_bytes = PagedKVCache.bytes_per_block(load_model_config(ensure_model("tiny")), 16, dtype)
    blocks = (args.mib << 20) // block_bytes + 2 * LEASE_BLOCKS
    spec = ClusterSpec(port=0, preset="tiny", prefill=0, decode=1,
                       worker_args=("--num-kv-blocks", str(blocks), "--dtype", dtype_name))
    progress(f"starting a decode worker with {blocks} KV blocks ...")
    with LocalCluster(spec, Path(tempfile.mkdtemp(prefix="pdserve-bench-"))) as cluster:
        memcpy = memcpy_gb_s(args.mib << 20, args.repeats * 3)
        progress(f"[memcpy] {memcpy:.2f} GB/s in one process")
        transports = asyncio.run(measure(cluster, args.mib, args.repeats, dtype))
    emit({"device": device_name(), "mib": args.mib, "dtype": dtype_name, "memcpy_gb_s": memcpy, "transports": transports,
          "shm_vs_memcpy": transports["shm"]["gb_s"] / memcpy}, args.out)


if __name__ == "__main__":
    main()
