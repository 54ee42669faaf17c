"""Prompt logprobs (``SamplingParams.prompt_logprobs``) from pdserve's engine equal transformers'
log-softmax of its own logits for the same prompt, in float32, whether the prompt runs in one
forward or in chunks across steps beside other requests, and whether or not its prefix is
cached: a prompt asking for them is computed whole."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from common.model.location import ensure_model
from common.model.sampling_params import SamplingParams
from tests.checkpoints import random_prompts
from tests.engine_helpers import checked_engine

LENGTHS = [5, 40, 130]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return ensure_model("tiny")


@pytest.fixture(scope="module")
def expected(model_dir: Path) -> list[torch.Tensor]:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for prompt in random_prompts(LENGTHS, seed=3):
            out.append(torch.log_softmax(hf(torch.tensor([prompt])).logits[0].double(), dim=-1))
    return out


def _run(engine, prompts: list[list[int]], k: int) -> dict[str, tuple]:  # type: ignore[no-untyped-def]
    params = SamplingParams(max_tokens=3, ignore_eos=True, prompt_logprobs=k, logprobs=k)
    got: dict[str, tuple] = {}
    for i, prompt in enumerate(prompts):
        engine.add_request(f"p{i}", prompt, params)
    engine.add_request("other", prompts[0][:3], SamplingParams(max_tokens=8, ignore_eos=True))  # asks for none
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.prompt_logprobs:
                assert out.request_id not in got, "prompt logprobs given twice"
                got[out.request_id] = out.prompt_logprobs
            if out.request_id == "other":
                assert not out.prompt_logprobs and not out.logprobs
    return got


@pytest.mark.parametrize("max_num_tokens", [4096, 48])  # one forward each; chunks of at most 48 tokens
def test_prompt_logprobs_are_transformers_log_softmax(model_dir, expected, max_num_tokens):
    prompts = random_prompts(LENGTHS, seed=3)
    with checked_engine(model_dir, dtype="float32", max_num_tokens=max_num_tokens, num_kv_blocks=64) as engine:
        for attempt in range(2):  # the second time the prompts' blocks are in the prefix cache
            got = _run(engine, prompts, k=2)
            assert set(got) == {f"p{i}" for i in range(len(prompts))}, attempt
            for i, prompt in enumerate(prompts):
                entries, ref = got[f"p{i}"], expected[i]
                assert len(entries) == len(prompt) - 1
                for pos, entry in enumerate(entries, start=1):
                    assert entry.logprob == pytest.approx(ref[pos - 1, prompt[pos]].item(), abs=1e-4)
                    top = ref[pos - 1].topk(2)
                    assert [t for t, _ in entry.top] == top.indices.tolist()
                    assert [lp for _, lp in entry.top] == pytest.approx(top.values.tolist(), abs=1e-4)
