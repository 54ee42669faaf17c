"""Which local workers share a GPU, so that each sizes its KV pool from its share of it.

A worker's engine flags decide its device (argparse keeps the last ``--device``); workers whose
devices name the same GPU share it, and each is told how many they are (``--device-workers N``,
see ``common.engine.kv_memory``). Workers on the CPU or alone on their GPU are told nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

DEFAULT_DEVICE = "cpu"  # EngineConfig's


def worker_device(args: Sequence[str]) -> str:
    """The device a worker started with these flags runs on."""
    device = DEFAULT_DEVICE
    for i, arg in enumerate(args):
        if arg == "--device" and i + 1 < len(args):
            device = args[i + 1]
        elif arg.startswith("--device="):
            device = arg.split("=", 1)[1]
    return device


def gpu_of(device: str) -> str | None:
    """``cuda:N`` for a device on GPU N (plain ``cuda`` is GPU 0 in a fresh process), else None."""
    kind, _, index = device.partition(":")
    return f"cuda:{index or 0}" if kind == "cuda" else None


def device_workers(devices: Mapping[str, str]) -> dict[str, int]:
    """Worker name → how many workers run on its GPU, for each worker whose GPU has several."""
    gpus = {name: gpu_of(device) for name, device in devices.items()}
    counts = Counter(gpu for gpu in gpus.values() if gpu)
    return {name: counts[gpu] for name, gpu in gpus.items() if gpu and counts[gpu] > 1}
