"""What a worker tells the gateway about itself: who it is once, its load on every heartbeat."""

from __future__ import annotations

from common.engine import LLMEngine
from common.rpc.registration import host_id
from pdserve.v1 import worker_pb2


def describe(engine: LLMEngine, role: str, worker_id: str, address: str) -> worker_pb2.WorkerDescriptor:
    cache = engine.cache.data
    models = engine.cost_models
    cost = worker_pb2.CostModel()
    if models is not None:
        cost = worker_pb2.CostModel(
            present=True, prefill_threshold=models.prefill.threshold, prefill_base_s=models.prefill.base_s,
            prefill_per_token_s=models.prefill.per_token_s, decode_alpha=models.decode.alpha,
            decode_beta=models.decode.beta, decode_gamma=models.decode.gamma, decode_delta=models.decode.delta)
    return worker_pb2.WorkerDescriptor(cost_model=cost, policy=engine.config.policy,
        worker_id=worker_id, role=role, address=address, host_id=host_id(), device=str(engine.device),
        model=str(engine.model_dir), block_size=engine.config.block_size, total_blocks=engine.pool.num_blocks,
        max_model_len=engine.max_model_len, vocab_size=engine.model.config.vocab_size,
        kv_dtype=str(cache.dtype).removeprefix("torch."), block_bytes=cache[0].numel() * cache.element_size(),
    )


def current_load(engine: LLMEngine, draining: bool) -> worker_pb2.WorkerLoad:
    """Read from the event loop while the engine thread runs: plain counters, a moment stale at worst."""
    scheduler = engine.scheduler
    queued = sum(r.num_tokens - r.num_computed_tokens for r in list(scheduler.waiting))
    return worker_pb2.WorkerLoad(free_blocks=engine.pool.num_free, running=len(scheduler.running),
                                 waiting=len(scheduler.waiting), queued_tokens=queued, draining=draining)


def warm_up(engine: LLMEngine, cost_model_path: str = "") -> None:
    """One short request through the whole engine, so the first real one pays no start-up cost;
    then the cost models: loaded from ``cost_model_path``, or measured here when a guard needs them."""
    from pathlib import Path

    from common.sampling_params import SamplingParams
    from common.slo.cost_models import CostModels
    from common.slo.profile import profile

    engine.generate([[1, 2, 3, 4]], SamplingParams(max_tokens=2, ignore_eos=True))
    if cost_model_path:
        engine.cost_models = CostModels.load(Path(cost_model_path))
    elif engine.config.policy != "fcfs":
        engine.cost_models = profile(engine)
