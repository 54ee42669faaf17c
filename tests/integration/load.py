"""Background load for the operations tests: requests on threads, every outcome recorded."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

import grpc

from wire.v1 import gateway_pb2, gateway_pb2_grpc


@dataclass
class Outcome:
    request_id: str
    tokens: int = 0
    finish_reason: str = ""  # set when the stream ended normally
    code: str = ""  # gRPC status name when it ended with an error
    details: str = ""
    cancelled_by_client: bool = False
    decode_worker: str = ""
    prefill_worker: str = ""

    @property
    def final(self) -> bool:
        """The request ended with a status that says why (none hung, none vanished)."""
        return bool(self.finish_reason or self.code)


@dataclass
class Load:
    address: str
    max_tokens: int = 48
    metadata: tuple[tuple[str, str], ...] = ()
    credentials: grpc.ChannelCredentials | None = None
    cancel_fraction: float = 0.0  # of requests the client cancels after a few tokens
    seed: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    first_tokens: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def run(self, count: int, concurrency: int, timeout_s: float = 120.0, prefix: str = "load") -> list[Outcome]:
        """Sends ``count`` requests, ``concurrency`` at a time; blocks until every one has ended."""
        rng = random.Random(self.seed)
        pending = [(f"{prefix}-{i}", rng.randint(8, 200), rng.random() < self.cancel_fraction) for i in range(count)]
        lock = threading.Lock()

        def worker() -> None:
            channel = (grpc.secure_channel(self.address, self.credentials) if self.credentials
                       else grpc.insecure_channel(self.address))
            with channel:
                stub = gateway_pb2_grpc.GatewayStub(channel)
                while True:
                    with lock:
                        if not pending:
                            return
                        request_id, prompt_len, cancel = pending.pop(0)
                    outcome = self._one(stub, request_id, prompt_len, cancel, timeout_s)
                    with lock:
                        self.outcomes.append(outcome)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s * count)
        return self.outcomes

    def start(self, count: int, concurrency: int, timeout_s: float = 120.0, prefix: str = "load") -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(count, concurrency, timeout_s, prefix), daemon=True)
        thread.start()
        return thread

    def _one(self, stub: gateway_pb2_grpc.GatewayStub, request_id: str, prompt_len: int, cancel: bool,
             timeout_s: float) -> Outcome:
        outcome = Outcome(request_id)
        request = gateway_pb2.GenerateRequest(
            request_id=request_id, token_ids=gateway_pb2.TokenIds(ids=[(7 * i + 3) % 250 + 1 for i in range(prompt_len)]),
            sampling=gateway_pb2.SamplingParams(max_tokens=self.max_tokens, ignore_eos=True))
        call = stub.Generate(request, timeout=timeout_s, metadata=self.metadata or None)
        try:
            for message in call:
                if outcome.tokens == 0 and message.token_ids:
                    self.first_tokens.release()
                outcome.tokens += len(message.token_ids)
                if message.finish_reason:
                    outcome.finish_reason = message.finish_reason
                    outcome.decode_worker = message.timings.decode_worker
                    outcome.prefill_worker = message.timings.prefill_worker
                if cancel and outcome.tokens >= 3 and not outcome.finish_reason:
                    call.cancel()
                    outcome.cancelled_by_client = True
        except grpc.RpcError as exc:
            outcome.code, outcome.details = exc.code().name, exc.details() or ""
        return outcome
