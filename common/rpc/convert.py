"""proto ⇄ domain conversions shared by the gateway and the workers (schedulers never see protos)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from common.model.sampling_params import SamplingParams, StructuredOutput
from common.model.token_logprobs import TokenLogprobs
from common.slo.cost_models import CostModels, PrefillModel
from common.slo.credit import virtual_batch_size
from common.slo.load_report import LoadReport
from common.slo.policy import Policy
from wire.v1 import gateway_pb2, worker_pb2

if TYPE_CHECKING:  # the gateway reads loads; only workers build them
    from common.engine.load import EngineLoad
    from common.engine.request import RequestOutput

DEFAULT_MAX_TOKENS = 16


def sampling_from_proto(msg: gateway_pb2.SamplingParams) -> SamplingParams:
    """Raises ValueError naming the field for out-of-range values."""
    return SamplingParams(
        max_tokens=msg.max_tokens if msg.HasField("max_tokens") else DEFAULT_MAX_TOKENS,
        temperature=msg.temperature,
        top_k=msg.top_k,
        top_p=msg.top_p if msg.HasField("top_p") else 1.0,
        seed=msg.seed if msg.HasField("seed") else None,
        min_tokens=msg.min_tokens,
        stop_token_ids=tuple(msg.stop_token_ids),
        ignore_eos=msg.ignore_eos,
        logprobs=msg.logprobs if msg.HasField("logprobs") else None,
        prompt_logprobs=msg.prompt_logprobs if msg.HasField("prompt_logprobs") else None,
        structured=StructuredOutput(msg.structured.kind, msg.structured.spec) if msg.HasField("structured") else None,
    )


def sampling_to_proto(params: SamplingParams) -> gateway_pb2.SamplingParams:
    msg = gateway_pb2.SamplingParams(
        max_tokens=params.max_tokens, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
        min_tokens=params.min_tokens, stop_token_ids=list(params.stop_token_ids), ignore_eos=params.ignore_eos,
    )
    if params.seed is not None:
        msg.seed = params.seed
    if params.logprobs is not None:
        msg.logprobs = params.logprobs
    if params.prompt_logprobs is not None:
        msg.prompt_logprobs = params.prompt_logprobs
    if params.structured is not None:
        msg.structured.kind, msg.structured.spec = params.structured.kind, params.structured.spec
    return msg


def cost_models_to_proto(models: CostModels | None) -> worker_pb2.CostModel:
    """A worker's fitted cost models as its descriptor carries them (``present`` false: none)."""
    if models is None:
        return worker_pb2.CostModel()
    prefill, decode = models.prefill, models.decode
    return worker_pb2.CostModel(
        present=True, prefill_threshold=prefill.threshold, prefill_base_s=prefill.base_s,
        prefill_per_token_s=prefill.per_token_s, prefill_per_token2_s=prefill.per_token2_s,
        prefill_max_tokens=prefill.max_tokens, decode_alpha=decode.alpha, decode_beta=decode.beta,
        decode_gamma=decode.gamma, decode_delta=decode.delta, decode_knee=decode.knee)


def prefill_model_from_proto(cost: worker_pb2.CostModel) -> PrefillModel | None:
    """The prefill fit a worker sent with its descriptor; None when it sent none."""
    if not cost.present:
        return None
    return PrefillModel(cost.prefill_threshold, cost.prefill_base_s, cost.prefill_per_token_s,
                        per_token2_s=cost.prefill_per_token2_s, max_tokens=cost.prefill_max_tokens)


def load_from_proto(load: worker_pb2.WorkerLoad) -> LoadReport:
    """A heartbeat's load as plain fields (its prefix digest is applied on its own)."""
    return LoadReport(free_blocks=load.free_blocks, running=load.running, waiting=load.waiting,
                      queued_tokens=load.queued_tokens, draining=load.draining, vbs=load.vbs, mean_len=load.mean_len,
                      tightest_tpot_ms=load.tightest_tpot_ms, reserved=load.reserved,
                      earliest_ttft_deadline_ms=load.earliest_ttft_deadline_ms, steps=load.steps,
                      tpot_alone_ms=load.tpot_alone_ms, tpot_margin_ceiling=load.tpot_margin_ceiling,
                      tpot_margin_start=load.tpot_margin_start)


def load_to_proto(snapshot: EngineLoad, policy: str, draining: bool = False) -> worker_pb2.WorkerLoad:
    """An engine's load snapshot as its heartbeat carries it (the SLO fields only under an SLO policy)."""
    load = worker_pb2.WorkerLoad(free_blocks=snapshot.free_blocks, running=snapshot.running,
                                 waiting=snapshot.waiting, queued_tokens=snapshot.queued_tokens, draining=draining,
                                 reserved=snapshot.reserved, steps=snapshot.steps)
    if policy == Policy.FCFS:
        return load
    if snapshot.earliest_ttft_deadline is not None:
        load.earliest_ttft_deadline_ms = (snapshot.earliest_ttft_deadline - time.monotonic()) * 1000
    if snapshot.tpot_slos:
        load.vbs = virtual_batch_size(snapshot.tpot_slos)
        load.tightest_tpot_ms = min(snapshot.tpot_slos.values()) * 1000
    if snapshot.running:
        load.mean_len = snapshot.mean_len
    if snapshot.tpot_alone_s is not None:
        load.tpot_alone_ms = snapshot.tpot_alone_s * 1000
    load.tpot_margin_ceiling, load.tpot_margin_start = snapshot.epsilon_ceiling, snapshot.epsilon_start
    return load


def logprobs_to_proto(logprobs: TokenLogprobs) -> gateway_pb2.TokenLogprobs:
    return gateway_pb2.TokenLogprobs(logprob=logprobs.logprob, top_token_ids=[t for t, _ in logprobs.top],
                                     top_logprobs=[lp for _, lp in logprobs.top])


def prefill_logprobs(out: RequestOutput) -> dict[str, object]:
    """A prefill's first token's logprobs and its prompt's, as ``PrefillResponse`` fields (none
    unless asked for)."""
    return {"first_logprobs": logprobs_to_proto(out.logprobs[0]) if out.logprobs else None,
            "prompt_logprobs": [logprobs_to_proto(lp) for lp in out.prompt_logprobs]}
