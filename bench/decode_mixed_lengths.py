"""The CPU decode step on long-tailed batches: a few long contexts among many short ones.

The dense decode stage is attended whole, at the width its longest context sets; the few longest
contexts go to a second stage of their own when that attends less (``long_rows`` in
``common/model/dense_decode_cache.py``). This bench runs, in one engine and interleaved, each
batch shape three ways: long-tailed with the second stage (the engine as it runs), long-tailed on
one stage only (the baseline: the second stage switched off in this process), and every request at
the mean length (the same total context: what the cost model, which predicts at the mean, assumes).

    python bench/decode_mixed_lengths.py [--preset tiny | --model DIR] [--dtype auto] [--threads 1]

It also runs a batch under credit batching (``CREDIT``: TPOT SLOs of 20 and 60 ms, so the loose
requests decode every third step) with the requests held back keeping their stage slots (the
engine as it runs) and losing them (the baseline: refilled from the pool when they return), and
the same batch with every request in every step; ``credit`` gives each one's decode tokens per
second of decode steps. And ``reallocation``: what growing a stage of ``EngineConfig``'s default
batch limit from 1,500 to 2,400 positions costs with a few of its slots occupied, the allocation
holding the occupied slots (the engine as it runs) against all of them (the baseline).

Last line: ``{"points": [{"shape", "split_step_ms", "one_stage_step_ms", "uniform_step_ms",
"speedup", "to_uniform"}, ...], "credit": {"kept_tok_s", "refilled_tok_s", "all_every_step_tok_s",
"speedup"}, "reallocation": [{"occupied", "slots", "held_ms", "all_slots_ms"}, ...], ...}`` (median decode step of the best of ``--rounds``; tokens per second, best of
``--rounds``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.common import device_name, emit, progress  # noqa: E402
from bench.engine_runs import make_prompts  # noqa: E402
from common.engine.config import DTYPES, EngineConfig, resolve_dtype  # noqa: E402
from common.engine.llm_engine import LLMEngine  # noqa: E402
from common.engine.sampling_params import SamplingParams  # noqa: E402
from common.model.dense_decode_cache import DecodeStage  # noqa: E402

SHAPES = {  # name: context lengths of the batch
    "1x3500+19x300": [3500] + [300] * 19,
    "2x2000+30x200": [2000] * 2 + [200] * 30,
    "4x1500+12x400": [1500] * 4 + [400] * 12,
    "2x288+14x100": [288] * 2 + [100] * 14,  # the short prompts of bench/slo.py's random workloads
}
NEW_TOKENS = 40
CREDIT = [20.0] * 10 + [60.0] * 20  # TPOT SLOs (ms) of a credit-batched batch of 300-token prompts


def median_step_ms(engine: LLMEngine, lens: list[int], tag: str) -> float:
    """The median decode step (ms) of one generation of ``lens`` prompts, the first few left out."""
    for i, n in enumerate(lens):
        engine.add_request(f"{tag}-{i}", make_prompts(1, n, seed=i)[0],
                           SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True))
    steps = []
    while engine.has_unfinished_requests():
        started = time.perf_counter()
        outputs = engine.step()
        if len(outputs) == len(lens):  # every request decoding: a decode step of the whole batch
            steps.append(time.perf_counter() - started)
    return statistics.median(steps[3:]) * 1000


def decode_tok_s(engine: LLMEngine, slos: list[float], tag: str, ctx: int = 300) -> float:
    """Decode tokens per second of decode-only steps until the first request finishes (while the
    batch is whole: under credit batching the loose requests then run alone), generating
    ``NEW_TOKENS`` for prompts of ``ctx`` tokens with these TPOT SLOs (0: none, run every step)."""
    for i, slo in enumerate(slos):
        engine.add_request(f"{tag}-{i}", make_prompts(1, ctx, seed=i)[0],
                           SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True), tpot_slo_ms=slo)
    tokens, seconds, whole = 0, 0.0, True
    while engine.has_unfinished_requests():
        _, batch = engine.schedule_step()
        if not batch.seqs:
            continue
        started = time.perf_counter()
        sampled = engine.runner.execute(batch)
        ended = time.perf_counter()
        outputs = engine.finish_step(batch, sampled, started, ended)
        if whole and all(s.is_decode for s in batch.seqs):
            tokens, seconds = tokens + len(batch.seqs), seconds + ended - started
        whole = whole and not any(o.finished for o in outputs)
    return tokens / seconds


def credit_point(engine: LLMEngine, rounds: int) -> dict[str, float]:
    stage = engine.runner.stage
    assert stage is not None
    plan = stage.plan
    best = {"kept": 0.0, "refilled": 0.0, "all_every_step": 0.0}
    for r in range(rounds):
        for way in best:
            stage.plan = plan if way != "refilled" else (lambda *a, keep=(): plan(*a))  # type: ignore[method-assign]
            slos = [0.0] * len(CREDIT) if way == "all_every_step" else CREDIT
            best[way] = max(best[way], decode_tok_s(engine, slos, f"credit-{way}-{r}"))
    stage.plan = plan  # type: ignore[method-assign]
    point = {f"{way}_tok_s": value for way, value in best.items()} | {"speedup": best["kept"] / best["refilled"]}
    progress(f"[credit batching, {len(CREDIT)} requests] kept slots {best['kept']:.0f} tok/s, refilled "
             f"{best['refilled']:.0f} tok/s ({point['speedup']:.2f}x), every request every step "
             f"{best['all_every_step']:.0f} tok/s")
    return point


def reallocation_points(engine: LLMEngine, rounds: int) -> list[dict[str, float]]:
    """A stage's reallocation from 1,500 to 2,400 positions with some of its slots occupied."""
    from common.model import dense_decode_cache

    slots = EngineConfig().max_batch_size
    held = dense_decode_cache.slot_allocation
    points = []
    for occupied in (4, 12, 32):
        best = {"held": float("inf"), "all_slots": float("inf")}
        for _ in range(max(rounds, 5)):
            for way in best:
                dense_decode_cache.slot_allocation = held if way == "held" else (lambda n, most: most)
                stage = DecodeStage(engine.cache, slots, split=False)
                ids, tables = list(range(occupied)), [[0]] * occupied
                stage.plan(ids, [1500] * occupied, tables)
                started = time.perf_counter()
                stage.plan(ids, [2400] * occupied, tables)  # wider than the allocation: reallocated
                best[way] = min(best[way], (time.perf_counter() - started) * 1000)
        dense_decode_cache.slot_allocation = held
        points.append({"occupied": occupied, "slots": slots, "held_ms": best["held"],
                       "all_slots_ms": best["all_slots"]})
        progress(f"[reallocation, {occupied} of {slots} slots occupied] {best['held']:.1f} ms holding the occupied "
                 f"slots, {best['all_slots']:.1f} ms holding all")
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="auto", choices=DTYPES)
    parser.add_argument("--threads", type=int, default=1, help="a decode worker's threads under pdserve up (one core)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = resolve_dtype(args.dtype, "cpu")
    most = max(max(len(lens) for lens in SHAPES.values()), len(CREDIT))
    total = max(max(sum(lens) for lens in SHAPES.values()), 300 * len(CREDIT))
    # the torch attention path: its stage is the one with a second stage (the C++ kernel's has none)
    engine = LLMEngine(EngineConfig(model=args.model, preset=args.preset, dtype=dtype, enable_prefix_caching=False,
                                    num_kv_blocks=(total + most * NEW_TOKENS) // 16 + most + 8, max_batch_size=most,
                                    attention_backend="torch"))
    stage = engine.runner.stage
    if stage is None or stage.long is None:
        sys.exit("this engine has no dense decode stage (the torch attention path on a CPU has one)")
    second = stage.long
    points = []
    for name, lens in SHAPES.items():
        mean = round(sum(lens) / len(lens))
        best = {"split": float("inf"), "one_stage": float("inf"), "uniform": float("inf")}
        for r in range(args.rounds):
            for way in best:
                stage.long = None if way == "one_stage" else second
                shape = [mean] * len(lens) if way == "uniform" else lens
                best[way] = min(best[way], median_step_ms(engine, shape, f"{name}-{way}-{r}"))
        stage.long = second
        point = {"shape": name, "split_step_ms": best["split"], "one_stage_step_ms": best["one_stage"],
                 "uniform_step_ms": best["uniform"], "speedup": best["one_stage"] / best["split"],
                 "to_uniform": best["split"] / best["uniform"]}
        points.append(point)
        progress(f"[{name}] second stage {best['split']:.2f} ms, one stage {best['one_stage']:.2f} ms "
                 f"({point['speedup']:.2f}x), all at the mean length {best['uniform']:.2f} ms")
    credit = credit_point(engine, args.rounds)
    reallocation = reallocation_points(engine, args.rounds)
    emit({"device": device_name(), "model": args.model or args.preset, "dtype": dtype, "threads": args.threads,
          "new_tokens": NEW_TOKENS, "points": points, "credit": credit, "reallocation": reallocation}, args.out)


if __name__ == "__main__":
    main()
