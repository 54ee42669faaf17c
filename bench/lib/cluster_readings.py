"""What a running cluster's metrics say, read back for the simulator: its RPC hop, its workers'
forwards and steps against their models (and a load's steps against the profile), its prefill
calls' overhead at the gateway, and its guards' refusals and margins."""

from __future__ import annotations

import statistics

from bench.lib.common import progress
from common.process.scrape import scrape_metrics
from common.slo.cost_models import CostModels, DecodeModel
from common.slo.ratio_histogram import LAGS
from pdserve.cluster import LocalCluster
from simulator.config import call_overhead_from_histogram, factors_from_histogram
from simulator.step_noise import memory_from_correlations


def guards_now(cluster: LocalCluster) -> tuple[dict[str, float], dict[str, float]]:
    """The gateway's refusals so far by reason (``pdserve:request_rejections``) and its guards' margins
    now by kind and SLO (``pdserve:slo_guard_margin``; one worker of each role); empty without metrics."""
    if "gateway" not in cluster.metrics_ports:
        return {}, {}
    samples = scrape_metrics(cluster.metrics_ports["gateway"])
    refusals = _refusals(samples)
    margins = {f"{_label(k, 'kind')}/{_label(k, 'slo_ms')}ms": v for k, v in samples.items()
               if k.startswith("pdserve:slo_guard_margin{")}
    return refusals, margins


def gateway_counts(cluster: LocalCluster) -> tuple[float, float, dict[str, float]]:
    """From one scrape, so far: the finished requests the gateway itself counted as meeting both
    SLOs and as missing one (``pdserve:slo_requests``, all classes), and its refusals by reason;
    (0, 0, {}) without metrics."""
    if "gateway" not in cluster.metrics_ports:
        return 0.0, 0.0, {}
    samples = scrape_metrics(cluster.metrics_ports["gateway"])
    counted = {"met": 0.0, "missed": 0.0}
    for key, value in samples.items():
        if key.startswith("pdserve:slo_requests_total{"):
            counted[_label(key, "result")] = counted.get(_label(key, "result"), 0.0) + value
    return counted["met"], counted["missed"], _refusals(samples)


def prefill_worker_refusals(cluster: LocalCluster) -> float:
    """Prompts the prefill workers have refused so far for their whole queue (``ttft_unattainable``:
    late, or making a queued one late), all of them together; 0 without metrics."""
    return sum(_refusals(scrape_metrics(port)).get("ttft_unattainable", 0.0)
               for name, port in cluster.metrics_ports.items() if name.startswith("prefill"))


def _refusals(samples: dict[str, float]) -> dict[str, float]:
    return {_label(k, "reason"): v for k, v in samples.items() if k.startswith("pdserve:request_rejections_total{")}


def hop_seconds(address: str, calls: int = 50) -> float:
    """Half the median round trip of the gateway's cheapest RPC."""
    import time

    import grpc

    from wire.v1 import gateway_pb2, gateway_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        stub.Info(gateway_pb2.InfoRequest(), timeout=10)
        trips = []
        for _ in range(calls):
            started = time.perf_counter()
            stub.Info(gateway_pb2.InfoRequest(), timeout=10)
            trips.append(time.perf_counter() - started)
    return statistics.median(trips) / 2


def _label(sample: str, name: str) -> str:
    """The value of label ``name`` in a Prometheus sample's key (``metric{name="value",...}``)."""
    return sample.split(f'{name}="')[1].split('"')[0]


def observed_ratios(cluster: LocalCluster, role: str) -> dict[float, float]:
    """The ``role`` worker's ``pdserve:cost_model_observed_ratio`` now (its decode steps or prefill
    forwards): cumulative count by upper bound, and the sum of the ratios under the key ``-1``."""
    name = next(n for n in cluster.processes if n.startswith(role))
    samples = scrape_metrics(cluster.metrics_ports[name])
    mine = {k: v for k, v in samples.items() if f'model="{role}"' in k}
    out = {float(_label(k, "le")): v for k, v in mine.items()
           if k.startswith("pdserve:cost_model_observed_ratio_bucket{")}
    out[-1.0] = next(v for k, v in mine.items() if k.startswith("pdserve:cost_model_observed_ratio_sum{"))
    return out


