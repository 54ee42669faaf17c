"""The prefill side of an engine's admission: how many prompt tokens a step may compute, whether a
forward begun now ends in time, and whether a prompt given to a decode worker (local prefill)
can have its first token before its TTFT budget runs out. ``EngineCore`` is built with it.
"""

from __future__ import annotations

from collections.abc import Callable

from common.engine.config import EngineConfig
from common.engine.local_prompts import LocalPrompts
from common.engine.tpot_admission import AdmissionError
from common.slo.calibration import Calibration
from common.slo.cost_models import CostModels, attention_work
from common.slo.forward_budget import TightestSlo, forward_budget


class PromptTiming:
    """What an engine's prompt timing reads of it (``EngineCore`` sets these)."""

    config: EngineConfig
    clock: Callable[[], float]
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

    def _refuse_if_late(self, tokens: int, computed: int, ttft_slo_ms: float, ttft_left_ms: float) -> None:
        """Raises ``AdmissionError`` when a prompt of ``tokens`` to compute (``computed`` before
        them) given to this engine now is predicted to have its first token after ``ttft_left_ms``;
        nothing to check without a budget or a cost model."""
        if not ttft_left_ms or self.cost_models is None:
            return
        first_token_s = self.local_prompts.first_token_s(tokens, attention_work(tokens, computed))
        if first_token_s is None or first_token_s * 1000 > ttft_left_ms:
            why = ("would wait for its decodes' slack without end" if first_token_s is None
                   else f"is predicted in {first_token_s * 1000:.0f} ms, {ttft_left_ms:.0f} ms left")
            raise AdmissionError(f"TTFT SLO {ttft_slo_ms:g} ms cannot be met by this decode worker: its first token {why}")

    def forward_s(self, tokens: int, attention: int) -> float:
        """A prefill forward's predicted time: the fitted model × this worker's calibration."""
        assert self.cost_models is not None
        return self.forward_calibration.scale(self.cost_models.prefill.predict(tokens, attention))
