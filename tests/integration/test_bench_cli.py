"""``pdserve bench`` end to end against a real cluster."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_cli_writes_consistent_json_and_plots(cluster, tmp_path):
    host, port = cluster.address.rsplit(":", 1)
    result = subprocess.run(
        [sys.executable, "-m", "client.bench", "--host", host, "--port", port, "--num-prompts", "24",
         "--request-rate", "20", "--random-input-len", "40", "--random-output-len", "12", "--random-range-ratio",
         "0.5", "--ignore-eos", "--slo-mix", "tight:1:1,loose:60000:60000:2", "--percentile-metrics",
         "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--save-detailed", "--plot",
         "--result-dir", str(tmp_path), "--result-filename", "out.json"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Serving Benchmark Result" in result.stdout and "Per SLO class" in result.stdout
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["completed"] + data["failed"] + data["rejected"] == data["num_prompts"] == 24
    assert data["request_goodput"] <= data["request_throughput"]
    classes = data["per_class"]
    assert sum(c["sent"] for c in classes.values()) == 24
    assert classes["tight"]["good"] == 0  # a 1 ms TTFT is out of reach
    assert classes["loose"]["good"] == classes["loose"]["completed"] > 0
    assert len(data["ttfts"]) == len(data["itls"]) == len(data["slo_classes"]) == 24
    assert sum(data["output_lens"]) == data["total_output_tokens"]
    for key in ("p99_ttft_ms", "p50_tpot_ms", "mean_itl_ms", "median_e2el_ms"):
        assert data[key] > 0
    assert len(list(tmp_path.glob("*.png"))) == 2


def _bench(cluster, tmp_path, processes: str) -> dict:
    host, port = cluster.address.rsplit(":", 1)
    result = subprocess.run(
        [sys.executable, "-m", "client.bench", "--host", host, "--port", port, "--num-prompts", "18",
         "--request-rate", "12", "--random-input-len", "30", "--random-output-len", "6", "--random-range-ratio",
         "0.5", "--ignore-eos", "--slo-mix", "a:60000:60000,b:60000:60000:2", "--seed", "4", "--processes",
         processes, "--save-detailed", "--result-dir", str(tmp_path), "--result-filename", f"{processes}.json"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads((tmp_path / f"{processes}.json").read_text())


def test_a_plan_sent_by_several_processes_comes_back_whole_in_plan_order(cluster, tmp_path):
    one, three = _bench(cluster, tmp_path, "1"), _bench(cluster, tmp_path, "3")
    assert three["completed"] == one["completed"] == 18 and not any(three["errors"])
    for key in ("input_lens", "output_lens", "slo_classes"):  # the same plan, merged back in its order
        assert three[key] == one[key]
    assert {k: v["sent"] for k, v in three["per_class"].items()} == {k: v["sent"] for k, v in one["per_class"].items()}
    assert all(t is not None and t > 0 for t in three["ttfts"])
