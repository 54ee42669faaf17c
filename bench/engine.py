"""Engine throughput: pdserve against transformers' ``generate()`` on the same model, same run.

For each batch size: B prompts of ``--prompt-len`` tokens, ``--output-len`` new tokens each.
Decode tokens/s counts tokens after the first (prefill excluded); prefill tokens/s is the
prompt tokens over the time to every request's first token. The machine's matmul FLOP/s
and memory bandwidth are measured in the same run, with a roofline bound for decode.

    python bench/engine.py [--preset tiny|small|1b] [--dtype bfloat16] [--device cuda]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.common import device_name, emit, progress  # noqa: E402
from bench.roofline import decode_roofline, machine_figures  # noqa: E402
from common.config import EngineConfig  # noqa: E402
from common.engine import LLMEngine, resolve_model_dir  # noqa: E402
from common.sampling_params import SamplingParams  # noqa: E402


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_prompts(batch: int, length: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(batch)
    return [torch.randint(0, 256, (length,), generator=gen).tolist() for _ in range(batch)]


def pdserve_run(engine: LLMEngine, prompts: list[list[int]], output_len: int, device: str) -> tuple[float, float]:
    """Returns (prefill seconds, decode seconds) for one batch."""
    params = SamplingParams(max_tokens=output_len, ignore_eos=True)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"b{i}", prompt, params)
    started, first_done, seen = time.perf_counter(), 0.0, set()
    while engine.has_unfinished_requests():
        for out in engine.step():
            seen.add(out.request_id)
        if not first_done and len(seen) == len(prompts):
            sync(device)
            first_done = time.perf_counter()
    sync(device)
    return first_done - started, time.perf_counter() - first_done


def transformers_run(model, prompts: list[list[int]], output_len: int, device: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    ids = torch.tensor(prompts, device=device)
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        sync(device)
        started = time.perf_counter()
        model(ids, attention_mask=mask)
        sync(device)
        prefill = time.perf_counter() - started
        started = time.perf_counter()
        model.generate(ids, attention_mask=mask, max_new_tokens=output_len, min_new_tokens=output_len,
                       do_sample=False, pad_token_id=0)
        sync(device)
        total = time.perf_counter() - started
    return prefill, max(total - prefill, 1e-9)


def load_transformers(model_dir: Path, dtype: torch.dtype, device: str):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    model.generation_config.eos_token_id = None
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--repeats", type=int, default=2, help="runs per batch size and engine; best is kept")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    total_len = args.prompt_len + args.output_len
    config = EngineConfig(model=args.model, preset=args.preset, dtype=args.dtype, device=args.device,
                          num_kv_blocks=max(batches) * (-(-total_len // 16)) + 16, max_batch_size=max(batches),
                          max_num_tokens=8192)
    engine = LLMEngine(config)
    model_dir = resolve_model_dir(config)
    hf = None if args.skip_transformers else load_transformers(model_dir, config.torch_dtype, args.device)
    # Warm-up at full length: first-use costs (allocator, the CPU decode stage growing to the
    # longest context) are paid here, not inside the batch-1 figure.
    pdserve_run(engine, make_prompts(2, args.prompt_len), args.output_len, args.device)
    if hf is not None:
        transformers_run(hf, make_prompts(2, 32), 4, args.device)
    decode, prefill = [], []
    for batch in batches:
        prompts = make_prompts(batch, args.prompt_len)
        p_pre, p_dec, t_pre, t_dec = float("inf"), float("inf"), float("inf"), float("inf")
        for _ in range(args.repeats):  # interleaved, best of each: the machine is shared and noisy
            pre, dec = pdserve_run(engine, prompts, args.output_len, args.device)
            p_pre, p_dec = min(p_pre, pre), min(p_dec, dec)
            if hf is not None:
                pre, dec = transformers_run(hf, prompts, args.output_len, args.device)
                t_pre, t_dec = min(t_pre, pre), min(t_dec, dec)
        generated, prompt_tokens = batch * (args.output_len - 1), batch * args.prompt_len
        decode.append({"batch": batch, "pdserve_tok_s": generated / p_dec, "transformers_tok_s": generated / t_dec,
                       "ratio": t_dec / p_dec})
        prefill.append({"batch": batch, "pdserve_tok_s": prompt_tokens / p_pre,
                        "transformers_tok_s": prompt_tokens / t_pre})
        progress(f"[batch {batch}] decode: pdserve {decode[-1]['pdserve_tok_s']:.0f} tok/s, transformers "
                 f"{decode[-1]['transformers_tok_s']:.0f} tok/s ({decode[-1]['ratio']:.2f}x); prefill: pdserve "
                 f"{prefill[-1]['pdserve_tok_s']:.0f} tok/s, transformers {prefill[-1]['transformers_tok_s']:.0f}")
    engine.check_integrity()
    machine = machine_figures(args.device)
    progress(f"[machine] {machine['matmul_gflops']:.0f} GFLOP/s matmul, {machine['mem_bw_gb_s']:.1f} GB/s copy")
    at32 = next((d for d in decode if d["batch"] == 32), decode[-1])
    roofline = decode_roofline(engine, at32["batch"], args.prompt_len + args.output_len // 2, machine,
                               at32["pdserve_tok_s"])
    emit({"device": device_name(args.device), "model": args.model or args.preset, "dtype": args.dtype,
          "prompt_len": args.prompt_len, "output_len": args.output_len, "machine": machine, "decode": decode,
          "prefill": prefill, "roofline": roofline}, args.out)


if __name__ == "__main__":
    main()
