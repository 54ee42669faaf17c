"""bench/lib/grpc_floor.py: the stand-in gateway serves every request and reports its loop's CPU."""

from __future__ import annotations

import math

from bench.lib.grpc_floor import loop_cpu_ms_per_request


def test_the_stand_in_gateway_reports_a_positive_loop_cpu_per_request():
    ms = loop_cpu_ms_per_request(rate=200.0, requests=40, messages=3, interval_s=0.002, step_s=0.001)
    # every request went through Reserve, Prefill, Commit, decode steps and three messages: some CPU each,
    # and far less than a second of it (the probe read the loop's thread, not the process)
    assert math.isfinite(ms) and 0.0 < ms < 1000.0
