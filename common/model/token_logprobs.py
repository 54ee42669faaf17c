"""One sampled token's log-probabilities as they travel with it: from the sampler
(``common.model.logprobs``) through the engine's outputs and the wire to a client."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    logprob: float  # the sampled token's
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob) of the likeliest tokens, most likely first


@dataclass(frozen=True, slots=True)
class StepLogprobs:
    """What one step computed of the logprobs its requests asked for, by request id: each sampled
    token's, and each prompt chunk's rows' (of the prompt token after each row)."""

    sampled: Mapping[str, TokenLogprobs] = field(default_factory=dict)
    prompt: Mapping[str, list[TokenLogprobs]] = field(default_factory=dict)
