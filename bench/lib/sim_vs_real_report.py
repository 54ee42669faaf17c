"""How ``bench/sim_vs_real.py`` sets its simulated points beside the real ones: each figure within
15% or not, one line a point, and the plot (real and simulated goodput and admitted attainment by
rate, each variant of ``bench/lib/sim_variants.py`` beside them)."""

from __future__ import annotations

from pathlib import Path

from bench.lib.sim_variants import VARIANTS


def close_enough(s: dict, r: dict, key: str) -> bool:
    """The simulated figure within 15% of the real point's."""
    return abs(s[key] - r[key]) <= 0.15 * max(r[key], 1e-9)


def both_close(s: dict, r: dict) -> bool:
    """Goodput and admitted attainment both within 15% of the real point's."""
    return close_enough(s, r, "goodput") and close_enough(s, r, "admitted_attainment")


def compare(real: list[dict], simulated: list[dict], beside: dict[str, list[dict]]) -> list[dict]:
    """Each real point with the compared simulation's, and each variant's beside it (``sim_<variant>_*``)."""
    out = []
    for r in real:
        def same(points: list[dict]) -> dict:
            return next(p for p in points if p["policy"] == r["policy"] and p["rate"] == r["rate"])

        s = same(simulated)
        point = {"rate": r["rate"], "policy": r["policy"], "real_goodput": r["goodput"], "sim_goodput": s["goodput"],
                 "real_admitted_attainment": r["admitted_attainment"],
                 "sim_admitted_attainment": s["admitted_attainment"], "real_rejected": r["rejected"],
                 "sim_rejected": s["rejected"], "real_refusals": r["refusals"], "sim_refusals": s["refusals"],
                 "real_margins": r["margins"], "sim_margins": s["margins"],
                 "real_cores_used": r["cores_used"], "sim_stretch": s["stretch"]}
        for key in ("goodput_runs", "goodput_spread", "admitted_attainment_runs", "admitted_attainment_spread"):
            if key in r:  # the point was run more than once (``--repeats``)
                point[f"real_{key}"], point[f"sim_{key}"] = r[key], s.get(key)
        for name, points in beside.items():
            v = same(points)
            point.update({f"sim_{name}_goodput": v["goodput"], f"sim_{name}_admitted_attainment": v["admitted_attainment"],
                          f"sim_{name}_stretch": v["stretch"], f"sim_{name}_refusals": v["refusals"],
                          f"sim_{name}_within_15pct": both_close(v, r)})
        point["goodput_within_15pct"] = close_enough(s, r, "goodput")
        point["attainment_within_15pct"] = close_enough(s, r, "admitted_attainment")
        out.append(point)
    return out


def summary_line(p: dict) -> str:
    """One compared point, real beside simulated (and each variant's in brackets)."""
    def beside(key: str, form: str) -> str:
        return ", ".join(f"{name} {p[f'sim_{name}_{key}']:{form}}" for name in VARIANTS)

    return (f"{p['policy']:8s} @ {p['rate']:5g}: goodput real {p['real_goodput']:.2f} sim {p['sim_goodput']:.2f} "
            f"({beside('goodput', '.2f')}); admitted attainment real "
            f"{p['real_admitted_attainment']:.1%} sim {p['sim_admitted_attainment']:.1%} "
            f"({beside('admitted_attainment', '.1%')})"
            + (f"; refused real {p['real_refusals']} sim {p['sim_refusals']}" if p["policy"] == "scorpio" else "")
            + (f"; real runs apart by {p['real_goodput_spread']:.0%} (goodput), "
               f"{p['real_admitted_attainment_spread']:.0%} (attainment)" if len(p.get("real_goodput_runs", ())) > 1
               else ""))


def plot(points: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5.4))
    for ax, key, title in ((axes[0], "goodput", "Goodput (good req/s)"),
                           (axes[1], "admitted_attainment", "Admitted requests meeting both SLOs")):
        for policy, color in (("fcfs", "tab:blue"), ("scorpio", "tab:orange")):
            ps = [p for p in points if p["policy"] == policy]
            ax.plot([p["rate"] for p in ps], [p[f"real_{key}"] for p in ps], "o-", color=color, label=f"{policy} real")
            ax.plot([p["rate"] for p in ps], [p[f"sim_{key}"] for p in ps], "s--", color=color, label=f"{policy} sim")
            for (variant, label), marker in zip(VARIANTS.items(), ("x:", "d:", "^-.", "v-.", "<:", ">-.", "*:")):
                if ps and f"sim_{variant}_{key}" in ps[0]:
                    ax.plot([p["rate"] for p in ps], [p[f"sim_{variant}_{key}"] for p in ps], marker, color=color,
                            alpha=0.6, label=f"{policy} sim, {label}")
        ax.set(title=title, xlabel="request rate (req/s)")
        ax.grid(alpha=0.3)
    # one legend below both plots: over either, it hides the points
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=7)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    fig.savefig(out, dpi=110)