def step_memory(cluster: LocalCluster) -> tuple[float, float]:
    """The decode worker's steps' memory now (``SimConfig.decode_step_memory``), fitted through its
    ``pdserve:cost_model_ratio_autocorrelation`` at the two lags it keeps (its last few thousand steps)."""
    name = next(n for n in cluster.processes if n.startswith("decode"))
    samples = scrape_metrics(cluster.metrics_ports[name])
    near, far = (next(v for k, v in samples.items() if k.startswith("pdserve:cost_model_ratio_autocorrelation{")
                      and 'model="decode"' in k and f'lag="{lag}"' in k) for lag in LAGS)
    w, rho = memory_from_correlations(near, far)
    progress(f"  decode steps: log-ratios correlate {near:.2f} / {far:.2f} at {LAGS[0]} / {LAGS[1]} steps apart "
             f"(memory w {w:.2f}, rho {rho:.3f})")
    return w, rho


def ratios_between(before: dict[float, float], after: dict[float, float]) -> tuple[float, tuple[float, ...]]:
    """The steps (forwards) run between two readings of ``observed_ratios``: their mean ratio to the
    model and their factors around that mean (``SimConfig.decode_step_factors`` or
    ``prefill_forward_factors``)."""
    buckets = [(le, after[le] - before.get(le, 0.0)) for le in after if le >= 0]
    steps = max((n for _, n in buckets), default=0.0)
    mean = (after[-1.0] - before.get(-1.0, 0.0)) / steps if steps else 1.0
    return mean, factors_from_histogram(buckets)


def in_cluster_decode(cluster: LocalCluster, ratio: float) -> DecodeModel:
    """The decode model the decode worker uses now (refitted from the steps it ran), times ``ratio``."""
    name = next(n for n in cluster.processes if n.startswith("decode"))
    samples = scrape_metrics(cluster.metrics_ports[name])
    terms = {t: next(v for k, v in samples.items() if k.startswith("pdserve:cost_model_coefficient{")
                     and f'term="{t}"' in k) for t in ("alpha", "beta", "gamma", "delta", "knee")}
    refits = next(v for k, v in samples.items() if k.startswith("pdserve:cost_model_refits{"))
    progress(f"  decode worker: {refits:g} refits, steps at {ratio:.2f}x its model")
    return DecodeModel(**terms).scaled(ratio)


def decode_load_scale(cluster: LocalCluster, models: CostModels, ratio: float, factors: tuple[float, ...],
                      output_tokens: float, mean_len: float) -> float:
    """What a decode step took in the cluster under a load over the profile's, at the load's mean batch
    (its ``output_tokens`` over its steps, one per factor; contexts of ``mean_len``): its mean ratio
    to the decode worker's model, times that model's prediction over the profile's there. The worker
    refits its model as it goes, and a refit from small batches says little of one, so both are read
    where the load ran."""
    batch = max(1.0, output_tokens / len(factors)) if factors else 1.0
    return ratio * in_cluster_decode(cluster, 1.0).predict(batch, mean_len) / models.decode.predict(batch, mean_len)


def overhead_buckets(cluster: LocalCluster) -> dict[float, float]:
    """The gateway's prefill-call overhead histogram now: cumulative count by upper bound."""
    samples = scrape_metrics(cluster.metrics_ports["gateway"])
    prefix = "pdserve:prefill_call_overhead_seconds_bucket{"
    return {float(_label(k, "le")): v for k, v in samples.items() if k.startswith(prefix)}


def call_overheads(before: dict[float, float], after: dict[float, float], hop_s: float) -> tuple[float, ...]:
    """One draw per prefill call made between the two readings, beyond the two hops simulated."""
    return call_overhead_from_histogram([(le, after[le] - before.get(le, 0.0)) for le in after], 2 * hop_s)
