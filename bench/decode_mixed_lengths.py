"""The CPU decode step on long-tailed batches: a few long contexts among many short ones.

The dense decode stage is attended whole, at the width its longest context sets; the few longest
contexts go to a second stage of their own when that attends less (``long_rows`` in
``common/model/dense_decode_cache.py``). This bench runs, in one engine and interleaved, each
batch shape three ways: long-tailed with the second stage (the engine as it runs), long-tailed on
one stage only (the baseline: the second stage switched off in this process), and every request at
the mean length (the same total context: what the cost model, which predicts at the mean, assumes).

    python bench/decode_mixed_lengths.py [--preset tiny | --model DIR] [--dtype auto] [--threads 1]

Last line: ``{"points": [{"shape", "split_step_ms", "one_stage_step_ms", "uniform_step_ms",
"speedup", "to_uniform"}, ...], ...}`` (median decode step of the best of ``--rounds``).
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

SHAPES = {  # name: context lengths of the batch
    "1x3500+19x300": [3500] + [300] * 19,
    "2x2000+30x200": [2000] * 2 + [200] * 30,
    "4x1500+12x400": [1500] * 4 + [400] * 12,
    "2x288+14x100": [288] * 2 + [100] * 14,  # the short prompts of bench/slo.py's random workloads
}
NEW_TOKENS = 40


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
    most = max(len(lens) for lens in SHAPES.values())
    total = max(sum(lens) for lens in SHAPES.values())
    engine = LLMEngine(EngineConfig(model=args.model, preset=args.preset, dtype=dtype, enable_prefix_caching=False,
                                    num_kv_blocks=(total + most * NEW_TOKENS) // 16 + most + 8, max_batch_size=most))
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
    emit({"device": device_name(), "model": args.model or args.preset, "dtype": dtype, "threads": args.threads,
          "new_tokens": NEW_TOKENS, "points": points}, args.out)


if __name__ == "__main__":
    main()
