"""A prefill of a new shape compiles no kernel on the GPU (skipped without CUDA).

Triton compiles a kernel once per specialization of its arguments (whether each pointer is
16-byte aligned, whether each integer is 1 or a multiple of 16). Arguments that follow a step's
sizes would make new variants appear mid-load, each compile stalling the whole step: on an H100,
requests at the first steps of new prompt lengths waited 1.1-1.4 s for their first token. After
the engine's first request, prefills of any lengths and batch compositions must reuse what it
compiled.
"""

from __future__ import annotations

import random

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _compiled_variants() -> dict[str, int]:
    from common.kernels import activation, cache_write, norm, prefill_attention, rope

    kernels = (prefill_attention._prefill_kernel, cache_write._cache_write_kernel, rope._rope_kernel,
               norm._rms_norm_kernel, activation._silu_mul_kernel)
    device = torch.cuda.current_device()
    return {k.fn.__name__: len(k.device_caches[device][0]) for k in kernels}


def test_prefills_of_new_lengths_and_batches_compile_nothing():
    from common.engine.config import EngineConfig
    from common.engine.llm_engine import LLMEngine
    from common.model.sampling_params import SamplingParams

    engine = LLMEngine(EngineConfig(device="cuda", dtype="bfloat16", num_kv_blocks=1024))
    first_token = SamplingParams(max_tokens=1, ignore_eos=True)
    engine.generate([[1, 2, 3, 4]], first_token)  # what a worker's warm-up runs
    after_first = _compiled_variants()
    assert after_first["_prefill_kernel"] >= 1 and after_first["_cache_write_kernel"] >= 1, after_first

    rng = random.Random(5)
    for batch in (1, 2, 3, 5, 8, 13):
        lengths = [rng.randint(1, 300) for _ in range(batch)]
        engine.generate([[rng.randint(5, 200) for _ in range(n)] for n in lengths], first_token)
    assert _compiled_variants() == after_first
