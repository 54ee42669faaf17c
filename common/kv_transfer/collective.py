"""Collective transport: point-to-point send/recv in a torch.distributed group per worker pair.

NCCL on GPUs (across hosts, or where CUDA IPC is impossible), gloo on CPUs (how the tests
run it). Set up lazily: the prefill worker asks the decode worker for a rendezvous
(``TransportInfo``), the decode worker serves a TCP store, and both join a two-rank group
(prefill rank 0, decode rank 1). Each transfer then runs ``ReceiveBlocks`` on the decode
worker (which posts one recv per destination run, straight into its pool) while the
prefill worker posts the matching sends; a per-transfer tag keeps concurrent transfers apart.

Trusted networks only: the TCP store and the group's own sockets carry no TLS and no
authentication (the gRPC calls around them do, under mutual TLS). See deploy/README.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import itertools
import threading
import time

import torch
import torch.distributed as dist

from common.model.kv_cache import PagedKVCache
from common.kv_transfer.base import NoLiveLease, ReservedBlocks, TransferStats, TransferTarget
from common.kv_transfer.runs import block_runs
from wire.v1 import worker_pb2, worker_pb2_grpc

PREFILL_RANK, DECODE_RANK = 0, 1
TIMEOUT = datetime.timedelta(seconds=60)
# Each in-flight transfer blocks one thread per side until its peer posts the matching op.
# A small shared pool (asyncio's default) can fill with sends on one side and receives on
# the other and deadlock across processes, so waits get a pool of their own, sized for the
# transfers that can be in flight at once.
WAITERS = concurrent.futures.ThreadPoolExecutor(max_workers=128, thread_name_prefix="kv-collective")


async def in_waiter_thread(fn, *args):  # type: ignore[no-untyped-def]
    return await asyncio.get_running_loop().run_in_executor(WAITERS, fn, *args)


def make_group(store: dist.Store, rank: int, device: torch.device) -> dist.ProcessGroup:
    if device.type == "cuda":
        options = dist.ProcessGroupNCCL.Options()
        return dist.ProcessGroupNCCL(store, rank, 2, options)
    return dist.ProcessGroupGloo(store, rank, 2, TIMEOUT)


class CollectiveReceiver:
    """Decode side: one TCP store for all peers, one group per prefill worker."""

    name = "nccl"
    not_offered = ""  # every pool can join a group (whether the pair can is for pairing.why_not)

    def __init__(self, host: str, device: torch.device) -> None:
        self.host = host
        self.device = device
        self._store: dist.TCPStore | None = None
        self._groups: dict[str, dist.ProcessGroup] = {}
        self._ready: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    async def describe(self, cache: PagedKVCache, request: worker_pb2.TransportInfoRequest,
                       reply: worker_pb2.TransportInfoResponse) -> None:
        reply.rendezvous = await in_waiter_thread(self.open, request.peer_id)

    async def accept(self, cache: PagedKVCache, request: worker_pb2.ReceiveBlocksRequest,
                     reserved: ReservedBlocks) -> int:
        """Receives the request's runs into the pool; returns the bytes received. Raises
        ``NoLiveLease`` (before posting any receive) unless every block is in its live lease."""
        allowed = reserved(request.request_id, request.lease_id)
        wanted = {s + i for s, n in zip(request.run_starts, request.run_lengths) for i in range(n)}
        if allowed is None or not wanted <= allowed:
            raise NoLiveLease(f"no live lease for {request.request_id}")
        return await in_waiter_thread(self.receive, cache.data, request.peer_id, list(request.run_starts),
                                      list(request.run_lengths), request.tag)

    def open(self, peer_id: str) -> str:
        """Starts joining the pair's group in the background; returns the rendezvous address."""
        with self._lock:
            if self._store is None:
                self._store = dist.TCPStore(self.host, 0, 2, True, TIMEOUT, wait_for_workers=False)
            if peer_id not in self._ready:
                ready = self._ready[peer_id] = threading.Event()
                threading.Thread(target=self._join, args=(peer_id, ready), daemon=True).start()
            return f"{self.host}:{self._store.port}"

    def _join(self, peer_id: str, ready: threading.Event) -> None:
        # ``ready`` is passed in rather than looked up: the peer may be forgotten meanwhile
        assert self._store is not None
        store = dist.PrefixStore(f"pair/{peer_id}", self._store)
        self._groups[peer_id] = make_group(store, DECODE_RANK, self.device)
        ready.set()

    def receive(self, pool: torch.Tensor, peer_id: str, starts: list[int], lengths: list[int], tag: int) -> int:
        """Blocking: receives each run straight into ``pool[start:start+length]``."""
        ready = self._ready.get(peer_id)
        if ready is None or not ready.wait(TIMEOUT.total_seconds()):
            raise RuntimeError(f"no channel with {peer_id}")
        group = self._groups[peer_id]
        works = [group.recv([pool[s:s + n]], PREFILL_RANK, tag) for s, n in zip(starts, lengths)]
        for work in works:
            work.wait()
        return sum(pool[s:s + n].numel() * pool.element_size() for s, n in zip(starts, lengths))

    def forget(self, peer_id: str) -> None:
        self._groups.pop(peer_id, None)
        self._ready.pop(peer_id, None)

    def close(self) -> None:
        """Drops every pair's group. A receive still waiting holds its own reference to its
        group, so it ends as it would have; the store stays up for it (it goes with the process)."""
        with self._lock:
            for peer_id in list(self._ready):
                self.forget(peer_id)


