"""Conditional disaggregation: when a decode worker computes a prompt itself.

A disaggregated cluster gives prefill and decode their own workers, so a burst of prompts queues
on the prefill workers while the decode workers, their steps short, sit partly idle. A request no
prefill worker can return the first token of in time is then refused, though the decode worker
that holds its reservation could compute the prompt in its own steps and start decoding it at
once (Dynamo's conditional disaggregation; vLLM's colocated scheduler does every prompt so).

The choice, for the gateway and the simulator alike: a prefill worker whenever one is predicted
to return the first token in time (``ttft_decision.best_prefill_s``), since a decode worker's
forward delays every request decoding there; the decode worker only when none is, and when its
own TTFT guard (a ``TtftGuard`` over the prompts it computes, on its prefill model, calibrated by
its answers and steered by the promise loop like any prefill worker's) predicts it in time. The
decode worker keeps its TPOT promises itself: a prompt joins a step only while every decoding
request's slack absorbs that step's forward (``EngineCore.stall_keeps``).

Plain code of numbers, ``now`` given.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.slo.ttft_decision import best_prefill_s
from common.slo.ttft_guard import TtftGuard


def prefills_locally(prefill: Sequence[TtftGuard], prefill_tokens: Sequence[int], local: TtftGuard,
                     local_tokens: int, deadline: float, now: float, ttft_s: float) -> bool:
    """Whether a request due at ``deadline`` (TTFT SLO ``ttft_s``) is prefilled by its decode
    worker (whose guard is ``local``, computing ``local_tokens`` of the prompt there) rather than
    by one of the prefill workers (``prefill``, computing ``prefill_tokens[i]`` each)."""
    left = deadline - now
    if prefill and best_prefill_s(prefill, prefill_tokens, deadline, now, ttft_s) <= left:
        return False
    return best_prefill_s([local], [local_tokens], deadline, now, ttft_s) <= left
