"""An event loop's typed face of an ``EngineThread``: one asyncio queue per request, and one
awaitable method per engine call a server makes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from common.engine.leases import Lease
from common.engine.request import REFUSED, RequestOutput, left_on_arrival
from common.engine.thread import EngineThread
from common.engine.tpot_admission import AdmissionError
from common.model.sampling_params import SamplingParams
from common.slo.tpot_guard import TPOT_MARGIN


class AsyncEngine:
    """asyncio face of an ``EngineThread``: ``generate`` yields each step's output, and every
    call a server makes into the engine is a typed method here (the one home of those calls;
    ``EngineThread`` only carries them). Each runs on the engine thread between steps; its
    exceptions (``AdmissionError``, ``LeaseError``, ``ValueError``) reach the awaiting caller.
    A call handed over runs even if its caller is cancelled meanwhile."""

    def __init__(self, thread: EngineThread) -> None:
        self.thread = thread

    async def reserve(self, request_id: str, prompt_len: int, max_tokens: int, tpot_slo_ms: float = 0.0,
                      epsilon: float = TPOT_MARGIN, prefix_hashes: Sequence[int] = (),
                      lease_id: str = "", handoff_s: float = 0.0) -> Lease | None:
        """A caller cancelled meanwhile (its RPC's deadline passed) never hands the lease id to
        anyone, so nothing can write into the blocks: they are freed as soon as they are
        reserved, not held until the lease runs out."""
        made: list[Lease] = []

        def reserve(engine: LLMEngine) -> Lease | None:
            lease = engine.reserve(request_id, prompt_len, max_tokens, tpot_slo_ms, epsilon, prefix_hashes, lease_id,
                                   handoff_s)
            if lease is not None:
                made.append(lease)
            return lease

        try:
            return await self.thread.run(reserve)
        except asyncio.CancelledError:
            # queued behind the reserve (the inbox is FIFO), so ``made`` is filled when it runs
            self.thread.call(lambda e: [e.release_reservation(request_id, lease.lease_id, writer_may_still_write=False)
                                        for lease in made])
            raise

    async def commit(self, request_id: str, lease_id: str, prompt_token_ids: list[int], first_token: int,
                     params: SamplingParams, tpot_slo_ms: float = 0.0) -> None:
        await self.thread.run(lambda e: e.commit(request_id, lease_id, prompt_token_ids, first_token, params,
                                                 tpot_slo_ms))

    async def prefill_reserved(self, request_id: str, lease_id: str, prompt_token_ids: list[int],
                               params: SamplingParams, ttft_slo_ms: float = 0.0, tpot_slo_ms: float = 0.0,
                               ttft_left_ms: float = 0.0) -> None:
        received = self.thread.engine.clock()
        await self.thread.run(lambda e: e.prefill_reserved(request_id, lease_id, prompt_token_ids, params, ttft_slo_ms,
                                                           tpot_slo_ms, left_on_arrival(ttft_left_ms, received, e.clock())))

    async def renew_reservation(self, request_id: str, lease_id: str) -> bool:
        return await self.thread.run(lambda e: e.renew_reservation(request_id, lease_id))

    async def release_reservation(self, request_id: str, lease_id: str | None, writer_may_still_write: bool) -> bool:
        return await self.thread.run(lambda e: e.release_reservation(request_id, lease_id, writer_may_still_write))

    async def abort(self, request_id: str) -> bool:
        """``LLMEngine.abort``: the request's reservation and the request itself."""
        return await self.thread.run(lambda e: e.abort(request_id))

    def abort_soon(self, request_id: str) -> None:
        """``abort`` for a caller that cannot wait (a ``finally`` as its stream closes)."""
        self.thread.call(lambda e: e.abort(request_id))

    async def release_held(self, request_id: str) -> bool:
        return await self.thread.run(lambda e: e.release_held(request_id))

    def release_held_soon(self, request_id: str) -> None:
        """``release_held`` for a caller that cannot wait."""
        self.thread.call(lambda e: e.release_held(request_id))

    async def generate(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                       prefill_only: bool = False, ttft_slo_ms: float = 0.0,
                       ttft_left_ms: float = 0.0) -> AsyncIterator[RequestOutput]:
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self.thread.submit(request_id, prompt_token_ids, params,
                           lambda out: loop.call_soon_threadsafe(outputs.put_nowait, out), prefill_only, ttft_slo_ms,
                           ttft_left_ms)
        finished = False
        try:
            while not finished:
                out = await outputs.get()
                finished = out.finished
                if out.error is not None:  # refused (its first token would be late here), or invalid
                    raise AdmissionError(out.error) if out.finish_reason == REFUSED else ValueError(out.error)
                yield out
        finally:
            if not finished:  # the consumer went away (cancel, deadline): free the request's blocks
                self.thread.abort(request_id)
                if prefill_only:  # it may have finished (KV held) before the abort got there
                    self.release_held_soon(request_id)
