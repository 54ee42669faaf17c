"""A worker's cost models at start-up: from a file, from the cache of earlier starts, or measured.

Measuring happens under a host-wide lock, so workers starting together on one machine
measure one after the other rather than each other's contention. A sound fit is cached
under a key of everything that decides its figures (model, dtype, device, threads, batch
limits, the measuring procedure); a restart with the same key loads it instead of measuring.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import platform
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from common import env
from common.engine.llm_engine import LLMEngine
from common.model.packed_linear import PackedLinear
from common.slo.cost_models import CostModels
from common.slo.policy import Policy
from common.worker.profile import profile_checked

log = logging.getLogger(__name__)

PROFILE_VERSION = 6  # bump when what ``profile_checked`` measures changes: old cache entries then miss


def cost_models_at_start(engine: LLMEngine, path: str = "", cache: str = "") -> CostModels | None:
    """``path`` if given; else none under ``fcfs``; else the cached fit or a fresh measurement.
    ``cache``: the cache directory ("" = under the pdserve cache, "off" = never)."""
    if path:
        return CostModels.load(Path(path))
    if engine.config.policy == Policy.FCFS:
        return None
    folder = None if cache == "off" else Path(cache) if cache else env.cache_dir() / "cost-models"
    entry = folder / f"{cache_key(engine)}.json" if folder else None
    if entry is not None and entry.exists():
        with contextlib.suppress(ValueError):
            models = CostModels.load(entry)
            log.info("cost models from %s (measured at an earlier start)", entry)
            return models
    with host_lock():
        models = profile_checked(engine, progress=lambda line: log.info("profile: %s", line))
    if entry is not None and models.sound:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_suffix(".tmp")
        models.save(tmp)
        tmp.replace(entry)
    elif not models.sound:
        log.warning("no measurement reproduced its points; using a conservative fit that observed steps correct")
    return models


def cache_key(engine: LLMEngine) -> str:
    """A digest of what decides the measured figures."""
    config_file = engine.model_dir / "config.json"
    parts = {
        "model": str(engine.model_dir.resolve()),
        "model_config": hashlib.sha256(config_file.read_bytes()).hexdigest() if config_file.exists() else "",
        "dtype": engine.config.resolved_dtype, "device": str(engine.device), "hardware": hardware_name(engine.device),
        "threads": torch.get_num_threads(), "attention": engine.backend, "cpu_kernels": _cpu_kernels_build(engine),
        "packed_linears": isinstance(engine.model.linear, PackedLinear) and (engine.model.linear.max_rows or "all"), "enforce_eager": engine.config.enforce_eager,
        "max_batch_size": engine.config.max_batch_size, "max_num_tokens": engine.config.max_num_tokens,
        "block_size": engine.config.block_size, "torch": torch.__version__, "procedure": PROFILE_VERSION,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _cpu_kernels_build(engine: LLMEngine) -> str:
    """Which build of the CPU kernels the engine attends with ("" for none): a changed kernel is
    another measurement."""
    if engine.backend != "cpu":
        return ""
    from common.cpu_kernels.build import build_directory

    return build_directory().name


def hardware_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


@contextlib.contextmanager
def host_lock() -> Iterator[None]:
    """Held by one process on this host at a time (released by the kernel if its holder dies)."""
    with open(Path(tempfile.gettempdir()) / "pdserve-profile.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