class CollectiveSender:
    """Prefill side."""

    def __init__(self, worker_id: str) -> None:
        self.name = "nccl"
        self.worker_id = worker_id
        # One joining task per decode worker: concurrent first sends must share it, since two
        # groups under one rendezvous prefix would pair up with only one on the decode side.
        self._groups: dict[str, asyncio.Task[dist.ProcessGroup]] = {}
        self._tags = itertools.count(1)

    async def send(self, cache: PagedKVCache, src_blocks: list[int], target: TransferTarget,
                   decode: worker_pb2_grpc.DecodeWorkerStub) -> TransferStats:
        group = await self._group(target.decode_worker_id, decode, cache.data.device)
        target.check_may_start()
        runs = block_runs(src_blocks, target.block_ids)
        tag = next(self._tags)
        started = time.perf_counter()
        receiving = decode.ReceiveBlocks(worker_pb2.ReceiveBlocksRequest(
            request_id=target.request_id, lease_id=target.lease_id, peer_id=self.worker_id,
            run_starts=[r.dst for r in runs], run_lengths=[r.length for r in runs], tag=tag),
            timeout=target.call_timeout_s())
        sending = in_waiter_thread(_send_runs, group, cache.data, runs, tag)
        reply, _ = await asyncio.gather(receiving, sending)
        return TransferStats(self.name, reply.bytes, time.perf_counter() - started)

    async def _group(self, decode_worker_id: str, decode: worker_pb2_grpc.DecodeWorkerStub,
                     device: torch.device) -> dist.ProcessGroup:
        task = self._groups.get(decode_worker_id)
        if task is None or (task.done() and task.exception() is not None):
            task = asyncio.get_running_loop().create_task(self._join(decode, device))
            self._groups[decode_worker_id] = task
        return await asyncio.shield(task)

    async def _join(self, decode: worker_pb2_grpc.DecodeWorkerStub, device: torch.device) -> dist.ProcessGroup:
        info = await decode.TransportInfo(worker_pb2.TransportInfoRequest(transport="nccl", peer_id=self.worker_id),
                                          timeout=TIMEOUT.total_seconds())
        return await in_waiter_thread(_join_group, info.rendezvous, self.worker_id, device)

    def forget(self, decode_worker_id: str) -> None:
        self._groups.pop(decode_worker_id, None)

    async def close(self) -> None:
        for task in self._groups.values():
            task.cancel()
        self._groups.clear()


def _join_group(rendezvous: str, worker_id: str, device: torch.device) -> dist.ProcessGroup:
    host, port = rendezvous.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), 2, False, TIMEOUT)
    return make_group(dist.PrefixStore(f"pair/{worker_id}", store), PREFILL_RANK, device)


def _send_runs(group: dist.ProcessGroup, pool: torch.Tensor, runs: list, tag: int) -> None:  # type: ignore[type-arg]
    works = [group.send([pool[r.src:r.src + r.length]], DECODE_RANK, tag) for r in runs]
    for work in works:
        work.wait()
