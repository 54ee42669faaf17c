"""Per-request sampling parameters, validated where they are built."""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _check(ok: bool, field: str, rule: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{field} {rule}, got {value!r}")
