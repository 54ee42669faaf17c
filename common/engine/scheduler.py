"""Iteration-level continuous batching for one engine.

Each step: running requests first (decodes before prefill chunks), then waiting ones in
arrival order, within ``max_batch_size`` requests and ``max_num_tokens`` tokens. Long
prompts are split into chunks across steps. The scheduler alone changes request state.

Memory policies (TensorRT-LLM's names):
- ``guaranteed_no_evict``: a request is admitted only when blocks for prompt + max_tokens
  are free, and never loses them.
- ``max_utilization``: blocks are taken as tokens arrive; when none are left the most
  recently admitted request is preempted (its KV dropped) and later recomputed.

Prefix caching (with the pool's prefix index, ``common.engine.prefix_sharing``): a request
admitted with nothing computed first takes the longest cached run of its full blocks, and every
block a step fills is named in the index.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from common.engine import prompt_logprobs
from common.engine.block_pool import BlockPool
from common.engine.request import FINISH_REASONS, Request, RequestOutput, RequestStatus
from common.engine.scheduler_blocks import SchedulerBlocks
from common.engine.step_policy import FirstComeFirstServed, StepPolicy
from common.model.batch import ScheduledBatch, ScheduledSeq, prompt_attention_work
from common.model.token_logprobs import StepLogprobs
from common.slo.cost_models import attention_work
from common.slo.credit import CreditBatcher
from common.slo.forward_budget import FORWARD_SHARE
from common.slo.policy import policy

MEMORY_POLICIES = ("guaranteed_no_evict", "max_utilization")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_batch_size: int
    max_num_tokens: int
    block_size: int
    max_model_len: int
    memory_policy: str
    eos_token_ids: tuple[int, ...]
    policy: str = "fcfs"  # fcfs | scorpio (both guards) | ttft_guard | tpot_guard
    prefix_salt: int = 0  # the model's identity, where block hashes start (``prefix_cache.model_salt``)

    @property
    def ttft_guard(self) -> bool:
        return policy(self.policy).ttft_guard

    @property
    def tpot_guard(self) -> bool:
        return policy(self.policy).tpot_guard


class Scheduler(SchedulerBlocks):
    def __init__(self, config: SchedulerConfig, pool: BlockPool, policy: StepPolicy | None = None) -> None:
        self.config = config
        self.pool = pool
        self.policy: StepPolicy = policy or FirstComeFirstServed()  # what the SLO guards decide in a step
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order
        self.requests: dict[str, Request] = {}
        self._pending_aborts: list[str] = []
        self.held: dict[str, list[int]] = {}  # prefill-only requests' KV, awaiting hand-off
        self.credit = CreditBatcher()
        self.match_prefixes = pool.prefix_index is not None  # off while an engine profiles itself

    def add(self, request: Request) -> None:
        """Queues a request, fresh or committed: a committed one's prompt KV already sits in
        ``request.block_ids`` (written by a prefill worker) and ``num_computed_tokens`` says so."""
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def release_held(self, request_id: str) -> bool:
        blocks = self.held.pop(request_id, None)
        if blocks is None:
            return False
        self.pool.free(blocks)
        return True

    def abort(self, request_id: str) -> bool:
        """Marks a request for abort; its blocks are freed at the start of the next step."""
        if request_id not in self.requests:
            return False
        self._pending_aborts.append(request_id)
        return True

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    def has_pending_aborts(self) -> bool:
        return bool(self._pending_aborts)

    def apply_aborts(self) -> list[RequestOutput]:
        outputs = []
        for request_id in self._pending_aborts:
            request = self.requests.get(request_id)
            if request is not None:
                self._finish(request, RequestStatus.FINISHED_ABORTED)
                outputs.append(RequestOutput(request_id, (), True, "abort"))
        self._pending_aborts.clear()
        return outputs

    def schedule(self) -> ScheduledBatch:
        budget = self.config.max_num_tokens
        prompt_budget = self.policy.prompt_budget(budget)  # decodes are not cut by it
        cut = prompt_budget < budget
        seqs: list[ScheduledSeq] = []
        preempted = 0
        decoding = self._credited_decodes()
        # Decodes go first so a long prompt chunk never delays tokens already streaming.
        for request in sorted(self.running, key=lambda r: r.num_uncomputed_tokens > 1):
            if budget == 0:
                break
            if request.status != RequestStatus.RUNNING or (decoding is not None and request not in decoding):
                continue  # preempted earlier in this loop, or waiting for TPOT credit
            n = min(request.num_uncomputed_tokens, budget)
            if n > 1:  # a prompt's chunk
                n = min(n, prompt_budget)
                if n == 0 or not self.policy.stall_keeps(n, attention_work(n, request.num_computed_tokens)):
                    continue
            preempted += self._make_room(request, request.num_computed_tokens + n)
            if request.status == RequestStatus.RUNNING:
                seqs.append(self._scheduled(request, n))
                budget -= n
                prompt_budget -= n if n > 1 else 0
        if not preempted:
            # Under a cut, a prompt that does not fit whole waits for the next forward rather than
            # lengthen this one's with a chunk: the requests in it may have no slack to spare.
            self._admit_waiting(seqs, min(budget, prompt_budget), whole_only=cut)
        self._note_first_tokens(seqs)
        resting = () if decoding is None else tuple(
            r.uid for r in self.running if r.status == RequestStatus.RUNNING and r not in decoding)
        return ScheduledBatch(tuple(seqs), resting)

    def _note_first_tokens(self, seqs: list[ScheduledSeq]) -> None:
        """A request sampling in a step its credit did not choose it for (its prompt's last chunk,
        or its first step after a commit) has just had a token: under credit batching its next
        one comes a full credit period later, not in the very next step."""
        if self.config.tpot_guard:
            for seq in seqs:
                if seq.sample and not (seq.is_decode and seq.request_id in self.credit.chosen):
                    self.credit.joined(seq.request_id)

    def _credited_decodes(self) -> set[Request] | None:
        """TPOT guard: the decoding requests whose credit lets them run this step (None: all run)."""
        decoding = [r for r in self.running if r.num_uncomputed_tokens == 1]
        chosen = self.credit_selection(decoding)
        if chosen is None:
            return None
        return {r for r in decoding if r.request_id in chosen} | {r for r in self.running if r not in decoding}

    def credit_selection(self, decoding: list[Request]) -> set[str] | None:
        """The ids of the ``decoding`` requests whose TPOT credit lets them run this step (the
        credit batcher advances one step); None under a policy without the TPOT guard: all run."""
        slos = self.credit_slos(decoding)
        return None if slos is None else self.credit.select(slos)

    def credit_slos(self, decoding: list[Request]) -> dict[str, float] | None:
        """The TPOT SLOs credit batching runs ``decoding`` by (None: the policy has no TPOT guard).
        A request without a TPOT SLO counts as the tightest present: it runs every step."""
        if not self.config.tpot_guard:
            return None
        tightest = min((r.tpot_slo_ms for r in decoding if r.tpot_slo_ms), default=1.0)
        if decoding and self.policy.all_fit(len(decoding), _mean_len(decoding), tightest / 1000):
            return None
        return {r.request_id: r.tpot_slo_ms or tightest for r in decoding}

    def _admit_waiting(self, seqs: list[ScheduledSeq], budget: int, whole_only: bool = False) -> None:
        """Admits waiting requests into this step within ``budget`` tokens; with ``whole_only``, a
        prompt that does not fit whole only as the step's first prompt; under the TTFT guard, a
        prompt with a later deadline only as ``_delays`` allows."""
        prompts = [s for s in seqs if not s.is_decode]
        started = bool(prompts)
        tokens = sum(len(s.token_ids) for s in prompts)
        work = prompt_attention_work(prompts)
        earliest = min((self.requests[s.request_id].ttft_deadline for s in prompts), default=float("inf"))
        if len(self.waiting) > 1 and (self.config.ttft_guard or self.policy.guards_stalls):
            # Least slack first under a TTFT guard: the request whose TTFT deadline comes soonest is
            # prefilled first. Under the stall rule, requests ready to decode (committed) before
            # any prompt: a prompt held back must not hold up the decodes whose slack it waits for.
            if not self.policy.guards_stalls:
                self.waiting = deque(sorted(self.waiting, key=lambda r: r.ttft_deadline))
            else:
                self.waiting = deque(sorted(self.waiting, key=lambda r: (not decode_ready(r), r.ttft_deadline)))
        while self.waiting and budget > 0 and len(self.running) < self.config.max_batch_size:
            request = self.waiting[0]
            hit = self._attach_cached_prefix(request)
            n = min(request.num_uncomputed_tokens, budget)
            chunk_after_others = whole_only and started and n < request.num_uncomputed_tokens
            more = attention_work(n, request.num_computed_tokens)
            if chunk_after_others or self._delays(tokens, work, n, more, earliest) or \
                    (n > 1 and not self.policy.stall_keeps(tokens + n, work + more)) or \
                    not self._grow_blocks(request, self._admission_tokens(request, n)):
                if hit:
                    self._drop_blocks(request)
                break  # FCFS: nobody jumps the head of the queue
            if hit is not None:
                assert self.pool.prefix_index is not None
                self.pool.prefix_index.count(request.num_tokens, hit * self.config.block_size)
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            seqs.append(self._scheduled(request, n))
            budget -= n
            started, tokens, work, earliest = True, tokens + n, work + more, min(earliest, request.ttft_deadline)

    def _delays(self, tokens: int, work: int, more: int, more_work: int, deadline: float) -> bool:
        """Whether ``more`` prompt tokens (of ``more_work`` attention work) would make a forward of
        ``tokens`` (of ``work``) end past ``FORWARD_SHARE``
        of the time left to ``deadline``, when the forward without them ends by it. The rest of
        that time is the first token's: the KV's hand-off and both hops follow the forward, and
        the gateway admitted the request on a prediction without these tokens."""
        if not self.policy.guards_forwards or not tokens or deadline == float("inf"):
            return False
        if not self.policy.forward_keeps(tokens, work, deadline, 1.0):
            return False  # already late: it holds nobody back
        return not self.policy.forward_keeps(tokens + more, work + more_work, deadline, FORWARD_SHARE)

    def _scheduled(self, request: Request, n: int) -> ScheduledSeq:
        start = request.num_computed_tokens
        return ScheduledSeq(
            request_id=request.request_id,
            token_ids=request.token_ids(start, start + n),
            start_pos=start,
            block_ids=request.block_ids,
            sample=start + n == request.num_tokens,
            params=request.params,
            num_output_tokens=len(request.output_token_ids),
            uid=request.uid,
            prompt_targets=prompt_logprobs.targets(request, start, n),
        )

    def update_from_output(self, batch: ScheduledBatch, sampled: dict[str, int],
                           logprobs: StepLogprobs | None = None) -> list[RequestOutput]:
        """Records computed tokens and sampled ones (and the logprobs asked for: ``prompt_logprobs``
        for a prompt's); finishes requests that hit a stop condition."""
        outputs = []
        for seq in batch.seqs:
            request = self.requests[seq.request_id]
            request.num_computed_tokens += len(seq.token_ids)
            self.register_full_blocks(request)
            prompt_logprobs.record(request, seq, logprobs)
            if not seq.sample:
                continue
            token = sampled[seq.request_id]
            request.output_token_ids.append(token)
            status = self._stop_status(request, token)
            if status is None and request.prefill_only:
                status = RequestStatus.FINISHED_PREFILLED
            held = tuple(request.block_ids) if request.prefill_only else ()
            if status is not None:
                self._finish(request, status)
            cached = request.num_cached_tokens if len(request.output_token_ids) == 1 else 0
            asked = logprobs.sampled.get(request.request_id) if logprobs else None
            outputs.append(RequestOutput(request.request_id, (token,), status is not None,
                                         FINISH_REASONS.get(status) if status else None, kv_block_ids=held,
                                         cached_tokens=cached, logprobs=() if asked is None else (asked,),
                                         prompt_logprobs=prompt_logprobs.first_output(request)))
        return outputs

    def _stop_status(self, request: Request, token: int) -> RequestStatus | None:
        params = request.params
        if len(request.output_token_ids) >= params.min_tokens:
            if token in params.stop_token_ids:
                return RequestStatus.FINISHED_STOPPED
            if not params.ignore_eos and token in self.config.eos_token_ids:
                return RequestStatus.FINISHED_STOPPED
        if len(request.output_token_ids) >= params.max_tokens or request.num_tokens >= self.config.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None

    def _finish(self, request: Request, status: RequestStatus) -> None:
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        if request.prefill_only and status != RequestStatus.FINISHED_ABORTED:
            self.held[request.request_id] = request.block_ids
        else:
            self.pool.free(request.block_ids)
        request.block_ids = []
        request.status = status
        del self.requests[request.request_id]

    def owned_blocks(self) -> list[int]:
        running = [b for r in self.requests.values() for b in r.block_ids]
        return running + [b for blocks in self.held.values() for b in blocks]


def decode_ready(request: Request) -> bool:
    """Whether the request's next token is a decode (its prompt's KV is all there)."""
    return bool(request.output_token_ids) and request.num_uncomputed_tokens == 1


def _mean_len(requests: list[Request]) -> float:
    return sum(r.num_tokens for r in requests) / len(requests)
