"""Use when results in ``bench/results/`` changed: prints the figures table of the README and
``docs/benchmarks.md`` from them, one row a figure, with the command that reproduces it.

    python tools/figures.py [--results bench/results]

A result a row needs but the folder lacks is left out, so the table shows only what was measured.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Row = tuple[str, str, str]  # figure, value, command
Rows = Callable[[dict[str, Any]], Iterator[Row]]


def _engine(d: dict[str, Any]) -> Iterator[Row]:
    at = {p["batch"]: p for p in d.get("decode", [])}
    model = _model_name(d.get("model", ""))
    if 32 in at and at[32].get("ratio_to_static"):
        yield (f"engine decode, batch 32 ({model}, {d.get('dtype')})",
               f"{at[32]['pdserve_tok_s']:,.0f} tok/s, {at[32]['ratio_to_static']:.2f}× transformers' static cache",
               "python bench/engine.py" + _engine_flags(d))
    elif 32 in at and at[32].get("ratio"):
        yield (f"engine decode, batch 32 ({model}, {d.get('dtype')})",
               f"{at[32]['pdserve_tok_s']:,.0f} tok/s, {at[32]['ratio']:.2f}× transformers",
               "python bench/engine.py" + _engine_flags(d))
    if 32 in at and at[32].get("ratio_to_vllm"):
        yield (f"engine decode, batch 32 ({model}, {d.get('dtype')}), against vLLM",
               f"{at[32]['ratio_to_vllm']:.2f}× vLLM's engine", "python bench/engine.py" + _engine_flags(d)
               + " --peer vllm --peer-python PEER/bin/python")


def _engine_flags(d: dict[str, Any]) -> str:
    model = _model_name(d.get("model", "tiny"))
    flags = "" if model == "tiny" else f" --preset {model}"
    if d.get("device", "").startswith("NVIDIA"):
        return flags + " --dtype bfloat16 --device cuda"
    return flags + f" --dtype {d['dtype']}" if d.get("dtype") else flags


def _model_name(model: str) -> str:
    """A preset's name for its converted checkpoint's directory (``.../pdserve-smollm2-135m``)."""
    return Path(model).name.removeprefix("pdserve-")


def _transfer(d: dict[str, Any]) -> Iterator[Row]:
    shm = d["transports"]["shm"]["gb_s"]
    yield ("KV transfer, shm, 64 MiB", f"{shm:.1f} GB/s, {d['shm_vs_memcpy']:.2f}× an in-process memcpy",
           "python bench/transfer.py")


def _e2e(d: dict[str, Any]) -> Iterator[Row]:
    yield (f"1P1D cluster against the bare engine, batch {d['batch']}",
           f"{d['e2e_vs_engine']:.2f}× the engine's tok/s; TTFT +{d['ttft_overhead_ms_p50']:.1f} ms p50",
           "python bench/e2e.py")


def _http(d: dict[str, Any]) -> Iterator[Row]:
    ratios = d.get("http_vs_grpc", {})
    if ratios:
        yield ("OpenAI HTTP against gRPC", ", ".join(f"{k} {v:.2f}×" for k, v in ratios.items()),
               "python bench/http_overhead.py")


def _prefix(d: dict[str, Any]) -> Iterator[Row]:
    c = d["configs"]
    yield ("prefix caching + KV-aware routing, multi-turn 2P1D",
           f"TTFT p50 {c['no_cache']['ttft_p50_ms'] / c['cache_kv_routing']['ttft_p50_ms']:.1f}× lower than without "
           f"caching, {c['cache_kv_routing']['hit_rate']:.0%} hits", "python bench/prefix.py")


def _slo(d: dict[str, Any]) -> Iterator[Row]:
    for name, w in d.get("workloads", {}).items():
        top = w.get("at_twice_the_knee")
        if not top:
            continue
        points = [p for p in w["points"] if p["policy"] == "scorpio"]
        knee = next((p for p in points if p["rate"] == w["knee_rate"]), None)
        at_top = next((p for p in points if p["rate"] == top["rate"]), None)
        keeps = f", {at_top['goodput'] / knee['goodput']:.2f}× its goodput at the knee" if knee and at_top and \
            knee["goodput"] else ""
        yield (f"`scorpio` at twice the knee ({name}, {top['rate']:g} req/s)",
               f"{top['goodput_ratio']:.1f}× `fcfs`'s goodput{keeps}, {top['scorpio_admitted_attainment']:.1%} of "
               "admitted meeting both SLOs", f"python bench/slo.py --workload {name}" + _slo_flags(d, w))


def _slo_flags(d: dict[str, Any], w: dict[str, Any]) -> str:
    if d.get("device", "").startswith("NVIDIA"):
        return " --device cuda --preset 1b --mps"
    return " --preset smollm2-135m --grid auto --base-rate 0" if d.get("preset") == "smollm2-135m" else ""


def _recovery(d: dict[str, Any]) -> Iterator[Row]:
    s = d["summary"]
    kind = "tight" if d["tpot_multiple"] < 2 else "loose"
    yield (f"load → 4× overload → load, {d['preset']}, {d['front']}, TPOT {d['tpot_multiple']:g}× unloaded ({kind})",
           f"worse overload phase {s['overload_goodput_ratio']:.2f}×, back at load {s['back_at_load_goodput_ratio']:.2f}× the first "
           f"load's goodput; {'' if s['least_admitted_attainment'] >= 1 else '≥'}{s['least_admitted_attainment']:.0%} of "
           "admitted meet both in every phase; "
           f"{s['lone_admitted']}/{s['lone_sent']} lone requests admitted after",
           f"python bench/slo_recovery.py --front {d['front']} --tpot-multiple {d['tpot_multiple']:g}" + _recovery_flags(d))


def _recovery_flags(d: dict[str, Any]) -> str:
    """The rates and phase length, where the run set them rather than took the defaults."""
    if d.get("phase_s", 100.0) == 100.0:
        return ""
    return f" --low-rate {d['load_rate']:g} --overload {d['overload_rate'] / d['load_rate']:g} --phase-s {d['phase_s']:g}"


def _vs_vllm(d: dict[str, Any]) -> Iterator[Row]:
    for name, w in d.get("workloads", {}).items():
        for label, r in w.get("ratios", {}).items():
            ratio = r["scorpio_over_vllm"]
            value = f"{ratio:.2f}× vLLM's goodput" if ratio is not None else "vLLM served no good request"
            yield (f"`scorpio` against vLLM, {name}, {label.replace('_', ' ')} ({r['rate']:g} req/s, {d['model']})",
                   f"{value}, {r['scorpio_admitted_attainment']:.1%} of admitted meeting both",
                   f"python bench/vs_vllm.py --workload {name} --preset {d['model']}"
                   + (" --grid auto" if name == "scaled" else "") + " --peer-python PEER/bin/python")


def _gateways(d: dict[str, Any]) -> Iterator[Row]:
    s = d["summary"]
    runs = ", ".join(f"{a:.3g}/{b:.3g}" for a, b in zip(s["two_gateways_goodput_runs"], s["one_gateway_goodput_runs"]))
    yield (f"two gateways over one pool against one, {s['multiple']:g}× the knee ({s['rate']:g} req/s, {d['preset']})",
           f"{s['two_over_one_goodput']:.2f}× one gateway's goodput (runs {runs} req/s); admitted meeting both: "
           f"{s['two_gateways_admitted_attainment_pooled']:.1%} over the rounds, each ≥"
           f"{s['two_gateways_admitted_attainment_min']:.1%} (one gateway: {s['one_gateway_admitted_attainment_pooled']:.1%},"
           f" ≥{s['one_gateway_admitted_attainment_min']:.1%}); the uncounted warm-up before them: "
           f"{s['warmup_admitted_attainment']:.1%}{_worker_refusals(d)}", "python bench/gateways.py" + (
               f" --preset {d['preset']} --duration-s 60" if d["preset"] != "tiny" else ""))


def _sampling_costs(d: dict[str, Any]) -> Iterator[Row]:
    for p in d["decode"]:
        if p["batch"] in (1, 32):
            r = p["ratio_to_none"]
            yield (f"decode with logprobs or a JSON Schema grammar, batch {p['batch']} ({d['model']}, {d['dtype']})",
                   f"logprobs=0 {r['logprobs=0']:.2f}×, logprobs=20 {r['logprobs=20']:.2f}×, json_schema "
                   f"{r['json_schema']:.2f}× of {p['decode_tok_s']['none']:,.0f} tok/s with neither",
                   "python bench/sampling_costs.py")


def _worker_refusals(d: dict[str, Any]) -> str:
    """The prompts the prefill worker's own check refused over the rounds, with two gateways and one."""
    counted = [p["prefill_worker_refusals"] for p in d["points"] if "prefill_worker_refusals" in p]
    if not counted:
        return ""
    by = {g: sum(p["prefill_worker_refusals"] for p in d["points"] if p["gateways"] == g) for g in (1, 2)}
    return f"; refused by the prefill worker's own check: {by[2]:.0f} with two gateways, {by[1]:.0f} with one"


