"""Log-probabilities of sampled tokens, computed from the logits the sampler is given: the model's
raw logits, log-softmaxed in float32 before temperature, top-k, top-p and the early-stop mask (so
a token's logprob is what the model gives it, whatever the request's sampling does to draw it).

Only the rows whose request asks (``SamplingParams.logprobs``) are computed, and a step with none
computes nothing. The tokens and their logprobs leave the device in one copy: the token ids, their
logprobs and the top-k ids and logprobs packed into one float64 tensor (token ids below 2**53 are
exact in it).
"""

from __future__ import annotations

import torch

from common.model.token_logprobs import TokenLogprobs


def wanted(ks: list[int | None]) -> bool:
    return any(k is not None for k in ks)


def sample_with_logprobs(logits: torch.Tensor, tokens: torch.Tensor,
                         ks: list[int | None]) -> tuple[list[int], list[TokenLogprobs | None]]:
    """``tokens [rows]`` (on the logits' device) and, for each row whose ``ks`` entry is not None,
    its token's logprob under ``logits [rows, vocab]`` and its ``k`` likeliest tokens' (one read
    back to the host for all of it)."""
    rows = [r for r, k in enumerate(ks) if k is not None]
    top_k = max((ks[r] or 0 for r in rows), default=0)
    index = torch.tensor(rows, dtype=torch.int64, device=logits.device)
    logp = torch.log_softmax(logits.index_select(0, index).float(), dim=-1)
    chosen = tokens.index_select(0, index)
    parts = [tokens.double(), logp.gather(1, chosen[:, None]).squeeze(1).double()]
    if top_k:
        top_logp, top_ids = logp.topk(top_k, dim=-1)
        parts += [top_ids.double().flatten(), top_logp.double().flatten()]
    packed = torch.cat(parts).tolist()
    n, picked = len(ks), len(rows)
    ids, chosen_logp = [int(t) for t in packed[:n]], packed[n:n + picked]
    tops, top_logps = packed[n + picked:n + picked + picked * top_k], packed[n + picked + picked * top_k:]
    out: list[TokenLogprobs | None] = [None] * n
    for i, r in enumerate(rows):
        k = ks[r] or 0
        top = tuple((int(tops[i * top_k + j]), top_logps[i * top_k + j]) for j in range(k))
        out[r] = TokenLogprobs(chosen_logp[i], top)
    return ids, out


def prompt_logprobs(logits: torch.Tensor, targets: list[tuple[int, ...]],
                    ks: list[int]) -> list[list[TokenLogprobs]]:
    """For each scored chunk (its rows' logits ``logits[rows, vocab]`` one chunk after another,
    ``targets`` the prompt token after each row, ``ks`` how many alternatives it asks for), the
    logprob of each target under its row's logits and the k likeliest tokens' (one read back)."""
    target = torch.tensor([t for chunk in targets for t in chunk], dtype=torch.int64, device=logits.device)
    logp = torch.log_softmax(logits.float(), dim=-1)
    top_k = max(ks, default=0)
    parts = [logp.gather(1, target[:, None]).squeeze(1).double()]
    if top_k:
        top_logp, top_ids = logp.topk(top_k, dim=-1)
        parts += [top_ids.double().flatten(), top_logp.double().flatten()]
    packed = torch.cat(parts).tolist()
    rows = len(target)
    chosen, tops, top_logps = packed[:rows], packed[rows:rows + rows * top_k], packed[rows + rows * top_k:]
    out, row = [], 0
    for chunk, k in zip(targets, ks):
        entries = []
        for _ in chunk:
            top = tuple((int(tops[row * top_k + j]), top_logps[row * top_k + j]) for j in range(k))
            entries.append(TokenLogprobs(chosen[row], top))
            row += 1
        out.append(entries)
    return out
