"""What a person reads: a progress bar while it runs and a summary table at the end."""

from __future__ import annotations

import sys
import time

from client.bench.metrics import RequestRecord


class ProgressBar:
    def __init__(self, total: int, label: str, stream=sys.stderr) -> None:  # type: ignore[no-untyped-def]
        self.total, self.label, self.stream = total, label, stream
        self.done = self.errors = 0
        self.started = time.perf_counter()

    def update(self, record: RequestRecord) -> None:
        self.done += 1
        self.errors += bool(record.error)
        step = max(1, self.total // 10)
        if not self.stream.isatty() and self.done % step and self.done != self.total:
            return  # logs get a line per 10%, terminals a live bar
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        elapsed = time.perf_counter() - self.started
        self.stream.write(f"{'' if self.stream.isatty() else chr(10)}\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                          f"{elapsed:5.1f}s errors {self.errors}")
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def summary_table(result: dict[str, object], per_class: dict[str, dict[str, float]], metrics: list[str],
                  percentiles: list[float]) -> str:
    lines = ["{:=^60}".format(" Serving Benchmark Result ")]
    rows = [("Successful requests", result["completed"]), ("Rejected requests", result["rejected"]),
            ("Failed requests", result["failed"]), ("Benchmark duration (s)", result["duration"]),
            ("Total input tokens", result["total_input_tokens"]),
            ("Total generated tokens", result["total_output_tokens"]),
            ("Request throughput (req/s)", result["request_throughput"]),
            ("Request goodput (req/s)", result["request_goodput"]),
            ("SLO adherence", result["slo_adherence"]),
            ("Output token throughput (tok/s)", result["output_throughput"])]
    if "p99_send_late_ms" in result:  # the load tester's own lag: its latencies carry it too
        rows.append(("Load tester's send lag, P99 / max (ms)",
                     f"{result['p99_send_late_ms']:.1f} / {result['max_send_late_ms']:.1f}"))
    if "p99_read_lag_ms" in result:
        rows.append(("Load tester's read lag, P99 (ms)", f"{result['p99_read_lag_ms']:.1f}"))
        rows.append(("Misses within the tester's lag", result["misses_within_read_lag"]))
    lines += [_row(name, value) for name, value in rows]
    for name in metrics:
        lines.append("{:-^60}".format(f" {name.upper()} (ms) "))
        keys = [f"mean_{name}_ms", f"median_{name}_ms"] + [f"p{p:g}_{name}_ms" for p in percentiles]
        lines += [_row(key.replace(f"_{name}_ms", "").replace("_", " ").title(), result[key]) for key in keys]
    if len(per_class) > 1 or "default" not in per_class:
        lines.append("{:-^60}".format(" Per SLO class "))
        lines.append(f"{'class':<14}{'sent':>7}{'good':>7}{'rejected':>10}{'failed':>8}{'adherence':>12}")
        for name, c in per_class.items():
            lines.append(f"{name:<14}{c['sent']:>7}{c['good']:>7}{c['rejected']:>10}{c['failed']:>8}"
                         f"{c['adherence']:>12.2%}")
    lines.append("=" * 60)
    return "\n".join(lines)


def _row(name: str, value: object) -> str:
    shown = f"{value:.2f}" if isinstance(value, float) else str(value)
    return f"{name:<44}{shown:>16}"
