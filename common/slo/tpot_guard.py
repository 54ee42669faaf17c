"""SCORPIO's TPOT guard at admission: may one more request decode here without breaking the
TPOT SLOs of those already here (running, or reserved and awaiting their commit)?

    admitted ⇔ calibration(model(VBS(slos ∪ new), mean_len)) · ε ≤ min(slos ∪ new)
    idle (nothing running, nothing reserved) ⇔ unloaded_step · ε ≤ new

An idle worker never refuses on a model's word alone: the step it measured alone at warm-up
decides, and the steps it then runs correct the model (``common.slo.calibration``).

A decision of numbers only: the caller hands over what it holds and its clocks' readings
(through ``calibration``), so a simulator on a virtual clock drives the same decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from common.slo.cost_models import DecodeModel
from common.slo.credit import virtual_batch_size

TPOT_MARGIN = 1.3  # ε: a step predicted this much slower must still meet the tightest TPOT SLO


def _uncalibrated(seconds: float) -> float:
    return seconds


def guarded_slos(running_ms: Mapping[str, float], reserved_ms: Mapping[str, float]) -> dict[str, float]:
    """The TPOT SLOs (seconds) admission must keep, by request id: the running requests' and
    the reserved ones'. 0 ms is no SLO and leaves a request out."""
    return {rid: ms / 1000 for rid, ms in {**running_ms, **reserved_ms}.items() if ms}


def admits(tpot_slos: Mapping[str, float], new_slo: float, mean_len: float, model: DecodeModel,
           epsilon: float = TPOT_MARGIN, calibration: Callable[[float], float] = _uncalibrated) -> bool:
    """Whether adding a request with TPOT SLO ``new_slo`` keeps the predicted step time, with
    margin ``epsilon``, within the tightest TPOT SLO of the resulting set (all in seconds).
    ``calibration`` corrects the model's prediction by what steps have been taking."""
    slos = {**tpot_slos, "__new__": new_slo}
    return calibration(model.predict(virtual_batch_size(slos), mean_len)) * epsilon <= min(slos.values())


def admits_request(new_slo_ms: float, prompt_len: int, slos: Mapping[str, float], running_lengths: Sequence[int],
                   model: DecodeModel, unloaded_step_s: float | None,
                   calibration: Callable[[float], float] = _uncalibrated) -> bool:
    """The guard's answer for a request of ``prompt_len`` tokens and TPOT SLO ``new_slo_ms``
    (0: none, always admitted). ``slos``: ``guarded_slos`` of the requests here;
    ``running_lengths``: the running requests' tokens; ``unloaded_step_s``: one request's
    step measured alone (None: not measured, the model decides even when idle)."""
    if not new_slo_ms:
        return True
    if not slos and not running_lengths and unloaded_step_s is not None:
        return unloaded_step_s * TPOT_MARGIN <= new_slo_ms / 1000
    lengths = [*running_lengths, prompt_len]
    return admits(slos, new_slo_ms / 1000, sum(lengths) / len(lengths), model, calibration=calibration)
