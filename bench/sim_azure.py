"""The Azure conversation trace, whole and at its own rate (19,366 requests over 3,502 s), on
8 prefill + 8 decode simulated workers with a GPU cost profile: how long ``pdserve simulate``
takes for it (the whole command as a user runs it, process start included) and what each policy
serves.

    python bench/sim_azure.py [--policies scorpio,fcfs] [--out bench/results/sim-azure-8p8d.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.common import emit, progress  # noqa: E402
from common.slo.startup import hardware_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROFILE = Path("simulator/profiles/h200-1b-bfloat16.json")  # measured by `pdserve profile` there
CLASSES = "a:500:30,b:2000:30,c:3000:30,d:500:50,e:1000:50,f:7500:50"
TRACE_REQUESTS = 19366
KEPT = ("num_prompts", "duration", "request_goodput", "slo_adherence", "rejected", "failed", "median_ttft_ms",
        "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "per_class")


def command(policy: str, prefill: int, decode: int, profile: Path) -> list[str]:
    return ["pdserve", "simulate", "--dataset-name", "trace", "--num-prompts", str(TRACE_REQUESTS),
            "--prefill", str(prefill), "--decode", str(decode), "--policy", policy, "--cost-model", str(profile),
            "--slo-mix", CLASSES, "--ignore-eos"]


def run(policy: str, args: argparse.Namespace, out_dir: Path) -> dict[str, object]:
    cmd = command(policy, args.prefill, args.decode, args.cost_model)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pdserve", *cmd[1:], "--save-result", "--result-dir", str(out_dir),
                    "--result-filename", f"{policy}.json"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    result = json.loads((out_dir / f"{policy}.json").read_text())
    return {**{k: result[k] for k in KEPT if k in result}, "wall_s_incl_process_start": round(wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", default="scorpio,fcfs")
    parser.add_argument("--prefill", type=int, default=8)
    parser.add_argument("--decode", type=int, default=8)
    parser.add_argument("--cost-model", type=Path, default=PROFILE)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    policies: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies.split(","):
            progress(f"simulating the whole trace with {policy} ...")
            policies[policy] = p = run(policy, args, Path(tmp))
            progress(f"{policy:8s}: {p['wall_s_incl_process_start']:.1f} s, goodput {p['request_goodput']:.2f} req/s, "
                     f"adherence {p['slo_adherence']:.2%}, rejected {p['rejected']}, failed {p['failed']}")
    emit({"what": f"pdserve simulate on the full Azure conversation trace at its real rate ({TRACE_REQUESTS:,} "
                  f"requests), {args.prefill} prefill + {args.decode} decode workers, "
                  f"{args.cost_model.name} cost profile, six SLO classes",
          "command": " ".join(command("POLICY", args.prefill, args.decode, args.cost_model)),
          "machine": f"{hardware_name(torch.device('cpu'))}, simulator single-threaded",
          "policies": policies}, args.out)


if __name__ == "__main__":
    main()
