"""The prefill side of an engine's admission: how many prompt tokens a step may compute, whether a
forward begun now ends in time, and whether a prompt given to a decode worker (local prefill)
can have its first token before its TTFT budget runs out. ``EngineCore`` is built with it.
"""

from __future__ import annotations

from collections.abc import Callable

from common.engine.config import EngineConfig
from common.engine.local_prompts import LocalPrompts
from common.engine.scheduler import Scheduler
from common.engine.tpot_admission import AdmissionError
from common.slo.calibration import Calibration
from common.slo.cost_models import CostModels, attention_work
from common.slo.forward_budget import TightestSlo, forward_budget


class PromptTiming:
    """What an engine's prompt timing reads of it (``EngineCore`` sets these)."""

    config: EngineConfig
    clock: Callable[[], float]
    scheduler: Scheduler
    cost_models: CostModels | None
    tightest_ttft: TightestSlo  # of the requests added: what cuts prefill forwards
    forward_calibration: Calibration  # prefill forwards as observed vs the fitted model
    local_prompts: LocalPrompts

    def prefill_cap(self) -> int:
        """Prompt tokens a step may compute now: the configured budget, cut under a TTFT guard so
        that a forward leaves the tightest recent TTFT SLO time for a request arriving during it
        (``common.slo.forward_budget``; the gateway predicts queues with the same cut)."""
        if self.cost_models is None:
            return self.config.max_num_tokens
        return forward_budget(self.cost_models.prefill, self.tightest_ttft.value(), self.config.max_num_tokens)

    def forward_keeps(self, tokens: int, attention: int, deadline: float, share: float = 1.0) -> bool:
        """Whether a forward of ``tokens`` prompt tokens of ``attention`` work
        (``common.slo.cost_models.attention_work``) begun now is predicted (fitted model × this
        worker's calibration of its forwards) to end within ``share`` of the time left to
        ``deadline`` (this engine's clock)."""
        return self.cost_models is None or self.forward_s(tokens, attention) <= share * (deadline - self.clock())

    def stall_keeps(self, tokens: int, work: int) -> bool:
        """The stall rule over this engine's decoding requests (``LocalPrompts.stall_keeps``)."""
        return self.local_prompts.stall_keeps(tokens, work)

    def _refuse_if_late(self, request_id: str, tokens: int, computed: int, ttft_slo_ms: float,
                        ttft_left_ms: float) -> None:
        """Raises ``AdmissionError`` when a prompt of ``tokens`` to compute (``computed`` before
        them) given to this engine now is predicted to have its first token after ``ttft_left_ms``
        (``LocalPrompts.first_token_s`` scaled by its calibration); nothing to check without a
        budget or a cost model. Admitted, its expectation is kept to calibrate by."""
        if not ttft_left_ms or self.cost_models is None:
            return
        local = self.local_prompts
        expected_s = local.first_token_s(tokens, attention_work(tokens, computed))
        if expected_s is None:
            raise AdmissionError(f"TTFT SLO {ttft_slo_ms:g} ms cannot be met by this decode worker: its first token "
                                 "would wait for its decodes' slack without end")
        first_token_s = local.first_token_calibration.scale(expected_s)
        if first_token_s * 1000 > ttft_left_ms:
            raise AdmissionError(f"TTFT SLO {ttft_slo_ms:g} ms cannot be met by this decode worker: its first token "
                                 f"is predicted in {first_token_s * 1000:.0f} ms, {ttft_left_ms:.0f} ms left")
        local.expect(request_id, self.clock(), expected_s)

    def queue_first_token_s(self, tokens: int, deadline: float) -> float | None:
        """On a prefill worker: seconds until a prompt of ``tokens`` due at ``deadline`` (this
        engine's clock), given now, has its first token: the prompts queued or under way here due
        no later go first (least slack first), all in forwards of the step budget, by the fitted
        model × this worker's calibration. None without a cost model."""
        if self.cost_models is None:
            return None
        ahead = [r for r in (*self.scheduler.waiting, *self.scheduler.running)
                 if r.num_uncomputed_tokens > 0 and r.ttft_deadline <= deadline]
        total = tokens + sum(r.num_uncomputed_tokens for r in ahead)
        return self.forward_calibration.scale(self.cost_models.prefill.predict_forwards(total, self.prefill_cap()))

    def _refuse_if_queue_late(self, tokens: int, ttft_slo_ms: float, ttft_left_ms: float) -> None:
        """Raises ``AdmissionError`` when a prompt given to this prefill worker now is predicted to
        have its first token after ``ttft_left_ms`` (``queue_first_token_s``), or to make a prompt
        queued here, due later and predicted on time, late (least slack first puts the newcomer
        ahead of it): a gateway sees only what it sent, so with several gateways this worker,
        which sees its whole queue, decides."""
        if not ttft_left_ms or self.cost_models is None:
            return
        deadline = self.clock() + ttft_left_ms / 1000
        first_token_s = self.queue_first_token_s(tokens, deadline)
        if first_token_s is not None and first_token_s * 1000 > ttft_left_ms:
            raise AdmissionError(f"TTFT SLO {ttft_slo_ms:g} ms cannot be met by this prefill worker: its first token "
                                 f"is predicted in {first_token_s * 1000:.0f} ms, {ttft_left_ms:.0f} ms left")
        if (pushed := self._pushed_late(tokens, deadline)) is not None:
            raise AdmissionError(f"TTFT SLO {ttft_slo_ms:g} ms: this prefill worker would make request {pushed}, "
                                 "queued before it and due later, miss its own")

    def _pushed_late(self, tokens: int, deadline: float) -> str | None:
        """A prompt queued here, due after ``deadline``, on time as queued and late with ``tokens``
        more computed before it (its id); None when there is none."""
        assert self.cost_models is not None
        model, cap, now = self.cost_models.prefill, self.prefill_cap(), self.clock()
        queued = sorted((r for r in (*self.scheduler.waiting, *self.scheduler.running)
                         if r.num_uncomputed_tokens > 0 and r.ttft_slo_ms), key=lambda r: r.ttft_deadline)
        ahead = 0  # tokens computed before each queued prompt's first token, its own included
        for r in queued:
            ahead += r.num_uncomputed_tokens
            if r.ttft_deadline <= deadline:
                continue
            left = r.ttft_deadline - now
            if self.forward_calibration.scale(model.predict_forwards(ahead, cap)) <= left < \
                    self.forward_calibration.scale(model.predict_forwards(ahead + tokens, cap)):
                return r.request_id
        return None

    def forward_s(self, tokens: int, attention: int) -> float:
        """A prefill forward's predicted time: the fitted model × this worker's calibration."""
        assert self.cost_models is not None
        return self.forward_calibration.scale(self.cost_models.prefill.predict(tokens, attention))
