"""The timed runs behind ``bench/engine.py``: one batch through pdserve's engine, one through
transformers' ``generate()``. Each returns the prefill and decode seconds it measured."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.model.sampling_params import SamplingParams

BLOCK_SIZE = 16
MAX_NUM_TOKENS = 8192
_request_ids = itertools.count()  # unique across runs: the engine's decode stage is keyed by request id


@dataclass(frozen=True, slots=True)
class Timing:
    prefill_s: float  # until every request has its first token
    decode_s: float  # the rest of the run


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_prompts(batch: int, length: int, seed: int = 0) -> list[list[int]]:
    """``batch`` prompts of exactly ``length`` ids in [0, 256), the same for a given (batch, seed)."""
    gen = torch.Generator().manual_seed(seed * 100_003 + batch)
    return torch.randint(0, 256, (batch, length), generator=gen).tolist()


def engine_config(args: Any, max_batch: int, prefill_tokens: int = 0) -> EngineConfig:
    """One engine for the whole run: KV for ``max_batch`` full-length requests, all in one batch,
    or for ``prefill_tokens`` of prompts prefilled together."""
    blocks_per_request = -(-(args.prompt_len + args.output_len) // BLOCK_SIZE)
    blocks = max(max_batch * blocks_per_request, -(-prefill_tokens // BLOCK_SIZE) + max_batch)
    # no prefix caching: runs repeat their prompts, and what is timed is computing them
    return EngineConfig(model=args.model, preset=args.preset, dtype=args.dtype, device=args.device,
                        block_size=BLOCK_SIZE, num_kv_blocks=blocks + 1, enable_prefix_caching=False,
                        max_batch_size=max_batch, max_num_tokens=max(MAX_NUM_TOKENS, args.prompt_len))


def time_pdserve(engine: LLMEngine, prompts: list[list[int]], output_len: int, device: str,
                 logprobs: int | None = None) -> Timing:
    params = SamplingParams(max_tokens=output_len, ignore_eos=True, logprobs=logprobs)
    ids = [f"bench-{next(_request_ids)}" for _ in prompts]
    for request_id, prompt in zip(ids, prompts):
        engine.add_request(request_id, prompt, params)
    no_token_yet, generated = set(ids), 0
    sync(device)
    started = time.perf_counter()
    first_done = 0.0
    while engine.has_unfinished_requests():
        outputs = engine.step()
        generated += sum(len(out.new_token_ids) for out in outputs)
        if no_token_yet:
            no_token_yet.difference_update(out.request_id for out in outputs if out.new_token_ids)
            if not no_token_yet:
                sync(device)
                first_done = time.perf_counter()
    sync(device)
    finished = time.perf_counter()
    if generated != len(prompts) * output_len:
        raise RuntimeError(f"pdserve generated {generated} tokens, expected {len(prompts) * output_len}")
    return Timing(first_done - started, finished - first_done)


def load_transformers(model_dir: Path, dtype: torch.dtype, device: str) -> Any:
    """The same checkpoint in transformers, default attention and cache, never stopping at EOS."""
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    gen_config = model.generation_config
    gen_config.eos_token_id = None
    if gen_config.pad_token_id is None:
        gen_config.pad_token_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    return model


def time_transformers(model: Any, prompts: list[list[int]], output_len: int, device: str,
                      cache: str = "dynamic") -> Timing:
    """Prefill: one forward of the batch (last position's logits, as generate() computes).
    Decode: the whole ``generate()`` minus that prefill. ``cache="static"``: generate() with a
    static cache, which transformers compiles (CUDA graphs) on a GPU and runs eagerly on a CPU."""
    input_ids = torch.tensor(prompts, dtype=torch.int64, device=device)
    mask = torch.ones_like(input_ids)
    with torch.inference_mode():
        sync(device)
        started = time.perf_counter()
        model(input_ids=input_ids, attention_mask=mask, logits_to_keep=1)
        sync(device)
        prefill = time.perf_counter() - started
        started = time.perf_counter()
        out = model.generate(input_ids, attention_mask=mask, max_new_tokens=output_len, min_new_tokens=output_len,
                             do_sample=False, pad_token_id=model.generation_config.pad_token_id,
                             cache_implementation=None if cache == "dynamic" else cache)
        sync(device)
        total = time.perf_counter() - started
    if out.shape[1] != input_ids.shape[1] + output_len:
        raise RuntimeError(f"transformers generated {out.shape[1] - input_ids.shape[1]} tokens, expected {output_len}")
    return Timing(prefill, max(total - prefill, 1e-9))


def time_prefill(engine: LLMEngine, prompts: list[list[int]], device: str) -> float:
    """Seconds until every prompt has its first token (prefill only: one output token each)."""
    return time_pdserve(engine, prompts, 1, device).prefill_s
