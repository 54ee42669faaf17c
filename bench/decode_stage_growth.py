"""What a growing decode batch costs the CPU's dense decode stage in reallocations.

A decode worker's batch grows a request at a time as load rises, and contexts of different lengths
come and go. Each time the stage's allocation no longer fits, it is reallocated, and every decoding
request waits for it. This bench replays one such history (the batch growing from 1 to ``--peak``
requests with prompts of 300-560 tokens, each decoding, then falling back) into two stages of the
engine's KV cache, in one process and interleaved:

- ``kernel``: the stage as the engine's C++ attention kernel runs it (uninitialised, a row for every
  slot the worker allows: only a wider context reallocates);
- ``zeroed``: the same stage allocated as the matmul path needs it, zeroed and holding the occupied
  slots (the baseline: what the kernel's stage did before).

    python bench/decode_stage_growth.py [--preset tiny | --model DIR] [--dtype auto] [--peak 48] [--rounds 3]

Last line: ``{"kernel": {"reallocations", "total_ms", "worst_ms"}, "zeroed": {...}, "worst_ratio",
"total_ratio", "rounds": {...}, ...}`` (medians over ``--rounds``, each round's in ``rounds``;
ratios: zeroed over kernel). The stages' plans are timed, not the attention: that is the same in
both. A first round in a fresh process touches fresh pages and shows what they cost; later rounds
may reuse memory the allocator kept, which a loaded worker's often cannot.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.common import device_name, emit, progress  # noqa: E402
from common.engine.config import DTYPES, EngineConfig, resolve_dtype  # noqa: E402
from common.engine.llm_engine import LLMEngine  # noqa: E402
from common.model.dense_decode_cache import DecodeStage  # noqa: E402

OUTPUT_TOKENS = 64


def history(peak: int, seed: int) -> list[dict[int, int]]:
    """Each step's decoding requests (id → context): one joins every other step up to ``peak``,
    each leaves after ``OUTPUT_TOKENS`` steps, then the batch drains."""
    rng = random.Random(seed)
    steps: list[dict[int, int]] = []
    running: dict[int, int] = {}
    born: dict[int, int] = {}
    step = 0
    for uid in range(2 * peak):
        for _ in range(2):
            running = {u: n + 1 for u, n in running.items() if step - born[u] < OUTPUT_TOKENS}
            steps.append(dict(running))
            step += 1
        if uid < peak or len(running) < peak // 2:
            running[uid], born[uid] = rng.randint(300, 560), step
    while running:
        running = {u: n + 1 for u, n in running.items() if step - born[u] < OUTPUT_TOKENS}
        steps.append(dict(running))
        step += 1
    return steps


def replay(stage: DecodeStage, steps: list[dict[int, int]]) -> dict[str, float]:
    """Plans every step; the time and count of the plans that reallocated."""
    total = worst = 0.0
    reallocations = 0
    for running in steps:
        if not running:
            continue
        ids = list(running)
        before = [t.data_ptr() for t in stage.keys]
        started = time.perf_counter()
        stage.plan(ids, [running[u] for u in ids], [[0]] * len(ids))
        seconds = time.perf_counter() - started
        if [t.data_ptr() for t in stage.keys] != before:
            reallocations += 1
            total, worst = total + seconds, max(worst, seconds)
    return {"reallocations": reallocations, "total_ms": total * 1000, "worst_ms": worst * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="auto", choices=DTYPES)
    parser.add_argument("--peak", type=int, default=48, help="the most requests decoding at once")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)  # a decode worker's under pdserve up: one core
    dtype = resolve_dtype(args.dtype, "cpu")
    config = EngineConfig(model=args.model, preset=args.preset, dtype=dtype, enable_prefix_caching=False,
                          num_kv_blocks=64)
    engine = LLMEngine(config)
    if engine.runner.stage is None or not engine.runner.stage.kernel:
        sys.exit("this engine does not attend with the C++ decode kernel (its stage is the matmuls')")
    steps = history(args.peak, seed=0)
    rounds: dict[str, list[dict[str, float]]] = {"zeroed": [], "kernel": []}
    for r in range(args.rounds):
        for way, runs in rounds.items():
            stage = DecodeStage(engine.cache, config.max_batch_size, split=False, kernel=way == "kernel")
            runs.append(replay(stage, steps))
            progress(f"[round {r + 1}/{args.rounds}] {way}: {runs[-1]['reallocations']} reallocations, "
                     f"{runs[-1]['total_ms']:.1f} ms in all, the worst {runs[-1]['worst_ms']:.1f} ms")
            del stage
    median = {way: {key: statistics.median(run[key] for run in runs) for key in runs[0]} for way, runs in rounds.items()}
    kernel, zeroed = median["kernel"], median["zeroed"]
    result = {"device": device_name(), "model": args.model or args.preset, "dtype": str(dtype).removeprefix("torch."),
              "peak": args.peak, "steps": len(steps), "kernel": kernel, "zeroed": zeroed, "rounds": rounds,
              "worst_ratio": zeroed["worst_ms"] / max(kernel["worst_ms"], 1e-6),
              "total_ratio": zeroed["total_ms"] / max(kernel["total_ms"], 1e-6)}
    progress(f"median of {args.rounds} rounds: reallocations {zeroed['reallocations']:g} -> {kernel['reallocations']:g}; "
             f"time in them {zeroed['total_ms']:.1f} -> {kernel['total_ms']:.1f} ms; the worst "
             f"{zeroed['worst_ms']:.1f} -> {kernel['worst_ms']:.1f} ms")
    emit(result, args.out)


if __name__ == "__main__":
    main()
