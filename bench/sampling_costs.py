"""What asking for log probabilities or structured output costs a decode step: the same batches
through one engine without either, with each token's logprob (``logprobs=0``), with the 5 and the
20 likeliest tokens' too, and under a JSON Schema grammar (an array of at least 400 short strings,
so no request ends before ``--output-len``), interleaved, the best of ``--repeats`` kept. Decode
tokens/s of each, and its ratio to the run without (a step none of whose requests asks computes
nothing extra: ``common.model.logprobs``, ``common.model.grammar``).

    python bench/sampling_costs.py [--preset smollm2-135m] [--batches 1,8,32] [--out bench/results/sampling-costs-cpu.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.lib.common import device_name, emit, progress  # noqa: E402
from bench.lib.engine_runs import engine_config, make_prompts, sync  # noqa: E402
from common.engine.llm_engine import LLMEngine  # noqa: E402
from common.model.sampling_params import SamplingParams, StructuredOutput  # noqa: E402

LONG_ARRAY = json.dumps({"type": "array", "minItems": 400, "items": {"type": "string", "maxLength": 8}})
CASES: dict[str, dict[str, object]] = {
    "none": {"ignore_eos": True}, "logprobs=0": {"ignore_eos": True, "logprobs": 0},
    "logprobs=5": {"ignore_eos": True, "logprobs": 5}, "logprobs=20": {"ignore_eos": True, "logprobs": 20},
    "json_schema": {"structured": StructuredOutput("json_schema", LONG_ARRAY)},
}
_ids = itertools.count()


def decode_tok_s(engine: LLMEngine, prompts: list[list[int]], output_len: int, device: str, **fields: object) -> float:
    """Tokens/s of the decode phase (after every request has its first token)."""
    params = SamplingParams(max_tokens=output_len, temperature=1.0, seed=0, **fields)  # type: ignore[arg-type]
    ids = [f"cost-{next(_ids)}" for _ in prompts]
    for request_id, prompt in zip(ids, prompts):
        engine.add_request(request_id, prompt, params)
    waiting, generated, started = set(ids), 0, 0.0
    while engine.has_unfinished_requests():
        outputs = engine.step()
        if waiting:
            waiting.difference_update(o.request_id for o in outputs if o.new_token_ids)
            if not waiting:
                sync(device)
                started = time.perf_counter()
            continue
        generated += sum(len(o.new_token_ids) for o in outputs)
    sync(device)
    return generated / (time.perf_counter() - started)


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
    for fields in CASES.values():  # warm-up: kernels, and the grammar compiled once
        decode_tok_s(engine, make_prompts(2, args.prompt_len), 4, args.device, **fields)
    rows = []
    for batch in batches:
        prompts = make_prompts(batch, args.prompt_len)
        best: dict[str, float] = {}
        for _ in range(args.repeats):
            for name, fields in CASES.items():
                best[name] = max(best.get(name, 0.0), decode_tok_s(engine, prompts, args.output_len, args.device, **fields))
        row = {"batch": batch, "decode_tok_s": best, "ratio_to_none": {k: v / best["none"] for k, v in best.items() if k != "none"}}
        rows.append(row)
        progress(f"[batch {batch}] decode {best['none']:.0f} tok/s without; "
                 + ", ".join(f"{k}: {r:.3f}x" for k, r in row["ratio_to_none"].items()))
    engine.check_integrity()
    emit({"device": device_name(args.device), "model": args.model or args.preset, "dtype": engine.config.resolved_dtype,
          "prompt_len": args.prompt_len, "output_len": args.output_len, "repeats": args.repeats, "decode": rows,
          "seconds": round(time.perf_counter() - started, 1)}, args.out)


if __name__ == "__main__":
    main()
