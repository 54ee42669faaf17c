"""A 1P1D cluster on one GPU (skipped without CUDA): greedy output through the gateway equals the
engine's own on the same GPU, for each KV transport between two workers on one device.

Neither worker is given ``--num-kv-blocks``: ``LocalCluster`` tells both that they share the GPU
(``--device-workers 2``) and each sizes its pool from its half. Where the MPS control binary is
installed, the workers run under the cluster's own MPS daemon (``pdserve.mps``), as
``pdserve up --mps`` runs them; under the one already serving this environment if there is one
(``start_mps`` of ``device-env.sh``: a second daemon would compete for the GPU); else without MPS.
"""

from __future__ import annotations

import gc
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
import torch

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.model.kv_cache import PagedKVCache
from common.engine.kv_memory import CUDA_FRACTION
from common.model.config import load_model_config
from common.model.location import ensure_model
from common.model.sampling_params import SamplingParams
from pdserve.cluster import ClusterSpec, LocalCluster
from pdserve.mps import CONTROL, server_pids
from wire.v1 import gateway_pb2, gateway_pb2_grpc
from tests.checkpoints import random_prompts
from tests.integration.conftest import assert_pools_whole

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

LENGTHS = [1, 9, 30, 64, 100, 170, 250, 300]
MAX_TOKENS = [12, 20, 7, 16, 25, 9, 14, 18]
PROMPT_SEED = 31
BLOCK_SIZE = 16  # the engine's default, which the cluster's workers use
MPS_INSTALLED = shutil.which(CONTROL) is not None


def mps_daemon_serves_this_environment() -> bool:
    """Whether a control daemon answers at this environment's pipe directory already."""
    asked = subprocess.run([CONTROL], input="get_server_list\n", capture_output=True, text=True, timeout=30,
                           check=False)
    return asked.returncode == 0


@pytest.fixture(scope="module")
def engine_alone() -> list[list[int]]:
    """Greedy output of the engine by itself on this GPU, freed before any cluster starts."""
    engine = LLMEngine(EngineConfig(preset="tiny", device="cuda", dtype="float32", num_kv_blocks=512))
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in MAX_TOKENS]
    output = engine.generate(random_prompts(LENGTHS, seed=PROMPT_SEED), params)
    del engine
    gc.collect()
    torch.cuda.empty_cache()  # the workers' pools are capped by what is free
    return output


def generate(address: str, prompt: list[int], max_tokens: int) -> tuple[list[int], str, str]:
    """(tokens, finish reason, KV transport used) of one streamed greedy request."""
    with grpc.insecure_channel(address) as channel:
        request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=prompt),
                                              sampling=gateway_pb2.SamplingParams(max_tokens=max_tokens,
                                                                                  ignore_eos=True))
        tokens, reason, transport = [], "", ""
        for message in gateway_pb2_grpc.GatewayStub(channel).Generate(request, timeout=120):
            tokens += message.token_ids
            reason = message.finish_reason or reason
            transport = message.timings.kv_transport or transport
        return tokens, reason, transport


def start_on_one_gpu(log_dir: Path, transport: str) -> LocalCluster:
    ensure_model("tiny")  # once, before two processes look for it
    own_mps = MPS_INSTALLED and not mps_daemon_serves_this_environment()
    spec = ClusterSpec(port=0, preset="tiny", device="cuda", kv_transport=transport, policy="fcfs",
                       worker_args=("--dtype", "float32"), mps=own_mps)
    return LocalCluster(spec, log_dir).start(timeout_s=300)


def assert_pools_within_their_shares(cluster: LocalCluster) -> None:
    """Each worker's pool fits in half of the GPU's usable memory and takes most of it (the
    tiny model's weights are a few MB): sized from the share, not from what was free."""
    per_block = PagedKVCache.bytes_per_block(load_model_config(ensure_model("tiny")), BLOCK_SIZE, torch.float32)
    share = int(torch.cuda.mem_get_info()[1] * CUDA_FRACTION) // 2
    info = cluster.info()
    assert info is not None
    pools = {w.worker_id: w.total_blocks * per_block for w in info.workers}
    assert len(pools) == 2 and all(share // 2 < size <= share for size in pools.values()), (pools, share)


@pytest.mark.parametrize("transport", ["cuda_ipc", "grpc"])
def test_1p1d_on_one_gpu_matches_the_engine_alone(tmp_path, engine_alone, transport):
    cluster = start_on_one_gpu(tmp_path / "logs", transport)
    try:
        assert sorted(cluster.device_workers.values()) == [2, 2]
        if cluster.mps is not None:
            assert server_pids(cluster.mps), "no MPS server running: the workers did not connect through MPS"
        prompts = random_prompts(LENGTHS, seed=PROMPT_SEED)
        with ThreadPoolExecutor(len(prompts)) as pool:
            results = list(pool.map(lambda a: generate(cluster.address, *a), zip(prompts, MAX_TOKENS)))
        assert [tokens for tokens, _, _ in results] == engine_alone
        assert {reason for _, reason, _ in results} == {"length"}
        assert {used for _, _, used in results} == {transport}
        assert_pools_whole(cluster)
        assert_pools_within_their_shares(cluster)
    finally:
        cluster.stop()
