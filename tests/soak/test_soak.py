"""Soak: minutes of mixed load with client cancellations and a worker killed and restarted.

Afterwards every block pool must be whole and every request must have ended with a final
status. Prints each process's RSS before and after (``make soak``; ``PDSERVE_SOAK_S`` sets
the duration, default 180 s; ``PDSERVE_SOAK_REPORT=FILE`` also writes the figures as JSON).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.integration.conftest import WORKER_ARGS, assert_pools_whole, start_cluster
from tests.integration.load import Load

pytestmark = pytest.mark.soak


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _snapshot(cluster) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    return {name: {"pid": proc.pid, "rss_mib": round(_rss_mib(proc.pid), 1)}
            for name, proc in cluster.processes.items() if proc.poll() is None}


def test_soak_mixed_load_cancellations_and_a_worker_restart(tmp_path):
    duration_s = float(os.environ.get("PDSERVE_SOAK_S", "180"))
    cluster = start_cluster(tmp_path, prefill=2, decode=2,
                            worker_args=(*WORKER_ARGS, "--lease-timeout-s", "5", "--quarantine-s", "2"))
    try:
        Load(cluster.address, max_tokens=16).run(count=8, concurrency=4, prefix="warm")
        before = _snapshot(cluster)
        stop = threading.Event()
        loads: list[Load] = []

        def drive(seed: int) -> None:
            batch = 0
            while not stop.is_set():
                load = Load(cluster.address, max_tokens=24 + 40 * (seed % 3), cancel_fraction=0.15, seed=seed * 1000 + batch)
                loads.append(load)
                load.run(count=12, concurrency=3, prefix=f"soak-{seed}-{batch}")
                batch += 1

        drivers = [threading.Thread(target=drive, args=(seed,), daemon=True) for seed in range(3)]
        for d in drivers:
            d.start()
        time.sleep(duration_s / 3)
        victim = next(n for n in cluster.processes if n.startswith("decode-1"))
        cluster.kill(victim)
        time.sleep(duration_s / 6)
        cluster.start_worker("decode", victim)
        cluster.wait_ready(timeout_s=120)
        time.sleep(duration_s / 2)
        stop.set()
        for d in drivers:
            d.join(300)

        outcomes = [o for load in loads for o in load.outcomes]
        sent = sum(12 for _ in loads)
        assert len(outcomes) == sent, f"{sent - len(outcomes)} request(s) without a final status"
        unclear = [o for o in outcomes if not (o.final or o.cancelled_by_client)]
        assert not unclear
        errors = [o for o in outcomes if o.code and not o.cancelled_by_client]
        assert all(o.code == "UNAVAILABLE" and o.details for o in errors), {o.code for o in errors}
        assert_pools_whole(cluster, timeout_s=20)
        after = _snapshot(cluster)
        report = {
            "duration_s": duration_s, "requests": len(outcomes),
            "finished": sum(bool(o.finish_reason) for o in outcomes),
            "cancelled_by_client": sum(o.cancelled_by_client for o in outcomes),
            "unavailable": len(errors), "restarted": victim,
            "rss_before_mib": before, "rss_after_mib": after,
        }
        print(json.dumps(report, indent=2))
        if os.environ.get("PDSERVE_SOAK_REPORT"):
            Path(os.environ["PDSERVE_SOAK_REPORT"]).write_text(json.dumps(report, indent=2))
    finally:
        cluster.stop()
