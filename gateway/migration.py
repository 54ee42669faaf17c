"""A request resumed on another decode worker after its own was lost mid-stream: what is asked of
the cluster the second time. Its prompt and every token already sent are prefilled again (on a
prefill worker, or locally) into a reservation on a live decode worker; it asks for the tokens
still owed; a seeded one samples on as the first would have (``common.model.seeds``), so greedy
and seeded output is what an undisturbed run gives. Its TTFT is long met, and the migration's gap
has spent its TPOT: it is resumed with neither SLO, so no guard refuses to finish what was begun
(``RequestPath`` waits for KV blocks, up to its client's deadline)."""

from __future__ import annotations

import dataclasses
import time

from common.model.seeds import continuation_seed
from gateway.validation import ValidatedRequest


def continuation(req: ValidatedRequest, generated: list[int]) -> ValidatedRequest:
    """``req`` resumed after the tokens ``generated`` (as many as its client has)."""
    produced = len(generated)
    params = req.params
    params = dataclasses.replace(params, max_tokens=params.max_tokens - produced,
                                 min_tokens=max(0, params.min_tokens - produced),
                                 seed=None if params.seed is None else continuation_seed(params.seed, produced),
                                 prompt_logprobs=None)  # given with the first token already
    return dataclasses.replace(req, prompt_token_ids=[*req.prompt_token_ids, *generated], params=params,
                               ttft_ms=0.0, tpot_ms=0.0, received_at=time.perf_counter(), delivery_s=0.0)
