"""Per-request sampling parameters, validated where they are built."""

from __future__ import annotations

from dataclasses import dataclass

MAX_LOGPROBS = 20  # the likeliest tokens a step may report beside the sampled one (OpenAI's limit)
# what an output may be constrained to (``StructuredOutput.kind``)
STRUCTURED_KINDS = ("json", "json_schema", "regex", "choice", "grammar")


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    """What a request's output must be, enforced while it is sampled (``common.model.grammar``): a
    JSON object (``json``), JSON valid against the JSON Schema ``spec`` (``json_schema``), a match
    of the regular expression ``spec`` (``regex``), one of the strings of the JSON list ``spec``
    (``choice``), or a sentence of the EBNF grammar ``spec`` (``grammar``, GBNF)."""

    kind: str
    spec: str = ""

    def __post_init__(self) -> None:
        _check(self.kind in STRUCTURED_KINDS, "structured.kind", f"must be one of {', '.join(STRUCTURED_KINDS)}",
               self.kind)
        _check(bool(self.spec) or self.kind == "json", "structured.spec", f"is needed for {self.kind}", self.spec)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """``temperature == 0`` is greedy. ``top_k == 0`` and ``top_p == 1`` disable those filters."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None  # None: none; 0: each sampled token's; k: and the k likeliest tokens'
    prompt_logprobs: int | None = None  # the same of each prompt token after the first (its prefill is not cached)
    structured: StructuredOutput | None = None  # what the output must be; None: free text

    def __post_init__(self) -> None:
        _check(self.max_tokens >= 1, "max_tokens", "must be >= 1", self.max_tokens)
        _check(self.temperature >= 0, "temperature", "must be >= 0", self.temperature)
        _check(self.top_k >= 0, "top_k", "must be >= 0 (0 disables it)", self.top_k)
        _check(0 < self.top_p <= 1, "top_p", "must be in (0, 1]", self.top_p)
        _check(self.seed is None or self.seed >= 0, "seed", "must be >= 0", self.seed)
        _check(0 <= self.min_tokens <= self.max_tokens, "min_tokens", "must be in [0, max_tokens]",
               self.min_tokens)
        _check(all(t >= 0 for t in self.stop_token_ids), "stop_token_ids", "must be >= 0",
               self.stop_token_ids)
        for name in ("logprobs", "prompt_logprobs"):
            k = getattr(self, name)
            _check(k is None or 0 <= k <= MAX_LOGPROBS, name, f"must be in [0, {MAX_LOGPROBS}]", k)
        _check(self.structured is None or not self.ignore_eos, "ignore_eos",
               "cannot be set with structured output (it ends where its grammar does)", self.ignore_eos)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _check(ok: bool, field: str, rule: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{field} {rule}, got {value!r}")
