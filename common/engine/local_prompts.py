"""Prompts a decode engine computes in its own steps (conditional disaggregation), read from the
engine's state: the TPOT promises of its decoding requests that such a prompt's forward must keep
(``stall_keeps``, the scheduler's test) and when its first token is expected
(``first_token_s``, what ``EngineCore.prefill_reserved`` refuses by, scaled by
``first_token_calibration``). The arithmetic is ``common.slo.local_prefill``'s; this is the glue
between it and one engine.

``first_token_s`` is an expected time from the fitted models, and the prompts it times are the
rare ones no prefill worker could serve in time, computed beside decode steps whose forwards the
prefill calibration (pure prefill steps) never sees, so on shared cores their first tokens often
come well after it. The check scales the expectation by a high quantile of what this engine's own
local prompts took against it (each timed from its admission to its first token): one prompt's
first token decides its TTFT, so the tail matters, not the median.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.engine.scheduler import decode_ready
from common.slo import local_prefill
from common.slo.calibration import Calibration
from common.slo.cost_models import attention_work

if TYPE_CHECKING:
    from common.engine.core import EngineCore

FIRST_TOKEN_QUANTILE = 0.9  # of a local first token's observed / expected time: what the check scales by
FIRST_TOKEN_WINDOW_S = 30.0  # local prompts are rare: the calibration keeps its newest ones at least this long
EXPECTED_MAX_AGE_S = 60.0  # an admitted prompt with no first token by then (aborted) is forgotten


class LocalPrompts:
    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.fresh_decodes = local_prefill.FreshDecodes()  # what a prompt computed here waits behind
        self.first_token_calibration = Calibration(window_s=FIRST_TOKEN_WINDOW_S, quantile=FIRST_TOKEN_QUANTILE,
                                                   clock=core.clock)
        self._expected: dict[str, tuple[float, float]] = {}  # request id: (admitted at, first_token_s then)

    def expect(self, request_id: str, now: float, first_token_s: float) -> None:
        """A local prompt admitted ``now``, its first token expected in ``first_token_s``."""
        self._expected = {k: v for k, v in self._expected.items() if v[0] > now - EXPECTED_MAX_AGE_S}
        self._expected[request_id] = (now, first_token_s)

    def decode_began(self, now: float, tpot_slo_s: float, request_id: str | None = None) -> None:
        """A request began decoding here (committed, or its first token out of a local prompt:
        ``request_id``, whose time against its expectation calibrates the next ones)."""
        self.fresh_decodes.observe(now, tpot_slo_s)
        if request_id is not None and (expected := self._expected.pop(request_id, None)) is not None:
            self.first_token_calibration.observe(expected[1], now - expected[0])

    def stall_keeps(self, tokens: int, attention: int) -> bool:
        """Whether a step computing ``tokens`` prompt tokens (of ``attention`` work) beside the
        decodes keeps every decoding request's TPOT promise (``local_prefill.stall_keeps``). A
        prompt waits while it would not: the decodes' slack grows with every step that beats
        their SLO, and every request that begins decoding meanwhile, with none, holds it again
        (how long, ``first_token_s`` predicts)."""
        core = self.core
        if core.cost_models is None:
            return True
        promises, step = self.promises()
        forward = core.forward_s(tokens, attention)
        return not promises or local_prefill.stall_keeps(promises, core.clock(), forward, step)

    def first_token_s(self, tokens: int, attention: int) -> float | None:
        """Seconds until a prompt of ``tokens`` (``attention`` work) given to this engine now
        would have its first token: the prompts queued here go with it in one forward beside one
        decode step, once the decodes' slack lets that forward in (``local_prefill.stall_wait_s``,
        under the TPOT guard), and the requests that begin decoding here meanwhile, each with no
        slack, let it in (``local_prefill.start_wait_s``, at their recent rate). The requests
        reserved here and not yet committed are among those: their first tokens are on the way, so
        each counts as beginning now, with no slack. An expected time, not a bound. None when it
        never would, or without a cost model."""
        core = self.core
        if core.cost_models is None:
            return None
        queued = [r for r in core.scheduler.waiting if not decode_ready(r)]
        tokens += sum(r.num_uncomputed_tokens for r in queued)
        attention += sum(attention_work(r.num_uncomputed_tokens, r.num_computed_tokens) for r in queued)
        forward = core.forward_s(tokens, attention)
        if not core.scheduler.policy.guards_stalls:
            return forward
        promises, step = self.promises(reserved=True)
        now = core.clock()
        tightest = self.fresh_decodes.tightest_s(now)
        return local_prefill.first_token_s(promises, now, forward, step, self.fresh_decodes.rate(now), tightest,
                                           core.tpot_margin(tightest))

    def promises(self, reserved: bool = False) -> tuple[list[local_prefill.Promise], float]:
        """The TPOT promises of the requests decoding here (running, or committed and about to:
        they go before prompts, ``Scheduler._admit_waiting``), and, with ``reserved``, of those
        reserved here, as beginning now; and their next step's predicted time (0 without any)."""
        core = self.core
        decoding = [r for r in (*core.scheduler.running, *core.scheduler.waiting)
                    if r.first_token_at is not None and decode_ready(r)]
        leases = core.leases.leases() if reserved else []
        if not (decoding or leases) or core.cost_models is None:
            return [], 0.0
        lengths = [r.num_tokens for r in decoding] + [lease.prompt_len + 1 for lease in leases]
        step = core.step_costs.calibration.scale(core.cost_models.decode.predict(len(lengths),
                                                                                 sum(lengths) / len(lengths)))
        now = core.clock()
        return [local_prefill.Promise(r.first_token_at, r.tpot_slo_ms / 1000, len(r.output_token_ids),  # type: ignore[arg-type]
                                      core.tpot_margin(r.tpot_slo_ms / 1000)) for r in decoding if r.tpot_slo_ms] + \
            [local_prefill.Promise(now, lease.tpot_slo_ms / 1000, 1, core.tpot_margin(lease.tpot_slo_ms / 1000))
             for lease in leases if lease.tpot_slo_ms], step
