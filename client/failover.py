"""Which gateway a client asks, when it was given several (``"a:50051,b:50051"`` or a list): the one
that answered last, then the others in turn. A call that fails with UNAVAILABLE before its first
message (the gateway is down, draining, or cannot reach a worker) is made again on the next; one
that fails after it has begun is not (its tokens were already delivered)."""

from __future__ import annotations

from collections.abc import Sequence


def gateway_addresses(address: str | Sequence[str]) -> list[str]:
    """The addresses of a client's gateways: one, several comma-separated, or a list."""
    entries = address.split(",") if isinstance(address, str) else list(address)
    addresses = [a.strip() for a in entries if a.strip()]
    if not addresses:
        raise ValueError("a client needs at least one gateway address")
    return addresses


class Failover:
    def __init__(self, count: int) -> None:
        self.count = count
        self.current = 0  # the gateway that answered last
        self.serving: dict[str, int] = {}  # request id -> the gateway running it (for Abort)

    def order(self) -> list[int]:
        """The gateways to try for the next call, in order."""
        return [(self.current + k) % self.count for k in range(self.count)]

    def tries_next(self, unavailable: bool, begun: bool, last: bool = False) -> bool:
        """Whether a call that failed (``unavailable``: with UNAVAILABLE) is made again on the next
        gateway: only before its first message, and only while another is left."""
        return unavailable and not begun and not last and self.count > 1

    def answered(self, index: int, request_id: str = "") -> None:
        self.current = index
        if request_id:
            self.serving[request_id] = index

    def ended(self, request_id: str) -> None:
        self.serving.pop(request_id, None)
