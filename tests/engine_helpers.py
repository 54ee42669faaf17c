"""Driving an engine the way a server does: requests arrive while others are running."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.model.sampling_params import SamplingParams


def run_staggered(engine: LLMEngine, prompts: list[list[int]], max_tokens: list[int],
                  join_steps: list[int]) -> list[list[int]]:
    """Adds prompt i at step ``join_steps[i]``; checks pool integrity after every step."""
    outputs: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    pending = sorted(range(len(prompts)), key=lambda i: join_steps[i])
    step = 0
    while pending or engine.has_unfinished_requests():
        while pending and join_steps[pending[0]] <= step:
            i = pending.pop(0)
            engine.add_request(f"r{i}", prompts[i], SamplingParams(max_tokens=max_tokens[i], ignore_eos=True))
        for out in engine.step():
            outputs[out.request_id].extend(out.new_token_ids)
        engine.check_integrity()
        step += 1
    return [outputs[f"r{i}"] for i in range(len(prompts))]


@contextmanager
def checked_engine(model_dir: Path | None = None, **config: object) -> Iterator[LLMEngine]:
    """An engine whose pool must be whole and fully free when the test is done with it."""
    engine = LLMEngine(EngineConfig(model=str(model_dir) if model_dir else None, **config))  # type: ignore[arg-type]
    yield engine
    engine.check_integrity()
    assert engine.pool.num_free == engine.pool.num_blocks, "blocks leaked"
