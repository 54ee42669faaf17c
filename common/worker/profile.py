"""Measuring an engine on its own hardware and fitting its cost models (``pdserve profile``).

``profile`` measures and fits once; ``profile_checked`` measures again while a fit does not
reproduce its own points (a neighbour was busy, the machine hiccuped) and, when no attempt
gives a sound fit, falls back to the last fit scaled up to over-predict every point it
measured: pessimistic, so admission errs on the safe side until observed steps correct it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from common.model.batch import blocks_for
from common.engine.llm_engine import LLMEngine
from common.model.sampling_params import SamplingParams
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel

# Up to a whole forward's budget: the TTFT guard predicts forwards of up to max_num_tokens, and a
# fit asked about a size it never measured only extrapolates. Sizes past the budget are skipped.
QUICK_PREFILL_TOKENS = (16, 64, 128, 256, 512, 1024, 2048, 4096)
# ... and no larger once a forward took this long (a slow device: start-up stays short; the
# guard counts the predictions it extrapolates, and refits from the steps it runs)
LONGEST_PROFILED_FORWARD_S = 2.0
# A decode point is skipped when filling its batch would take longer than this (its prompts'
# prefill, estimated from the prefill points): on a slow device the large batches are learnt
# from the steps the worker runs (``common.slo.refit``) rather than at start-up.
LONGEST_DECODE_SETUP_S = 4.0
# A point is measured twice (the better run) unless one run already took this long.
REPEAT_BELOW_S = 1.0
# A prefill point slower than this many times the next larger one paid a one-off (a kernel compiled
# on first use: docs/decisions.md, 'Profile: outlier points measured again') and is measured again.
OUTLIER_RATIO = 1.5
# Up to the batch the TPOT guard asks about (VBS up to max_batch_size), and large enough to show
# where a GPU's flat step time ends. Batches past max_batch_size are cut to it.
QUICK_DECODE_POINTS = tuple((b, n) for b in (1, 4, 16, 64) for n in (64, 256))


@dataclass(frozen=True, slots=True)
class Measurements:
    prefill_tokens: list[float]
    prefill_seconds: list[float]
    decode_batch: list[float]
    decode_len: list[float]
    decode_seconds: list[float]

    def fit(self) -> CostModels:
        return CostModels(PrefillModel.fit(self.prefill_tokens, self.prefill_seconds),
                          DecodeModel.fit(self.decode_batch, self.decode_len, self.decode_seconds))

    def conservative(self, models: CostModels) -> CostModels:
        prefill, decode = models.prefill, models.decode
        if not prefill.sound:
            prefill = prefill.conservative(self.prefill_tokens, self.prefill_seconds)
        if not decode.sound:
            decode = decode.conservative(self.decode_batch, self.decode_len, self.decode_seconds)
        return CostModels(prefill, decode)


def profile(engine: LLMEngine, prefill_tokens: tuple[int, ...] = QUICK_PREFILL_TOKENS,
            decode_points: tuple[tuple[int, int], ...] = QUICK_DECODE_POINTS,
            progress: Callable[[str], None] = lambda _: None) -> CostModels:
    """Times real prefill steps and decode steps on ``engine``; returns the fitted models."""
    return measure(engine, prefill_tokens, decode_points, progress).fit()


def profile_checked(engine: LLMEngine, attempts: int = 3,
                    progress: Callable[[str], None] = lambda _: None) -> CostModels:
    """Fits whose every point is reproduced (see ``cost_models.sound``), measuring up to
    ``attempts`` times; else the last fits, each unsound one made conservative."""
    for attempt in range(1, attempts + 1):
        measured = measure(engine, progress=progress)
        models = measured.fit()
        if models.sound:
            return models
        progress(f"attempt {attempt}: the fits do not reproduce their points (prefill: "
                 f"{models.prefill.describe()}; decode: {models.decode.describe()})")
    return measured.conservative(models)


def measure(engine: LLMEngine, prefill_tokens: tuple[int, ...] = QUICK_PREFILL_TOKENS,
            decode_points: tuple[tuple[int, int], ...] = QUICK_DECODE_POINTS,
            progress: Callable[[str], None] = lambda _: None) -> Measurements:
    tokens, seconds = [], []
    for n in prefill_tokens:
        fits = n + 2 <= engine.max_model_len and blocks_for(n + 2, engine.config.block_size) <= engine.pool.num_blocks
        if fits and n <= engine.config.max_num_tokens:
            tokens.append(n)
            seconds.append(_better_of_two(lambda: _prefill_seconds(engine, n)))
            progress(f"prefill {n} tokens: {seconds[-1] * 1000:.1f} ms")
            if seconds[-1] > LONGEST_PROFILED_FORWARD_S:
                break
    remeasure_outliers(tokens, seconds, lambda n: _prefill_seconds(engine, n), progress)
    batches, lengths, steps = [], [], []
    per_token_s = seconds[-1] / tokens[-1] if tokens else 0.0
    for wanted, length in decode_points:
        # as many requests as the pool holds whole (a request waiting for blocks would mix its
        # prefill into the steps timed)
        batch = min(wanted, engine.config.max_batch_size, engine.pool.num_blocks // blocks_for(length + 26, engine.config.block_size))
        if batches and batch * length * per_token_s > LONGEST_DECODE_SETUP_S:
            continue
        if length + 24 <= engine.max_model_len and batch >= 1 and (batch, length + 10) not in zip(batches, lengths):
            batches.append(batch)
            lengths.append(length + 10)  # the mean length over the steps timed
            steps.append(_better_of_two(lambda: _decode_step_seconds(engine, batch, length)))
            progress(f"decode batch {batch} at length {length}: {steps[-1] * 1000:.2f} ms/step")
    return Measurements(tokens, seconds, batches, lengths, steps)


def remeasure_outliers(tokens: list[int], seconds: list[float], measure_one: Callable[[int], float],
                       progress: Callable[[str], None] = lambda _: None) -> None:
    """Measures again (the better of the runs, in place) every prefill point slower than
    ``OUTLIER_RATIO`` times the next larger one: a forward of fewer tokens costs no more than one
    of more, so the excess was a one-off. From the largest down, each against the corrected next."""
    for i in range(len(seconds) - 2, -1, -1):
        if seconds[i] > OUTLIER_RATIO * seconds[i + 1]:
            again = min(seconds[i], _better_of_two(lambda: measure_one(tokens[i])))
            progress(f"prefill {tokens[i]} tokens again: {again * 1000:.1f} ms (first {seconds[i] * 1000:.1f} ms, "
                     f"more than {tokens[i + 1]} tokens took)")
            seconds[i] = again


def _better_of_two(run: Callable[[], float]) -> float:
    """The better of two runs of a measurement (a burst of other work on the core is not this
    engine's speed), or one run when it alone took ``REPEAT_BELOW_S`` or more."""
    started = time.perf_counter()
    first = run()
    return first if time.perf_counter() - started >= REPEAT_BELOW_S else min(first, run())


def unloaded_step_seconds(engine: LLMEngine) -> float:
    """The median decode step of one short request alone: what an idle worker can promise."""
    return _decode_step_seconds(engine, 1, 16)


@contextlib.contextmanager
def _uncached(engine: LLMEngine) -> Iterator[None]:
    """Prefix caching paused: the profile's prompts repeat, and a hit is not a forward's cost."""
    before = engine.scheduler.match_prefixes
    engine.scheduler.match_prefixes = False
    try:
        yield
    finally:
        engine.scheduler.match_prefixes = before


def _prefill_seconds(engine: LLMEngine, n: int) -> float:
    with _uncached(engine):
        return _timed_prefill(engine, n)


def _timed_prefill(engine: LLMEngine, n: int) -> float:
    engine.add_request("profile-prefill", _prompt(n), SamplingParams(max_tokens=1, ignore_eos=True))
    started = time.perf_counter()
    while engine.has_unfinished_requests():
        engine.step()
    _sync(engine)
    return time.perf_counter() - started


def _decode_step_seconds(engine: LLMEngine, batch: int, length: int) -> float:
    with _uncached(engine):
        return _timed_decode_steps(engine, batch, length)


def _timed_decode_steps(engine: LLMEngine, batch: int, length: int) -> float:
    for i in range(batch):
        engine.add_request(f"profile-decode-{i}", _prompt(length), SamplingParams(max_tokens=24, ignore_eos=True))
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
