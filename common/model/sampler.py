"""Turns each request's logits into its next token.

A seeded request draws its n-th token from a generator seeded by (seed, n) alone, so its
tokens depend neither on what else shares the batch nor on which process samples them: a
first token drawn on a prefill worker and the rest on a decode worker give the same
sequence as one engine would.
"""

from __future__ import annotations

import torch

from common.engine.batch import ScheduledSeq


class Sampler:
    def __init__(self, eos_token_ids: tuple[int, ...]) -> None:
        self.eos_token_ids = eos_token_ids

    def __call__(self, logits: torch.Tensor, seqs: list[ScheduledSeq]) -> list[int]:
        """``logits [len(seqs), vocab]`` float32 -> one token id per sequence."""
        logits = self._suppress_early_stops(logits, seqs)
        tokens = logits.argmax(dim=-1).tolist()
        for row, seq in enumerate(seqs):
            if not seq.params.greedy:
                tokens[row] = _sample_row(logits[row], seq)
        return tokens

    def _suppress_early_stops(self, logits: torch.Tensor, seqs: list[ScheduledSeq]) -> torch.Tensor:
        """Below ``min_tokens``, EOS and stop tokens cannot be sampled."""
        early = [(row, s) for row, s in enumerate(seqs) if s.num_output_tokens < s.params.min_tokens]
        if not early:
            return logits
        logits = logits.clone()
        for row, seq in early:
            banned = [t for t in (*self.eos_token_ids, *seq.params.stop_token_ids) if t < logits.shape[1]]
            logits[row, banned] = float("-inf")
        return logits


def _sample_row(logits: torch.Tensor, seq: ScheduledSeq) -> int:
    params = seq.params
    scaled = logits / params.temperature
    if 0 < params.top_k < scaled.shape[0]:
        kth = torch.topk(scaled, params.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p < 1.0:
        scaled = _top_p_filter(scaled, params.top_p)
    probs = torch.softmax(scaled, dim=-1)
    generator = None
    if params.seed is not None:
        generator = torch.Generator().manual_seed(token_seed(params.seed, seq.num_output_tokens))
    return int(torch.multinomial(probs, 1, generator=generator).item())


def token_seed(seed: int, index: int) -> int:
    """A 63-bit seed for the ``index``-th output token of a request seeded with ``seed``."""
    return (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9) % (1 << 63)


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keeps the smallest set of most likely tokens whose probability reaches ``top_p``."""
    sorted_logits, order = torch.sort(logits, descending=True)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p  # mass before this token
    drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))
