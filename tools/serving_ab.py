"""Use when a change to the guards must be told apart from run-to-run noise: two commits'
serving, alternated on this machine.

A serving point on two shared cores moves from run to run by more than many a change is worth
(docs/decisions.md, "Serving A/B: alternated runs, and an A/A run for the noise"), so one run of a
change against one run of the base says little. This runs a pdserve cluster (``pdserve up``'s defaults,
the policy given) from the code of ``--base`` (a git worktree, made and removed here) and from the
working tree, in turns (base, then the change, ``--rounds`` times), each through vs_vllm's workloads
and the rates given, a fresh cluster per run, and reports every run, the medians, and how many of
each side's runs held the target attainment. Run with ``--base`` the commit the working tree is
(an A/A run), it shows the noise a difference must clear.

    python tools/serving_ab.py --base REV [--workload mixed] [--rates 16,48] [--rounds 3] [--out f.json] [--plot f.png]
    python tools/serving_ab.py --base REV --workload mixed --workload bursty --rates mixed=16,48 --rates bursty=24,48

Last line: ``{"base", "change", "runs": [{"side", "round", "workload", "rate", "goodput",
"admitted_attainment", "rejected"}, ...], "summary": [{"workload", "rate", "side", "median_goodput",
"runs_at_target", "runs"}, ...], "median_goodput_ratio": {"<workload>@<rate>": change / base}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lib.common import device_name, emit, progress  # noqa: E402
from bench.vs_vllm import WORKLOADS as VS_VLLM_WORKLOADS  # noqa: E402
from common.slo.promise import DEFAULT_TARGET  # noqa: E402

ONE_RUN = ROOT / "tools" / "serving_ab_run.py"  # a cluster of the code it is started from, one workload's rates


def summarize(runs: list[dict], target: float = DEFAULT_TARGET) -> tuple[list[dict], dict[str, float]]:
    """Per workload, rate and side: the median goodput, how many runs held ``target`` of admitted
    requests to both SLOs, and the runs; and per workload and rate, the change's median goodput over
    the base's."""
    groups: dict[tuple[str, float, str], list[dict]] = {}
    for run in runs:
        groups.setdefault((run["workload"], run["rate"], run["side"]), []).append(run)
    summary = [{"workload": w, "rate": r, "side": side, "runs": len(group),
                "median_goodput": statistics.median(g["goodput"] for g in group),
                "runs_at_target": sum(g["admitted_attainment"] >= target for g in group)}
               for (w, r, side), group in sorted(groups.items())]
    medians = {(s["workload"], s["rate"], s["side"]): s["median_goodput"] for s in summary}
    ratios = {f"{w}@{r:g}": medians[(w, r, "change")] / medians[(w, r, "base")]
              for (w, r, side) in medians if side == "base" and (w, r, "change") in medians
              and medians[(w, r, "base")] > 0}
    return summary, ratios


def rates_by_workload(specs: list[str], workloads: list[str]) -> dict[str, str]:
    """``--rates`` as given (``16,48`` for every workload, ``bursty=24,48`` for one; a later one
    wins) for each workload run. ValueError on a rate that is not a positive number or a
    workload not run."""
    rates = dict.fromkeys(workloads, "16,48")
    for spec in specs:
        name, _, values = spec.rpartition("=")
        if name and name not in rates:
            raise ValueError(f"--rates {spec!r}: {name!r} is not a workload run here ({', '.join(workloads)})")
        try:
            numbers = [float(v) for v in values.split(",")] if values else []
        except ValueError:
            numbers = []
        if not numbers or min(numbers) <= 0:
            raise ValueError(f"--rates {spec!r}: rates are positive numbers, comma-separated")
        for workload in [name] if name else workloads:
            rates[workload] = values
    return rates


def one_side(code: Path, workload: str, rates: str, policy: str, work: Path) -> list[dict]:
    """One fresh cluster of the code at ``code`` through ``rates``: its points."""
    # its text, not its path: through -c the side's tree (the working directory) comes first on
    # sys.path, where run by path this tree's tools/ would, so every import is the side's
    done = subprocess.run([sys.executable, "-c", ONE_RUN.read_text(), workload, rates, policy, str(work)], cwd=code,
                          env={**os.environ, "PYTHONPATH": str(code)}, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"a run of {code} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["points"]


def worktree(rev: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(where), rev], check=True)
    return where


def plot(runs: list[dict], out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = sorted({(r["workload"], r["rate"]) for r in runs})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in ((axes[0], "goodput", "Goodput (good req/s)"),
                           (axes[1], "admitted_attainment", "Admitted requests meeting both SLOs")):
        for side, color, shift in (("base", "tab:blue", -0.12), ("change", "tab:orange", 0.12)):
            xs = [points.index((r["workload"], r["rate"])) + shift for r in runs if r["side"] == side]
            ax.scatter(xs, [r[key] for r in runs if r["side"] == side], color=color, label=side, alpha=0.8)
        ax.set_xticks(range(len(points)), [f"{w} {r:g}" for w, r in points])
        ax.set(title=title)
        ax.grid(alpha=0.3)
        ax.legend()
    axes[1].axhline(DEFAULT_TARGET, color="gray", linestyle=":")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit (any git revision) the working tree is compared with")
    parser.add_argument("--workload", action="append", choices=tuple(VS_VLLM_WORKLOADS),
                        help="vs_vllm's workloads (repeatable; default: mixed)")
    parser.add_argument("--rates", action="append", default=[],
                        help="request rates each run serves, in order (req/s; default 16,48); WORKLOAD=RATES "
                             "for one workload (repeatable)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side, alternated")
    parser.add_argument("--policy", default="scorpio")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    workloads = args.workload or ["mixed"]
    try:
        rates = rates_by_workload(args.rates, workloads)
    except ValueError as exc:
        parser.error(str(exc))
    base_rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.base], check=True,
                              capture_output=True, text=True).stdout.strip()
    change = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], check=True,
                            capture_output=True, text=True).stdout.strip()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="pdserve-ab-") as tmp:
        work = Path(tmp)
        base = worktree(base_rev, work / "base")
        try:
            for round_ in range(args.rounds):
                for side, code in (("base", base), ("change", ROOT)):
                    for workload in workloads:
                        progress(f"round {round_ + 1}/{args.rounds}: {side} ({base_rev if side == 'base' else change}), "
                                 f"{workload} at {rates[workload]} req/s ...")
                        for p in one_side(code, workload, rates[workload], args.policy,
                                          work / f"{side}-{round_}-{workload}"):
                            runs.append({"side": side, "round": round_ + 1, **p})
                            progress(f"  {workload} {p['rate']:g} req/s: goodput {p['goodput']:.2f}, "
                                     f"{100 * p['admitted_attainment']:.1f}% of admitted, rejected {p['rejected']}")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    summary, ratios = summarize(runs)
    for s in summary:
        progress(f"{s['workload']} {s['rate']:g} req/s, {s['side']}: median goodput {s['median_goodput']:.2f}, "
                 f"{s['runs_at_target']}/{s['runs']} runs at {100 * DEFAULT_TARGET:.0f}% of admitted")
    for point, ratio in ratios.items():
        progress(f"{point}: the change's median goodput {ratio:.3f}x the base's")
    if args.plot:
        plot(runs, args.plot)
    emit({"device": device_name("cpu"), "base": base_rev, "change": change, "policy": args.policy, "runs": runs,
          "summary": summary, "median_goodput_ratio": ratios}, args.out)


if __name__ == "__main__":
    main()
