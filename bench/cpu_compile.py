"""Would compiling the CPU decode step pay? The engine's eager decode step against the same model
compiled whole by ``torch.compile`` (inductor, weights frozen so it packs the linears itself,
attention left to the engine as an opaque op), step for step in one process, interleaved.

The compiled forward is built here, over the engine's own weights, and nowhere in pdserve: it is
the measurement behind running the CPU step eagerly (README, Against vLLM). Each batch size runs
``--rounds`` rounds of one eager and one compiled generation (400-token prompts, 60 new tokens,
EOS ignored); the median step of the best round of each is kept. Compilation happens once, with
dynamic shapes, before the first round, and its seconds are reported.

    python bench/cpu_compile.py [--model DIR | --preset tiny] [--dtype bfloat16] [--batches 1,8,32] [--threads 2]

Last line: ``{"compile_s", "points": [{"batch", "eager_step_ms", "compiled_step_ms", "speedup",
"same_tokens"}, ...], ...}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.common import device_name, emit, progress  # noqa: E402
from bench.engine_runs import make_prompts  # noqa: E402
from common.engine.config import DTYPES, EngineConfig, resolve_dtype  # noqa: E402
from common.engine.llm_engine import LLMEngine  # noqa: E402
from common.engine.sampling_params import SamplingParams  # noqa: E402
from common.model.llama import LlamaModel  # noqa: E402
from common.model.ops import rms_norm  # noqa: E402

_STEP: dict[str, object] = {}  # the cache and metadata of the step being compiled-run


@torch.library.custom_op("pdserve_bench::attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> torch.Tensor:
    model: LlamaModel = _STEP["model"]  # type: ignore[assignment]
    return model.attention(q, k, v, _STEP["cache"], layer, _STEP["meta"], model.scale,
                           model.config.sliding_windows[layer])


@_attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> torch.Tensor:
    return torch.empty_like(q)


class WholeForward(nn.Module):
    """The engine's decode forward as one module whose weights are parameters (shared storage)."""

    def __init__(self, model: LlamaModel) -> None:
        super().__init__()
        self.config = model.config
        w = model.weights
        self.embed, self.final, self.head = (nn.Parameter(t, requires_grad=False)
                                             for t in (w.embed, w.final_norm, w.lm_head))
        self.layers = nn.ModuleList()
        for layer in w.layers:
            m = nn.Module()
            for name in ("input_norm", "qkv", "o", "post_norm", "gate_up", "down"):
                setattr(m, name, nn.Parameter(getattr(layer, name), requires_grad=False))
            self.layers.append(m)

    def forward(self, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        c = self.config
        eps, d = c.rms_norm_eps, c.head_dim
        residual, delta = self.embed[ids], None
        for i, layer in enumerate(self.layers):
            residual = residual if delta is None else residual + delta
            q, k, v = F.linear(rms_norm(residual, layer.input_norm, eps), layer.qkv).split(
                [c.q_size, c.kv_size, c.kv_size], -1)
            q, k = (_rotate(t.reshape(-1, n, d), cos, sin) for t, n in ((q, c.num_heads), (k, c.num_kv_heads)))
            attn = _attention(q, k, v.reshape(-1, c.num_kv_heads, d), i)
            residual = residual + F.linear(attn.flatten(1), layer.o)
            gate, up = F.linear(rms_norm(residual, layer.post_norm, eps), layer.gate_up).chunk(2, -1)
            delta = F.linear(F.silu(gate) * up, layer.down)
        return F.linear(rms_norm(residual + delta, self.final, eps), self.head).float()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


class Switch:
    """Wraps the engine's forward: decode-only steps go to the compiled module when ``on``."""

    def __init__(self, engine: LLMEngine) -> None:
        import torch._inductor.config as inductor

        inductor.freezing = True
        self.model, self.eager = engine.model, engine.model.forward
        self.compiled = torch.compile(WholeForward(engine.model).eval(), dynamic=True)
        self.on = False
        engine.model.forward = self  # type: ignore[method-assign]

    def __call__(self, ids, positions, cache, meta, logits_rows):  # type: ignore[no-untyped-def]
        if meta.prefills or not self.on:
            return self.eager(ids, positions, cache, meta, logits_rows)
        _STEP.update(model=self.model, cache=cache, meta=meta)
        cos, sin = self.model.rotary.lookup(positions, self.model.dtype)
        out = self.compiled(ids, cos, sin)
        return out if logits_rows is None else out[logits_rows]


def generation(engine: LLMEngine, batch: int, tag: str) -> tuple[float, list[list[int]]]:
    """Median decode step (ms, the first few left out) and the tokens of one generation."""
    prompts = make_prompts(batch, 400)
    ids = [f"{tag}-{i}" for i in range(batch)]
    for request_id, prompt in zip(ids, prompts):
        engine.add_request(request_id, prompt, SamplingParams(max_tokens=60, ignore_eos=True))
    engine.step()  # the prefill
    steps, tokens = [], {i: [] for i in ids}
    while engine.has_unfinished_requests():
        started = time.perf_counter()
        outputs = engine.step()
        steps.append(time.perf_counter() - started)
        for out in outputs:
            tokens[out.request_id].extend(out.new_token_ids)
    return statistics.median(steps[5:]) * 1000, [tokens[i] for i in ids]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="auto", choices=DTYPES)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    dtype = resolve_dtype(args.dtype, "cpu")
    engine = LLMEngine(EngineConfig(model=args.model, preset=args.preset, dtype=dtype, enable_prefix_caching=False,
                                    num_kv_blocks=max(batches) * 40 + 10, max_batch_size=max(batches)))
    switch = Switch(engine)
    switch.on = True
    started = time.perf_counter()
    generation(engine, 2, "compile")  # batch 2: one dynamic-shape compilation (batch 1 specialises)
    generation(engine, 1, "compile-1")
    compile_s = time.perf_counter() - started
    progress(f"[compile] {compile_s:.1f} s")
    points = []
    for batch in batches:
        best: dict[bool, float] = {}
        tokens: dict[bool, list[list[int]]] = {}
        for r in range(args.rounds):
            for on in (False, True):
                switch.on = on
                ms, tokens[on] = generation(engine, batch, f"{batch}-{r}-{on}")
                best[on] = min(best.get(on, float("inf")), ms)
        points.append({"batch": batch, "eager_step_ms": best[False], "compiled_step_ms": best[True],
                       "speedup": best[False] / best[True], "same_tokens": tokens[False] == tokens[True]})
        progress(f"[batch {batch}] eager {best[False]:.2f} ms, compiled {best[True]:.2f} ms "
                 f"({points[-1]['speedup']:.2f}x), same tokens: {points[-1]['same_tokens']}")
    emit({"device": device_name(), "model": args.model or args.preset, "dtype": dtype, "threads": args.threads,
          "compile_s": compile_s, "points": points}, args.out)


if __name__ == "__main__":
    main()
