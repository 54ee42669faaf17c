"""What a worker tells the gateway about itself: who it is once, its load on every heartbeat."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Sequence
from pathlib import Path

import torch

from common.engine.llm_engine import LLMEngine
from common.rpc.convert import cost_models_to_proto, load_to_proto
from common.worker.prefix_digest import DigestSubscription
from common.worker.registration import host_id
from wire.v1 import worker_pb2

log = logging.getLogger(__name__)


def gpu_uuid(device: torch.device) -> str:
    """The GPU's UUID (as nvidia-smi shows it), equal in every process on that GPU; "" off CUDA."""
    if device.type != "cuda":
        return ""
    return str(getattr(torch.cuda.get_device_properties(device), "uuid", ""))


def describe(engine: LLMEngine, role: str, worker_id: str, address: str, kv_transport: str = "",
             kv_receives: Sequence[str] = ()) -> worker_pb2.WorkerDescriptor:
    cache = engine.cache.data
    return worker_pb2.WorkerDescriptor(
        cost_model=cost_models_to_proto(engine.cost_models), policy=engine.config.policy, incarnation=uuid.uuid4().hex,
        worker_id=worker_id, role=role, address=address, host_id=host_id(), device=str(engine.device),
        model=str(engine.model_dir), block_size=engine.config.block_size, total_blocks=engine.pool.num_blocks,
        max_model_len=engine.max_model_len, max_num_tokens=engine.config.max_num_tokens, vocab_size=engine.model.config.vocab_size,
        kv_dtype=str(cache.dtype).removeprefix("torch."), block_bytes=engine.cache.block_bytes,
        device_kind=engine.device.type, gpu_uuid=gpu_uuid(engine.device), kv_transport=kv_transport,
        kv_receives=list(kv_receives),
        prefix_salt=engine.prefix_salt if engine.pool.prefix_index is not None else 0,
        model_digest=model_digest(engine.model_dir),
    )


def model_digest(model_dir: Path) -> str:
    """A short digest of the checkpoint's config: equal for workers that lay out its KV alike."""
    config = model_dir / "config.json"
    return hashlib.sha256(config.read_bytes()).hexdigest()[:16] if config.exists() else ""


def current_load(engine: LLMEngine, draining: bool, digest: DigestSubscription | None = None) -> worker_pb2.WorkerLoad:
    """Read from the event loop while the engine thread runs: the engine's latest snapshot
    (``LLMEngine.load``), as of its last step or call; and, from a prefill worker, its prefix
    digest (every load built is sent: the digest's changes are drained)."""
    load = load_to_proto(engine.load, engine.config.policy, draining)
    prefix = digest.next() if digest is not None else None
    if prefix is not None:
        load.prefix.CopyFrom(prefix)
    return load


def warm_up(engine: LLMEngine, cost_model_path: str = "", cost_model_cache: str = "") -> None:
    """One short request through the whole engine, so the first real one pays no start-up cost,
    and the unloaded step time an idle worker admits by; then the cost models (see
    ``common.worker.startup``)."""
    from common.model.sampling_params import SamplingParams
    from common.worker.profile import unloaded_step_seconds
    from common.worker.startup import cost_models_at_start, host_lock

    with host_lock():  # workers starting together measure one after the other
        engine.generate([[1, 2, 3, 4]], SamplingParams(max_tokens=2, ignore_eos=True))
        engine.unloaded_step_s = unloaded_step_seconds(engine)
    log.info("unloaded decode step: %.2f ms", engine.unloaded_step_s * 1000)
    engine.cost_models = cost_models_at_start(engine, cost_model_path, cost_model_cache)
    if engine.cost_models is not None:
        log.info("prefill cost model: %s", engine.cost_models.prefill.describe())
        log.info("decode cost model: %s", engine.cost_models.decode.describe())
