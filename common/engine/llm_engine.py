"""One engine: the model, its paged KV cache and runner around an ``EngineCore`` (requests,
blocks, leases, the TPOT guard). Single-threaded; see ``common.engine.thread`` for running it
beside an event loop.

    step():  aborts → schedule() → runner.execute(batch) → update_from_output(...)
"""

from __future__ import annotations

import functools
import logging
import threading

import torch

from common.engine.config import EngineConfig
from common.engine.core import AdmissionError, EngineCore
from common.model.grammar import Grammars
from common.model.decode_graphs import DecodeGraphs, capture_memory_bytes
from common.model.packed_linear import MAX_ROWS, PackedLinear, packed_linear_supported, prefill_rows_packed
from common.model.dense_decode_cache import DecodeStage
from common.model.host_heap import keep_large_buffers_on_heap
from common.model.kv_cache import PagedKVCache, StorageFactory, zeros_storage
from common.engine.kv_memory import num_kv_blocks
from common.model.llama import LlamaModel
from common.model.location import resolve_model_dir
from common.model.runner import ModelRunner
from common.engine.request import RequestOutput
from common.model.sampler import Sampler
from common.model.sampling_params import SamplingParams
from common.text.auto_tokenizer import load_tokenizer

log = logging.getLogger(__name__)


class LLMEngine(EngineCore):
    """An ``EngineCore`` with the model: weights, the paged KV cache, the runner (and on a GPU
    its decode graphs)."""

    def __init__(self, config: EngineConfig, kv_storage: StorageFactory = zeros_storage) -> None:
        self.device = torch.device(config.device)
        if self.device.type == "cpu":
            keep_large_buffers_on_heap()
        self.model_dir = resolve_model_dir(config.model, config.preset)
        self.model = LlamaModel.load(self.model_dir, config.torch_dtype, self.device)
        self.backend = kernel_backend(config, self.device)
        self.model.attention, self.model.ops = _kernels(self.backend)
        if not config.enforce_eager and packed_linear_supported(self.device, config.torch_dtype):
            self.model.linear = packed_linears(self.model)
        mcfg = self.model.config
        max_model_len = min(config.max_model_len or mcfg.max_position_embeddings, mcfg.max_position_embeddings)
        graphs_wanted = self.device.type == "cuda" and self.backend == "triton" and not config.enforce_eager
        reserve = 0  # device bytes the decode graphs will hold, kept out of the KV pool
        if graphs_wanted:
            reserve = capture_memory_bytes(self.model, config.block_size, config.max_batch_size, max_model_len)
        blocks = num_kv_blocks(config, mcfg, self.device, reserve)
        super().__init__(config, blocks, max_model_len, mcfg.vocab_size, mcfg.eos_token_ids)
        if self.pool.prefix_index is not None:  # a worker's heartbeat reads its digest from the event loop
            self.pool.prefix_index.guard_with(threading.Lock())
        self.cache = PagedKVCache(mcfg, blocks, config.block_size, config.torch_dtype, self.device, kv_storage)
        stage = None
        if self.backend in ("torch", "cpu"):
            stage = DecodeStage(self.cache, config.max_batch_size, kernel=self.backend == "cpu")
        graphs = None
        if graphs_wanted:
            graphs = DecodeGraphs(self.model, self.cache, config.max_batch_size, max_model_len, capture=True)
            graphs.capture_all()
        grammars = Grammars(lambda: load_tokenizer(self.model_dir), mcfg.vocab_size, mcfg.eos_token_ids)
        self.runner = ModelRunner(self.model, self.cache, Sampler(mcfg.eos_token_ids, self.device), stage, graphs,
                                  grammars)

    def step(self) -> list[RequestOutput]:
        aborted, batch = self.schedule_step()
        if not batch.seqs:
            return aborted
        started = self.clock()
        sampled = self.runner.execute(batch)
        outputs = aborted + self.finish_step(batch, sampled, started, self.clock(), self.runner.logprobs)
        for out in outputs:
            if out.finished:
                self.runner.grammars.drop(out.request_id)
        return outputs

    def _validate(self, request_id: str, prompt: list[int], params: SamplingParams) -> None:
        super()._validate(request_id, prompt, params)
        if params.structured is not None:  # a spec that does not compile is refused with the request
            self.runner.grammars.check(params.structured)

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[list[int]]:
        """Runs prompts to completion and returns each one's output token ids."""
        per_prompt = params if isinstance(params, list) else [params] * len(prompts)
        results: dict[str, list[int]] = {}
        for i, (prompt, p) in enumerate(zip(prompts, per_prompt)):
            self.add_request(f"gen-{i}", prompt, p)
            results[f"gen-{i}"] = []
        while self.has_unfinished_requests():
            for out in self.step():
                results[out.request_id].extend(out.new_token_ids)
        return [results[f"gen-{i}"] for i in range(len(prompts))]


def packed_linears(model: LlamaModel) -> PackedLinear:
    """Every linear weight prepacked; calls of prefill size use the packed layout too where a
    measurement on the first layer's weights finds it at least as fast on this CPU."""
    first = model.weights.layers[0]
    many_rows = prefill_rows_packed([first.qkv, first.o, first.gate_up, first.down])
    return PackedLinear(model.linear_weights(), max_rows=None if many_rows else MAX_ROWS)


__all__ = ["AdmissionError", "LLMEngine", "kernel_backend"]


def kernel_backend(config: EngineConfig, device: torch.device) -> str:
    """``attention_backend`` resolved: Triton kernels on a GPU; on a CPU the C++ kernels where they
    build and serve the model, else (and with ``enforce_eager``) the torch path."""
    if config.attention_backend == "auto":
        if device.type == "cuda":
            return "triton"
        if config.enforce_eager:
            return "torch"
        reason = cpu_kernels_unavailable(config)
        if reason is None:
            return "cpu"
        log.warning("attention on the torch path: %s", reason)
        return "torch"
    if config.attention_backend == "cpu":
        if device.type != "cpu":
            raise ValueError(f"attention_backend cpu runs on the CPU, not {device.type}")
        reason = cpu_kernels_unavailable(config)
        if reason is not None:
            raise ValueError(f"attention_backend cpu: {reason}")
    return config.attention_backend


def cpu_kernels_unavailable(config: EngineConfig) -> str | None:
    """Why the CPU kernels cannot serve this engine (None: they can)."""
    from common.cpu_kernels import build
    from common.cpu_kernels.decode_attention import unsupported
    from common.model.config import load_model_config

    model = load_model_config(resolve_model_dir(config.model, config.preset))
    reason = unsupported(model.head_dim, config.torch_dtype)
    if reason is not None:
        return f"the CPU kernels do not cover {reason}"
    try:
        build.load()
    except build.CpuKernelsUnavailable as exc:
        return str(exc)
    return None


def _kernels(backend: str):  # type: ignore[no-untyped-def]
    """The attention function and the layer ops of a kernel backend."""
    if backend == "triton":
        from common.model.ops import triton_ops
        from common.model.triton_attention import paged_attention_triton

        return paged_attention_triton, triton_ops()
    from common.model.attention import paged_attention  # cpu: the torch path, its decode stage on the kernel
    from common.model.ops import TORCH_OPS

    if backend == "cpu":
        from common.cpu_kernels.layer_ops import CPU_OPS
        from common.cpu_kernels.prefill_attention import prefill_attention

        return functools.partial(paged_attention, prefill_kernel=prefill_attention), CPU_OPS
    return paged_attention, TORCH_OPS
