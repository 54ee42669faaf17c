"""One side of ``bench/serving_ab.py``: a cluster of the code this process imports (its
``PYTHONPATH``: the worktree of one side), as ``pdserve up`` starts it with the policy given,
warmed, then through one of vs_vllm's workloads at each rate in turn, each with its own seed as
vs_vllm draws them. It imports nothing of its own directory's tree, so it runs any commit that
has ``bench.vs_vllm``'s workloads.

    cd WORKTREE && PYTHONPATH=WORKTREE python -c "$(cat bench/serving_ab_run.py)" WORKLOAD RATES POLICY WORK_DIR

(its text through ``-c``: run as a script, its own directory would come first on the path, and
this ``bench/common.py`` would shadow the ``common`` package)

Last line: ``{"points": [{"workload", "rate", "goodput", "admitted_attainment", "rejected"}, ...]}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.common import run_load_tester
from bench.serving_systems import PdserveSystem
from bench.vs_vllm import COMPARISON_SEED, WARM_SEED, WORKLOADS, summary
from common.engine.config import resolve_dtype


def main() -> None:
    workload, rates, policy, work = sys.argv[1], [float(r) for r in sys.argv[2].split(",")], sys.argv[3], Path(sys.argv[4])
    flags, mix = WORKLOADS[workload]
    points = []
    with PdserveSystem("tiny", policy, resolve_dtype("auto", "cpu"), work / "logs").start() as system:
        target = ("--backend", "openai", "--base-url", system.base_url)
        run_load_tester(target, 2.0, 20, flags, "", work / "warm", seed=WARM_SEED)
        for i, rate in enumerate(rates):
            r = run_load_tester(target, rate, max(60, round(rate * 20)), flags, mix, work / f"run{i}",
                                seed=COMPARISON_SEED + 10 * i)
            p = summary(policy, workload, rate, r)
            points.append({"workload": workload, "rate": rate, "goodput": p["goodput"],
                           "admitted_attainment": p["admitted_attainment"], "rejected": p["rejected"]})
    print(json.dumps({"points": points}))


if __name__ == "__main__":
    main()
