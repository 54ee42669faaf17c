"""Conditional disaggregation: which worker prefills (``common.slo.local_prefill``), a decode
engine computing a reserved prompt itself (``EngineCore.prefill_reserved``), and the TPOT
promises of its decoding requests held while it does (``LocalPrompts.stall_keeps``)."""

from __future__ import annotations

import pytest

from common.engine.config import EngineConfig
from common.engine.core import EngineCore
from common.engine.llm_engine import LLMEngine
from common.engine.prefix_cache import chain_hashes
from common.model.sampling_params import SamplingParams
from common.model.location import ensure_model
from common.slo.calibration import Calibration
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
from common.slo.local_prefill import prefills_locally
from common.slo.class_margins import ClassMargins
from common.slo.ttft_guard import TtftGuard
from tests.checkpoints import random_prompts, reference_greedy

MODEL = PrefillModel(threshold=0, base_s=0.010, per_token_s=1e-4)  # 10 ms + 0.1 ms a token


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _guard(clock: Clock, queued_tokens: int = 0) -> TtftGuard:
    guard = TtftGuard(MODEL, 0, Calibration(quantile=0.5, clock=clock), headrooms=ClassMargins(1.0))
    guard.calibration.observe(1.0, 1.0)  # tested: an untested idle worker never refuses
    if queued_tokens:
        guard.sent("queued", deadline=float("inf"), tokens=queued_tokens)
    return guard


def test_a_prefill_worker_in_time_is_preferred_and_the_decode_worker_serves_only_what_none_can():
    clock = Clock()
    idle_decode = _guard(clock)
    # the prefill worker's queue: 1,000 tokens (110 ms) ahead of a 400-token prompt (50 ms)
    busy = _guard(clock, queued_tokens=1000)
    deadline = 0.3
    assert not prefills_locally([busy], [400], idle_decode, 400, deadline, 0.0, 0.3)  # 160 ms: in time
    deadline = 0.1  # 100 ms: the prefill worker would take 160, the decode worker 50
    assert prefills_locally([busy], [400], idle_decode, 400, deadline, 0.0, 0.1)
    busy_decode = _guard(clock, queued_tokens=1000)
    assert not prefills_locally([busy], [400], busy_decode, 400, deadline, 0.0, 0.1)  # both too late: refused
    assert prefills_locally([], [], idle_decode, 400, deadline, 0.0, 0.1)  # no prefill worker at all
    # the decode worker's cached prefix counts: 350 of 400 tokens cached there leaves 15 ms
    assert prefills_locally([busy], [400], _guard(clock, queued_tokens=500), 50, deadline, 0.0, 0.1)


@pytest.mark.parametrize("cached_prefix", [False, True], ids=["fresh", "prefix-cached"])
def test_a_reserved_prompt_computed_by_the_decode_engine_decodes_as_transformers_does(cached_prefix):
    engine = LLMEngine(EngineConfig(num_kv_blocks=64, block_size=16, enable_prefix_caching=True))
    prompts = random_prompts([48, 37], seed=5)
    prompts[1] = prompts[0][:32] + prompts[1][:5] if cached_prefix else prompts[1]
    # a whole prompt of full blocks (48 = 3 x 16): the block holding its last token must be recomputed
    prompts.append(list(prompts[0]))
    expected = reference_greedy(ensure_model("tiny"), prompts, [6, 6, 6])
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    outputs: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):
        hashes = chain_hashes(prompt, 16, engine.prefix_salt) if cached_prefix or i == 2 else []
        lease = engine.reserve(f"r{i}", len(prompt), 6, prefix_hashes=hashes)
        assert lease is not None
        if i == 2:
            assert lease.cached == 3  # all of its blocks were in the cache
        engine.prefill_reserved(f"r{i}", lease.lease_id, prompt, params)
        outputs[f"r{i}"] = []
        while engine.has_unfinished_requests():
            for out in engine.step():
                outputs[out.request_id] += out.new_token_ids
    assert [outputs[f"r{i}"] for i in range(len(prompts))] == expected
    engine.check_integrity()


