"""Faults injected on purpose, so tests can show what the cluster does when a part fails.

``PDSERVE_FAULTS`` holds ``kind:worker-id-prefix:count`` entries separated by commas, e.g.
``engine_thread_dies:decode-1:20``: the engine thread of every worker whose id starts with
``decode-1`` raises after its 20th step. Unset (always, outside tests): no fault anywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

KINDS = ("engine_thread_dies",)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    worker_prefix: str
    count: int


def parse_faults(text: str) -> tuple[Fault, ...]:
    faults = []
    for entry in filter(None, text.split(",")):
        kind, prefix, count = entry.split(":")
        if kind not in KINDS:
            raise ValueError(f"PDSERVE_FAULTS: unknown fault {kind!r} (known: {', '.join(KINDS)})")
        faults.append(Fault(kind, prefix, int(count)))
    return tuple(faults)


def fault_threshold(kind: str, worker_id: str) -> int | None:
    """After how many events this process should fail with ``kind``; None: never."""
    for fault in parse_faults(os.environ.get("PDSERVE_FAULTS", "")):
        if fault.kind == kind and worker_id.startswith(fault.worker_prefix):
            return fault.count
    return None
