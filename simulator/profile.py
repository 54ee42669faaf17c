"""The default cost profile: this machine's, for a model (the default one unless named), measured as a worker of a
``pdserve up`` cluster measures itself (on a worker's share of the cores), and cached under the
same key, so a simulation and a real cluster on this machine share one measurement."""

from __future__ import annotations

import os
import sys

from common.slo.cost_models import CostModels


def this_machine(preset: str | None = None) -> CostModels:
    from common.engine.config import EngineConfig
    from common.model.presets import DEFAULT_PRESET
    from common.engine.llm_engine import LLMEngine
    from common.worker.cpu_plan import apply_to_this_process, plan_cores
    from common.worker.state import warm_up

    import torch

    share = plan_cores(["prefill-0", "decode-0"])[-1]  # what `pdserve up` gives a worker here
    affinity, threads = os.sched_getaffinity(0), torch.get_num_threads()
    apply_to_this_process(share.cores, share.threads)
    try:
        print(f"cost profile: the {preset or DEFAULT_PRESET} model on this machine ({share.describe()}), measured once and cached",
              file=sys.stderr, flush=True)
        engine = LLMEngine(EngineConfig(preset=preset or DEFAULT_PRESET))
        warm_up(engine)
    finally:
        os.sched_setaffinity(0, affinity)
        torch.set_num_threads(threads)
    if engine.cost_models is None:
        raise ValueError("no cost profile could be measured here; pass --cost-model FILE")
    return engine.cost_models