def _core(policy: str, clock: Clock) -> EngineCore:
    core = EngineCore(EngineConfig(policy=policy, num_kv_blocks=64), 64, 2048, vocab_size=1000, eos_token_ids=(),
                      clock=clock)
    # a 400-token forward: 30 ms; a decode step: 2 ms
    core.cost_models = CostModels(PrefillModel(0, 0.030, 0.0), DecodeModel(0.0, 0.0, 0.0, 0.002))
    core.unloaded_step_s = 0.002
    return core


def _decoding(core: EngineCore, request_id: str, tpot_ms: float) -> None:
    lease = core.reserve(request_id, 8, 64, tpot_slo_ms=tpot_ms)
    assert lease is not None
    core.commit(request_id, lease.lease_id, list(range(1, 9)), 5, SamplingParams(max_tokens=64, ignore_eos=True),
                tpot_slo_ms=tpot_ms)


def _step(core: EngineCore, clock: Clock) -> set[str]:
    """One step (2 ms, 32 with a prompt in it), every scheduled request sampling token 7; the ids
    whose prompt it computed."""
    _, batch = core.schedule_step()
    started = clock.now
    clock.now += 0.032 if any(not s.is_decode for s in batch.seqs) else 0.002
    core.finish_step(batch, {s.request_id: 7 for s in batch.seqs if s.sample}, started, clock.now)
    return {s.request_id for s in batch.seqs if not s.is_decode}


def test_a_local_prompt_waits_until_every_decoding_request_can_absorb_its_forward():
    clock = Clock()
    core = _core("scorpio", clock)
    _decoding(core, "tight", tpot_ms=15)  # its first token just now: no slack yet
    lease = core.reserve("local", 400, 8, tpot_slo_ms=50)
    assert lease is not None
    core.prefill_reserved("local", lease.lease_id, list(range(1, 401)), SamplingParams(max_tokens=8, ignore_eos=True),
                          ttft_slo_ms=1000)
    # its next token is due 15 ms after its first; a 30 ms forward (+ 2 steps, x 1.3) would miss that
    steps = 0
    while not _step(core, clock):
        steps += 1
        assert steps < 10, "the prompt never ran"
    # slack grows 13 ms a 2 ms step: the forward fits once 2k + 44.2 <= 15 (k + 1) ms, k >= 3
    assert steps == 3
    tight = core.scheduler.requests["tight"]
    # through that step's forward it kept its promise: its time per output token stays within 15 ms
    assert (clock.now - tight.first_token_at) / (len(tight.output_token_ids) - 1) <= 0.015


def test_without_a_tpot_guard_the_local_prompt_runs_at_once():
    clock = Clock()
    core = _core("ttft_guard", clock)
    _decoding(core, "tight", tpot_ms=15)
    lease = core.reserve("local", 400, 8)
    assert lease is not None
    core.prefill_reserved("local", lease.lease_id, list(range(1, 401)), SamplingParams(max_tokens=8, ignore_eos=True),
                          ttft_slo_ms=1000)
    assert _step(core, clock) == {"local"}


async def test_decode_workers_get_a_guard_of_their_own_prefills_only_with_local_prefill_on():
    from gateway.registry import WorkerRegistry
    from wire.v1 import worker_pb2

    def descriptor(worker_id: str, role: str) -> worker_pb2.WorkerDescriptor:
        return worker_pb2.WorkerDescriptor(worker_id=worker_id, role=role, address="127.0.0.1:1", host_id="h",
                                           device="cpu", device_kind="cpu", incarnation=worker_id,
                                           cost_model=worker_pb2.CostModel(present=True, prefill_base_s=0.01))

    on, off = WorkerRegistry(1.5, local_prefill=True), WorkerRegistry(1.5)
    for registry in (on, off):
        registry.register(descriptor("prefill-0", "prefill"), worker_pb2.WorkerLoad())
        registry.register(descriptor("decode-0", "decode"), worker_pb2.WorkerLoad())
    decode = on.workers["decode-0"]
    decode.ready = True
    assert on.local_prefills() == [decode] and on.local_prefills(decode) == [decode]
    assert not decode.guard.probe_first and on.workers["prefill-0"].guard.probe_first
    assert off.workers["decode-0"].ttft is None and off.local_prefills(off.workers["decode-0"]) == []


def test_the_gateway_flag_takes_on_or_off():
    from gateway.config import GatewayConfig

    assert GatewayConfig().local_prefill == "on"
    with pytest.raises(ValueError, match="local_prefill"):
        GatewayConfig(local_prefill="yes")
