"""The decode side of an engine's admission: the TPOT guard over what runs and is reserved here
(``common.slo.tpot_guard``), the measured step it reads when idle, the bounds on ε its steps
give, and credit batching's work-conserving test. ``EngineCore`` is built with it; it reads the
engine's state and changes none.
"""

from __future__ import annotations

from collections.abc import Mapping

from common.engine.config import EngineConfig
from common.engine.leases import LeaseTable
from common.engine.scheduler import Scheduler
from common.engine.step_costs import StepCosts
from common.slo import tpot_guard
from common.slo.class_margins import slo_class_ms
from common.slo.cost_models import CostModels


class AdmissionError(ValueError):
    """The request's SLO cannot be met here now (the caller answers RESOURCE_EXHAUSTED);
    ``margin_alone``: it could under its class's ε probed lower (``MarginController.probe``), so
    the margin, not the work here, refused it; ``never``: not under any load either (its TPOT SLO
    is below one request's step alone here: the caller answers FAILED_PRECONDITION)."""

    def __init__(self, message: str, margin_alone: bool = False, never: bool = False) -> None:
        super().__init__(message)
        self.margin_alone = margin_alone
        self.never = never


class TpotAdmission:
    """What an engine's TPOT guard reads of it (``EngineCore`` sets these)."""

    config: EngineConfig
    scheduler: Scheduler
    leases: LeaseTable
    step_costs: StepCosts
    cost_models: CostModels | None
    unloaded_step_s: float | None
    # ε by TPOT SLO class (``slo_class_ms``), as the latest reservation of each class brought it
    tpot_margins: dict[float, float]

    def _refuse_if_never(self, tpot_slo_ms: float) -> None:
        alone = self.tpot_alone_s
        if self.scheduler.config.tpot_guard and tpot_guard.never_met(tpot_slo_ms / 1000, alone):
            assert alone is not None
            raise AdmissionError(f"TPOT SLO {tpot_slo_ms:g} ms can never be met by this decode worker: one request "
                                 f"alone takes {alone * 1000:.1f} ms a token here", never=True)

    @property
    def tpot_alone_s(self) -> float | None:
        """One request's decode step alone here (``StepEvidence.alone_s``); None: not measured."""
        return self.step_costs.evidence.alone_s(self.unloaded_step_s)

    @property
    def tpot_alone_now_s(self) -> float | None:
        """One request's decode step here now, what the idle rule admits by (``StepEvidence.alone_now_s``)."""
        return self.step_costs.evidence.alone_now_s(self.unloaded_step_s)

    @property
    def epsilon_ceiling(self) -> float:
        """The most ε this worker's steps have shown it needs (``StepEvidence.ceiling``), as its
        heartbeats report it: the gateway bounds ε by it, lifted for a while by the misses it saw
        (``ClassMargins.limit``)."""
        return self.step_costs.evidence.ceiling(tpot_guard.TPOT_MARGIN)

    @property
    def epsilon_start(self) -> float:
        """Where ε starts here and returns to on time (``StepEvidence.start``)."""
        return self.step_costs.evidence.start(tpot_guard.TPOT_MARGIN)

    def tpot_admits(self, tpot_slo_ms: float, prompt_len: int, max_tokens: int,
                    epsilon: float = tpot_guard.TPOT_MARGIN, handoff_s: float = 0.0) -> bool:
        """The TPOT guard (``common.slo.tpot_guard``) over the decodes of the requests here and
        those reserved (their leases carry their SLOs and budgets), the newcomer's class held to
        ``epsilon`` (its requests here too), its ``handoff_s`` ahead of it; always true under a policy without it, or before the
        worker has a cost model."""
        if not self.scheduler.config.tpot_guard or self.cost_models is None:
            return True
        new = tpot_guard.Decoding(tpot_slo_ms / 1000, max_tokens - 1, prompt_len + 1, lag_s=handoff_s)
        present = self.decodings({slo_class_ms(tpot_slo_ms / 1000): epsilon})
        # the newcomer needs a place once its KV is committed: at least a prefill forward's fixed cost away
        soonest_commit_s = max(0.0, self.cost_models.prefill.base_s)
        return tpot_guard.admits_request(new, present, self.cost_models.decode, self.tpot_alone_now_s, epsilon,
                                         self.step_costs.calibration.scale, self.config.max_batch_size,
                                         soonest_commit_s)

    def all_fit(self, batch: int, mean_len: float, tightest_slo_s: float) -> bool:
        """Credit batching's work-conserving test: a step of every decoding request, as the
        calibrated model predicts it, keeps the tightest TPOT SLO present with margin ε. Then
        holding a loose request back saves the tight ones nothing (a GPU's step is nearly flat
        in batch size) and only keeps the loose one present longer, in a place of the batch."""
        if self.cost_models is None:
            return False
        step = self.step_costs.calibration.scale(self.cost_models.decode.predict(batch, mean_len))
        return tpot_guard.step_keeps(step, tightest_slo_s, self.tpot_margin(tightest_slo_s))

    def tpot_margin(self, slo_s: float) -> float:
        """ε for a request with this TPOT SLO: its class's latest (``TPOT_MARGIN`` before any), as
        the gateway bounded it (``ClassMargins.limit``), at most ``epsilon_bound.MOST``."""
        return self.tpot_margins.get(slo_class_ms(slo_s), tpot_guard.TPOT_MARGIN)

    def decodings(self, margins: Mapping[float, float] | None = None) -> list[tpot_guard.Decoding]:
        """What the TPOT guard projects: every request here (decoding or about to) and every
        reservation, with its SLO, its output tokens still to come at most, its length, and its
        class's ε (``margins``, by ``slo_class_ms``, in place of the stored ones where given)."""
        margins = {**self.tpot_margins, **(margins or {})}  # each class's as its latest reservation brought it

        def margin(slo_ms: float) -> float:
            return margins.get(slo_class_ms(slo_ms / 1000), tpot_guard.TPOT_MARGIN)

        here = [tpot_guard.Decoding(r.tpot_slo_ms / 1000, r.params.max_tokens - len(r.output_token_ids), r.num_tokens,
                                    margin(r.tpot_slo_ms)) for r in self.scheduler.requests.values()]
        return here + [tpot_guard.Decoding(lease.tpot_slo_ms / 1000, lease.max_tokens - 1, lease.prompt_len + 1,
                                           margin(lease.tpot_slo_ms), lease.handoff_s) for lease in self.leases.leases()]
