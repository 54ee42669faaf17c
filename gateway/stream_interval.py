"""How long the gateway may hold a request's next token message, gathering more into it.

Every message is work for the gateway beyond its token's (``gateway.coalesce``), and holding
messages apart cuts the gateway's CPU a request (chosen by measurement: docs/decisions.md, 'Stream
interval'). On a GPU host the gateway's loop, not the GPU, is what runs out first. Holding each
stream's messages ``s`` apart turns the tokens a decode step makes every few milliseconds into one
message per ``s``, for no change in either SLO a client measures (the first token and the last are
never held).

``--stream-interval-ms``:

- a number: every stream holds its messages that far apart (0: each token as it comes);
- ``auto`` (the gateway's default): nothing is held while the loop's thread is busy less than
  ``LOW`` of its time (``gateway.front_capacity.LoopBusy``), so an unloaded gateway streams token
  by token; from there the interval grows linearly to ``MAX_AUTO_S`` at ``HIGH``, before the busy
  guard (``--busy-limit``, from 0.85) starts refusing requests for the gateway's own load.

``pdserve up`` starts a gateway that gets no core of its own (fewer cores than workers + 1: the
gateway runs on the workers' cores) with ``SHARED_CORES_S``: there every message is CPU a worker
does not get, however idle the loop's own thread looks (``--gateway-arg=--stream-interval-ms=0``
streams token by token anyway).
"""

from __future__ import annotations

from collections.abc import Callable

LOW, HIGH = 0.4, 0.75  # the loop's busy share where holding begins, and where it reaches its most
MAX_AUTO_S = 0.025  # the longest auto hold: 40 messages a second per stream
SHARED_CORES_S = MAX_AUTO_S  # the hold of a gateway on its workers' cores


class StreamInterval:
    """The current hold, in seconds: fixed, or from the loop's busy share (``busy``)."""

    def __init__(self, fixed_s: float | None, busy: Callable[[], float] = lambda: 0.0) -> None:
        if fixed_s is not None and fixed_s < 0:
            raise ValueError(f"a stream interval must be >= 0, got {fixed_s}")
        self.fixed_s, self.busy = fixed_s, busy

    @classmethod
    def parse(cls, value: str, busy: Callable[[], float] = lambda: 0.0) -> StreamInterval:
        """``auto`` or milliseconds (``--stream-interval-ms``)."""
        if value == "auto":
            return cls(None, busy)
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if not ms >= 0:  # (NaN too)
            raise ValueError(f"stream_interval_ms must be auto or milliseconds >= 0, got {value!r}")
        return cls(ms / 1000)

    def seconds(self) -> float:
        if self.fixed_s is not None:
            return self.fixed_s
        share = (self.busy() - LOW) / (HIGH - LOW)
        return MAX_AUTO_S * min(1.0, share) if share > 0 else 0.0
