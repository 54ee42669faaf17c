"""A request's token events, from its decode worker's stream to the messages its client gets.

The gateway relays every decode step's token to the client as a gRPC message. Each message costs the
gateway far more than the token's own work: the write, its completion coming back through gRPC's
poller thread, the wake-ups between that thread and the event loop; over a request's tokens these
add up to about as much as everything else a request costs (docs/decisions.md, 'Stream interval';
``bench/front_end_cost.py --stream-interval`` measures what holding saves). So events are merged
where that loses nothing a client measures:

- tokens that already wait behind one another go as one message (``next_message``): the gateway
  is behind, and sending them apart would keep it behind;
- while the gateway is loaded, a request's next message may be held until a stream interval has
  passed since its last one (``gateway.stream_interval``), gathering the tokens that come
  meanwhile. The first token is never held (it ends the TTFT), nor an event that ends the stream
  (it ends the request, and with it the TPOT its client computes, last token time minus first over
  the tokens between): holding changes when the tokens in between arrive, never either SLO.

An idle gateway sends each token on its own, as soon as it comes.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from gateway.errors import RequestError
from wire.v1 import worker_pb2

InboxItem = worker_pb2.TokenEvent | RequestError


def ends_the_stream(item: InboxItem) -> bool:
    return isinstance(item, RequestError) or bool(item.error) or bool(item.finish_reason)


class TokenInbox:
    """What the decode stream posted for one request, taken by its flow a batch at a time.

    A waiting flow is woken by any item, or, while it holds for more (``take``'s ``hold_until``),
    only by an item that ends the stream or by the hold's end: tokens that come during a hold
    cost an append each, not a wake-up of the flow."""

    def __init__(self) -> None:
        self._items: deque[InboxItem] = deque()
        self._ending = False  # an item that ends the stream is waiting
        self._waiter: asyncio.Future[None] | None = None
        self._holding = False
        self.last_arrival = 0.0  # perf_counter time the newest item was posted
        self.first_arrival = 0.0  # ... and the first (0: none yet)

    def put(self, item: InboxItem) -> None:
        self._items.append(item)
        self.last_arrival = time.perf_counter()
        self.first_arrival = self.first_arrival or self.last_arrival
        ending = ends_the_stream(item)
        self._ending = self._ending or ending
        if not self._holding or ending:
            self._wake()

    def __len__(self) -> int:
        return len(self._items)

    async def take(self, hold_until: float = 0.0) -> deque[InboxItem]:
        """Every item waiting, once there is one. With ``hold_until`` (perf_counter time) still
        ahead, first waits until then for more, unless an item that ends the stream comes."""
        if not self._items:
            await self._wait()
        delay = hold_until - time.perf_counter()
        if delay > 0 and not self._ending:
            timer = asyncio.get_running_loop().call_later(delay, self._wake)
            self._holding = True
            try:
                await self._wait()
            finally:
                self._holding = False
                timer.cancel()
        items, self._items = self._items, deque()
        self._ending = False
        return items

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


def next_message(items: deque[InboxItem], merge: bool = True) -> InboxItem:
    """The first of ``items`` (taken from them), with the plain token events behind it merged in
    up to and including one that finishes the request (unless ``merge`` is False); an error or an
    abort behind them stays in ``items``, for the caller to handle next. A first item that itself
    ends the stream comes back as it is, with nothing behind it taken."""
    event = items.popleft()
    if not merge or ends_the_stream(event) or not items:
        return event
    merged = worker_pb2.TokenEvent()
    merged.CopyFrom(event)
    while items:
        waiting = items[0]
        if isinstance(waiting, RequestError) or waiting.error:
            break
        items.popleft()
        merged.token_ids.extend(waiting.token_ids)
        if waiting.logprobs:
            merged.logprobs.extend(waiting.logprobs)
        if waiting.finish_reason:
            merged.finish_reason = waiting.finish_reason
            break
    return merged
