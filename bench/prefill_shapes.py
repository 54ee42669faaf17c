"""Prefill of prompts of every length against one length, with and without whole-grain shapes.

oneDNN JIT-compiles a kernel for every GEMM shape it has not seen (and keeps about a thousand), so a
serving worker whose prompts come in every length kept compiling: the linears' rows and the prefill
attention's blocks vary with the length. pdserve pads those dimensions to multiples of 16
(``packed_linear.ROW_GRAIN``, ``cpu_kernels.prefill_attention.SHAPE_GRAIN``). Each variant runs in
a process of its own (oneDNN's cache is per process), on the cores and threads ``pdserve up``'s
plan gives a prefill worker on this machine, and alternates prompts of a fixed length with prompts
of random lengths none of its earlier calls had; its figure is the random prompts' time per token
over the fixed ones' (noise-robust: both ran interleaved in one process). ``padded`` is pdserve's
default; ``unpadded`` sets both grains to 1.

    python bench/prefill_shapes.py [--preset tiny] [--prompts 150] [--out bench/results/prefill-shapes-cpu.json]

Last line: ``{"variants": {"padded": {...}, "unpadded": {...}}, "speedup_random_lengths": x, ...}``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import device_name, emit, progress  # noqa: E402

VARIANTS = ("padded", "unpadded")


def measure(args: argparse.Namespace, variant: str) -> dict:
    """One variant, in this process: per-token seconds of fixed and random-length prompts."""
    from common.worker.cpu_plan import apply_to_this_process, plan_cores

    prefill = next(a for a in plan_cores(["prefill-0", "decode-0"]) if a.name == "prefill-0")
    apply_to_this_process(prefill.cores, prefill.threads)
    from common.cpu_kernels import prefill_attention
    from common.engine.config import EngineConfig
    from common.engine.llm_engine import LLMEngine
    from common.engine.sampling_params import SamplingParams
    from common.model.packed_linear import PackedLinear

    engine = LLMEngine(EngineConfig(model=args.model, preset=args.preset, dtype=args.dtype, device="cpu",
                                    enable_prefix_caching=False, max_num_tokens=max(2048, args.max_len)))
    if variant == "unpadded":
        prefill_attention.SHAPE_GRAIN = 1
        if isinstance(engine.model.linear, PackedLinear):
            engine.model.linear.row_grain = 1
    rng = random.Random(args.seed)
    vocab = engine.model.config.vocab_size
    params = SamplingParams(max_tokens=1, ignore_eos=True)

    def forward_s(length: int) -> float:
        prompt = [rng.randrange(3, vocab) for _ in range(length)]
        started = time.perf_counter()
        engine.generate([prompt], params)
        return (time.perf_counter() - started) / length

    for _ in range(5):
        forward_s(args.fixed_len)
    lengths = rng.sample(range(args.min_len, args.max_len + 1), min(args.prompts, args.max_len - args.min_len + 1))
    fixed, varied = [], []
    for i, length in enumerate(lengths):
        fixed.append(forward_s(args.fixed_len))
        varied.append(forward_s(length))
        if (i + 1) % 50 == 0:
            progress(f"  {variant}: {i + 1}/{len(lengths)} prompts")
    return {"prompts": len(lengths), "fixed_len": args.fixed_len, "lengths": [args.min_len, args.max_len],
            "fixed_us_per_token": statistics.median(fixed) * 1e6,
            "random_us_per_token": statistics.median(varied) * 1e6,
            "random_over_fixed": statistics.median(varied) / statistics.median(fixed),
            "random_mean_over_fixed_mean": statistics.fmean(varied) / statistics.fmean(fixed),
            "plan": prefill.describe(), "device": device_name()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", default=None, help="a Hugging Face checkpoint directory (overrides --preset)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--prompts", type=int, default=150, help="random-length prompts per variant")
    parser.add_argument("--fixed-len", type=int, default=400)
    parser.add_argument("--min-len", type=int, default=300)
    parser.add_argument("--max-len", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    variants = {}
    for variant in VARIANTS:
        progress(f"{variant}: {args.prompts} prompts of {args.min_len}-{args.max_len} tokens between prompts of "
                 f"{args.fixed_len} ...")
        # a fresh process per variant: oneDNN's cache of compiled kernels is the process's
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
            variants[variant] = child.submit(measure, args, variant).result()
        v = variants[variant]
        progress(f"{variant}: fixed {v['fixed_us_per_token']:.1f} us/token, random lengths "
                 f"{v['random_us_per_token']:.1f} ({v['random_over_fixed']:.3f}x)")
    ratio = variants["unpadded"]["random_over_fixed"] / variants["padded"]["random_over_fixed"]
    progress(f"prompts of every length: {ratio:.2f}x faster padded than unpadded (each against its own fixed-length "
             f"prompts)")
    emit({"preset": args.model or args.preset, "dtype": args.dtype, "variants": variants,
          "speedup_random_lengths": ratio}, args.out)


if __name__ == "__main__":
    main()
