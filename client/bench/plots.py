"""PNG figures: latency CDFs per SLO class, a timeline, and the sweep curves."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from client.bench.metrics import RequestRecord  # noqa: E402


def latency_cdfs(records: list[RequestRecord], out: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    classes = sorted({r.slo_class or "default" for r in records})
    for name in classes:
        done = [r for r in records if r.ok and (r.slo_class or "default") == name]
        for ax, values in ((axes[0], [r.ttft * 1000 for r in done]),
                           (axes[1], [r.tpot * 1000 for r in done if r.output_len > 1])):
            if values:
                xs = np.sort(values)
                ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=name)
    for ax, title in ((axes[0], "TTFT"), (axes[1], "TPOT")):
        ax.set(title=f"{title} CDF", xlabel=f"{title} (ms)", ylabel="fraction of requests")
        ax.grid(alpha=0.3)
        ax.legend(title="SLO class")
    return _save(fig, out)


def timeline(records: list[RequestRecord], duration: float, out: Path, bin_s: float = 0.25) -> Path:
    edges = np.arange(0, duration + bin_s, bin_s)
    inflight = [sum(r.start <= t < (r.token_times[-1] if r.ok else r.start) for r in records) for t in edges]
    token_times = [t for r in records for t, n in zip(r.token_times, r.tokens_per_message) for _ in range(n)]
    counts, _ = np.histogram(token_times, bins=edges)
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.step(edges, inflight, where="post", label="requests in flight", color="tab:blue")
    ax.set(xlabel="time since start (s)", ylabel="requests in flight", title="Load over time")
    twin = ax.twinx()
    twin.plot(edges[:-1] + bin_s / 2, counts / bin_s, color="tab:orange", label="output tokens/s")
    twin.set_ylabel("output tokens/s")
    fig.legend(loc="upper right")
    return _save(fig, out)


def sweep_curves(points: list[dict[str, object]], out: Path) -> Path:
    rates = [p["request_rate"] for p in points]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].plot(rates, [p["request_goodput"] for p in points], marker="o", label="goodput")
    axes[0].plot(rates, [p["request_throughput"] for p in points], marker="x", ls="--", label="throughput")
    axes[0].set(title="Goodput vs request rate", xlabel="request rate (req/s)", ylabel="req/s")
    for ax, key in ((axes[1], "p99_ttft_ms"), (axes[2], "p99_tpot_ms")):
        ax.plot(rates, [p.get(key, float("nan")) for p in points], marker="o")
        ax.set(title=f"{key.split('_')[1].upper()} p99 vs request rate", xlabel="request rate (req/s)", ylabel="ms")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend()
    return _save(fig, out)


def _save(fig: plt.Figure, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
