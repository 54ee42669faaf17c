"""What to send and when: datasets (random, sharegpt-like, trace), arrival times, SLO classes."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BUILTIN_TRACE = Path(__file__).parent / "data" / "azure_llm_2023_conv.csv"


@dataclass(frozen=True, slots=True)
class SloClass:
    name: str
    ttft_ms: float
    tpot_ms: float
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    index: int
    prompt: list[int]
    output_len: int
    slo_class: SloClass | None
    send_at: float  # seconds after the start


def parse_slo_mix(spec: str) -> list[SloClass]:
    """``"tight:200:20:1,loose:2000:100:3"`` → classes (name:ttft_ms:tpot_ms[:weight])."""
    classes = []
    for item in filter(None, spec.split(",")):
        parts = item.split(":")
        if len(parts) not in (3, 4):
            raise ValueError(f"--slo-mix entry {item!r} must be name:ttft_ms:tpot_ms[:weight]")
        weight = float(parts[3]) if len(parts) == 4 else 1.0
        classes.append(SloClass(parts[0], float(parts[1]), float(parts[2]), weight))
    return classes


def gamma_intervals(n: int, rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """Gaps between sends: gamma with shape ``burstiness`` and mean 1/rate (1 = Poisson)."""
    if math.isinf(rate):
        return np.zeros(n)
    if rate <= 0 or burstiness <= 0:
        raise ValueError("request rate and burstiness must be > 0")
    return rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)


def random_lengths(n: int, input_len: int, output_len: int, range_ratio: float,
                   rng: np.random.Generator) -> list[tuple[int, int]]:
    """Uniform in [len·(1−r), len·(1+r)], as vLLM's random dataset."""
    def draw(mean: int) -> np.ndarray:
        low, high = max(1, int(mean * (1 - range_ratio))), max(1, int(mean * (1 + range_ratio)))
        return rng.integers(low, high + 1, size=n)
    return list(zip(draw(input_len).tolist(), draw(output_len).tolist()))


def sharegpt_like_lengths(n: int, rng: np.random.Generator, max_input: int, max_output: int) -> list[tuple[int, int]]:
    """Log-normal lengths shaped like ShareGPT conversations (long-tailed prompts and outputs)."""
    inputs = np.clip(rng.lognormal(mean=5.0, sigma=1.0, size=n), 4, max_input).astype(int)
    outputs = np.clip(rng.lognormal(mean=5.2, sigma=0.9, size=n), 2, max_output).astype(int)
    return list(zip(inputs.tolist(), outputs.tolist()))


def read_trace(path: Path, n: int, time_scale: float, length_scale: float) -> list[tuple[float, int, int]]:
    """(arrival s, prompt tokens, output tokens) of the first ``n`` rows, scaled."""
    rows = []
    with path.open() as f:
        for row in csv.DictReader(f):
            if len(rows) == n:
                break
            rows.append((float(row["arrived_at"]) * time_scale,
                         max(1, round(int(row["num_prefill_tokens"]) / length_scale)),
                         max(1, round(int(row["num_decode_tokens"]) / length_scale))))
    if not rows:
        raise ValueError(f"{path} holds no requests")
    return rows


def pick_classes(n: int, classes: list[SloClass], rng: np.random.Generator) -> list[SloClass | None]:
    if not classes:
        return [None] * n
    weights = np.array([c.weight for c in classes], dtype=float)
    picks = rng.choice(len(classes), size=n, p=weights / weights.sum())
    return [classes[i] for i in picks]


def token_prompt(length: int, rng: np.random.Generator, vocab: int = 256) -> list[int]:
    return rng.integers(0, vocab, size=length).tolist()
