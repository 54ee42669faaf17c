"""What the machine can do (matmul FLOP/s, copy bandwidth) and the decode bound it implies.

The bound is computed from the model's ``config.json`` alone: one decode step must read
every weight it multiplies by once and each sequence's KV at its current length, and do
``2 · params · B`` FLOPs in the linear layers plus ``4 · heads · head_dim · len`` per
sequence and layer in attention (QKᵀ and PV).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from common.model.config import ModelConfig, load_model_config

MATMUL_N = 2048
COPY_BYTES = 512 << 20


def best_seconds(fn: Callable[[], object], device: str, repeats: int) -> float:
    """Fastest of ``repeats`` timed calls, after one untimed call."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - started)
    return best


def matmul_gflops(device: str, dtype: torch.dtype = torch.float32, repeats: int = 5) -> float:
    a = torch.randn(MATMUL_N, MATMUL_N, device=device).to(dtype)
    b = torch.randn(MATMUL_N, MATMUL_N, device=device).to(dtype)
    out = torch.empty(MATMUL_N, MATMUL_N, device=device, dtype=dtype)
    seconds = best_seconds(lambda: torch.matmul(a, b, out=out), device, repeats)
    return 2 * MATMUL_N**3 / seconds / 1e9


def copy_gb_s(device: str, repeats: int = 5) -> float:
    """Bytes read plus bytes written per second by one large tensor copy."""
    src = torch.ones(COPY_BYTES // 4, device=device, dtype=torch.float32)
    dst = torch.zeros_like(src)
    seconds = best_seconds(lambda: dst.copy_(src), device, repeats)
    return 2 * COPY_BYTES / seconds / 1e9


def machine_figures(device: str, dtype: str = "float32") -> dict[str, float]:
    figures: dict[str, float] = {"matmul_gflops": matmul_gflops(device), "mem_bw_gb_s": copy_gb_s(device),
                                 "cpu_threads": torch.get_num_threads()}
    if dtype != "float32":  # the model's own dtype, for the compute side of the bound
        figures[f"matmul_gflops_{dtype}"] = matmul_gflops(device, getattr(torch, dtype))
    return figures


def linear_params(cfg: ModelConfig) -> int:
    """Weights multiplied by every token in a decode step: all layers, final norm and the LM head.
    The embedding is only indexed (B rows), so it is left out unless tied to the LM head."""
    h, q, kv, inter = cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size
    per_layer = h * (q + 2 * kv) + q * h + 3 * h * inter + 2 * h
    per_layer += (q + 2 * kv) * cfg.qkv_bias + h * cfg.o_bias + (2 * inter + h) * cfg.mlp_bias
    return cfg.num_layers * per_layer + h + cfg.vocab_size * h


def total_params(cfg: ModelConfig) -> int:
    embed = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size
    return linear_params(cfg) + embed


def kv_bytes_per_token(cfg: ModelConfig, dtype: str) -> int:
    elem = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    return cfg.num_layers * 2 * cfg.kv_size * elem


def decode_roofline(model_dir: Path, dtype: str, batch: int, mean_len: float, machine: dict[str, float],
                    achieved_tok_s: float) -> dict[str, float | int | str]:
    cfg = load_model_config(model_dir)
    elem = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    weight_bytes = linear_params(cfg) * elem
    kv_bytes = int(batch * mean_len * kv_bytes_per_token(cfg, dtype))
    attn_flops = int(4 * batch * mean_len * cfg.num_layers * cfg.q_size)
    flops = 2 * linear_params(cfg) * batch + attn_flops
    memory_s = (weight_bytes + kv_bytes) / (machine["mem_bw_gb_s"] * 1e9)
    compute_s = flops / (machine.get(f"matmul_gflops_{dtype}", machine["matmul_gflops"]) * 1e9)
    bound = batch / max(memory_s, compute_s)
    return {"batch": batch, "mean_context_len": mean_len, "params": total_params(cfg),
            "weight_bytes": weight_bytes, "kv_bytes": kv_bytes, "step_bytes": weight_bytes + kv_bytes,
            "step_flops": flops, "attention_flops": attn_flops, "memory_ms": memory_s * 1e3,
            "compute_ms": compute_s * 1e3, "bound_by": "memory" if memory_s >= compute_s else "compute",
            "bound_tok_s": bound, "achieved_tok_s": achieved_tok_s, "achieved_step_ms": batch / achieved_tok_s * 1e3,
            "fraction_of_bound": achieved_tok_s / bound}
