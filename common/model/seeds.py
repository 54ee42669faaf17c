"""Per-token sampling seeds: the key of a seeded request's ``index``-th output token, and the seed
a request continued elsewhere (``gateway.migration``) takes so its sequence goes on unchanged.
Plain integers: the gateway, which imports no torch, works out continuations."""

from __future__ import annotations

SEED_MUL = 0x9E3779B97F4A7C15  # odd: invertible modulo 2^63
INDEX_MUL = 0xBF58476D1CE4E5B9
MOD = 1 << 63


def token_seed(seed: int, index: int) -> int:
    """A 63-bit key for the ``index``-th output token of a request seeded with ``seed``."""
    return (seed * SEED_MUL + index * INDEX_MUL) % MOD


def continuation_seed(seed: int, produced: int) -> int:
    """The seed whose token ``i`` is keyed as ``seed``'s token ``produced + i``: a request resumed
    after ``produced`` tokens, as a new request, samples what the first would have."""
    return (seed + produced * INDEX_MUL * pow(SEED_MUL, -1, MOD)) % MOD
