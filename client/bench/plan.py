"""Turning the command line into the list of requests to send."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from client.bench.workload import (BUILTIN_TRACE, PlannedRequest, gamma_intervals, parse_slo_mix, pick_classes,
                                   random_lengths, read_trace, sharegpt_like_lengths, token_prompt)


def build_plan(args: argparse.Namespace, rate: float) -> list[PlannedRequest]:
    """Same seed → same prompts, lengths, classes and arrival sequence, whatever the rate.

    Synthetic datasets draw gamma gaps at ``rate``; a trace keeps its own arrival pattern
    (× ``--time-scale``), stretched to a mean of ``rate`` when a finite rate is given.
    """
    if args.dataset_name == "multi-turn":
        raise ValueError("--dataset-name multi-turn is a conversation per session, sent by pdserve bench over gRPC")
    rng = np.random.default_rng(args.seed)
    n = args.num_prompts
    if args.dataset_name == "trace":
        rows = read_trace(Path(args.dataset_path) if args.dataset_path else BUILTIN_TRACE, n,
                          args.time_scale, args.length_scale)
        times, lengths = [t for t, _, _ in rows], [(i, o) for _, i, o in rows]
        if rate != float("inf") and times[-1] > 0:  # a finite rate rescales the trace to that mean rate
            times = [t * (len(times) / rate) / times[-1] for t in times]
    else:
        if args.dataset_name == "random":
            lengths = random_lengths(n, args.random_input_len, args.random_output_len, args.random_range_ratio, rng)
        else:
            lengths = sharegpt_like_lengths(n, rng, args.max_input_len, args.max_output_len)
        unit = gamma_intervals(n, 1.0, args.burstiness, np.random.default_rng(args.seed + 1))
        times = (np.cumsum(unit) - unit[0]) / rate if rate != float("inf") else np.zeros(n)
    classes = pick_classes(len(lengths), parse_slo_mix(args.slo_mix or ""), rng)
    shared = token_prompt(getattr(args, "shared_prefix_len", 0), np.random.default_rng(args.seed + 2))
    return [PlannedRequest(i, shared + token_prompt(max(1, inp - len(shared)), rng), out, cls, float(t))
            for i, ((inp, out), cls, t) in enumerate(zip(lengths, classes, times))]
