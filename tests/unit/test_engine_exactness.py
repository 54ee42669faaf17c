"""Greedy output of pdserve's engine is token-identical to transformers' generate()."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.model.location import ensure_model
from common.model.sampling_params import SamplingParams
from common.model.packed_linear import PackedLinear, packed_linear_supported
from tests.checkpoints import random_prompts, reference_greedy, write_checkpoint
from tests.engine_helpers import checked_engine, run_staggered

LENGTHS = [1, 7, 16, 33, 64, 129, 200, 300]
MAX_TOKENS = [24, 9, 17, 32, 5, 20, 12, 28]
JOIN_STEPS = [0, 0, 3, 3, 8, 15, 15, 30]  # later requests join while earlier ones decode or leave


@pytest.fixture(scope="module")
def default_model() -> Path:
    return ensure_model("tiny")


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return random_prompts(LENGTHS, seed=1)


@pytest.fixture(scope="module")
def reference(default_model: Path, prompts: list[list[int]]) -> list[list[int]]:
    return reference_greedy(default_model, prompts, MAX_TOKENS)


@pytest.mark.parametrize("enforce_eager", [False, True])
def test_greedy_matches_transformers_with_requests_joining_and_leaving(default_model, prompts, reference, enforce_eager):
    """On a CPU with oneDNN the default is the fast step (prepacked linears); ``enforce_eager``
    the plain path. Both are token-identical to transformers."""
    with checked_engine(default_model, num_kv_blocks=256, enforce_eager=enforce_eager) as engine:
        fast = packed_linear_supported(engine.device, engine.model.dtype) and not enforce_eager
        assert isinstance(engine.model.linear, PackedLinear) == fast
        assert run_staggered(engine, prompts, MAX_TOKENS, JOIN_STEPS) == reference


def test_the_real_default_model_matches_transformers_on_both_cpu_paths():
    """SmolLM2-135M (real weights, whose logits have the near-ties random weights avoid) through
    the prepacked linears and the plain path, against transformers' own generation."""
    model = ensure_model("smollm2-135m")
    prompts = random_prompts([5, 64, 200], seed=3)
    max_tokens = [24, 16, 24]
    reference = reference_greedy(model, prompts, max_tokens)
    for enforce_eager in (False, True):
        with checked_engine(model, num_kv_blocks=256, enforce_eager=enforce_eager) as engine:
            assert run_staggered(engine, prompts, max_tokens, [0, 0, 2]) == reference, enforce_eager


def test_greedy_matches_transformers_under_preemption_with_a_tiny_block_budget(default_model, prompts, reference):
    # 32 blocks of 16 = 512 tokens: the longest request alone needs 21 blocks, so requests
    # must be preempted (KV dropped) and recomputed to finish.
    with checked_engine(default_model, num_kv_blocks=32, memory_policy="max_utilization") as engine:
        preemptions = _count_preemptions(engine)
        assert run_staggered(engine, prompts, MAX_TOKENS, [0] * len(prompts)) == reference
        assert preemptions() > 0, "the block budget was meant to force preemption"


def test_greedy_matches_transformers_with_prompts_chunked_across_steps(default_model, prompts, reference):
    with checked_engine(default_model, num_kv_blocks=256, max_num_tokens=48, max_batch_size=3) as engine:
        assert run_staggered(engine, prompts, MAX_TOKENS, JOIN_STEPS) == reference


def test_guaranteed_no_evict_waits_for_blocks_instead_of_preempting(default_model, prompts, reference):
    with checked_engine(default_model, num_kv_blocks=24, memory_policy="guaranteed_no_evict") as engine:
        preemptions = _count_preemptions(engine)
        assert run_staggered(engine, prompts, MAX_TOKENS, [0] * len(prompts)) == reference
        assert preemptions() == 0


@pytest.mark.parametrize(
    "model_type, overrides",
    [
        ("qwen2", {"tie_word_embeddings": True}),
        ("mistral", {"sliding_window": 40}),
        ("llama", {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64}}),
        ("llama", {"attention_bias": True, "mlp_bias": True, "num_key_value_heads": 8}),
    ],
    ids=["qwen2-qkv-bias-tied", "mistral-sliding-window", "llama3-rope-scaling", "llama-biases-mha"],
)
def test_greedy_matches_transformers_for_other_llama_family_layouts(tmp_path, model_type, overrides):
    model_dir = write_checkpoint(tmp_path / model_type, model_type, seed=3, **overrides)
    lengths, max_tokens = [1, 20, 45, 90, 150], [12, 20, 8, 16, 10]
    prompts = random_prompts(lengths, seed=2)
    expected = reference_greedy(model_dir, prompts, max_tokens)
    with checked_engine(model_dir, num_kv_blocks=64, block_size=8, max_num_tokens=64) as engine:
        assert run_staggered(engine, prompts, max_tokens, [0, 2, 2, 5, 9]) == expected


def _count_preemptions(engine):  # type: ignore[no-untyped-def]
    seen: dict[str, int] = {}
    original = engine.scheduler._preempt

    def counting(request):  # type: ignore[no-untyped-def]
        seen[request.request_id] = seen.get(request.request_id, 0) + 1
        original(request)

    engine.scheduler._preempt = counting
    return lambda: sum(seen.values())


def test_a_reused_request_id_never_sees_the_previous_requests_kv(default_model):
    # generate() names requests gen-0, gen-1, ... on every call. B's length equals A's final
    # context, the one case where a cache keyed by request id would look up to date.
    prompt_a, prompt_b = random_prompts([10, 16], seed=5)
    params = SamplingParams(max_tokens=7, ignore_eos=True)
    with checked_engine(default_model, num_kv_blocks=64) as engine:
        engine.generate([prompt_a], params)
        reused = engine.generate([prompt_b], params)
    with checked_engine(default_model, num_kv_blocks=64) as fresh:
        assert reused == fresh.generate([prompt_b], params)
