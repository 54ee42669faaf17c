"""Use only through ``tools/serving_ab.py``, which starts it once a side and round.

A cluster of the code this process imports (its ``PYTHONPATH``: the worktree of one side), as
``pdserve up`` starts it with the policy given, warmed, then through one of vs_vllm's workloads at
each rate in turn, as vs_vllm measures a system (``bench.vs_vllm.measure``: the same warm-up,
numbers of prompts and seeds). It imports nothing of
its own directory's tree, so it runs any commit that has ``bench.vs_vllm.measure``.

    cd WORKTREE && PYTHONPATH=WORKTREE python -c "$(cat tools/serving_ab_run.py)" WORKLOAD RATES POLICY WORK_DIR

(its text through ``-c``: the side's tree, the working directory, then comes first on the path;
run by path, this tree's ``tools/`` would)

Last line: ``{"points": [{"workload", "rate", "goodput", "admitted_attainment", "rejected"}, ...]}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    from bench.lib.serving_systems import PdserveSystem
except ImportError:  # a base revision whose helpers sit in bench/ itself, not bench/lib/
    from bench.serving_systems import PdserveSystem  # type: ignore[no-redef]
from bench.vs_vllm import COMPARISON_SEED, measure
from common.engine.config import resolve_dtype

# vs_vllm's own defaults (its --warm-prompts, --min-prompts, --duration-s), spelled here so that a
# side's tree needs nothing newer than ``measure``
VS_VLLM_DEFAULTS = argparse.Namespace(warm_prompts=20, min_prompts=60, duration_s=20.0)


def main() -> None:
    workload, rates, policy, work = sys.argv[1], [float(r) for r in sys.argv[2].split(",")], sys.argv[3], Path(sys.argv[4])
    with PdserveSystem("tiny", policy, resolve_dtype("auto", "cpu"), work / "logs").start() as system:
        measured = measure(system, f"pdserve-{policy}", workload, rates, VS_VLLM_DEFAULTS, work, COMPARISON_SEED)
    print(json.dumps({"points": [{"workload": workload, "rate": p["rate"], "goodput": p["goodput"],
                                  "admitted_attainment": p["admitted_attainment"], "rejected": p["rejected"]}
                                 for p in measured]}))


if __name__ == "__main__":
    main()
