"""A request's prompt logprobs (``SamplingParams.prompt_logprobs``), gathered over its prompt's
chunks and given out with its first output token. A prompt recomputed after a preemption gives
the positions it has already; the prefix cache is not looked up for such a request
(``scheduler_blocks``), so every prompt token after the first has its entry.
"""

from __future__ import annotations

from common.engine.request import Request
from common.model.batch import ScheduledSeq
from common.model.token_logprobs import StepLogprobs, TokenLogprobs


def targets(request: Request, start: int, n: int) -> tuple[int, ...]:
    """What a chunk of ``n`` tokens from ``start`` scores: the prompt token after each of its rows
    while there is one (``ScheduledSeq.prompt_targets``); none unless the request asks."""
    if request.params.prompt_logprobs is None:
        return ()
    return tuple(request.prompt_token_ids[start + 1:start + n + 1])


def record(request: Request, seq: ScheduledSeq, found: StepLogprobs | None) -> None:
    """The step computed ``seq``'s chunk: its rows' logprobs of the prompt tokens after them
    join the request's, those of positions it has not yet."""
    entries = found.prompt.get(seq.request_id) if found and seq.prompt_targets else None
    if entries is None:
        return
    have = len(request.prompt_logprobs)  # entries of prompt positions 1..have
    skip = have - seq.start_pos  # of this chunk's, those given already (a recomputed prompt)
    if skip < len(entries):
        request.prompt_logprobs.extend(entries[max(0, skip):])


def first_output(request: Request) -> tuple[TokenLogprobs, ...]:
    """What the request's first output carries: its prompt logprobs, when asked for."""
    if request.params.prompt_logprobs is None or len(request.output_token_ids) != 1:
        return ()
    return tuple(request.prompt_logprobs)
