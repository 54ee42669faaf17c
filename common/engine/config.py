"""The engine's configuration: one frozen dataclass whose defaults are the CLI's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from common import env
from common.model.presets import DEFAULT_PRESET, MODEL_NAMES
from common.engine.scheduler import MEMORY_POLICIES
from common.slo.policy import POLICIES

if TYPE_CHECKING:
    import torch

# torch-free (the gateway reads these configs): dtypes by name, torch's objects only on use
DTYPES = ("auto", "float32", "bfloat16", "float16")
DEFAULT_DTYPE = env.default_dtype() or "auto"
ATTENTION_BACKENDS = ("auto", "torch", "cpu", "triton")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    model: str | None = None  # a Hugging Face checkpoint directory; None = the embedded preset
    preset: str = DEFAULT_PRESET
    # auto: bfloat16 where the device computes it natively (a GPU with bfloat16, a CPU with
    # AVX512-BF16 or AMX), float32 elsewhere; float32 is the precision exact against transformers
    dtype: str = DEFAULT_DTYPE
    device: str = "cpu"
    block_size: int = 16
    num_kv_blocks: int | None = None  # explicit pool size; overrides the memory fraction
    # of free memory after loading (of total / device_workers when several share a GPU); None = 0.9 GPU / 0.1 CPU
    kv_cache_memory_fraction: float | None = None
    device_workers: int = 1  # worker processes sharing this GPU; each sizes its KV pool from 1/N of it
    max_batch_size: int = 64
    max_num_tokens: int = 4096
    max_model_len: int | None = None  # None = the model's max_position_embeddings
    memory_policy: str = "guaranteed_no_evict"
    # kernels: triton (fused ops, paged attention; GPU) | cpu (C++ paged decode attention, built on
    # first use) | torch (the reference; a CPU without a compiler) | auto: triton on a GPU, cpu where it builds
    attention_backend: str = "auto"
    # the plain path: on a GPU every decode step op by op instead of replaying CUDA graphs, on a
    # CPU plain F.linear instead of weights prepacked for oneDNN (``common.model.packed_linear``)
    enforce_eager: bool = False
    enable_prefix_caching: bool = True  # reuse the KV of full blocks a prompt shares with earlier ones
    policy: str = "scorpio"  # scheduling: scorpio (both SLO guards) | fcfs (the baseline) | ttft_guard | tpot_guard
    # TPOT guard: credit batching holds a decode back only when a step of all of them would make the
    # tightest TPOT SLO present miss (off: it always runs each request at its SLO's cadence)
    work_conserving_credit: bool = True
    lease_timeout_s: float = 60.0  # decode: a reservation neither committed nor released returns its blocks
    quarantine_s: float = 10.0  # decode: blocks a writer may still be writing stay unused this long

    def __post_init__(self) -> None:
        _require(self.preset in MODEL_NAMES, "preset", f"must be one of {', '.join(MODEL_NAMES)}", self.preset)
        _require(self.dtype in DTYPES, "dtype", f"must be one of {', '.join(DTYPES)}", self.dtype)
        _require(self.block_size >= 1, "block_size", "must be >= 1", self.block_size)
        _require(self.num_kv_blocks is None or self.num_kv_blocks >= 1, "num_kv_blocks", "must be >= 1",
                 self.num_kv_blocks)
        fraction = self.kv_cache_memory_fraction
        _require(fraction is None or 0 < fraction <= 1, "kv_cache_memory_fraction", "must be in (0, 1]", fraction)
        _require(self.device_workers >= 1, "device_workers", "must be >= 1", self.device_workers)
        _require(self.lease_timeout_s > 0, "lease_timeout_s", "must be > 0", self.lease_timeout_s)
        _require(self.quarantine_s >= 0, "quarantine_s", "must be >= 0", self.quarantine_s)
        _require(self.max_batch_size >= 1, "max_batch_size", "must be >= 1", self.max_batch_size)
        _require(self.max_num_tokens >= 1, "max_num_tokens", "must be >= 1", self.max_num_tokens)
        _require(self.max_model_len is None or self.max_model_len >= 2, "max_model_len", "must be >= 2",
                 self.max_model_len)
        _require(self.memory_policy in MEMORY_POLICIES, "memory_policy",
                 f"must be one of {', '.join(MEMORY_POLICIES)}", self.memory_policy)
        _require(self.policy in POLICIES, "policy", f"must be one of {', '.join(POLICIES)}", self.policy)
        _require(self.attention_backend in ATTENTION_BACKENDS, "attention_backend",
                 f"must be one of {', '.join(ATTENTION_BACKENDS)}", self.attention_backend)

    @property
    def resolved_dtype(self) -> str:
        """The dtype's name, ``auto`` resolved on this machine for ``device``."""
        return resolve_dtype(self.dtype, self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.resolved_dtype)  # type: ignore[no-any-return]


def resolve_dtype(name: str, device: str) -> str:
    """``name``, or for ``auto``: bfloat16 where ``device`` computes it natively, else float32."""
    if name != "auto":
        return name
    import torch

    if device.startswith("cuda"):
        native = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    else:
        cpu_bf16 = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
        native = cpu_bf16 and torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return "bfloat16" if native else "float32"


def _require(ok: bool, field: str, rule: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{field} {rule}, got {value!r}")
