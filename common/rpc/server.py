"""Building and running a grpc.aio server the same way in every process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import grpc

from common.process.lifecycle import ProcessFailed
from common.process.logs import configure_logging
from common.rpc.tls import TlsConfig, channel_credentials, server_credentials

MAX_MESSAGE_BYTES = 64 << 20  # the grpc KV transport's chunks are well under this

SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
]
CHANNEL_OPTIONS = SERVER_OPTIONS[:2] + [("grpc.enable_retries", 0)]


# The credentials this process dials other cluster processes with (set once at start-up by
# ``use_tls``): with mutual TLS on, every channel presents this process's certificate.
_dial_tls = TlsConfig()


def use_tls(tls: TlsConfig) -> None:
    global _dial_tls
    _dial_tls = tls


def new_server(interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> grpc.aio.Server:
    return grpc.aio.server(options=SERVER_OPTIONS, interceptors=list(interceptors))


def bind(server: grpc.aio.Server, host: str, port: int, tls: TlsConfig | None = None,
         require_client_auth: bool = False) -> str:
    """Binds (with TLS when ``tls`` is enabled); returns the ``host:port`` actually bound
    (``port=0`` picks a free one)."""
    address = f"{host}:{port}"
    if tls is not None and tls.enabled:
        bound = server.add_secure_port(address, server_credentials(tls, require_client_auth))
    else:
        bound = server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"could not bind {address}")
    return f"{host}:{bound}"


def channel(address: str) -> grpc.aio.Channel:
    """A channel to another cluster process's worker port: TLS when the cluster runs mutual
    TLS (every worker then serves TLS and wants this process's certificate)."""
    return _dial(address, _dial_tls.mutual)


def gateway_channel(address: str) -> grpc.aio.Channel:
    """A worker's channel to the gateway: TLS whenever this process was given a CA to trust the
    gateway's certificate by (the gateway's port can be TLS without the cluster being mTLS)."""
    return _dial(address, bool(_dial_tls.ca))


def _dial(address: str, secure: bool) -> grpc.aio.Channel:
    if secure:
        return grpc.aio.secure_channel(address, channel_credentials(_dial_tls), options=CHANNEL_OPTIONS)
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


def install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - optional speed-up
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def run_main(main: Callable[[], Awaitable[None]], role: str = "", log_format: str = "text",
             log_level: str = "INFO") -> None:
    """Runs ``main`` to the end; a process that failed (``ProcessFailed``) exits with status 1."""
    configure_logging(role, log_format, log_level)
    install_uvloop()
    try:
        asyncio.run(main())
    except ProcessFailed as exc:
        logging.getLogger(role or __name__).critical("exiting: %s", exc)
        raise SystemExit(1) from None
