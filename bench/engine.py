"""Engine throughput: pdserve against transformers' ``generate()`` on the same model, same run.

For each batch size B: B seeded random prompts of exactly ``--prompt-len`` ids, ``--output-len``
new tokens each, EOS ignored. pdserve runs them through one ``LLMEngine`` built once for the
whole run; the prefill phase lasts until every request has its first token, the decode phase
is the rest. Decode tokens/s = B·(output_len − 1) / decode seconds; prefill tokens/s =
B·prompt_len / prefill seconds. transformers: prefill is one forward of the batch, decode is
``generate()`` minus that forward, with its default (dynamic) cache and with a static cache
(which transformers compiles into CUDA graphs on a GPU; on a CPU it runs eagerly). Runs are
interleaved and the best of ``--repeats`` is kept. Then: prefill of ``--long-prompts`` prompts
of ``--long-prompt-len`` ids (``prefill_long``), and the bandwidth of the engine's decode
attention at batch 32 × 600 and batch 1 × 8,000 tokens of context (``kernels``). The machine's
matmul FLOP/s and copy bandwidth are measured in the same run, and give a roofline bound for
pdserve's decode at batch 32 and the fraction of memory bandwidth the attention reaches.

With ``--peer vllm``, vLLM (in a virtual environment of its own, ``--peer-python``) runs the same
model directory, shapes and dtype on the same cores, alternating with pdserve's runs ``--rounds``
times (the best of each system kept), and every ``decode`` and ``prefill`` entry gains
``vllm_tok_s``; without its interpreter the bench says so and skips it.

    python bench/engine.py [--preset tiny|small|1b | --model DIR] [--dtype float32|bfloat16] [--device cuda]
                           [--peer vllm --peer-python PEER/bin/python]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.lib.common import device_name, emit, progress  # noqa: E402
from bench.lib.engine_runs import (  # noqa: E402
    Timing, engine_config, load_transformers, make_prompts, time_pdserve, time_prefill, time_transformers)
from bench.lib.kernel_figures import decode_attention_figures  # noqa: E402
from bench.lib.peer_runs import add_peer, run_vllm  # noqa: E402
from bench.lib.roofline import decode_roofline, machine_figures  # noqa: E402
from common.engine.config import DTYPES, resolve_dtype  # noqa: E402
from common.engine.llm_engine import LLMEngine  # noqa: E402

ROOFLINE_BATCH = 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", default=None, help="a Hugging Face checkpoint directory (overrides --preset)")
    parser.add_argument("--dtype", default="auto", choices=DTYPES,
                        help="auto (the engine's default): bfloat16 where the device computes it natively, else float32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2, help="interleaved runs per batch size; best is kept")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--long-prompt-len", type=int, default=1400)
    parser.add_argument("--long-prompts", type=int, default=None, help="default: 100 on a GPU, 16 on a CPU")
    parser.add_argument("--peer", choices=("vllm",), default=None,
                        help="also run this peer on the same model, shapes, dtype and cores (its own environment)")
    parser.add_argument("--peer-python", type=Path, default=None,
                        help="the peer's interpreter (default: $PDSERVE_PEER_VLLM, else .peer-vllm/bin/python)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="with a peer: pdserve's runs and the peer's alternate this many times, the best of "
                             "each kept (the machine's speed drifts over the minutes between them)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON result here")
    args = parser.parse_args(argv)
    args.batch_sizes = [int(b) for b in args.batches.split(",") if b.strip()]
    args.dtype = resolve_dtype(args.dtype, args.device)  # pdserve, transformers and the peer all run this one
    if args.long_prompts is None:
        args.long_prompts = 100 if args.device.startswith("cuda") else 16
    if not args.batch_sizes or min(args.batch_sizes) < 1 or args.output_len < 2 or args.prompt_len < 1:
        parser.error("--batches must be positive integers, --output-len >= 2, --prompt-len >= 1")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def warm_up(engine: LLMEngine, hf: Any, args: argparse.Namespace) -> None:
    """pdserve's warm-up is full length: the CPU decode stage grows to the longest context once,
    here, rather than inside the first measured batch. transformers gets a tiny generate()."""
    time_pdserve(engine, make_prompts(2, args.prompt_len, seed=1), args.output_len, args.device)
    if hf is not None:
        time_transformers(hf, make_prompts(2, 32, seed=1), 4, args.device)
        time_transformers(hf, make_prompts(2, 32, seed=1), 4, args.device, cache="static")


def best(timings: list[Timing]) -> Timing:
    return Timing(min(t.prefill_s for t in timings), min(t.decode_s for t in timings))


def measure_batch(engine: LLMEngine, hf: Any, batch: int,
                  args: argparse.Namespace) -> tuple[Timing, Timing | None, Timing | None]:
    prompts = make_prompts(batch, args.prompt_len)
    ours: list[Timing] = []
    theirs: list[Timing] = []
    static: list[Timing] = []
    for _ in range(args.repeats):  # interleaved: drift on a shared machine hits both sides alike
        ours.append(time_pdserve(engine, prompts, args.output_len, args.device))
        if hf is not None:
            theirs.append(time_transformers(hf, prompts, args.output_len, args.device))
            static.append(time_transformers(hf, prompts, args.output_len, args.device, cache="static"))
    return best(ours), (best(theirs) if theirs else None), (best(static) if static else None)


def rates(batch: int, args: argparse.Namespace, ours: Timing, theirs: Timing | None,
          static: Timing | None) -> tuple[dict, dict]:
    generated, prompt_tokens = batch * (args.output_len - 1), batch * args.prompt_len
    ours_dec, ours_pre = generated / ours.decode_s, prompt_tokens / ours.prefill_s
    theirs_dec = generated / theirs.decode_s if theirs else None
    theirs_pre = prompt_tokens / theirs.prefill_s if theirs else None
    static_dec = generated / static.decode_s if static else None
    decode = {"batch": batch, "pdserve_tok_s": ours_dec, "transformers_tok_s": theirs_dec,
              "ratio": ours_dec / theirs_dec if theirs_dec else None, "transformers_static_tok_s": static_dec,
              "ratio_to_static": ours_dec / static_dec if static_dec else None}
    prefill = {"batch": batch, "pdserve_tok_s": ours_pre, "transformers_tok_s": theirs_pre}
    return decode, prefill


def report(decode: dict, prefill: dict) -> None:
    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.0f}"

    ratio = "" if decode["ratio"] is None else f" ({decode['ratio']:.2f}x)"
    progress(f"[batch {decode['batch']}] decode: pdserve {fmt(decode['pdserve_tok_s'])} tok/s, transformers "
             f"{fmt(decode['transformers_tok_s'])} tok/s{ratio}, static cache "
             f"{fmt(decode['transformers_static_tok_s'])} tok/s; prefill: pdserve {fmt(prefill['pdserve_tok_s'])}"
             f" tok/s, transformers {fmt(prefill['transformers_tok_s'])} tok/s")


def prefill_long(engine: LLMEngine, args: argparse.Namespace) -> dict:
    prompts = make_prompts(args.long_prompts, args.long_prompt_len, seed=2)
    seconds = min(time_prefill(engine, prompts, args.device) for _ in range(args.repeats))
    result = {"prompt_len": args.long_prompt_len, "num_prompts": args.long_prompts,
              "pdserve_tok_s": args.long_prompts * args.long_prompt_len / seconds}
    progress(f"[prefill long] {args.long_prompts} prompts of {args.long_prompt_len} ids: "
             f"{result['pdserve_tok_s']:.0f} tok/s")
    return result


def roofline_for(engine: LLMEngine, args: argparse.Namespace, machine: dict, decode: list[dict]) -> dict:
    entry = next((d for d in decode if d["batch"] == ROOFLINE_BATCH), decode[-1])
    mean_len = args.prompt_len + args.output_len / 2  # contexts run prompt+1 .. prompt+output-1
    roof = decode_roofline(engine.model_dir, args.dtype, entry["batch"], mean_len, machine, entry["pdserve_tok_s"])
    progress(f"[roofline] batch {roof['batch']}: bound {roof['bound_tok_s']:.0f} tok/s ({roof['bound_by']}: "
             f"{roof['memory_ms']:.2f} ms memory, {roof['compute_ms']:.2f} ms compute per step), achieved "
             f"{roof['achieved_tok_s']:.0f} tok/s ({roof['achieved_step_ms']:.2f} ms/step) = "
             f"{roof['fraction_of_bound']:.0%} of bound")
    return roof


def alternate_rounds(engine: LLMEngine, hf: Any, args: argparse.Namespace
                     ) -> tuple[list[dict], list[dict], dict[int, dict[str, float]] | None]:
    """pdserve's batches (beside transformers'), then the peer's, ``--rounds`` times with a peer (once
    without): the best of each system over the rounds, so that a stretch of slow machine falls on
    both alike."""
    runs: dict[int, list[tuple[Timing, Timing | None, Timing | None]]] = {b: [] for b in args.batch_sizes}
    peers: list[dict[int, dict[str, float]]] = []
    for round_ in range(args.rounds if args.peer else 1):
        for batch in args.batch_sizes:
            runs[batch].append(measure_batch(engine, hf, batch, args))
            report(*rates(batch, args, *runs[batch][-1]))
        peer_run = run_vllm(args.peer_python, engine.model_dir, args) if args.peer == "vllm" else None
        if peer_run is None:
            break
        peers.append(peer_run)
    decode, prefill = [], []
    for batch, timings in runs.items():
        ours, theirs, static = (best([t for t in side if t is not None]) if any(side) else None
                                for side in zip(*timings))
        d, p = rates(batch, args, ours, theirs, static)  # type: ignore[arg-type]
        decode.append(d)
        prefill.append(p)
    if not peers:
        return decode, prefill, None
    peer = {b: {key: max(run[b][key] for run in peers) for key in ("decode_tok_s", "prefill_tok_s")}
            for b in peers[0]}
    return decode, prefill, peer


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    engine = LLMEngine(engine_config(args, max(args.batch_sizes), args.long_prompts * (args.long_prompt_len + 1)))
    hf = None if args.skip_transformers else load_transformers(engine.model_dir, engine.config.torch_dtype,
                                                                 args.device)
    warm_up(engine, hf, args)
    progress(f"[setup] model {engine.model_dir}, {args.dtype} on {args.device}, {time.perf_counter() - started:.1f} s")
    decode, prefill, peer = alternate_rounds(engine, hf, args)
    if peer is not None:
        add_peer(decode, prefill, peer)
        for d, p in zip(decode, prefill):
            progress(f"[batch {d['batch']}] vLLM: decode {d['vllm_tok_s'] or 0:.0f} tok/s (pdserve "
                     f"{d['ratio_to_vllm'] or 0:.2f}x), prefill {p['vllm_tok_s'] or 0:.0f} tok/s (pdserve "
                     f"{p['ratio_to_vllm'] or 0:.2f}x)")
    long = prefill_long(engine, args)
    engine.check_integrity()
    machine = machine_figures(args.device, args.dtype)
    progress(f"[machine] {machine['matmul_gflops']:.0f} GFLOP/s float32 matmul, {machine['mem_bw_gb_s']:.1f} GB/s "
             f"copy (read + write), {machine['cpu_threads']} threads")
    roofline = roofline_for(engine, args, machine, decode)
    kernels = {"decode_attention": decode_attention_figures(engine, machine["mem_bw_gb_s"])}
    for k in kernels["decode_attention"]:
        progress(f"[decode attention] batch {k['batch']} x {k['context']} tokens: {k['gb_s']:.1f} GB/s, "
                 f"{k['fraction_of_hbm']:.0%} of copy bandwidth ({engine.backend} kernels)")
    progress(f"[done] {time.perf_counter() - started:.1f} s")
    emit({"device": device_name(args.device), "model": args.model or args.preset, "dtype": args.dtype,
          "prompt_len": args.prompt_len, "output_len": args.output_len, "machine": machine, "decode": decode,
          "prefill": prefill, "prefill_long": long, "roofline": roofline, "kernels": kernels,
          "kernel_backend": engine.backend, "cuda_graphs": engine.runner.graphs is not None,
          "peer": {"name": "vllm", "threads": torch.get_num_threads(), "rounds": args.rounds} if peer is not None
          else None}, args.out)


if __name__ == "__main__":
    main()
