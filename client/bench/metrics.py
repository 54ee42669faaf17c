"""Per-request records → the figures ``vllm bench serve`` reports, under its key names.

TTFT = send → first token; TPOT = (E2E − TTFT)/(output tokens − 1), 0 for one token;
ITL = gaps between consecutive token messages; E2E (``e2el``) = send → last token.
A request is good when TTFT ≤ its TTFT SLO and TPOT ≤ its TPOT SLO; rejected
(RESOURCE_EXHAUSTED) and failed requests are never good.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

REJECTED = "RESOURCE_EXHAUSTED"


@dataclass(slots=True)
class RequestRecord:
    index: int
    input_len: int
    start: float  # seconds since the benchmark began
    slo_class: str = ""
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None
    token_times: list[float] = field(default_factory=list)  # arrival of each token message
    tokens_per_message: list[int] = field(default_factory=list)
    error: str = ""  # gRPC status name, "" when it completed
    output_token_ids: list[int] = field(default_factory=list)  # over gRPC: what a next turn resends
    cached_tokens: int = 0  # prompt tokens the server found in its prefix cache (its usage says)
    # how long after its planned moment the load tester's event loop got to sending it: the
    # tester's own delay, which its latencies of the same moments carry too
    send_late_s: float = 0.0
    # the tester's loop's worst lag from the send to the first token's read (client.bench.read_lag):
    # a TTFT carries up to this much of the tester's own backlog
    read_lag_s: float = 0.0
    request_id: str = ""  # the server's id for it (over gRPC), which its logs name it by

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.token_times)

    @property
    def output_len(self) -> int:
        return sum(self.tokens_per_message)

    @property
    def ttft(self) -> float:
        return self.token_times[0] - self.start

    @property
    def e2el(self) -> float:
        return self.token_times[-1] - self.start

    @property
    def tpot(self) -> float:
        return (self.e2el - self.ttft) / (self.output_len - 1) if self.output_len > 1 else 0.0

    @property
    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]

    def good(self, lag_s: float = 0.0) -> bool:
        """Both SLOs met (with ``lag_s`` taken off the TTFT: what it would have been without that lag)."""
        if not self.ok:
            return False
        ttft_ok = self.ttft_slo_ms is None or (self.ttft - lag_s) * 1000 <= self.ttft_slo_ms
        tpot_ok = self.tpot_slo_ms is None or self.tpot * 1000 <= self.tpot_slo_ms
        return ttft_ok and tpot_ok


def summarize(records: list[RequestRecord], duration: float, percentiles: list[float],
              metrics: list[str]) -> dict[str, object]:
    done = [r for r in records if r.ok]
    errors = Counter(r.error for r in records if r.error)
    good = sum(r.good() for r in records)
    out_tokens = sum(r.output_len for r in done)
    result: dict[str, object] = {
        "duration": duration, "num_prompts": len(records), "completed": len(done),
        "failed": sum(n for code, n in errors.items() if code != REJECTED), "rejected": errors.get(REJECTED, 0),
        "errors_by_code": dict(errors),
        "total_input_tokens": sum(r.input_len for r in done), "total_output_tokens": out_tokens,
        "request_throughput": len(done) / duration, "request_goodput": good / duration,
        "output_throughput": out_tokens / duration,
        "total_token_throughput": (out_tokens + sum(r.input_len for r in done)) / duration,
        "slo_adherence": good / len(records) if records else 0.0,
        "total_cached_tokens": sum(r.cached_tokens for r in done),
        "prefix_hit_rate": sum(r.cached_tokens for r in done) / max(1, sum(r.input_len for r in done)),
        "prefill_tokens_per_request": sum(r.input_len - r.cached_tokens for r in done) / max(1, len(done)),
        "p99_send_late_ms": float(np.percentile([r.send_late_s * 1000 for r in records], 99)) if records else 0.0,
        "max_send_late_ms": max((r.send_late_s * 1000 for r in records), default=0.0),
        "p99_read_lag_ms": float(np.percentile([r.read_lag_s * 1000 for r in done], 99)) if done else 0.0,
        # requests that missed only by what the tester's own lag could have added to their TTFT
        "misses_within_read_lag": sum(not r.good() and r.good(lag_s=r.read_lag_s) for r in done),
    }
    samples = {"ttft": [r.ttft for r in done], "tpot": [r.tpot for r in done if r.output_len > 1],
               "itl": [g for r in done for g in r.itls], "e2el": [r.e2el for r in done]}
    for name in metrics:
        result.update(_distribution(name, samples[name], percentiles))
    return result


def _distribution(name: str, seconds: list[float], percentiles: list[float]) -> dict[str, float]:
    ms = np.array(seconds) * 1000 if seconds else np.zeros(1)
    figures = {f"mean_{name}_ms": float(ms.mean()), f"median_{name}_ms": float(np.median(ms)),
               f"std_{name}_ms": float(ms.std())}
    for p in percentiles:
        figures[f"p{p:g}_{name}_ms"] = float(np.percentile(ms, p))
    return figures


def per_class(records: list[RequestRecord], duration: float) -> dict[str, dict[str, float]]:
    classes: dict[str, list[RequestRecord]] = {}
    for r in records:
        classes.setdefault(r.slo_class or "default", []).append(r)
    return {name: {"sent": len(rs), "completed": sum(r.ok for r in rs), "good": sum(r.good() for r in rs),
                   "rejected": sum(r.error == REJECTED for r in rs),
                   "failed": sum(bool(r.error) and r.error != REJECTED for r in rs),
                   "goodput": sum(r.good() for r in rs) / duration,
                   "adherence": sum(r.good() for r in rs) / len(rs)}
            for name, rs in sorted(classes.items())}


def detailed(records: list[RequestRecord]) -> dict[str, list[object]]:
    return {"ttfts": [r.ttft if r.ok else None for r in records], "itls": [r.itls for r in records],
            "output_lens": [r.output_len for r in records], "input_lens": [r.input_len for r in records],
            "start_times": [r.start for r in records], "errors": [r.error for r in records],
            "slo_classes": [r.slo_class for r in records], "request_ids": [r.request_id for r in records],
            "ttft_slos_ms": [r.ttft_slo_ms for r in records]}
