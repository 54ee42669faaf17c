"""proto ⇄ domain conversions shared by the gateway and the workers (schedulers never see protos)."""

from __future__ import annotations

from common.model.sampling_params import SamplingParams
from common.slo.cost_models import CostModels, PrefillModel
from common.slo.load_report import LoadReport
from wire.v1 import gateway_pb2, worker_pb2

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
    )


def sampling_to_proto(params: SamplingParams) -> gateway_pb2.SamplingParams:
    msg = gateway_pb2.SamplingParams(
        max_tokens=params.max_tokens, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
        min_tokens=params.min_tokens, stop_token_ids=list(params.stop_token_ids), ignore_eos=params.ignore_eos,
    )
    if params.seed is not None:
        msg.seed = params.seed
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
