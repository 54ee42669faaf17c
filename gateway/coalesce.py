"""Tokens that wait in a request's inbox go to the client as one message.

The gateway relays every decode step's token to the client as a gRPC message, about 200 µs
of its one core each on a 2-core CPU (``bench/front_end_cost.py``). When it falls behind (a GPU
decoding a hundred requests every few milliseconds), a request's tokens pile up in its inbox
while its previous message is written; sending them one message each would keep it behind, so
what is already waiting is merged. An idle gateway sends each token on its own, as soon as it
comes: nothing is held back to be merged.
"""

from __future__ import annotations

import asyncio

from gateway.errors import RequestError
from wire.v1 import worker_pb2

InboxItem = worker_pb2.TokenEvent | RequestError


def coalesce_waiting(event: InboxItem, inbox: asyncio.Queue[InboxItem]) -> tuple[InboxItem, InboxItem | None]:
    """``event`` with the token events already waiting behind it merged in, up to and including one
    that finishes the request; and the first waiting item that is no plain token event (an error,
    an abort), which the caller handles next, or None. An ``event`` that is itself no plain token
    event (an error, an abort, a finish) comes back as it is."""
    if _ends_the_stream(event):
        return event, None
    merged: worker_pb2.TokenEvent | None = None
    while not inbox.empty():
        waiting = inbox.get_nowait()
        if isinstance(waiting, RequestError) or waiting.error:
            return merged or event, waiting
        if merged is None:
            merged = worker_pb2.TokenEvent()
            merged.CopyFrom(event)
        merged.token_ids.extend(waiting.token_ids)
        if waiting.finish_reason:
            merged.finish_reason = waiting.finish_reason
            break
    return merged or event, None


def _ends_the_stream(item: InboxItem) -> bool:
    return isinstance(item, RequestError) or bool(item.error) or bool(item.finish_reason)
