"""KV pool sizing when several workers share one GPU (``--device-workers``), on made-up figures."""

from __future__ import annotations

import argparse

import pytest
import torch

from common.engine import kv_memory as memory
from common.engine.config import EngineConfig
from common.engine.args import add_engine_args, engine_config_from_args
from common.model.kv_cache import PagedKVCache
from common.engine.kv_memory import DeviceMemory, kv_cache_bytes, num_kv_blocks
from common.model.config import parse_model_config

GIB = 1 << 30
MODEL = parse_model_config({"vocab_size": 10, "hidden_size": 64, "intermediate_size": 8, "num_hidden_layers": 2,
                            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16})


def test_a_worker_alone_takes_its_fraction_of_the_free_memory():
    assert kv_cache_bytes(DeviceMemory(free=50 * GIB, total=80 * GIB, held=2 * GIB), 0.9) == int(45 * GIB)


def test_a_worker_sharing_a_gpu_takes_its_share_of_the_total_less_what_it_holds():
    gpu = DeviceMemory(free=70 * GIB, total=80 * GIB, held=3 * GIB)
    assert kv_cache_bytes(gpu, 0.9, device_workers=2) == 36 * GIB - 3 * GIB
    assert kv_cache_bytes(gpu, 0.5, device_workers=4) == 10 * GIB - 3 * GIB


def test_a_share_never_counts_on_memory_another_process_uses():
    busy = DeviceMemory(free=20 * GIB, total=80 * GIB, held=1 * GIB)
    assert kv_cache_bytes(busy, 0.9, device_workers=2) == int(18 * GIB)


def test_a_share_smaller_than_the_weights_leaves_nothing_for_the_pool():
    assert kv_cache_bytes(DeviceMemory(free=60 * GIB, total=80 * GIB, held=50 * GIB), 0.9, device_workers=2) == 0


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_two_workers_on_one_gpu_stay_within_the_fraction_whichever_starts_first(order):
    total, context, weights = 80 * GIB, GIB // 2, [4 * GIB, 6 * GIB]
    used = 2 * context + sum(weights)  # both loaded their models before either sized its pool
    pools = [0, 0]
    for worker in order:
        pools[worker] = kv_cache_bytes(DeviceMemory(total - used, total, weights[worker]), 0.9, device_workers=2)
        used += pools[worker]
    assert pools == [36 * GIB - 4 * GIB, 36 * GIB - 6 * GIB]  # the second is not squeezed by the first
    assert sum(pools) + sum(weights) <= int(0.9 * total)


def test_the_first_of_two_workers_without_a_share_would_take_almost_the_whole_gpu():
    # Why the option exists: alone-on-the-device sizing leaves the second worker a tenth.
    first = kv_cache_bytes(DeviceMemory(free=79 * GIB, total=80 * GIB, held=GIB), 0.9)
    second = kv_cache_bytes(DeviceMemory(free=79 * GIB - first - GIB, total=80 * GIB, held=GIB), 0.9)
    assert first > 8 * second


def _fixed_memory(monkeypatch: pytest.MonkeyPatch, figures: DeviceMemory) -> None:
    monkeypatch.setattr(memory, "device_memory", lambda device: figures)


def test_num_kv_blocks_sizes_from_the_share_on_a_gpu(monkeypatch):
    _fixed_memory(monkeypatch, DeviceMemory(free=70 * GIB, total=80 * GIB, held=3 * GIB))
    per_block = PagedKVCache.bytes_per_block(MODEL, 16, torch.float32)
    config = EngineConfig(device="cuda", device_workers=2)
    assert num_kv_blocks(config, MODEL, torch.device("cuda")) == (33 * GIB) // per_block


def test_device_workers_change_nothing_on_the_cpu(monkeypatch):
    _fixed_memory(monkeypatch, DeviceMemory(free=10 * GIB, total=16 * GIB, held=0))
    alone = num_kv_blocks(EngineConfig(), MODEL, torch.device("cpu"))
    assert num_kv_blocks(EngineConfig(device_workers=2), MODEL, torch.device("cpu")) == alone


def test_an_explicit_num_kv_blocks_wins_over_a_share(monkeypatch):
    _fixed_memory(monkeypatch, DeviceMemory(free=70 * GIB, total=80 * GIB, held=3 * GIB))
    config = EngineConfig(device="cuda", num_kv_blocks=7, device_workers=2)
    assert num_kv_blocks(config, MODEL, torch.device("cuda")) == 7


def test_a_share_too_small_for_one_block_says_so(monkeypatch):
    _fixed_memory(monkeypatch, DeviceMemory(free=70 * GIB, total=80 * GIB, held=60 * GIB))
    with pytest.raises(ValueError, match=r"share \(1/2\) of the GPU.*--num-kv-blocks"):
        num_kv_blocks(EngineConfig(device="cuda", device_workers=2), MODEL, torch.device("cuda"))


def test_device_workers_must_be_positive():
    with pytest.raises(ValueError, match="device_workers must be >= 1, got 0"):
        EngineConfig(device_workers=0)


def test_device_workers_is_an_engine_flag():
    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    args = parser.parse_args(["--device", "cuda:1", "--device-workers", "3"])
    assert engine_config_from_args(args).device_workers == 3
    assert engine_config_from_args(parser.parse_args([])).device_workers == 1
