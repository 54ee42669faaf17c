"""Serving the OpenAI routes with uvicorn inside the gateway's event loop, beside grpc.aio.

The gateway's lifecycle owns the process's signals (SIGTERM drains), so uvicorn is kept from
installing its own; the socket is bound here, so a taken port fails the gateway's start with
the OS's error instead of uvicorn exiting the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

log = logging.getLogger("pdserve.gateway.http")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpServer:
    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        self._socket = socket.create_server((host, port), reuse_port=False)
        self.address = "%s:%d" % self._socket.getsockname()[:2]
        config = uvicorn.Config(app, loop="none", lifespan="off", log_config=None, access_log=False,
                                timeout_graceful_shutdown=5)
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        log.info("OpenAI-compatible HTTP on http://%s/v1", self.address)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
