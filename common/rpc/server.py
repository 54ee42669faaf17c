"""Building and running a grpc.aio server the same way in every process."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

import grpc

from common.kv_transfer.grpc_stream import MAX_MESSAGE_BYTES

SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
]
CHANNEL_OPTIONS = SERVER_OPTIONS[:2] + [("grpc.enable_retries", 0)]


def new_server() -> grpc.aio.Server:
    return grpc.aio.server(options=SERVER_OPTIONS)


def bind(server: grpc.aio.Server, host: str, port: int) -> str:
    """Binds insecurely; returns the ``host:port`` actually bound (``port=0`` picks a free one)."""
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"could not bind {host}:{port}")
    return f"{host}:{bound}"


def channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


def install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - optional speed-up
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def serve_until_signalled(server: grpc.aio.Server, on_stop: Callable[[], Awaitable[None]]) -> None:
    """Runs until SIGTERM/SIGINT, then ``on_stop`` and a short grace period for open calls."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger(__name__).info("shutting down")
    await on_stop()
    await server.stop(grace=2.0)


def run_main(main: Callable[[], Awaitable[None]]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    install_uvloop()
    asyncio.run(main())
