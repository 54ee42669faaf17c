"""Everything of an engine except the model: requests, KV blocks, reservations, the TPOT guard
and the calibration of its cost model. Plain code of time and state: every time it reads comes
from ``clock``, so the simulator (``simulator/``) runs this very code on a virtual clock with
cost models in place of the forward.

A step is two halves around the forward::

    aborted, batch = core.schedule_step()          # expire leases, apply aborts, schedule
    sampled = <forward of batch>                    # LLMEngine: the model; simulator: a cost model
    outputs = core.finish_step(batch, sampled, started, ended)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from common.engine.block_pool import BlockPool
from common.engine.config import EngineConfig
from common.engine.leases import Lease, LeaseTable
from common.engine.load import EngineLoad, measure
from common.engine.local_prompts import LocalPrompts
from common.engine.prefix_cache import PrefixIndex, model_salt
from common.engine.request import Request, RequestOutput
from common.engine.scheduler import Scheduler, SchedulerConfig
from common.engine.step_costs import StepCosts
from common.engine.step_policy import SloGuarded
from common.engine.prompt_timing import PromptTiming
from common.engine.run_ahead import RunAhead
from common.engine.tpot_admission import AdmissionError, TpotAdmission
from common.model.batch import ScheduledBatch, blocks_for
from common.model.sampling_params import SamplingParams
from common.model.token_logprobs import StepLogprobs
from common.slo import epsilon_bound, tpot_guard
from common.slo.calibration import Calibration
from common.slo.class_margins import slo_class_ms
from common.slo.promise import STEP
from common.slo.ratio_histogram import RatioHistogram
from common.slo.forward_budget import TightestSlo
from common.slo.cost_models import CostModels

Clock = Callable[[], float]
__all__ = ["AdmissionError", "EngineCore"]


class EngineCore(TpotAdmission, PromptTiming, RunAhead):
    def __init__(self, config: EngineConfig, num_blocks: int, max_model_len: int, vocab_size: int,
                 eos_token_ids: tuple[int, ...], clock: Clock = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        self.pool = BlockPool(num_blocks, PrefixIndex() if config.enable_prefix_caching else None)
        self.prefix_salt = model_salt(f"{config.model or config.preset}:{config.resolved_dtype}")
        scheduler_config = SchedulerConfig(config.max_batch_size, config.max_num_tokens, config.block_size,
                                           max_model_len, config.memory_policy, eos_token_ids, config.policy,
                                           self.prefix_salt)
        self.scheduler = Scheduler(scheduler_config, self.pool, SloGuarded(
            self, scheduler_config.ttft_guard, scheduler_config.tpot_guard, config.work_conserving_credit))
        self.leases = LeaseTable(self.pool, config.lease_timeout_s, config.quarantine_s)
        self.local_prompts = LocalPrompts(self)  # prompts computed in this engine's own steps
        self.tightest_ttft = TightestSlo(clock=clock)  # of the requests added: what cuts prefill forwards
        self.forward_calibration = Calibration(quantile=0.5, clock=clock)  # prefill forwards (their own time) vs the fit
        # ε by TPOT SLO class (``slo_class_ms``), as the latest reservation of each class brought it
        # (the gateway's closed loop steers them): what each request's TPOT is held to
        self.tpot_margins: dict[float, float] = {}
        self.cost_models: CostModels | None = None  # set by the worker (loaded or profiled)
        self.step_costs = StepCosts(clock)  # decode steps as run vs the decode model: calibration, refits
        self.unloaded_step_s: float | None = None  # one request's step, measured alone at warm-up
        self.steps_completed = 0  # forwards run since start: heartbeats carry it as proof of progress
        self.forward_ratios = RatioHistogram()  # every prefill forward's time / the model's prediction
        self._last_step_end: float | None = None  # end of the previous step, if it led straight here
        # What other threads read of this engine (``common.engine.load``): replaced, never
        # changed, after every step and every call below that changes requests, leases or blocks.
        self.load: EngineLoad = self._measure()

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    prefill_only: bool = False, ttft_slo_ms: float = 0.0, tpot_slo_ms: float = 0.0,
                    ttft_left_ms: float = 0.0) -> None:
        """Queues a request; raises ValueError naming the field when it cannot be served. A
        ``prefill_only`` request ends after its first token with reason ``prefilled`` and its KV
        blocks held (``RequestOutput.kv_block_ids``) until ``release_held``; under a TTFT guard, one
        predicted late raises ``AdmissionError``."""
        self._validate(request_id, prompt_token_ids, params)
        if prefill_only and self.scheduler.config.ttft_guard:
            self._refuse_if_queue_late(len(prompt_token_ids), ttft_slo_ms, ttft_left_ms)
        self.tightest_ttft.observe(ttft_slo_ms / 1000)
        self.scheduler.add(Request(request_id, list(prompt_token_ids), params, arrival_time=self.clock(),
                                   prefill_only=prefill_only, ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms,
                                   ttft_left_ms=ttft_left_ms,
                                   cacheable=self.pool.prefix_index is not None))
        self.load = self._measure()

    def release_held(self, request_id: str) -> bool:
        released = self.scheduler.release_held(request_id)
        self.load = self._measure()
        return released

    # Decode side of a KV hand-off: reserve -> (a prefill worker writes) -> commit.

    def reserve(self, request_id: str, prompt_len: int, max_tokens: int, tpot_slo_ms: float = 0.0,
                epsilon: float = tpot_guard.TPOT_MARGIN, prefix_hashes: Sequence[int] = (),
                lease_id: str = "", handoff_s: float = 0.0) -> Lease | None:
        """Blocks for the prompt's KV (and, under guaranteed_no_evict, all output); None if full.
        The prompt's leading full blocks this engine's prefix cache holds (of ``prefix_hashes``)
        are shared into the lease (``Lease.cached``) rather than written again.

        Raises ``AdmissionError`` when the TPOT guard (margin ``epsilon``; the newcomer's
        ``handoff_s`` ahead, ``tpot_guard.Decoding.lag_s``) predicts the SLOs could not all be met."""
        self._validate(request_id, [0] * prompt_len, SamplingParams(max_tokens=max_tokens))
        self._refuse_if_never(tpot_slo_ms)
        epsilon = min(epsilon, epsilon_bound.MOST)  # the gateway bounds it: by these steps and its outcomes
        self.tpot_margins[slo_class_ms(tpot_slo_ms / 1000)] = epsilon
        if not self.tpot_admits(tpot_slo_ms, prompt_len, max_tokens, epsilon, handoff_s):
            margin_alone = self.tpot_admits(tpot_slo_ms, prompt_len, max_tokens, epsilon / (1 + STEP),  # the probe
                                            handoff_s)
            raise AdmissionError(f"TPOT SLO {tpot_slo_ms:g} ms cannot be met with the requests running here",
                                 margin_alone)
        alone = self.scheduler.config.tpot_guard and self.cost_models is not None and tpot_guard.idle_rule_decides(
            tpot_guard.Decoding(tpot_slo_ms / 1000, max_tokens - 1, prompt_len + 1), self.decodings(),
            self.tpot_alone_now_s)  # the idle rule decided, under no margin
        tokens = prompt_len + (max_tokens if self.config.memory_policy == "guaranteed_no_evict" else 1)
        index = self.pool.prefix_index
        cached = index.lookup(list(prefix_hashes)[:prompt_len // self.config.block_size]) if index else []
        lease = self.leases.reserve(request_id, blocks_for(min(tokens, self.max_model_len), self.config.block_size),
                                    now=self.clock(), tpot_slo_ms=tpot_slo_ms, prompt_len=prompt_len,
                                    max_tokens=max_tokens, cached_blocks=cached, lease_id=lease_id)
        if lease is not None:
            lease.alone, lease.handoff_s = alone, handoff_s
        self.load = self._measure()
        return lease

    def commit(self, request_id: str, lease_id: str, prompt_token_ids: list[int], first_token: int,
               params: SamplingParams, tpot_slo_ms: float = 0.0) -> None:
        """Starts decoding a request whose prompt KV is in its reserved blocks."""
        self._validate(request_id, prompt_token_ids, params)
        blocks = self.leases.commit(request_id, lease_id).block_ids
        now = self.clock()
        request = Request(request_id, list(prompt_token_ids), params, arrival_time=now,
                          output_token_ids=[first_token], num_computed_tokens=len(prompt_token_ids),
                          block_ids=blocks, tpot_slo_ms=tpot_slo_ms, cacheable=self.pool.prefix_index is not None,
                          first_token_at=now)
        self.scheduler.add(request)
        self.local_prompts.decode_began(now, tpot_slo_ms / 1000)
        self.scheduler.register_full_blocks(request)  # the prompt's KV is all here: the next turn may share it
        self.load = self._measure()

    def prefill_reserved(self, request_id: str, lease_id: str, prompt_token_ids: list[int], params: SamplingParams,
                         ttft_slo_ms: float = 0.0, tpot_slo_ms: float = 0.0, ttft_left_ms: float = 0.0) -> None:
        """Conditional disaggregation: a reserved request's prompt computed in this engine's own
        steps instead of written into the lease by a prefill worker. It queues as a prompt in the
        lease's blocks (the leading ones the prefix cache lent it counted computed), goes least
        slack first among prompts, and into a step only while that step's forward keeps every
        decoding request's TPOT promise (``LocalPrompts.stall_keeps``); its first token comes out of that step,
        and then it decodes as a committed request does. Raises ``AdmissionError``, the lease
        freed, when that first token is predicted to come after ``ttft_left_ms``
        (``LocalPrompts.first_token_s``)."""
        self._validate(request_id, prompt_token_ids, params)
        lease = self.leases.commit(request_id, lease_id)
        size = self.config.block_size
        # its last token is always computed (the step samples after it): a cached block holding it
        # is given back (shared, so never written) and the scheduler adds a fresh one
        cached = min(lease.cached, (len(prompt_token_ids) - 1) // size)
        tokens, computed = len(prompt_token_ids) - cached * size, cached * size
        try:
            self._refuse_if_late(request_id, tokens, computed, ttft_slo_ms, ttft_left_ms)
        except BaseException:  # refused, or the prediction failed: the reservation ends here either way
            self.pool.free(lease.block_ids)  # (the gateway's Release then finds none)
            self.load = self._measure()
            raise
        self.pool.free(lease.block_ids[cached:lease.cached])
        self.tightest_ttft.observe(ttft_slo_ms / 1000)
        self.scheduler.add(Request(request_id, list(prompt_token_ids), params, arrival_time=self.clock(),
                                   block_ids=lease.block_ids[:cached] + lease.block_ids[lease.cached:],
                                   num_computed_tokens=cached * size, num_cached_tokens=cached * size,
                                   num_registered=cached, ttft_slo_ms=ttft_slo_ms, ttft_left_ms=ttft_left_ms,
                                   tpot_slo_ms=tpot_slo_ms, cacheable=self.pool.prefix_index is not None))
        self.load = self._measure()

    def renew_reservation(self, request_id: str, lease_id: str) -> bool:
        """``LeaseTable.renew``: the reservation's prefill is still awaited."""
        return self.leases.renew(request_id, lease_id, now=self.clock())

    def release_reservation(self, request_id: str, lease_id: str | None, writer_may_still_write: bool) -> bool:
        released = self.leases.release(request_id, lease_id, writer_may_still_write, now=self.clock())
        self.load = self._measure()
        return released

    def _validate(self, request_id: str, prompt: list[int], params: SamplingParams) -> None:
        if request_id in self.scheduler.requests:
            raise ValueError(f"request_id {request_id!r} is already running")
        if not prompt:
            raise ValueError("prompt is empty")
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise ValueError(f"prompt token ids must be in [0, {self.vocab_size})")
        total = len(prompt) + params.max_tokens
        if total > self.max_model_len:
            raise ValueError(f"prompt ({len(prompt)} tokens) + max_tokens ({params.max_tokens}) exceeds the "
                             f"model's limit of {self.max_model_len} tokens")
        if blocks_for(total, self.config.block_size) > self.pool.num_blocks:
            raise ValueError(f"prompt + max_tokens needs more KV blocks than the pool has ({self.pool.num_blocks})")

    def abort_request(self, request_id: str) -> bool:
        """Aborts at the next step (blocks freed then). False if the id is unknown or finished."""
        return self.scheduler.abort(request_id)

    def abort(self, request_id: str) -> bool:
        """Ends whatever this engine holds for the request: its reservation (quarantined, since
        whether a prefill worker still writes into it is unknown here) and the request itself
        (at the next step). False if it held neither."""
        released = self.leases.release(request_id, None, writer_may_still_write=True, now=self.clock())
        aborted = self.scheduler.abort(request_id)
        self.load = self._measure()
        return aborted or released

    def abort_all(self) -> list[str]:
        """Aborts every request now, not at the next step (their callers are failed by the
        caller); returns their ids."""
        request_ids = list(self.scheduler.requests)
        for request_id in request_ids:
            self.scheduler.abort(request_id)
        self.scheduler.apply_aborts()
        self.load = self._measure()
        return request_ids

    def expire_leases(self) -> None:
        """What ``step`` does first; an idle engine's thread calls it on its own."""
        self.leases.expire(self.clock())
        self.load = self._measure()

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def schedule_step(self) -> tuple[list[RequestOutput], ScheduledBatch]:
        """The first half of a step: leases expired, aborts applied (their outputs), the batch."""
        self.leases.expire(self.clock())
        aborted = self.scheduler.apply_aborts()
        batch = self.scheduler.schedule()
        if not batch.seqs:
            self._last_step_end = None
            self.load = self._measure()
        return aborted, batch

    def finish_step(self, batch: ScheduledBatch, sampled: dict[str, int], started: float, ended: float,
                    logprobs: StepLogprobs | None = None) -> list[RequestOutput]:
        """The second half: the batch ran from ``started`` to ``ended`` and sampled these tokens (and logprobs)."""
        self.steps_completed += 1
        self._observe_step(batch, ended - (self._last_step_end or started))
        if self.cost_models is not None and batch.seqs and not any(s.is_decode for s in batch.seqs):
            predicted = self.cost_models.prefill.predict(batch.num_tokens, batch.attention_work)
            self.forward_calibration.observe(predicted, ended - started)
            self.forward_ratios.observe(predicted, ended - started)
        outputs = self.scheduler.update_from_output(batch, sampled, logprobs)
        for seq in batch.seqs:
            if seq.sample and seq.num_output_tokens == 0 and (request := self.scheduler.requests.get(seq.request_id)):
                request.first_token_at = ended
                if not request.prefill_only:  # it decodes here (a prefill worker's never does)
                    self.local_prompts.decode_began(ended, request.tpot_slo_ms / 1000, request.request_id)
        self._last_step_end = ended if self.has_unfinished_requests() else None
        self.load = self._measure()
        return outputs

    def remeasure(self) -> None:
        """Takes the load snapshot again, after a change made outside any step or call (warm-up's
        measure of one request's step alone, ``unloaded_step_s``)."""
        self.load = self._measure()

    def _measure(self) -> EngineLoad:
        return measure(self.scheduler, self.pool, self.leases, self.steps_completed,
                       self.step_costs.calibration.ratio, self.step_costs.prediction_error, self.step_costs.refits,
                       self.forward_calibration.ratio, self.tpot_alone_s, self.epsilon_ceiling,
                       self.epsilon_start, self.tpot_alone_now_s)

    def _observe_step(self, batch: ScheduledBatch, seconds: float) -> None:
        """Feeds decode-only steps to the calibration of the decode cost model.

        ``seconds`` is the step's period (previous step's end to this one's) when steps ran
        back to back: what a request in every step waits per token, including the scheduler,
        the hand-off of outputs, calls handled between steps and whatever else shares the CPU.
        """
        if all(s.is_decode for s in batch.seqs):
            self.observe_decode_step(len(batch.seqs), sum(s.start_pos + 1 for s in batch.seqs) / len(batch.seqs),
                                     seconds)

    def observe_decode_step(self, batch_size: int, mean_len: float, seconds: float) -> None:
        """One decode step of ``batch_size`` requests at ``mean_len`` took ``seconds`` (``StepCosts.observe``)."""
        if self.cost_models is not None and self.cost_models.calibrate:
            self.cost_models = self.step_costs.observe(self.cost_models, batch_size, mean_len, seconds,
                                                       self.config.max_batch_size)

    def check_integrity(self) -> None:
        """Pool whole, and every block's reference count equals the requests that hold it."""
        self.pool.check_integrity()
        holders: dict[int, int] = {}
        for block in self.scheduler.owned_blocks() + self.leases.held_blocks():
            holders[block] = holders.get(block, 0) + 1
        for block in range(self.pool.num_blocks):
            if self.pool.refcount(block) != holders.get(block, 0):
                raise AssertionError(f"block {block}: refcount {self.pool.refcount(block)}, "
                                     f"held by {holders.get(block, 0)} requests")
