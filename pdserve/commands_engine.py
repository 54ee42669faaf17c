"""``pdserve model create`` and ``pdserve generate``: the engine in one process."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from common.engine.config import EngineConfig
from common.text.detokenizer import IncrementalDetokenizer
from common.engine.llm_engine import LLMEngine
from common.engine.args import add_engine_args, engine_config_from_args
from common.model.create import create_model
from common.model.location import default_model_dir
from common.model.presets import DEFAULT_PRESET, MODEL_NAMES
from common.model.sampling_params import SamplingParams
from common.text.auto_tokenizer import load_tokenizer


def register(sub: Any) -> None:
    model = sub.add_parser("model", help="manage the embedded default model")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    create = model_sub.add_parser("create", help="write a seeded random-weight Llama checkpoint, offline")
    create.add_argument("--preset", choices=tuple(MODEL_NAMES), default=DEFAULT_PRESET)
    create.add_argument("--out", type=Path, default=None, help="directory (default: the pdserve cache)")
    create.add_argument("--seed", type=int, default=0)
    create.set_defaults(handler=_model_create)

    gen = sub.add_parser("generate", help="run the engine in this process and stream one completion")
    gen.add_argument("--prompt", required=True)
    defaults = SamplingParams()
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=defaults.temperature)
    gen.add_argument("--top-k", type=int, default=defaults.top_k)
    gen.add_argument("--top-p", type=float, default=defaults.top_p)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--min-tokens", type=int, default=defaults.min_tokens)
    gen.add_argument("--ignore-eos", action="store_true")
    add_engine_args(gen)
    gen.set_defaults(handler=_generate)

    prof = sub.add_parser("profile", help="measure this machine and fit the prefill and decode cost models")
    prof.add_argument("--out", type=Path, default=Path("cost_model.json"))
    prof.add_argument("--prefill-tokens", default="16,32,64,128,256,512,1024,2048")
    prof.add_argument("--decode-batches", default="1,4,8,16,32")
    prof.add_argument("--decode-lengths", default="64,256,1024")
    prof.add_argument("--threads", type=int, default=0, help="torch threads (default: as many as a worker of "
                      "`pdserve up` gets on this host, on the same cores)")
    add_engine_args(prof)
    prof.set_defaults(handler=_profile)


def _profile(args: argparse.Namespace) -> int:
    from common.worker.cpu_plan import apply_to_this_process, plan_cores
    from common.worker.profile import profile

    worker = plan_cores(["prefill-0", "decode-0"])[-1]  # measure as a worker of a default cluster runs
    apply_to_this_process(worker.cores if not args.threads else (), args.threads or worker.threads)
    print(f"measuring with {args.threads or worker.threads} thread(s)", file=sys.stderr)
    engine = LLMEngine(engine_config_from_args(args))
    engine.generate([[1, 2, 3]], SamplingParams(max_tokens=2))
    prefill_tokens = tuple(int(n) for n in args.prefill_tokens.split(","))
    points = tuple((int(b), int(n)) for b in args.decode_batches.split(",") for n in args.decode_lengths.split(","))
    models = profile(engine, prefill_tokens, points, progress=lambda line: print("  " + line, file=sys.stderr))
    p, d = models.prefill, models.decode
    print(f"prefill: t = {p.base_s * 1000:.2f} ms + {p.per_token_s * 1e6:.2f} us x max(0, n - {p.threshold:g})"
          f"   R^2 = {p.r2:.4f}, worst point {p.worst_ratio:.2f}x")
    print(f"decode:  t = {d.alpha * 1e9:.3f} ns*B*L + {d.beta * 1e6:.1f} us*B + {d.gamma * 1e9:.1f} ns*L + "
          f"{d.delta * 1000:.2f} ms   R^2 = {d.r2:.4f}, worst point {d.worst_ratio:.2f}x")
    if not models.sound:
        print("warning: a fit misses one of its own points by more than 1.5x (a busy machine?); measure again",
              file=sys.stderr)
    models.save(args.out)
    print(f"saved {args.out}")
    return 0


def _model_create(args: argparse.Namespace) -> int:
    out = args.out or default_model_dir(args.preset)
    print(f"creating the {args.preset!r} model in {out} ...", file=sys.stderr)
    create_model(args.preset, out, seed=args.seed)
    print(out)
    return 0


def _generate(args: argparse.Namespace) -> int:
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
                            top_p=args.top_p, seed=args.seed, min_tokens=args.min_tokens,
                            ignore_eos=args.ignore_eos)
    config: EngineConfig = engine_config_from_args(args)
    started = time.perf_counter()
    engine = LLMEngine(config)
    tokenizer = load_tokenizer(engine.model_dir)
    prompt_ids = tokenizer.encode(args.prompt)
    print(f"[model {engine.model_dir}, {len(prompt_ids)} prompt tokens, "
          f"loaded in {time.perf_counter() - started:.1f}s]", file=sys.stderr)
    engine.add_request("cli", prompt_ids, params)
    detok = IncrementalDetokenizer(tokenizer)
    started, first, count, reason = time.perf_counter(), 0.0, 0, None
    while engine.has_unfinished_requests():
        for out in engine.step():
            first = first or time.perf_counter() - started
            count += len(out.new_token_ids)
            sys.stdout.write(detok.add(out.new_token_ids))
            sys.stdout.flush()
            reason = out.finish_reason or reason
    sys.stdout.write(detok.flush() + "\n")
    elapsed = time.perf_counter() - started
    print(f"[{count} tokens in {elapsed:.2f}s, first after {first * 1000:.0f} ms, finish: {reason}]",
          file=sys.stderr)
    return 0
