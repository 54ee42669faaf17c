"""Use when the load tester sees TTFT misses the gateway counts in time: where a request's TTFT
goes between the two, request by request.

``bench/slo.py --detailed`` keeps, for every point, each request's id and TTFT as the load tester
measured it (from its send); each cluster's gateway log has, for the same id, the TTFT the gateway
measured (from its handler) and what its plan allowed for the front (``allowed``: the wait before
the handler and the delivery of the first token, ``gateway.arrival_wait`` and ``gateway.delivery``).
The gap, tester TTFT less gateway TTFT, is time neither the guards nor the gateway's counters see;
an allowance below it is a plan short by the difference. Per point this prints the gap's
percentiles, how often it outran the allowance, and the admitted requests that missed their TTFT
by the tester's clock while the gateway counted them in time, by TTFT class.

    python tools/front_end_gap.py WORK_DIR [--out gap.json]

WORK_DIR is the directory ``bench/slo.py`` names as it starts a workload (``pdserve-slo-*``); its
``logs-<policy>/gateway.log`` files are joined with the ``<policy>/<rate>.json`` results beside them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import emit, progress  # noqa: E402

FINISHED = re.compile(r"\[(?P<id>[0-9a-f]+)\] finished: \S+, \d+ tokens, ttft (?P<ttft>[\d.]+) ms, .*?"
                      r"allowed (?P<allowed>[\d.]+) ms")


def gateway_ttfts(log: Path) -> dict[str, tuple[float, float]]:
    """request id → (TTFT the gateway measured, the front's allowance), in ms, from its log."""
    found = {}
    for line in log.read_text(errors="replace").splitlines():
        m = FINISHED.search(line)
        if m:
            found[m["id"]] = (float(m["ttft"]), float(m["allowed"]))
    return found


def point_gap(result: dict, gateway: dict[str, tuple[float, float]]) -> dict | None:
    """The figures of one point's detailed result joined with its gateway's log; None when the
    result kept no request ids (run without ``--detailed``)."""
    ids = result.get("request_ids")
    if not ids:
        return None
    rows = [(tester_s * 1000, *gateway[rid], slo, cls)
            for rid, tester_s, slo, cls in zip(ids, result["ttfts"], result["ttft_slos_ms"], result["slo_classes"])
            if rid in gateway and tester_s is not None]
    if not rows:
        return None
    gaps = np.array([tester - gw for tester, gw, _, _, _ in rows])
    unseen: dict[str, int] = {}  # missed by the tester's clock, in time by the gateway's
    for tester, gw, allowed, slo, cls in rows:
        if slo is not None and tester > slo and gw <= slo:
            unseen[cls or "default"] = unseen.get(cls or "default", 0) + 1
    return {"matched": len(rows), "gap_ms": {f"p{q}": float(np.percentile(gaps, q)) for q in (50, 90, 99)}
            | {"max": float(gaps.max())},
            "allowed_ms_p50": float(np.median([allowed for _, _, allowed, _, _ in rows])),
            "gap_over_allowance": int(sum(g > allowed for g, (_, _, allowed, _, _) in zip(gaps, rows))),
            "ttft_misses_unseen_by_gateway": unseen}


def work_dir_gaps(work: Path) -> list[dict]:
    points = []
    for log in sorted(work.rglob("logs-*/gateway.log")):
        policy = log.parent.name.removeprefix("logs-")
        gateway = gateway_ttfts(log)
        for path in sorted((log.parent.parent / policy).glob("*.json"), key=lambda p: float(p.stem)):
            gap = point_gap(json.loads(path.read_text()), gateway)
            if gap is not None:
                points.append({"policy": policy, "rate": float(path.stem)} | gap)
    return points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, help="a bench/slo.py workload's directory (pdserve-slo-*)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    points = work_dir_gaps(args.work)
    if not points:
        progress(f"no detailed results with gateway logs under {args.work} (run bench/slo.py with --detailed)")
        return 1
    for p in points:
        progress(f"{p['policy']} @ {p['rate']:g} req/s, {p['matched']} requests: gap p50/p99/max "
                 f"{p['gap_ms']['p50']:.1f}/{p['gap_ms']['p99']:.1f}/{p['gap_ms']['max']:.1f} ms, allowed p50 "
                 f"{p['allowed_ms_p50']:.1f} ms, over it {p['gap_over_allowance']}; TTFT misses the gateway "
                 f"counted in time: {p['ttft_misses_unseen_by_gateway'] or 'none'}")
    emit({"points": points}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
