"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from common.worker.startup import hardware_name


def device_name(device: str = "cpu") -> str:
    """The GPU's name, or the CPU's with its widest vector extension and thread count: two hosts
    of one CPU family can differ by their instruction sets, and so by their figures."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return hardware_name(torch.device(device))
    return f"{hardware_name(torch.device('cpu'))} ({simd_level()}, {torch.get_num_threads()} threads)"


def simd_level() -> str:
    """The widest of AVX512-BF16, AVX-512, AVX2 this CPU has (Linux ``/proc/cpuinfo``), or its arch."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        flags = []
    for flag, name in (("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2")):
        if flag in flags:
            return name
    import platform

    return platform.machine()


def best_of(fn: Callable[[], None], repeats: int) -> float:
    """Fastest wall time of ``repeats`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def emit(result: dict[str, Any], out: Path | None = None) -> None:
    """Prints the result as the last stdout line, and writes it to ``out`` if given."""
    line = json.dumps(result)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    print(line, flush=True)


def run_load_tester(target: Sequence[str], rate: float, num_prompts: int, requests: Sequence[str], slo_mix: str,
                    out_dir: Path, seed: int = 7, extra: Sequence[str] = ()) -> dict[str, Any]:
    """One seeded ``pdserve bench`` run against ``target`` (its server flags: ``--host H --port P``,
    or ``--backend openai --base-url URL``), EOS ignored, TTFT and TPOT percentiles (``extra``:
    more of its flags, which win); its saved result. The seed is fixed, so every run of one rate
    sends the same arrivals and prompts."""
    name = f"{rate:g}.json"
    cmd = [sys.executable, "-m", "client.bench", *target, "--num-prompts", str(num_prompts), "--request-rate",
           str(rate), "--seed", str(seed), *requests, "--ignore-eos", "--save-result", "--result-dir", str(out_dir),
           "--result-filename", name, "--percentile-metrics", "ttft,tpot"]
    cmd += (["--slo-mix", slo_mix] if slo_mix else []) + list(extra)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=900)
    return json.loads((out_dir / name).read_text())
