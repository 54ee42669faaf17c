"""What a worker last reported of its load, as the policies read it: plain fields, converted from
the wire message once per heartbeat (``common.rpc.convert.load_from_proto``), so routing and the
guards work on the same state in the gateway and in the simulator."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoadReport:
    free_blocks: int = 0
    running: int = 0
    waiting: int = 0
    queued_tokens: int = 0  # prompt tokens queued there (all gateways')
    draining: bool = False
    vbs: float = 0.0  # decode: Σ TRP over running and reserved requests
    mean_len: float = 0.0  # decode: mean sequence length of the running set
    tightest_tpot_ms: float = 0.0  # decode: the tightest TPOT SLO running or reserved
    reserved: int = 0  # decode: leases not yet committed
    earliest_ttft_deadline_ms: float = 0.0  # prefill: ms until its most urgent queued request's TTFT deadline
    steps: int = 0  # engine steps completed since start: progress, for stall detection
    tpot_alone_ms: float = 0.0  # decode: one request's step alone, the least TPOT it gives (0: unknown)
    tpot_margin_ceiling: float = 0.0  # decode: the most ε its steps have shown it needs (0: not reported)
    tpot_margin_start: float = 0.0  # decode: where ε starts there and returns to on time (0: not reported)
