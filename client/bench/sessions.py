"""Multi-turn conversations: each session's turns resend the whole history (every earlier
prompt and answer) plus a new user message, after a think time, as chat clients do.

Sessions start at the run's arrival times (``--request-rate`` counts requests: sessions start at
that rate divided by ``--turns``); a turn is sent when the previous one has finished and the
think time passed. A refused or failed turn ends its session (its later turns are not sent,
and count as not good: the user left). Over gRPC, where the answer's token ids come back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import numpy as np

from client.async_client import auth_metadata
from client.bench.metrics import RequestRecord
from client.bench.runner import Goodput, new_record, send_one
from client.bench.workload import PlannedRequest, SloClass, gamma_intervals, token_prompt
from client.failover import gateway_addresses
from wire.v1 import gateway_pb2_grpc


@dataclass(frozen=True, slots=True)
class PlannedSession:
    index: int
    start_at: float  # seconds after the run's start
    messages: list[list[int]]  # each turn's new user tokens (the first: the opening prompt)
    output_lens: list[int]
    slo_class: SloClass | None


def plan_sessions(n_requests: int, turns: int, first_len: int, turn_len: int, output_len: int, rate: float,
                  burstiness: float, classes: list[SloClass | None], seed: int) -> list[PlannedSession]:
    sessions = max(1, n_requests // turns)
    rng = np.random.default_rng(seed)
    unit = gamma_intervals(sessions, 1.0, burstiness, np.random.default_rng(seed + 1))
    starts = (np.cumsum(unit) - unit[0]) * turns / rate if rate != float("inf") else np.zeros(sessions)
    return [PlannedSession(i, float(starts[i]),
                           [token_prompt(first_len if t == 0 else turn_len, rng) for t in range(turns)],
                           [output_len] * turns, classes[i % len(classes)] if classes else None)
            for i in range(sessions)]


async def run_sessions(address: str, sessions: list[PlannedSession], think_s: float, ignore_eos: bool,
                       goodput: Goodput, on_done: Callable[[RequestRecord], None], timeout_s: float = 600,
                       api_key: str = "") -> tuple[list[RequestRecord], float]:
    """``address``: one gateway, or several comma-separated: each session talks to one, in turn."""
    metadata = auth_metadata(api_key)
    turns = len(sessions[0].messages) if sessions else 0
    channels = [grpc.aio.insecure_channel(a) for a in gateway_addresses(address)]
    try:
        stubs = [gateway_pb2_grpc.GatewayStub(ch) for ch in channels]
        started = time.perf_counter()

        async def converse(session: PlannedSession) -> list[RequestRecord]:
            await asyncio.sleep(max(0.0, session.start_at - (time.perf_counter() - started)))
            history: list[int] = []
            records = []
            for t, (message, output_len) in enumerate(zip(session.messages, session.output_lens)):
                prompt = history + message
                item = PlannedRequest(session.index * turns + t, prompt, output_len, session.slo_class, 0.0)
                record = await send_one(stubs[session.index % len(stubs)], item, ignore_eos, goodput, started,
                                        timeout_s, metadata)
                on_done(record)
                records.append(record)
                if record.error:
                    records += [_not_sent(session, t2, turns, goodput, started) for t2 in range(t + 1, turns)]
                    break
                history = prompt + record.output_token_ids
                await asyncio.sleep(think_s)
            return records

        per_session = await asyncio.gather(*(converse(s) for s in sessions))
        return [r for records in per_session for r in records], time.perf_counter() - started
    finally:
        for channel in channels:
            await channel.close()


def _not_sent(session: PlannedSession, turn: int, turns: int, goodput: Goodput, started: float) -> RequestRecord:
    item = PlannedRequest(session.index * turns + turn, [], 0, session.slo_class, 0.0)
    record = new_record(item, goodput, started)
    record.error = "SESSION_ENDED"
    return record
