"""What asking for log probabilities costs a decode step: the same batches through one engine
without logprobs, with each token's (``logprobs=0``), and with the 5 and 20 likeliest tokens'
too, interleaved, the best of ``--repeats`` kept. Decode tokens/s of each, and its ratio to the
run without (the step's sampler then computes nothing extra: ``common.model.logprobs``).

    python bench/logprobs.py [--preset smollm2-135m] [--batches 1,8,32] [--out bench/results/logprobs-cpu.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.lib.common import device_name, emit, progress  # noqa: E402
from bench.lib.engine_runs import engine_config, make_prompts, time_pdserve  # noqa: E402
from common.engine.llm_engine import LLMEngine  # noqa: E402

ASKED = (None, 0, 5, 20)  # SamplingParams.logprobs of each run: None asks for nothing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    started = time.perf_counter()
    engine = LLMEngine(engine_config(args, max(batches)))
    time_pdserve(engine, make_prompts(max(batches), args.prompt_len), 4, args.device)  # warm-up
    rows = []
    for batch in batches:
        prompts = make_prompts(batch, args.prompt_len)
        best: dict[int | None, float] = {}
        for _ in range(args.repeats):
            for k in ASKED:
                t = time_pdserve(engine, prompts, args.output_len, args.device, logprobs=k)
                best[k] = min(best.get(k, float("inf")), t.decode_s)
        tok_s = {k: batch * (args.output_len - 1) / s for k, s in best.items()}
        row = {"batch": batch, "decode_tok_s": {str(k): v for k, v in tok_s.items()},
               "ratio_to_none": {str(k): tok_s[k] / tok_s[None] for k in ASKED if k is not None}}
        rows.append(row)
        progress(f"[batch {batch}] decode tok/s without logprobs {tok_s[None]:.0f}; "
                 + ", ".join(f"logprobs={k}: {r:.3f}x" for k, r in zip(ASKED[1:], row["ratio_to_none"].values())))
    engine.check_integrity()
    emit({"device": device_name(args.device), "model": args.model or args.preset, "dtype": engine.config.resolved_dtype,
          "prompt_len": args.prompt_len, "output_len": args.output_len, "repeats": args.repeats, "decode": rows,
          "seconds": round(time.perf_counter() - started, 1)}, args.out)


if __name__ == "__main__":
    main()
