"""The rules of a request's path at the gateway, as plain functions of worker state and time
(``gateway.request_path.RequestPath`` decides by them; so do tests of each rule on its own):
when the TTFT guard refuses, when a TPOT SLO can never be met, the last useful moment of a decode
admission, what a request every decode worker refused does next, where its prompt is computed,
whether a lost worker is worth another try."""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

from common.slo.guard_reading import Readings
from common.slo.local_prefill import prefills_locally
from common.slo.tpot_guard import never_met_anywhere
from common.slo.ttft_decision import last_useful_admission, ttft_refusal as prefill_refusal
from common.slo.ttft_guard import TtftGuard
from gateway.prefix_view import PromptBlocks
from gateway.router import Router, W, WorkerPool

KV_WAIT_S = 30.0  # the longest a request refused for blocks alone waits for them (beyond a quarantine)
MAX_ATTEMPTS = 3  # reserve + prefill tries before a request that keeps losing workers fails with UNAVAILABLE


class PathPool(WorkerPool[W], Protocol):
    def local_prefills(self, decode: W | None = None) -> list[W]:
        """The decode workers that may compute a prompt themselves: ``decode`` alone when given,
        else every routable one; none with local prefill off."""
        ...


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused before any work: its gRPC status, the reason the gateway counts
    (``pdserve:request_rejections``), and what the client is told."""

    code: str
    reason: str
    message: str


def ttft_deadline(arrived: float, ttft_s: float) -> float:
    """When a request that arrived at ``arrived`` must have its first token; inf without a TTFT SLO."""
    return arrived + ttft_s if ttft_s else float("inf")


def _guards_and_tokens(pool: PathPool[W], prompt: PromptBlocks, decode: W | None = None) -> tuple[list[TtftGuard], list[int]]:
    """The guards of the routable prefill workers and of the decode workers that may prefill the
    request themselves (``decode`` alone when given), and what each would compute of the prompt
    (less its cached prefix)."""
    workers = pool.routable("prefill") + pool.local_prefills(decode)
    return [w.guard for w in workers], [prompt.uncached_tokens(w.prefix) for w in workers]


def ttft_refusal(pool: PathPool[W], prompt: PromptBlocks, ttft_s: float, arrived: float, now: float,
                 decode: W | None = None) -> Refusal | None:
    """A refusal when no worker that may prefill the request (the prefill workers; ``decode``,
    holding its reservation, or before one is made any decode worker, with local prefill on) is
    predicted to return its first token within ``ttft_s`` of ``arrived``; None: one is, or no SLO."""
    if not ttft_s:
        return None
    reason = prefill_refusal(*_guards_and_tokens(pool, prompt, decode), ttft_s, arrived, now)
    if reason is None:
        return None
    return Refusal("RESOURCE_EXHAUSTED", "ttft_unattainable", f"TTFT SLO of {ttft_s * 1000:g} ms is unattainable: {reason}")


def never_refusal(tpot_s: float, alone_s: list[float | None]) -> Refusal | None:
    """A refusal when a TPOT SLO is below every decode worker's step for one request alone
    (``alone_s``, as they report it): no wait, load or margin could meet it."""
    if not never_met_anywhere(tpot_s, alone_s):
        return None
    fastest = min(a for a in alone_s if a)
    return Refusal("FAILED_PRECONDITION", "slo_unattainable",
                   f"TPOT SLO {tpot_s * 1000:g} ms can never be met on this cluster, however idle: one request alone "
                   f"takes {fastest * 1000:.1f} ms a token on its fastest decode worker; ask for a looser tpot_ms")


def last_useful(pool: PathPool[W], prompt: PromptBlocks, deadline: float, now: float, ttft_s: float,
                readings: Readings | None = None) -> float:
    """The last moment a decode admission still lets the request's prefill finish by ``deadline``
    (``last_useful_admission`` over the workers that may prefill it)."""
    return last_useful_admission(*_guards_and_tokens(pool, prompt), deadline, now, ttft_s, readings)


def admitted_margin(alone: bool, margin: float) -> float:
    """The ε that admitted a reservation, for its TPOT's outcome: 1 when the idle rule did (no
    margin decided it, so its outcome says nothing of ε), else the margin it carried."""
    return 1.0 if alone else margin


def retries_after_loss(attempt: int) -> bool:
    """Whether a request whose ``attempt``-th try (from 1) lost a worker before its first token
    existed tries again on other workers: nothing reached its client, so the loss costs it only
    time, up to ``MAX_ATTEMPTS`` tries."""
    return attempt < MAX_ATTEMPTS


def writer_may_still_write(lost_role: str) -> bool:
    """Whether the attempt's decode blocks may still be written when a worker of ``lost_role`` was
    lost: a lost prefill worker's copy may be under way (its blocks are quarantined, not reused);
    a prefill worker that answered that its decode side failed is no longer writing."""
    return lost_role == "prefill"


class AfterRefusals(enum.Enum):
    WAIT_FOR_ADMISSION = "wait_for_admission"  # in the admission queue, until its last useful moment
    WAIT_FOR_BLOCKS = "wait_for_blocks"  # for KV blocks to come back, up to ``blocks_wait_until``
    REFUSE = "refuse"


def after_refusals(ttft_guard: bool, ttft_s: float, blocks_only: bool) -> AfterRefusals:
    """What a request every decode worker refused does next: under the TTFT guard, one with a
    TTFT SLO waits for admission while its deadline allows; otherwise one refused for want of KV
    blocks alone waits for blocks (they come back as requests end and quarantines lapse); any
    other is refused."""
    if ttft_guard and ttft_s:
        return AfterRefusals.WAIT_FOR_ADMISSION
    return AfterRefusals.WAIT_FOR_BLOCKS if blocks_only else AfterRefusals.REFUSE


def blocks_wait_until(now: float, ttft_deadline: float, client_deadline: float | None) -> float:
    """How long a request refused for blocks alone waits for them: to its TTFT deadline, else its
    client's, else ``KV_WAIT_S`` (longer than a quarantine: a retry after a lost prefill worker
    waits out the blocks its first attempt left quarantined)."""
    return min(ttft_deadline, client_deadline or float("inf"), now + KV_WAIT_S)


def prefill_choice(router: Router, pool: PathPool[W], prompt: PromptBlocks, deadline: float, ttft_s: float,
                   decode: W, decode_cached_tokens: int, now: float, avoid: Collection[str] = (),
                   pairs: Callable[[W], bool] = lambda w: True) -> tuple[W, bool] | None:
    """Where the request's prompt is computed: the router's first prefill worker not in ``avoid``
    that ``pairs`` with ``decode`` (their KV can move), or, with local prefill, ``decode`` itself
    (True) when no prefill worker is predicted in time and it is (``prefills_locally``), unless it
    failed an earlier attempt's prefill; None when there is neither."""
    candidates = [w for w in router.prefill_candidates(pool, prompt, deadline, ttft_s)
                  if w.worker_id not in avoid and pairs(w)]
    if ttft_s and decode.worker_id not in avoid and pool.local_prefills(decode) and prefills_locally(
            [w.guard for w in candidates], [prompt.uncached_tokens(w.prefix) for w in candidates], decode.guard,
            len(prompt) - decode_cached_tokens, deadline, now, ttft_s):
        return decode, True
    return (candidates[0], False) if candidates else None


def all_refused(refused_by: list[str], details: str = "") -> Refusal:
    """What a request every candidate refused is told, by what each refusal said (``REFUSED_BY``:
    "floor", never met there however idle; "kv", no blocks; "margin" or "", its TPOT guard):
    every one below its floor, the SLO can never be met; every one out of blocks, the cache is
    full; else decode admission (``details``: the last refusal's words)."""
    if refused_by and all(r == "floor" for r in refused_by):
        return Refusal("FAILED_PRECONDITION", "slo_unattainable", "the TPOT SLO can never be met on this cluster, "
                       f"however idle: {details}; ask for a looser tpot_ms")
    reason = "kv_cache_full" if refused_by and all(r == "kv" for r in refused_by) else "decode_admission"
    return Refusal("RESOURCE_EXHAUSTED", reason, f"no decode worker admits the request: {details}")
