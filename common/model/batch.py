"""The plain batch description a scheduler hands to the model runner for one step."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from common.model.sampling_params import SamplingParams
from common.slo.cost_models import attention_work


def blocks_for(tokens: int, block_size: int) -> int:
    """How many blocks of ``block_size`` tokens hold ``tokens`` tokens (the last one partly filled)."""
    return -(-tokens // block_size)


@dataclass(frozen=True, slots=True)
class ScheduledSeq:
    """Run ``token_ids`` at positions ``start_pos...``; sample a token after them if ``sample``."""

    request_id: str
    token_ids: list[int]
    start_pos: int
    block_ids: list[int]
    sample: bool
    params: SamplingParams
    num_output_tokens: int
    uid: int = -1  # Request.uid: unique even where request ids are reused
    # asking for prompt logprobs: the prompt token after each of its first rows (none after the
    # prompt's last token, whose logits sample the first output)
    prompt_targets: tuple[int, ...] = ()

    @property
    def is_decode(self) -> bool:
        return len(self.token_ids) == 1


@dataclass(frozen=True, slots=True)
class ScheduledBatch:
    seqs: tuple[ScheduledSeq, ...]
    # uids of decoding requests credit batching holds back this step: they decode again soon, so a
    # cache of their KV (the CPU decode stage) keeps it rather than copy it all back then
    resting: tuple[int, ...] = ()

    @property
    def num_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.seqs)

    @property
    def attention_work(self) -> int:
        """The prompt tokens' attention work (``common.slo.cost_models.attention_work``): what the
        prefill model's quadratic term counts."""
        return prompt_attention_work(self.seqs)


def prompt_attention_work(seqs: Iterable[ScheduledSeq]) -> int:
    """The attention work of the prompt tokens (not the decodes) among ``seqs``."""
    return sum(attention_work(len(s.token_ids), s.start_pos) for s in seqs if not s.is_decode)
