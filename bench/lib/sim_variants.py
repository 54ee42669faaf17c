"""What ``bench/sim_vs_real.py`` simulates beside its compared simulation, against the same real
points: candidate laws for what the simulated cluster lacks, each a config and a truth.

- ``own_cores``: every worker on cores of its own (no simulated host), at the truth as measured.
- ``decode_measured``: the decode worker's stretch measured against the load (what its steps took
  in the cluster over the profile's at two loads, ``SimConfig.decode_step_ratio``) rather than
  taken from the share of its core the front end and its own threads take.
- ``decode_by_cpu``: the host counting the decode worker's core in use for only the share of its
  steps its engine computes (``SimConfig.decode_cpu_share``: the decode engine thread's
  CPU at the calibration load over the time the simulated decode worker computed there).
- ``steps_independent``: the decode worker's steps drawn one at a time, without the memory the
  real worker's steps show (``SimConfig.decode_step_memory``: slow in stretches).
- ``per_forward``: the prefill worker's in-cluster cost as a fixed cost per forward rather than a
  factor on every forward (a loaded worker's batched forwards pay it once).
- ``per_step``: the decode worker's the same way, a fixed cost per step beyond the profile rather
  than a factor on every step (a step's cost inside the cluster, if it does not grow with the batch).
- ``per_request``: the decode worker's in-cluster cost as a fixed cost per step and a cost per
  request in it beyond the profile, from the decode engine thread's CPU a step at the calibration
  and the heavier load (``step_costs``), the host's stretch on top: a factor on the whole step,
  measured at one or two requests, charges a large batch too little if the cost grows with it.

The compared simulation (one factor on the profile) was chosen over these by measurement
(docs/decisions.md, "sim_vs_real: the in-cluster decode cost is one factor on the profile").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
from simulator.config import SimConfig

M = TypeVar("M", PrefillModel, DecodeModel)

VARIANTS = {"own_cores": "workers on cores of their own", "decode_measured": "decode stretch measured by load",
            "decode_by_cpu": "decode core by its engine's CPU", "steps_independent": "decode steps independent",
            "per_forward": "in-cluster cost per forward", "per_step": "in-cluster cost per step",
            "per_request": "in-cluster cost per step and request"}


def per_forward_cost(model: PrefillModel, ratio: float, tokens: int) -> PrefillModel:
    """``model`` taking ``ratio`` × its time for a forward of ``tokens``, the difference a fixed cost
    of every forward (what a forward costs inside the cluster beyond its profile, if it does not grow
    with the forward's tokens); a ratio below one scales it."""
    return _with_fixed_cost(model, ratio, "base_s", model.predict(tokens))


def per_step_cost(model: DecodeModel, ratio: float, mean_len: float) -> DecodeModel:
    """``model`` taking ``ratio`` × its time for a one-request step at ``mean_len``, the difference a
    fixed cost of every step (a step's cost inside the cluster beyond its profile, if it does not
    grow with the batch); a ratio below one scales it."""
    return _with_fixed_cost(model, ratio, "delta", model.predict(1, mean_len))


def step_costs(model: DecodeModel, loads: Sequence[tuple[float, float]], mean_len: float) -> tuple[float, float]:
    """What a decode step costs beyond ``model`` at ``mean_len``: ``(per step, per request in it)``
    in seconds, both at least zero, fitted through ``loads`` (each a mean batch and the engine's
    seconds a step there) by least squares, unweighted (``cost_models``' fit weighs by the inverse of
    what it fits, which these differences, near zero, do not bear); one load, or loads of one batch,
    give a cost per step."""
    points = [(batch, seconds - model.predict(batch, mean_len)) for batch, seconds in loads if batch > 0]
    if not points:
        return 0.0, 0.0
    mean_b = sum(b for b, _ in points) / len(points)
    mean_extra = sum(e for _, e in points) / len(points)
    spread = sum((b - mean_b) ** 2 for b, _ in points)
    per_request = (sum((b - mean_b) * (e - mean_extra) for b, e in points) / spread) if spread > 1e-12 else 0.0
    per_step = mean_extra - per_request * mean_b
    if per_request <= 0:
        return max(0.0, mean_extra), 0.0
    if per_step < 0:  # through the origin
        return 0.0, max(0.0, sum(b * e for b, e in points) / sum(b * b for b, _ in points))
    return per_step, per_request


def per_request_cost(model: DecodeModel, per_step_s: float, per_request_s: float, mean_len: float) -> DecodeModel:
    """``model`` with a cost per step and one per request in the step added (``step_costs``). A model
    with a knee charges nothing a request below it, so there the cost per request goes on its term
    per batch·length instead, exact at ``mean_len``."""
    if model.knee:
        return dataclasses.replace(model, delta=model.delta + per_step_s, alpha=model.alpha + per_request_s / mean_len)
    return dataclasses.replace(model, delta=model.delta + per_step_s, beta=model.beta + per_request_s)


def _with_fixed_cost(model: M, ratio: float, fixed_term: str, measured_s: float) -> M:
    """``model`` with ``(ratio - 1) × measured_s`` added to its fixed term, or scaled by a ratio below one."""
    if ratio <= 1:
        return model.scaled(ratio)
    return dataclasses.replace(model, **{fixed_term: getattr(model, fixed_term) + (ratio - 1) * measured_s})


def alone_at(truth: CostModels, stretch: dict[str, float]) -> CostModels:
    """The truth a simulated host runs its workers at: what was measured under the host's stretch,
    less the stretch it charges itself."""
    return CostModels(truth.prefill.scaled(1 / stretch["prefill"]), truth.decode.scaled(1 / stretch["decode"]))


def variants_beside(models: CostModels, truth: CostModels, own_cores: SimConfig, shared: SimConfig,
                    measured: SimConfig, stretch: dict[str, float], forward_ratio: float, prompt_len: int,
                    mean_len: float, decode_engine_cores: float, decode_busy: float,
                    stretch_of: Callable[[SimConfig], dict[str, float]],
                    engine_steps: Sequence[tuple[float, float]] = ()
                    ) -> tuple[dict[str, tuple[SimConfig, CostModels]], dict[str, float]]:
    """The variants (``VARIANTS``), and the figures they were made from. ``measured``: the compared
    host's config with the decode step's stretch measured; ``stretch``: what the compared host
    charges at the calibration load; ``decode_engine_cores`` and ``decode_busy``: the
    real decode engine thread's cores and the simulated decode worker's busy share there;
    ``mean_len``: a decoding request's mean context, where the one-request step was measured;
    ``stretch_of``: a config's stretch at the calibration load, simulated; ``engine_steps``: the decode
    engine thread's seconds a step at each measured load, by its mean batch (``step_costs``)."""
    stretch_measured = stretch_of(measured)
    cpu_share = min(1.0, max(0.05, decode_engine_cores / max(decode_busy, 1e-9)))
    by_cpu = dataclasses.replace(shared, decode_cpu_share=cpu_share)
    stretch_by_cpu = stretch_of(by_cpu)
    alone = alone_at(truth, stretch)
    per_forward = CostModels(per_forward_cost(models.prefill, forward_ratio / stretch["prefill"], prompt_len),
                             alone.decode)
    step_ratio = truth.decode.predict(1, mean_len) / models.decode.predict(1, mean_len) / stretch["decode"]
    per_step = CostModels(alone.prefill, per_step_cost(models.decode, step_ratio, mean_len))
    per_step_s, per_request_s = step_costs(models.decode, engine_steps, mean_len)
    by_request = CostModels(alone.prefill, per_request_cost(models.decode, per_step_s, per_request_s, mean_len))
    variants = {"own_cores": (own_cores, truth), "decode_measured": (measured, alone_at(truth, stretch_measured)),
                "decode_by_cpu": (by_cpu, alone_at(truth, stretch_by_cpu)),
                "steps_independent": (dataclasses.replace(shared, decode_step_memory=(0.0, 0.0)), alone),
                "per_forward": (shared, per_forward), "per_step": (shared, per_step), "per_request": (shared, by_request)}
    figures = {"decode_engine_cores_calibration": decode_engine_cores, "simulated_decode_busy_calibration": decode_busy,
               "decode_cpu_share": cpu_share, "calibration_stretch_measured_decode": stretch_measured["decode"],
               "calibration_stretch_by_cpu_prefill": stretch_by_cpu["prefill"],
               "calibration_stretch_by_cpu_decode": stretch_by_cpu["decode"],
               "decode_engine_extra_ms_per_step": per_step_s * 1e3, "decode_engine_extra_ms_per_request": per_request_s * 1e3,
               "decode_step_memory_w": shared.decode_step_memory[0], "decode_step_memory_rho": shared.decode_step_memory[1]}
    return variants, figures
