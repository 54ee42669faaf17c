"""The simulated host of ``bench/sim_vs_real.py``, fitted from a real cluster's measured loads: the
cores its front end and its workers' own threads used, and (for a variant) what its decode steps
took, each as a power of the request rate (``simulator.host``), and how a prefill call's overhead
grows with it."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace

from bench.lib.process_cores import front_end, own_threads
from common.worker.cpu_plan import available_cores
from simulator.config import SimConfig
from simulator.host import RateLaw

HOST_FIGURES = ("front_end_cores", "prefill_own", "decode_own", "decode_step_ratio", "decode_load_scale",
                "calibration_stretch")  # the figures shown as the host


def host_config(own_cores: SimConfig, loads: tuple[tuple[float, dict[str, float]], ...]) -> SimConfig:
    """The simulated host's config from the measured loads (``(rate, cores used)``): the front end's
    cores and each role's own threads', fitted as powers of the rate."""
    def law(figure: Callable[[dict[str, float]], float]) -> tuple[float, float]:
        fitted = RateLaw.fit([(rate, figure(used)) for rate, used in loads])
        return fitted.at_one, fitted.exponent

    return replace(own_cores, host_cores=len(available_cores()), front_end_cores=law(front_end),
                   prefill_own_cores=law(lambda u: own_threads(u, "prefill")),
                   decode_own_cores=law(lambda u: own_threads(u, "decode")))


def decode_step_law(decode_scales: list[tuple[float, float]]) -> tuple[float, float]:
    """``SimConfig.decode_step_ratio`` through what a decode step took in the cluster over the
    profile's at two loads (``(rate, scale)``)."""
    fitted = RateLaw.fit(decode_scales)
    return fitted.at_one, fitted.exponent


def overhead_growth(calibration: tuple[float, tuple[float, ...]], heavier: tuple[float, tuple[float, ...]]) -> RateLaw:
    """How a prefill call's overhead grows with the load (``SimConfig.call_overhead_growth``), from
    the overheads drawn at two loads (``(rate, draws)``): the calibration load's draws (what the
    simulation draws from) × this law, fitted through 1 at its rate and the heavier load's mean over
    the calibration's at the heavier rate (flat without either, and where the heavier load's is the
    lower: noise)."""
    (calibration_rate, drawn), (heavier_rate, heavier_drawn) = calibration, heavier
    if not drawn or not heavier_drawn:
        return RateLaw(1.0, 0.0)
    ratio = max(1.0, statistics.fmean(heavier_drawn) / statistics.fmean(drawn))
    return RateLaw.fit([(calibration_rate, 1.0), (heavier_rate, ratio)])


def host_figures(measured: SimConfig, loads: tuple[tuple[float, dict[str, float]], ...],
                 decode_scales: list[tuple[float, float]], stretch: dict[str, float]) -> dict[str, float]:
    """What the host's config was fitted from and to, for the result: ``measured``, the host with the
    decode step's law (``host_config`` and ``decode_step_law``'s), fitted from ``loads`` and
    ``decode_scales``."""
    figures: dict[str, float] = {"host_cores": measured.host_cores}
    figures.update({f"decode_load_scale_{at}": scale for at, (_, scale) in zip(("calibration", "heavier"), decode_scales)})
    for name in ("front_end_cores", "prefill_own_cores", "decode_own_cores", "decode_step_ratio"):
        figures[f"{name}_at_1"], figures[f"{name}_exponent"] = getattr(measured, name)
    for at, (rate, used) in zip(("unloaded", "calibration", "heavier"), loads):
        figures[f"front_end_cores_{at}"] = front_end(used)
        for role in ("prefill", "decode"):
            figures[f"{role}_own_cores_{at}"] = own_threads(used, role)
    figures.update({f"calibration_stretch_{role}": s for role, s in stretch.items()})
    return figures
