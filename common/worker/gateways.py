"""A worker's registrations with every gateway of its cluster: one ``Registrar`` per gateway, each
with its own prefix digests (``DigestSubscription``), so every gateway keeps the whole registry.

The gateways are given as ``--gateway a:50051,b:50051``, or as a name that resolves to several
addresses (a Kubernetes headless Service): the list is resolved again every ``RESOLVE_S``, so a
gateway that joins late hears from every worker within that (and a heartbeat), and one that left
is dropped. A name that resolves to one address is dialled by name (TLS checks it)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from common.worker.prefix_digest import DigestPublisher, DigestSubscription
from common.worker.registration import HEARTBEAT_S, Registrar
from wire.v1 import worker_pb2

log = logging.getLogger(__name__)
RESOLVE_S = 10.0

LoadFor = Callable[[DigestSubscription], worker_pb2.WorkerLoad]  # one gateway's heartbeat load


def gateway_entries(spec: str) -> list[str]:
    """The ``host:port`` entries of a ``--gateway`` value (comma-separated, blanks ignored)."""
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    for entry in entries:
        host, _, port = entry.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--gateway wants host:port entries separated by commas, got {entry!r}")
    return entries


def resolve(entry: str) -> list[str]:
    """The addresses to register at for one entry: its name when it resolves to one address (or
    not at all, for now: the registrar retries), else one ``ip:port`` per address."""
    host, _, port = entry.rpartition(":")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
    except OSError:
        return [entry]
    addresses = sorted({info[4][0] for info in infos})
    if len(addresses) <= 1:
        return [entry]
    return [f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addresses]


class GatewayRegistrations:
    def __init__(self, gateways: str, descriptor: worker_pb2.WorkerDescriptor, load: LoadFor,
                 digests: DigestPublisher, on_refused: Callable[[str], None] = lambda reason: None,
                 period_s: float = HEARTBEAT_S, resolve_s: float = RESOLVE_S,
                 resolver: Callable[[str], list[str]] = resolve) -> None:
        self.entries = gateway_entries(gateways)
        if not self.entries:
            raise ValueError("a worker needs at least one gateway to register with (--gateway)")
        self.descriptor = descriptor
        self.load = load
        self.digests = digests
        self.on_refused = on_refused
        self.period_s = period_s
        self.resolve_s = resolve_s
        self.resolver = resolver
        self.registrars: dict[str, tuple[Registrar, DigestSubscription]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow(), name="gateway-registrations")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*(self._drop(address) for address in list(self.registrars)))

    async def beat_now(self) -> None:
        """An immediate heartbeat to every gateway (to say this worker is draining), best effort."""
        await asyncio.gather(*(registrar.beat_now() for registrar, _ in self.registrars.values()))

    async def _follow(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            wanted: list[str] = []
            for entry in self.entries:
                wanted += await loop.run_in_executor(None, self.resolver, entry)
            for address in wanted:
                if address not in self.registrars:
                    self._add(address)
            for address in [a for a in self.registrars if a not in wanted]:
                log.info("gateway %s no longer resolves: no more heartbeats to it", address)
                await self._drop(address)
            await asyncio.sleep(self.resolve_s)

    def _add(self, address: str) -> None:
        subscription = self.digests.subscribe()
        registrar = Registrar(address, self.descriptor, lambda: self.load(subscription), self.period_s,
                              on_refused=self.on_refused, on_resync=subscription.resync)
        self.registrars[address] = (registrar, subscription)
        registrar.start()

    async def _drop(self, address: str) -> None:
        registrar, subscription = self.registrars.pop(address)
        self.digests.unsubscribe(subscription)
        await registrar.stop()
