"""TLS on every gRPC port, and mutual TLS between the processes of a cluster.

``--tls-cert``/``--tls-key`` give a process its identity; ``--tls-ca`` adds the trust root for
its peers and turns on mutual TLS: workers then require a client certificate from that CA,
and ``PeerRoleInterceptor`` lets through only the roles (certificate common names
``gateway``, ``prefill``, ``decode``) allowed to call each method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

ROLE_NAMES = ("gateway", "prefill", "decode")


@dataclass(frozen=True, slots=True)
class TlsConfig:
    cert: str = ""
    key: str = ""
    ca: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            missing = "--tls-key" if self.cert else "--tls-cert"
            raise ValueError(f"{missing} is required when {'--tls-cert' if self.cert else '--tls-key'} is given")
        for flag, path in (("--tls-cert", self.cert), ("--tls-key", self.key), ("--tls-ca", self.ca)):
            if path and not Path(path).is_file():
                raise ValueError(f"{flag}: no such file {path!r}")

    @property
    def enabled(self) -> bool:
        return bool(self.cert)

    @property
    def mutual(self) -> bool:
        return self.enabled and bool(self.ca)


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


def server_credentials(cfg: TlsConfig, require_client_auth: bool) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials([(_read(cfg.key), _read(cfg.cert))], root_certificates=_read(cfg.ca),
                                       require_client_auth=require_client_auth and bool(cfg.ca))


def channel_credentials(cfg: TlsConfig) -> grpc.ChannelCredentials:
    """Trusts ``ca`` (or the system roots); presents this process's certificate when it has one."""
    if cfg.enabled:
        return grpc.ssl_channel_credentials(_read(cfg.ca), _read(cfg.key), _read(cfg.cert))
    return grpc.ssl_channel_credentials(_read(cfg.ca))


def peer_role(context: grpc.aio.ServicerContext) -> str | None:
    """The common name of the caller's verified client certificate, or None without one."""
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode() if names else None


class PeerRoleInterceptor(grpc.aio.ServerInterceptor):
    """Lets a call through only when the caller's certificate names an allowed role.

    ``allowed`` maps full-method prefixes ("/pkg.Service/" or "/pkg.Service/Method") to the
    roles that may call them; the longest matching prefix wins; methods no prefix matches
    (health, reflection) are open to any caller the TLS handshake admitted.
    """

    def __init__(self, allowed: Mapping[str, set[str]]) -> None:
        self.allowed = sorted(allowed.items(), key=lambda item: -len(item[0]))

    def roles_for(self, method: str) -> set[str] | None:
        return next((roles for prefix, roles in self.allowed if method.startswith(prefix)), None)

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Any],
                                handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        roles = self.roles_for(handler_call_details.method)
        if handler is None or roles is None:
            return handler
        return _guarded(handler, handler_call_details.method, roles)


async def _check(context: grpc.aio.ServicerContext, method: str, roles: set[str]) -> None:
    role = peer_role(context)
    if role is None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{method} needs a client certificate")
    if role not in roles:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                            f"caller {role!r} may not call {method}: allowed {', '.join(sorted(roles))}")


def _guarded(handler: grpc.RpcMethodHandler, method: str, roles: set[str]) -> grpc.RpcMethodHandler:
    """The same handler, with the caller check run before its behaviour."""
    if handler.unary_unary or handler.stream_unary:
        inner = handler.unary_unary or handler.stream_unary

        async def respond(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await _check(context, method, roles)
            return await inner(request, context)

        make = grpc.unary_unary_rpc_method_handler if handler.unary_unary else grpc.stream_unary_rpc_method_handler
    else:
        inner = handler.unary_stream or handler.stream_stream

        async def respond(request: Any, context: grpc.aio.ServicerContext) -> Any:  # type: ignore[misc]
            await _check(context, method, roles)
            async for message in inner(request, context):
                yield message

        make = grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler
    return make(respond, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
