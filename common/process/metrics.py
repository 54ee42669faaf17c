"""Prometheus metrics, vLLM-style names under ``pdserve:``, every series labelled with the role.

Each process builds one ``Metrics`` on its own registry (so tests can build several in one
process) and serves it over HTTP when ``--metrics-port`` is set. Gauges that mirror engine
state are read at scrape time through callbacks, so they are never stale and cost nothing
between scrapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from common.slo.ratio_histogram import LAGS, MEMORY_STEPS, RatioHistogram

disable_created_metrics()  # the *_created series only add noise to every scrape

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
# 0.25 ms to ~1.9 s in steps of 1.5x: fine enough to be read back as a distribution
OVERHEAD_BUCKETS = tuple(round(0.00025 * 1.5 ** k, 7) for k in range(23))
TPOT_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)


class Metrics:
    def __init__(self, role: str) -> None:
        self.role = role
        self.registry = CollectorRegistry()
        r, labels = self.registry, ["role"]

        self._running = Gauge("pdserve:num_requests_running", "Requests being served (gateway: streaming; "
                              "prefill: in a forward; decode: in the running batch)", labels, registry=r)
        self._waiting = Gauge("pdserve:num_requests_waiting", "Requests queued (gateway: not yet admitted; "
                              "workers: waiting in the scheduler) — the autoscaling signal", labels, registry=r)
        self._kv_usage = Gauge("pdserve:kv_cache_usage_perc", "Fraction of KV blocks in use (1 = full)", labels,
                               registry=r)
        self._draining = Gauge("pdserve:draining", "1 while the process drains after SIGTERM", labels, registry=r)
        self.requests = Counter("pdserve:requests", "Requests that ended, by final status (finish reason or "
                                "gRPC code)", [*labels, "status"], registry=r)
        self.rejections = Counter("pdserve:request_rejections", "Requests turned away before any work, by reason",
                                  [*labels, "reason"], registry=r)
        self.slo = Counter("pdserve:slo_requests", "Finished requests by SLO class and whether both SLOs were met",
                           [*labels, "slo_class", "result"], registry=r)
        self.ttft = Histogram("pdserve:time_to_first_token_seconds", "Time to first token at the gateway", labels,
                              buckets=LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("pdserve:time_per_output_token_seconds", "Mean time per output token after the first",
                              labels, buckets=TPOT_BUCKETS, registry=r)
        self.e2e = Histogram("pdserve:e2e_request_latency_seconds", "Request latency, first byte in to last out",
                             labels, buckets=LATENCY_BUCKETS, registry=r)
        self.stamped_wait = Histogram("pdserve:request_start_wait_seconds", "From a request's own stamp "
                                      "(x-request-start) to its handler: the wait before the gateway its TTFT plan "
                                      "counts", labels, buckets=LATENCY_BUCKETS, registry=r)
        self.retries = Counter("pdserve:request_retries", "Requests retried on other workers after a worker failed "
                               "before their first token, by the failed worker's role", [*labels, "failed_role"],
                               registry=r)
        self.migrations = Counter("pdserve:request_migrations", "Requests resumed on another decode worker after "
                                  "theirs was lost mid-stream", labels, registry=r)
        self.prompt_tokens = Counter("pdserve:prompt_tokens", "Prompt tokens processed", labels, registry=r)
        self.generation_tokens = Counter("pdserve:generation_tokens", "Tokens generated", labels, registry=r)
        self.kv_bytes = Counter("pdserve:kv_transfer_bytes", "KV cache bytes moved to decode workers",
                                [*labels, "transport"], registry=r)
        self.kv_seconds = Counter("pdserve:kv_transfer_seconds", "Seconds spent moving KV cache bytes",
                                  [*labels, "transport"], registry=r)
        self._add_guard_series(r, labels)
        self.workers = Gauge("pdserve:workers", "Workers the gateway knows, by role and state",
                             ["role", "worker_role", "state"], registry=r)
        self._loop_lag = Gauge("pdserve:event_loop_lag_seconds", "Largest delay of this process's event loop "
                               "over the last second (work that should not run on it, or an overloaded host)",
                               labels, registry=r)
        self._loop_busy = Gauge("pdserve:event_loop_busy_ratio", "Share of the last half second the event "
                                "loop's thread spent on the CPU (near 1: the process is at its capacity)",
                                labels, registry=r)
        self._arrival_wait = Gauge("pdserve:arrival_wait_seconds", "Wait of a gRPC call inside this process "
                                   "before its handler runs, as the TTFT plans allow for it (gateway/arrival_wait.py)",
                                   labels, registry=r)
        self._server: WSGIServer | None = None
        self._observed_ratios: _RatioHistograms | None = None

    def _add_guard_series(self, r: CollectorRegistry, labels: list[str]) -> None:
        """The SLO guards' own series: their cost models, calibration, margins, attainment."""
        model_labels = [*labels, "model", "worker"]
        self.fit_worst_ratio = Gauge("pdserve:cost_model_fit_worst_ratio", "Of the fitted cost model in use: the "
                                     "worst factor between it and a point it was fitted on (1 = exact)",
                                     model_labels, registry=r)
        self.fit_r2 = Gauge("pdserve:cost_model_fit_r2", "R² of the fitted cost model in use on its own points",
                            model_labels, registry=r)
        self.calibration = Gauge("pdserve:cost_model_calibration_ratio", "Factor observed work applies to the "
                                 "cost model's predictions: below 1 the model was too slow, above 1 too fast",
                                 model_labels, registry=r)
        self.coefficients = Gauge("pdserve:cost_model_coefficient", "The cost model in use (after refits from the "
                                  "work really run): decode alpha, beta, gamma, delta (s), knee (requests)",
                                  [*model_labels, "term"], registry=r)
        self.refits = Gauge("pdserve:cost_model_refits", "Times the cost model was refitted from the work really "
                            "run and replaced", model_labels, registry=r)
        self.prediction_error = Gauge("pdserve:cost_model_prediction_error_ratio", "Median over recent steps of "
                                      "the calibrated prediction (made before the step) / the observed step",
                                      model_labels, registry=r)
        self.attainment = Gauge("pdserve:slo_admitted_attainment", "Of the requests admitted and served over the "
                                "last minute, the share that met both SLOs, by SLO class", [*labels, "slo_class"],
                                registry=r)
        self.margin = Gauge("pdserve:slo_guard_margin", "The margin a guard applies to its predictions, steered to "
                            "hold the attainment target: ttft_headroom per prefill worker, tpot_epsilon (VBS ε) per "
                            "decode worker, each per SLO class (the SLO in ms, two significant digits); "
                            "ttft_boundary per prefill worker (slo_ms 0: all classes), the least a promise already "
                            "made is checked under; tpot_ceiling and tpot_start per decode worker (slo_ms 0), the "
                            "most its steps let ε be and where ε starts and returns to on time",
                            [*labels, "kind", "worker", "slo_ms"], registry=r)
        self.prefill_call_overhead = Histogram(
            "pdserve:prefill_call_overhead_seconds", "Of each prefill call, the time at the gateway beyond what the "
            "worker reports spending on it (queue, forward, KV copy): RPC hops, both event loops' delays, this "
            "host's contention", labels, buckets=OVERHEAD_BUCKETS, registry=r)
        self.extrapolations = Gauge("pdserve:cost_model_extrapolations", "Predictions a prefill worker's cost "
                                    "model made for forwards larger than any it was fitted on, since it joined",
                                    [*labels, "worker"], registry=r)
        self.delivery_allowance = Gauge("pdserve:front_delivery_allowance_seconds", "Of a request's TTFT budget, "
                                        "what the gateway expects its front (grpc, http) to spend delivering the "
                                        "first token: a high quantile of the last deliveries", [*labels, "front"],
                                        registry=r)

    def watch(self, running: Callable[[], float], waiting: Callable[[], float],
              kv_usage: Callable[[], float] | None = None, draining: Callable[[], float] | None = None) -> None:
        """Gauges read at scrape time."""
        self._running.labels(self.role).set_function(running)
        self._waiting.labels(self.role).set_function(waiting)
        if kv_usage is not None:
            self._kv_usage.labels(self.role).set_function(kv_usage)
        if draining is not None:
            self._draining.labels(self.role).set_function(draining)

    def watch_prefix_cache(self, queries: Callable[[], float], hits: Callable[[], float]) -> None:
        """vLLM's prefix cache counters (prompt tokens looked up, of which found), read at scrape time."""
        self.registry.register(_ReadCounters(self.role, {
            "pdserve:prefix_cache_queries": ("Prompt tokens looked up in the prefix cache", queries),
            "pdserve:prefix_cache_hits": ("Prompt tokens found in the prefix cache (prefill skipped)", hits)}))

    def watch_loop_lag(self, worst_recent_s: Callable[[], float]) -> None:
        self._loop_lag.labels(self.role).set_function(worst_recent_s)

    def watch_loop_busy(self, fraction: Callable[[], float]) -> None:
        self._loop_busy.labels(self.role).set_function(fraction)

    def watch_arrival_wait(self, allowance_s: Callable[[], float]) -> None:
        self._arrival_wait.labels(self.role).set_function(allowance_s)

    def watch_cost_model(self, model: str, worker: str, r2: float, worst_ratio: float,
                         calibration: Callable[[], float] | None = None,
                         prediction_error: Callable[[], float] | None = None,
                         refits: Callable[[], float] | None = None) -> None:
        """A worker's cost model: its fit (fixed) and, where it is calibrated here, its
        calibration (read at scrape time)."""
        self.fit_r2.labels(self.role, model, worker).set(r2)
        self.fit_worst_ratio.labels(self.role, model, worker).set(worst_ratio)
        if calibration is not None:
            self.calibration.labels(self.role, model, worker).set_function(calibration)
        if prediction_error is not None:
            self.prediction_error.labels(self.role, model, worker).set_function(prediction_error)
        if refits is not None:
            self.refits.labels(self.role, model, worker).set_function(refits)

    def watch_observed_ratios(self, model: str, worker: str, ratios: RatioHistogram) -> None:
        """``pdserve:cost_model_observed_ratio``: every decode step's period (``model="decode"``) or
        prefill forward's time (``model="prefill"``) over the model's prediction."""
        if self._observed_ratios is None:
            self._observed_ratios = _RatioHistograms()
            self.registry.register(self._observed_ratios)
        self._observed_ratios.series.append(([self.role, model, worker], ratios))

    def watch_tpot_bounds(self, ceiling: Callable[[], float], alone_s: Callable[[], float]) -> None:
        """A decode worker's bounds on its TPOT guard (``common.slo.epsilon_bound``), read at scrape time."""
        r = self.registry
        Gauge("pdserve:tpot_margin_ceiling", "The most ε this decode worker's TPOT guard applies: where the closed "
              "loop starts, or how far its recent steps outran their calibrated predictions", ["role"],
              registry=r).labels(self.role).set_function(ceiling)
        Gauge("pdserve:tpot_alone_seconds", "One request's decode step alone here now: an idle worker admits a TPOT "
              "SLO at or above it under no margin (one below the least it has shown is refused as never attainable)",
              ["role"],
              registry=r).labels(self.role).set_function(alone_s)

    def watch_coefficients(self, model: str, worker: str, terms: dict[str, Callable[[], float]]) -> None:
        for term, read in terms.items():
            self.coefficients.labels(self.role, model, worker, term).set_function(read)

    def finished(self, status: str) -> None:
        self.requests.labels(self.role, status).inc()

    def rejected(self, reason: str) -> None:
        self.rejections.labels(self.role, reason).inc()

    def transferred(self, transport: str, nbytes: int, seconds: float) -> None:
        self.kv_bytes.labels(self.role, transport).inc(nbytes)
        self.kv_seconds.labels(self.role, transport).inc(seconds)

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """Starts the HTTP endpoint (``/metrics``) on a daemon thread; port 0 leaves it off."""
        if port:
            self._server, _ = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _RatioHistograms(Collector):
    """Histograms the engine counts (``RatioHistogram``), read at scrape time."""

    def __init__(self) -> None:
        self.series: list[tuple[list[str], RatioHistogram]] = []

    def collect(self):  # type: ignore[no-untyped-def]
        family = HistogramMetricFamily("pdserve:cost_model_observed_ratio", "Each decode step's period "
                                       "(model=decode) or prefill forward's time (model=prefill) over the cost "
                                       "model's prediction, calibration not applied, since start",
                                       labels=["role", "model", "worker"])
        for labels, ratios in self.series:
            family.add_metric(labels, [(_le(le), float(n)) for le, n in ratios.cumulative()], ratios.total)
        yield family
        memory = GaugeMetricFamily("pdserve:cost_model_ratio_autocorrelation", "Correlation of the log of those "
                                   "ratios `lag` steps (forwards) apart, over about the last "
                                   f"{MEMORY_STEPS} (slowdowns in stretches, not one at a time)",
                                   labels=["role", "model", "worker", "lag"])
        for labels, ratios in self.series:
            for lag in LAGS:
                memory.add_metric([*labels, str(lag)], ratios.correlation(lag))
        yield memory


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


class _ReadCounters(Collector):
    """Counters whose values live elsewhere (the engine counts them), read at scrape time."""

    def __init__(self, role: str, counters: dict[str, tuple[str, Callable[[], float]]]) -> None:
        self.role = role
        self.counters = counters

    def collect(self):  # type: ignore[no-untyped-def]
        for name, (text, read) in self.counters.items():
            family = CounterMetricFamily(name, text, labels=["role"])
            family.add_metric([self.role], read())
            yield family
