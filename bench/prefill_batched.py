"""Batched prefill forwards against the prefill cost model: each prompt's attention, or the total's.

A worker's prefill model is fitted on forwards of one prompt (``pdserve profile``, the start-up
measurement): ``t = c + k·max(0, n − n0) + q·n²``. A forward of several prompts computes the
linears over all their tokens but attention only within each prompt, so its quadratic part is the
sum of the prompts' (``common.slo.cost_models.attention_work``), not the total's square. This
measures forwards of ``k`` prompts of ``n`` tokens on the cores and threads ``pdserve up``'s plan
gives a prefill worker here, the model fitted the way a worker fits it at start, and prints each
forward's time over both predictions: the closer to 1, the better the model.

    python bench/prefill_batched.py [--preset tiny] [--out bench/results/prefill-batched-cpu.json]

Last line: ``{"points": [{"prompts", "tokens_each", "measured_ms", "ratio_to_sum_of_prompts",
"ratio_to_one_prompt"}, ...], "median_abs_log_error": {...}, ...}``.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import device_name, emit, progress  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--prompts", default="1,2,4,8", help="prompts per forward")
    parser.add_argument("--lengths", default="128,256,512", help="tokens per prompt")
    parser.add_argument("--repeats", type=int, default=5, help="forwards per point (the median counts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from common.worker.cpu_plan import apply_to_this_process, plan_cores

    prefill = next(a for a in plan_cores(["prefill-0", "decode-0"]) if a.name == "prefill-0")
    apply_to_this_process(prefill.cores, prefill.threads)
    from common.engine.config import EngineConfig
    from common.engine.llm_engine import LLMEngine
    from common.engine.sampling_params import SamplingParams
    from common.slo.cost_models import attention_work
    from common.slo.profile import profile_checked

    counts, lengths = [int(k) for k in args.prompts.split(",")], [int(n) for n in args.lengths.split(",")]
    engine = LLMEngine(EngineConfig(model=args.model, preset=args.preset, dtype=args.dtype, device="cpu",
                                    enable_prefix_caching=False,
                                    max_num_tokens=max(4096, max(counts) * max(lengths))))
    progress(f"fitting the prefill model as a worker does at start ({prefill.describe()}) ...")
    model = profile_checked(engine, progress=lambda line: None).prefill
    progress(f"  {model.describe()}")
    rng = random.Random(args.seed)
    vocab = engine.model.config.vocab_size
    params = SamplingParams(max_tokens=1, ignore_eos=True)

    def forward_s(k: int, n: int) -> float:
        for i in range(k):
            engine.add_request(f"p{i}", [rng.randrange(3, vocab) for _ in range(n)], params)
        started = time.perf_counter()
        while engine.has_unfinished_requests():
            engine.step()
        return time.perf_counter() - started

    points = []
    for n in lengths:
        for k in counts:
            forward_s(k, n)  # the shapes' first meeting
            measured = statistics.median(forward_s(k, n) for _ in range(args.repeats))
            by_prompt = model.predict(k * n, k * attention_work(n))
            as_one = model.predict(k * n)
            points.append({"prompts": k, "tokens_each": n, "measured_ms": measured * 1000,
                           "predicted_sum_of_prompts_ms": by_prompt * 1000, "predicted_one_prompt_ms": as_one * 1000,
                           "ratio_to_sum_of_prompts": measured / by_prompt, "ratio_to_one_prompt": measured / as_one})
            progress(f"  {k} x {n} tokens: {measured * 1000:.1f} ms; model by prompt {by_prompt * 1000:.1f} ms "
                     f"({measured / by_prompt:.2f}x), as one prompt {as_one * 1000:.1f} ms ({measured / as_one:.2f}x)")
    batched = [p for p in points if p["prompts"] > 1]
    error = {key: statistics.median(abs(math.log(p[f"ratio_to_{key}"])) for p in batched)
             for key in ("sum_of_prompts", "one_prompt")}
    progress(f"forwards of several prompts, median |log(measured / predicted)|: by prompt "
             f"{error['sum_of_prompts']:.3f}, as one prompt {error['one_prompt']:.3f}")
    emit({"device": device_name(), "preset": args.preset, "model": model.to_dict(), "points": points,
          "median_abs_log_error": error}, args.out)


if __name__ == "__main__":
    main()
