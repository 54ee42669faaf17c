"""A worker's side of the registry: register with the gateway, then heartbeat its load."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from pathlib import Path

import grpc

from common.rpc.server import gateway_channel
from wire.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)
HEARTBEAT_S = 0.5


def host_id() -> str:
    """Equal for processes that share a host (and so /dev/shm and CUDA IPC)."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    return f"{socket.gethostname()}/{boot.read_text().strip() if boot.exists() else ''}"


class Registrar:
    def __init__(self, gateway: str, descriptor: worker_pb2.WorkerDescriptor,
                 load: Callable[[], worker_pb2.WorkerLoad], period_s: float = HEARTBEAT_S,
                 on_refused: Callable[[str], None] = lambda reason: None,
                 on_resync: Callable[[], None] | None = None) -> None:
        self.descriptor = descriptor
        self.load = load
        self.on_resync = on_resync  # the gateway needs a whole prefix digest: before a registration, or asked
        self.period_s = period_s
        self.on_refused = on_refused  # the gateway will never take this worker as configured
        self._channel = gateway_channel(gateway)
        self._stub = worker_pb2_grpc.RegistryStub(self._channel)
        self._task: asyncio.Task[None] | None = None
        self._registered = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="registrar")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._channel.close()

    async def beat_now(self) -> None:
        """An immediate heartbeat (e.g. to say this worker is draining), best effort."""
        if not self._registered:
            return
        try:
            await self._tick(True)
        except grpc.aio.AioRpcError as exc:
            log.warning("immediate heartbeat failed: %s", exc.code().name)

    async def _run(self) -> None:
        last_error = ""
        while True:
            try:
                self._registered = await self._tick(self._registered)
                last_error = ""
            except grpc.aio.AioRpcError as exc:
                if not self._registered and exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    self.on_refused(f"the gateway refused this worker: {exc.details()}")
                    return
                error = f"{exc.code().name}: {exc.details()}"
                if error != last_error:  # once per distinct failure, not every period
                    log.warning("%s with the gateway failed (%s); retrying every %.1f s",
                                "heartbeat" if self._registered else "registration", error, self.period_s)
                    last_error = error
                self._registered = False
            await asyncio.sleep(self.period_s)

    async def _tick(self, registered: bool) -> bool:
        if not registered:
            if self.on_resync is not None:
                self.on_resync()
            await self._stub.Register(worker_pb2.RegisterRequest(worker=self.descriptor, load=self.load()),
                                      timeout=2)
            log.info("registered with the gateway as %s", self.descriptor.worker_id)
            return True
        reply = await self._stub.Heartbeat(worker_pb2.HeartbeatRequest(worker_id=self.descriptor.worker_id,
                                                                       load=self.load()), timeout=2)
        if reply.prefix_resync and self.on_resync is not None:
            self.on_resync()
        return reply.known
