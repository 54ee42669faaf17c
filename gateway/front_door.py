"""What every public entry of the gateway goes through, whatever its protocol.

gRPC's ``Generate`` and the OpenAI-compatible HTTP routes both hand a ``GenerateRequest`` and
the caller's credentials here: the drain check, authentication, the tenant's quota, the chat
template, tokenizing (off the event loop), validation, then the request's flow. Every refusal is
a ``RequestError`` carrying a gRPC status; each protocol maps it to its own way of saying so.
Accounting (metrics of finished and failed requests) is done here, once for both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from common.process.logs import request_id_var
from common.process.metrics import Metrics
from common.text.chat_template import ChatTemplate, ChatTemplateError
from gateway.chat_messages import template_messages, template_tools
from gateway import request_start
from gateway.accounting import RequestAccounting
from gateway.arrival_wait import ArrivalWait
from gateway.delivery import DeliveryAllowance
from gateway.errors import RequestError, invalid
from gateway.front_capacity import FrontCapacity
from gateway.request_flow import RequestFlow
from gateway.tenants import AuthError, QuotaError, TenantTable
from gateway.validation import ModelLimits, prompt_text, slo_ms, validate
from wire.v1 import gateway_pb2


@dataclass(frozen=True, slots=True)
class Caller:
    metadata: Sequence[tuple[str, str | bytes]]  # headers: ``authorization`` carries the API key
    time_remaining: float | None = None  # seconds until the client stops waiting; None: no deadline
    # registers a clean-up to run when the call ends, however it ends (gRPC's done callback: a
    # cancelled call's suspended generator may never run its ``finally``); None: ``finally`` only
    on_done: Callable[[Callable[[], None]], None] | None = None
    # when the request reached this process (perf_counter), before its body was read and parsed:
    # its TTFT counts from there; None: from when ``generate`` begins
    received_at: float | None = None
    front: str = "grpc"  # which front it came through ("grpc", "http"): whose delivery it waits for


class FrontDoor:
    def __init__(self, flow: RequestFlow, tokenizer: Any, limits: ModelLimits, chat: ChatTemplate | None,
                 tenants: TenantTable | None = None, metrics: Metrics | None = None,
                 draining: Callable[[], bool] = lambda: False, delivery: DeliveryAllowance | None = None,
                 capacity: FrontCapacity | None = None, arrival: ArrivalWait | None = None) -> None:
        self.flow = flow
        self.tokenizer = tokenizer
        self.limits = limits
        self.chat = chat
        self.tenants = tenants or TenantTable.open()
        self.metrics = metrics or Metrics("gateway")
        self.draining = draining
        self.delivery = delivery or DeliveryAllowance()
        self.capacity = capacity  # None: this gateway never refuses for its own load (fcfs)
        self.arrival = arrival  # the wait of a gRPC call before its handler; None: not measured
        # Tokenizing a long prompt takes milliseconds to seconds: never on the event loop, which
        # also serves every other stream and the workers' heartbeats.
        self._tokenizing = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="tokenize")

    def authenticate(self, caller: Caller) -> str:
        """The caller's tenant name ("" with open access), or UNAUTHENTICATED."""
        return self._tenant(caller).name

    def _tenant(self, caller: Caller) -> Any:
        try:
            return self.tenants.authenticate(caller.metadata)
        except AuthError as exc:
            raise RequestError(grpc.StatusCode.UNAUTHENTICATED, str(exc), "unauthenticated") from None

    async def generate(self, request: gateway_pb2.GenerateRequest,
                       caller: Caller) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        """The request's messages; raises ``RequestError`` when it is refused or fails."""
        received_at = caller.received_at or time.perf_counter()
        waited_s = request_start.waited_before(caller.metadata, received_at)  # None: not stamped
        accounting = RequestAccounting(self.metrics)
        request_id_var.set(request.request_id)
        try:
            tenant = self._admit_caller(request, caller, waited_s)
        except RequestError as exc:
            accounting.failed(exc.code.name, exc.reason, exc.message, before_work=True)
            raise
        admission = tenant.admit_slot
        try:
            validated = await self._validated(request, caller, received_at, waited_s, tenant.name)
            request_id_var.set(validated.request_id)

            def clean_up() -> None:
                self.flow.abandon(validated)
                admission.release()

            if caller.on_done is not None:
                caller.on_done(clean_up)
            reason = ""
            delivered = False
            try:
                async for message in self.flow.run(validated):
                    accounting.on_message(message)
                    reason = message.finish_reason or reason
                    handed = time.perf_counter()
                    yield message
                    if not delivered:  # the front is back for more: the first token is on its transport
                        delivered = True
                        self.delivery.observe(caller.front, time.perf_counter() - handed)
            finally:
                clean_up()
            accounting.finished(validated, reason or "stop")
        except RequestError as exc:
            accounting.failed(exc.code.name, exc.reason, exc.message, before_work=accounting.tokens == 0)
            raise
        finally:
            admission.release()

    def _admit_caller(self, request: gateway_pb2.GenerateRequest, caller: Caller,
                      waited_s: float | None) -> _Admitted:
        if self.draining():
            raise RequestError(grpc.StatusCode.UNAVAILABLE, "gateway is draining; retry on another replica", "draining")
        # The busy guard stands in for a wait the gateway cannot see (a call queued inside gRPC
        # behind a busy loop). A stamped request's wait is known (``gateway.request_start``) and
        # the TTFT guard plans with it: the busy guard would only refuse what can still be served in
        # time (chosen by measurement: docs/decisions.md, 'Gateway busy guard: stamped requests pass').
        refusal = self.capacity.refusal() if self.capacity is not None and waited_s is None else None
        if refusal is not None:  # first: a refusal must cost the busy loop as little as it can
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal, "gateway_busy")
        tenant = self._tenant(caller)
        if request.tenant and tenant.name and request.tenant != tenant.name:
            raise RequestError(grpc.StatusCode.PERMISSION_DENIED,
                               f"tenant {request.tenant!r} does not match the API key's tenant", "wrong_tenant")
        if waited_s is not None and self.flow.router.ttft_guard:
            self._refuse_if_already_late(request, waited_s)
        try:
            return _Admitted(tenant.name, tenant.admit())
        except QuotaError as exc:
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), "tenant_quota") from None

    def _refuse_if_already_late(self, request: gateway_pb2.GenerateRequest, waited_s: float) -> None:
        """RESOURCE_EXHAUSTED (``ttft_unattainable``) for a stamped request whose wait before the
        gateway already used up its TTFT SLO, before any work on it: at overload such refusals are
        most of what the event loop does, and this one costs it least. (Its SLO is read as
        validation will read it; one that validation would refuse goes on to that refusal.)"""
        try:
            ttft_ms = slo_ms(request.slo, self.limits)[0]
        except RequestError:
            return
        if ttft_ms and waited_s * 1000 >= ttft_ms:
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"TTFT SLO of {ttft_ms:g} ms is unattainable: the request waited "
                               f"{waited_s * 1000:.0f} ms before it reached the gateway", reason="ttft_unattainable")

    async def _validated(self, request: gateway_pb2.GenerateRequest, caller: Caller, received_at: float,
                         waited_s: float | None, tenant: str) -> Any:
        chat = request.WhichOneof("prompt") == "messages"
        text = self._render_chat(request) if chat else prompt_text(request, self.limits)
        ids = None if text is None else await asyncio.get_running_loop().run_in_executor(
            self._tokenizing, lambda: self.tokenizer.encode(text, add_special_tokens=not chat))
        validated = validate(request, ids, self.limits)
        remaining = caller.time_remaining
        return dataclasses.replace(validated, received_at=received_at, tenant=tenant or validated.tenant,
                                   deadline=received_at + remaining if remaining is not None else None,
                                   delivery_s=self._front_allowance(caller, waited_s))

    def _front_allowance(self, caller: Caller, waited_s: float | None) -> float:
        """Seconds of the client's TTFT spent outside the request's flow: before it reached this
        process, as its own stamp says (``waited_s``, ``gateway.request_start``), else as this
        process's probe estimates it (gRPC); and delivering its first token."""
        if waited_s is not None:
            self.metrics.stamped_wait.labels("gateway").observe(waited_s)
            before = waited_s
        else:
            before = self.arrival.allowance() if self.arrival is not None and caller.front == "grpc" else 0.0
        return before + self.delivery.allowance(caller.front)

    def _render_chat(self, request: gateway_pb2.GenerateRequest) -> str:
        if not request.messages.messages:
            raise invalid("messages is empty: a chat needs at least one message")
        messages, tools = template_messages(request.messages), template_tools(request.messages)
        if self.chat is None:
            raise invalid("this model has no chat template: send text or token_ids")
        if tools is not None and self.chat.tool_call_format is None:
            raise invalid("tools: this model's chat template defines no tool-call format, so no call could be read "
                          "from its answer")
        try:
            text = self.chat.render(messages, tools=tools)
        except ChatTemplateError as exc:
            raise invalid(f"messages: {exc}") from None
        limit = self.limits.max_prompt_bytes
        if limit and len(text.encode("utf-8")) > limit:
            raise invalid(f"messages are longer than the {limit} bytes that can fit the model's limit of "
                          f"{self.limits.max_model_len} tokens")
        return text


@dataclass(frozen=True, slots=True)
class _Admitted:
    name: str
    admit_slot: Any  # the tenant's ``Admission``: released once when the request ends
