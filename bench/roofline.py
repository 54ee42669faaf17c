"""What the machine can do (matmul FLOP/s, copy bandwidth) and the decode bound it implies."""

from __future__ import annotations

import torch

from bench.common import best_of
from common.engine import LLMEngine


def machine_figures(device: str) -> dict[str, float]:
    dtype = torch.float32
    a = torch.randn(2048, 2048, device=device, dtype=dtype)
    b = torch.randn(2048, 2048, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def matmul() -> None:
        torch.matmul(a, b)
        sync()

    src = torch.empty(128 << 20, device=device, dtype=torch.float32)  # 512 MiB
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)
        sync()

    flops = 2 * 2048**3 / best_of(matmul, 5)
    bandwidth = 2 * src.numel() * 4 / best_of(copy, 5)  # bytes read + written
    return {"matmul_gflops": flops / 1e9, "mem_bw_gb_s": bandwidth / 1e9, "cpu_threads": torch.get_num_threads()}


def decode_roofline(engine: LLMEngine, batch: int, mean_len: int, machine: dict[str, float],
                    achieved_tok_s: float) -> dict[str, float]:
    """One decode step must read every weight once and each sequence's KV, and do 2·params·B FLOPs."""
    cfg = engine.model.config
    w = engine.model.weights
    params = sum(t.numel() for t in [w.embed, w.lm_head, w.final_norm]) + sum(
        t.numel() for layer in w.layers for t in (layer.qkv, layer.o, layer.gate_up, layer.down))
    elem = engine.cache.data.element_size()
    kv_bytes = batch * mean_len * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * elem
    step_bytes = (params - w.embed.numel()) * elem + kv_bytes
    attn_flops = 4 * batch * mean_len * cfg.num_layers * cfg.num_heads * cfg.head_dim
    step_flops = 2 * (params - w.embed.numel()) * batch + attn_flops
    step_s = max(step_bytes / (machine["mem_bw_gb_s"] * 1e9), step_flops / (machine["matmul_gflops"] * 1e9))
    bound = batch / step_s
    return {"batch": batch, "mean_len": mean_len, "params": params, "step_bytes": step_bytes,
            "step_flops": step_flops, "bound_tok_s": bound, "achieved_tok_s": achieved_tok_s,
            "fraction_of_bound": achieved_tok_s / bound}
