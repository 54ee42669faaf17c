"""Measuring an engine on its own hardware and fitting its cost models (``pdserve profile``)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from common.engine import LLMEngine
from common.sampling_params import SamplingParams
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel

QUICK_PREFILL_TOKENS = (16, 64, 128, 256, 512, 1024)
QUICK_DECODE_POINTS = tuple((b, n) for b in (1, 4, 16) for n in (64, 256))


def profile(engine: LLMEngine, prefill_tokens: tuple[int, ...] = QUICK_PREFILL_TOKENS,
            decode_points: tuple[tuple[int, int], ...] = QUICK_DECODE_POINTS,
            progress: Callable[[str], None] = lambda _: None) -> CostModels:
    """Times real prefill steps and decode steps on ``engine``; returns the fitted models."""
    tokens, seconds = [], []
    for n in prefill_tokens:
        if n + 2 <= engine.max_model_len:
            tokens.append(n)
            seconds.append(min(_prefill_seconds(engine, n) for _ in range(2)))
            progress(f"prefill {n} tokens: {seconds[-1] * 1000:.1f} ms")
    batches, lengths, steps = [], [], []
    for batch, length in decode_points:
        if length + 8 <= engine.max_model_len and batch <= engine.config.max_batch_size:
            batches.append(batch)
            lengths.append(length + 4)
            steps.append(_decode_step_seconds(engine, batch, length))
            progress(f"decode batch {batch} at length {length}: {steps[-1] * 1000:.2f} ms/step")
    return CostModels(PrefillModel.fit(tokens, seconds), DecodeModel.fit(batches, lengths, steps))


def _prefill_seconds(engine: LLMEngine, n: int) -> float:
    engine.add_request("profile-prefill", _prompt(n), SamplingParams(max_tokens=1, ignore_eos=True))
    started = time.perf_counter()
    while engine.has_unfinished_requests():
        engine.step()
    _sync(engine)
    return time.perf_counter() - started


def _decode_step_seconds(engine: LLMEngine, batch: int, length: int) -> float:
    for i in range(batch):
        engine.add_request(f"profile-decode-{i}", _prompt(length), SamplingParams(max_tokens=12, ignore_eos=True))
    while any(r.num_computed_tokens < length for r in engine.scheduler.requests.values()):
        engine.step()
    engine.step()  # first decode step fills the CPU stage; not a steady-state step
    times = []
    while engine.has_unfinished_requests():
        started = time.perf_counter()
        engine.step()
        _sync(engine)
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def _prompt(n: int) -> list[int]:
    return [(i * 7919) % 256 for i in range(n)]


def _sync(engine: LLMEngine) -> None:
    if engine.device.type == "cuda":
        torch.cuda.synchronize()
