"""Turns each request's logits into its next token, on the logits' device, for the whole batch.

Greedy rows take the argmax. Sampled rows are tempered, cut to their top-k and top-p (one
sort of the batch serves both), and drawn by an exponential race: the token with the largest
``p / E`` wins, where each token's ``E = −ln U`` is exponential noise. That draws exactly from
``p`` and needs no per-row generator, so the batch samples in a few batched ops and the
step's only synchronisation is reading the chosen tokens back.

A seeded request's noise for its n-th token is a hash of (seed, n) and the token id alone
(``token_seed``), so its tokens depend neither on what else shares the batch, nor on the
device, nor on which process samples them: a first token drawn on a prefill worker and the rest
on a decode worker give the sequence one engine would. Unseeded rows hash a fresh random key.
"""

from __future__ import annotations

import random

import torch

from common.model.batch import ScheduledSeq
from common.model.logprobs import sample_with_logprobs, wanted
from common.model.token_logprobs import TokenLogprobs
from common.model.staging import Staging
from common.model.seeds import token_seed

MASK32 = 0xFFFFFFFF
# odd multipliers below 2**31, so every product of a 32-bit value stays inside int64
MIX = (0x7FEB352D, 0x5BD1E995)


class Sampler:
    def __init__(self, eos_token_ids: tuple[int, ...], device: torch.device | None = None) -> None:
        self.eos_token_ids = eos_token_ids
        self._random = random.Random()
        self._staging = Staging(device or torch.device("cpu"))  # the rows' parameters, in one copy

    def __call__(self, logits: torch.Tensor, seqs: list[ScheduledSeq]) -> list[int]:
        """``logits [len(seqs), vocab]`` float32 -> one token id per sequence."""
        return self.sample(logits, seqs).tolist()

    def with_logprobs(self, logits: torch.Tensor, seqs: list[ScheduledSeq],
                      raw: torch.Tensor | None = None) -> tuple[list[int], list[TokenLogprobs | None]]:
        """The tokens drawn from ``logits`` and each one's logprobs where its request asks, from
        ``raw`` (the logits before a grammar's mask; default ``logits``: ``common.model.logprobs``):
        a step none of whose requests asks costs what ``__call__`` does."""
        ks = [s.params.logprobs for s in seqs]
        if not wanted(ks):
            return self(logits, seqs), [None] * len(seqs)
        return sample_with_logprobs(logits if raw is None else raw, self.sample(logits, seqs), ks)

    def sample(self, logits: torch.Tensor, seqs: list[ScheduledSeq]) -> torch.Tensor:
        """The tokens as a device tensor ``[len(seqs)]`` (nothing read back)."""
        banned = self._early_stops(seqs, logits.shape[1])
        sampled = not all(s.params.greedy for s in seqs)
        if not banned and not sampled:
            return logits.argmax(dim=-1)
        params = [s.params for s in seqs]
        floats = torch.tensor([[p.temperature if not p.greedy else 1.0, p.top_p] for p in params], dtype=torch.float64)
        ints = torch.tensor([[p.top_k, self._key(s), p.greedy] for p, s in zip(params, seqs)], dtype=torch.int64)
        floats, ints, banned_at = self._staging.to_device(floats, ints, torch.tensor(banned, dtype=torch.int64))
        if banned:  # below ``min_tokens``, EOS and stop tokens cannot be sampled
            logits = logits.index_put((banned_at[:, 0], banned_at[:, 1]), logits.new_tensor(float("-inf")))
        greedy = logits.argmax(dim=-1)
        if not sampled:
            return greedy
        scaled = logits / floats[:, 0:1].float()
        if any(0 < p.top_k < logits.shape[1] or p.top_p < 1.0 for p in params):
            scaled = _top_k_top_p(scaled, ints[:, 0], floats[:, 1].float())
        drawn = (torch.softmax(scaled, dim=-1) / exponential_noise(ints[:, 1], logits.shape[1])).argmax(dim=-1)
        return torch.where(ints[:, 2].bool(), greedy, drawn)

    def _early_stops(self, seqs: list[ScheduledSeq], vocab: int) -> list[tuple[int, int]]:
        """(row, token) pairs that cannot be sampled yet: EOS and stop tokens below ``min_tokens``."""
        return [(row, t) for row, s in enumerate(seqs) if s.num_output_tokens < s.params.min_tokens
                for t in (*self.eos_token_ids, *s.params.stop_token_ids) if t < vocab]

    def _key(self, seq: ScheduledSeq) -> int:
        if seq.params.seed is None:
            return self._random.getrandbits(63)
        return token_seed(seq.params.seed, seq.num_output_tokens)


def _top_k_top_p(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Hides tokens outside each row's top-k (0: all) and then outside the smallest set of most
    likely tokens whose probability reaches its top-p. Ties with the k-th token stay in."""
    ordered, order = scaled.sort(dim=-1, descending=True)
    vocab = scaled.shape[1]
    k = torch.where((top_k > 0) & (top_k < vocab), top_k, vocab)
    kth = ordered.gather(1, (k - 1)[:, None])
    ordered = ordered.masked_fill(ordered < kth, float("-inf"))
    probs = torch.softmax(ordered, dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass of the more likely tokens
    drop_sorted = ((before >= top_p[:, None]) & (top_p[:, None] < 1.0)) | (ordered == float("-inf"))
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return scaled.masked_fill(drop, float("-inf"))


def exponential_noise(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """``[rows, vocab]`` float32 Exp(1) draws: row r, token t is a function of (keys[r], t) alone.

    A 32-bit integer hash of the token id mixed with the key's two halves, cut to 23 bits so
    that ``U = (h + ½) / 2²³`` is exact in float32 and strictly inside (0, 1). (With 24 bits,
    h + ½ needs 25: the largest h rounded to U = 1, E = 0, and that token won whatever its
    probability, about once in 340 steps over a 49,152-token vocabulary.)"""
    low, high = keys[:, None] & 0x7FFFFFFF, (keys[:, None] >> 31) & MASK32
    x = torch.arange(vocab, dtype=torch.int64, device=keys.device)[None, :]
    x = _mix(_mix(x ^ low) ^ high)
    return -torch.log(uniform_of_hash(x))


def uniform_of_hash(x: torch.Tensor) -> torch.Tensor:
    """32-bit hashes -> float32 uniforms strictly inside (0, 1) (``exponential_noise``)."""
    return ((x >> 9).float() + 0.5) * (1.0 / (1 << 23))


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = (x * MIX[0]) & MASK32
    x = x ^ (x >> 15)
    x = (x * MIX[1]) & MASK32
    return x ^ (x >> 16)


