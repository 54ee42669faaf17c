"""What the TTFT guard's admission check costs the gateway as its prefill queue grows.

For every arrival (and for every request waiting for a decode place, each time it gets a turn)
the gateway asks each prefill worker's guard whether the newcomer would make a queued request
late (``TtftGuard.pushes_queued_past``). The baseline is that check by its definition, run in
the same process: each queued request with a later deadline predicted with and without the
newcomer, one ``predict_s`` at a time (each a pass over the queue). Each queue is measured with
the requests sent without a TTFT SLO (every forward the whole token budget) and with the
``--ttft-slo-ms`` given (default 100: the forwards are cut to what fits half of it, and every
prediction of the check uses that cut).

    python bench/guard_cost.py [--queued 10,50,100,200,400] [--ttft-slo-ms 100] [--out f.json]

Last line: JSON ``{"points": [{"queued", "ttft_slo_ms", "forward_cut", "one_pass_us", "per_request_us",
"speedup", "same_answers"}, ...]}``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit, progress  # noqa: E402
from common.slo.cost_models import PrefillModel  # noqa: E402
from common.slo.ttft_guard import TtftGuard, new_guard  # noqa: E402

MODEL = PrefillModel(threshold=100, base_s=0.010, per_token_s=1e-4)
FORWARD_TOKENS = 4096  # a worker's default prefill budget


def by_definition(guard: TtftGuard, prompt: int, deadline: float, now: float) -> bool:
    return any(d >= deadline and d != float("inf") and now + (guard.predict_s(0, d, ttft_s=t) or 0.0) <= d
               and now + (guard.predict_s(prompt, d, ttft_s=t) or 0.0) > d for d, _, t in list(guard.queued.values()))


def loaded_guard(queued: int, ttft_s: float) -> TtftGuard:
    """A guard with ``queued`` 300-token prompts in flight, deadlines spread over 10 s ahead, sent
    with a TTFT SLO of ``ttft_s`` (0: none)."""
    guard = new_guard(MODEL, FORWARD_TOKENS)
    guard.calibration.observe(0.01, 0.01)
    for i in range(queued):
        guard.sent(f"r{i}", 100.0 + 10.0 * i / max(queued, 1), 300, ttft_s)
    return guard


def per_call_us(check, guard: TtftGuard, calls: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for i in range(calls):
            check(guard, 300, 99.0 + (i % 7), 99.0)
        best = min(best, (time.perf_counter() - started) / calls * 1e6)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queued", default="10,50,100,200,400")
    parser.add_argument("--ttft-slo-ms", type=float, default=100.0, help="the SLO of the second series (0: none)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    points = []
    for slo_ms in sorted({0.0, args.ttft_slo_ms}):
        for queued in (int(q) for q in args.queued.split(",")):
            guard = loaded_guard(queued, slo_ms / 1000)
            calls = max(20, 20_000 // max(queued, 1))
            ours = per_call_us(lambda g, p, d, n: g.pushes_queued_past(p, d, n), guard, calls)
            theirs = per_call_us(by_definition, guard, max(5, calls // 10))
            agree = all(guard.pushes_queued_past(300, 99.0 + k, 99.0) == by_definition(guard, 300, 99.0 + k, 99.0)
                        for k in range(7))
            points.append({"queued": queued, "ttft_slo_ms": slo_ms, "forward_cut": guard.forward_cut,
                           "one_pass_us": ours, "per_request_us": theirs, "speedup": theirs / ours,
                           "same_answers": agree})
            progress(f"[{queued} queued, TTFT SLO {slo_ms:g} ms, forwards of {guard.forward_cut} tokens] one pass "
                     f"{ours:.0f} us, per request {theirs:.0f} us ({theirs / ours:.1f}x)")
    emit({"points": points}, args.out)


if __name__ == "__main__":
    main()
