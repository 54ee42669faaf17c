"""vLLM's offline engine on the shapes ``bench/engine.py`` measures pdserve on, under vLLM's own
Python: decode and prefill tokens/s per batch size, as one JSON line on stdout.

Measured as ``bench/engine.py`` measures transformers: prefill is a run of the batch with one
new token each; decode is a run of ``--output-len`` new tokens (EOS ignored) less that prefill.
Prefix caching is off (runs repeat their prompts, and what is timed is computing them); the
best of ``--repeats`` runs is kept. The prompts are the token ids pdserve's runs computed
(``--prompts``: a JSON object, batch size -> its prompts), so no tokenizer is loaded.

    PEER/bin/python bench/lib/peers/vllm_engine.py --model DIR --prompts PROMPTS.json --output-len 128 \
        --dtype float32
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def timed(llm, batch_prompts: list[list[int]], new_tokens: int) -> float:  # type: ignore[no-untyped-def]
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=new_tokens, min_tokens=new_tokens, ignore_eos=True, temperature=0.0,
                            detokenize=False)
    started = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in batch_prompts], params, use_tqdm=False)
    seconds = time.perf_counter() - started
    made = sum(len(o.outputs[0].token_ids) for o in outs)
    if made != len(batch_prompts) * new_tokens:
        raise RuntimeError(f"vLLM generated {made} tokens, expected {len(batch_prompts) * new_tokens}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True, help="JSON: batch size -> that batch's prompts (token ids)")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-num-tokens", type=int, default=8192, help="tokens per step, as pdserve's engine")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with open(args.prompts) as f:
        by_batch = {int(b): p for b, p in json.load(f).items()}
    prompt_len = max(len(p) for ps in by_batch.values() for p in ps)

    from vllm import LLM

    started = time.perf_counter()
    llm = LLM(model=args.model, dtype=args.dtype, skip_tokenizer_init=True, enable_prefix_caching=False,
              max_num_seqs=max(by_batch), max_model_len=prompt_len + args.output_len + 16,
              max_num_batched_tokens=max(args.max_num_tokens, prompt_len), seed=0)
    timed(llm, by_batch[min(by_batch)][:2], 4)  # warm-up
    print(f"[vllm] engine ready in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    results = []
    for batch, batch_prompts in by_batch.items():
        prefill = min(timed(llm, batch_prompts, 1) for _ in range(args.repeats))
        total = min(timed(llm, batch_prompts, args.output_len) for _ in range(args.repeats))
        decode = max(total - prefill, 1e-9)
        results.append({"batch": batch, "prefill_tok_s": sum(map(len, batch_prompts)) / prefill,
                        "decode_tok_s": batch * (args.output_len - 1) / decode})
        print(f"[vllm] batch {batch}: decode {results[-1]['decode_tok_s']:.0f} tok/s, prefill "
              f"{results[-1]['prefill_tok_s']:.0f} tok/s", file=sys.stderr, flush=True)
    import vllm

    print(json.dumps({"peer": "vllm", "version": vllm.__version__, "results": results}), flush=True)


if __name__ == "__main__":
    main()