READERS: dict[str, Rows] = {"engine": _engine, "transfer": _transfer, "e2e": _e2e, "http-overhead": _http,
                            "prefix": _prefix, "slo": _slo, "slo-recovery": _recovery, "vs-vllm": _vs_vllm,
                            "gateways": _gateways, "sampling-costs": _sampling_costs}


def hardware(d: dict[str, Any]) -> str:
    device = d.get("device", "")
    return device.split(" (")[0] if device else "?"


# What repeated runs of each benchmark showed (the README states it beside each figure): serving
# points on two shared cores move a lot between runs, engine ratios much less.
SPREAD = {
    "engine": "one run; ratios are within one run",
    "transfer": "shm 0.17–0.57× memcpy in 4 runs on one host",
    "e2e": "one run",
    "http-overhead": "one run; rounds interleaved",
    "prefix": "one run",
    "slo": "one run per workload",
    "slo-recovery": "one run each; this host's unloaded TPOT moved 15.7–31 ms between runs",
    "vs-vllm": "one run",
    "gateways": "after one uncounted warm-up point; three rounds, the order alternating",
    "sampling-costs": "one run, best of 3 interleaved repeats (a ratio above 1 is noise)",
}


def rows(results: Path) -> list[tuple[str, str, Row]]:
    """(hardware, benchmark, row) for every figure the results hold."""
    out = []
    for path in sorted(results.glob("*.json")):
        bench = next((b for b in sorted(READERS, key=len, reverse=True) if path.name.startswith(b + "-")), None)
        if bench is None:
            continue
        d = json.loads(path.read_text())
        out += [(hardware(d), bench, row) for row in READERS[bench](d)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parents[1] / "bench" / "results")
    args = parser.parse_args()
    print("| hardware | figure | value | spread seen | command |\n|---|---|---|---|---|")
    for where, bench, (figure, value, command) in rows(args.results):
        print(f"| {where} | {figure} | {value} | {SPREAD.get(bench, '')} | `{command}` |")


if __name__ == "__main__":
    main()
