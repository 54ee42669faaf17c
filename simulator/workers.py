"""Workers on the virtual clock: an ``EngineCore`` each (the cluster's scheduler, leases, TPOT
guard and calibration), whose forward takes what its cost model says (``models``: the profile
scaled by the config's ``prefill_scale``/``decode_scale``; the engine's guard starts from the
profile itself and calibrates, as a real worker does).

As on a worker's engine thread, calls (RPCs that reached the worker) run between steps: one
arriving during a step waits for its end. A decode worker whose batch holds only decoding
requests, none about to finish, runs ahead through the engine's ``common.engine.run_ahead``: it
asks the engine's own credit batcher which requests run in each of the next steps, up to the
first that could finish one, and schedules one event at their end; a call arriving before then
cuts the run at the step in progress (the batcher rewound to it) and waits for that step's end.

With a ``HostCpu`` (``SimConfig.host_cores``), a forward, or a run ahead, takes its time × the
stretch the front end's share of the worker's cores gives at its start.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import NamedTuple

from common.model.batch import ScheduledBatch, prompt_attention_work
from common.engine.config import EngineConfig
from common.engine.core import EngineCore
from common.engine.load import EngineLoad
from common.engine.request import RequestOutput
from common.slo.cost_models import CostModels
from simulator.config import SimConfig
from simulator.events import Simulation
from simulator.host import HostCpu
from simulator.step_noise import step_factors

OutputListener = Callable[[RequestOutput], None]
MAX_RUN = 512  # steps a decode worker runs ahead at most
FIRST_RUN = 4  # ... at first: a run that ends uncut doubles the next one, a cut one halves it


class SimWorker(ABC):
    role = ""  # "prefill" or "decode": which of the config's forward factors it draws

    def __init__(self, sim: Simulation, worker_id: str, config: SimConfig, models: CostModels,
                 truth: CostModels | None = None, host: HostCpu | None = None) -> None:
        """``models``: the profile the worker loads (its guard starts from it); ``truth``: what its
        forwards really take (default: the profile scaled by the config's scales); ``host``: the
        cores it shares with the front end (None: its own)."""
        self.sim = sim
        self.host = host
        self.worker_id = worker_id
        # no prefix caching: simulated prompts are placeholders ([0] * n), equal where real ones are not
        engine = EngineConfig(policy=config.engine_policy, max_batch_size=config.max_batch_size,
                              max_num_tokens=config.max_num_tokens, block_size=config.block_size,
                              enable_prefix_caching=False, work_conserving_credit=config.work_conserving_credit)
        self.core = EngineCore(engine, config.num_kv_blocks, config.max_model_len, vocab_size=1, eos_token_ids=(),
                               clock=sim.clock)
        self.core.cost_models = models  # what the worker believes, as a real one loads its profile
        self.models = truth or CostModels(models.prefill.scaled(config.prefill_scale),
                                          models.decode.scaled(config.decode_scale))
        self.core.unloaded_step_s = self.models.decode.predict(1, 16)  # what a worker's warm-up measures alone
        self.core.remeasure()  # ... and registers with
        self.listeners: dict[str, OutputListener] = {}  # request id -> its outputs, as the engine thread's callbacks
        self.lost_calls: set[str] = set()  # scripted: requests whose Prefill here fails as if it were lost
        self._busy = False
        self._inbox: list[Callable[[], None]] = []
        rng = random.Random(f"{config.seed}-{worker_id}")
        factors = config.prefill_forward_factors if self.role == "prefill" else config.decode_step_factors
        memory = config.decode_step_memory if self.role == "decode" else (0.0, 0.0)
        self._noise = step_factors(factors, config.step_noise, memory, rng)
        self._exact = config.exact and truth is None

    def call(self, fn: Callable[[], None]) -> None:
        """An RPC that reached this worker: runs now if the engine is between steps, else after the step."""
        if self._busy:
            self._inbox.append(fn)
            self._interrupted()
            return
        self._sync()
        fn()
        self._kick()

    def load(self) -> EngineLoad:
        """What a heartbeat carries."""
        self._sync()
        return self.core.load

    def _kick(self) -> None:
        if not self._busy and self.core.has_unfinished_requests():
            self._step()

    def _step(self) -> None:
        aborted, batch = self.core.schedule_step()
        self._deliver(aborted)
        if batch.seqs:
            self._busy = True
            alone = self.forward_s(batch) * self._noise()
            seconds = alone
            if self.host is not None:
                seconds *= self.host.stretch(self.worker_id, self.sim.now)
                self.host.busy(self.worker_id, self.sim.now, self.sim.now + seconds, alone)
            self.sim.after(seconds, self._step_done, batch, self.sim.now)

    def _step_done(self, batch: ScheduledBatch, started: float) -> None:
        outputs = self.core.finish_step(batch, {s.request_id: 0 for s in batch.seqs if s.sample}, started, self.sim.now)
        self._between_steps(outputs)

    def _between_steps(self, outputs: list[RequestOutput]) -> None:
        self._busy = False
        self._deliver(outputs)
        if self._inbox:
            self._sync()
            inbox, self._inbox = self._inbox, []
            for fn in inbox:
                fn()
        self._kick()

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            listener = self.listeners.get(out.request_id)
            if listener is not None:
                if out.finished:
                    del self.listeners[out.request_id]
                listener(out)

    def _sync(self) -> None:
        """Brings the engine's state up to date (a decode worker's run ahead)."""

    def _interrupted(self) -> None:
        """A call arrived during a step (a decode worker's run ahead stops at the step in progress)."""

    @abstractmethod
    def forward_s(self, batch: ScheduledBatch) -> float:
        """What ``batch`` takes on this worker's cost model: each kind of worker says (the prefill and
        decode workers below both do; a worker of no kind cannot be built)."""


class SimPrefillWorker(SimWorker):
    role = "prefill"

    def forward_s(self, batch: ScheduledBatch) -> float:
        return self.models.prefill.predict(batch.num_tokens, batch.attention_work)


class Step(NamedTuple):
    """One step of a decode worker's run ahead."""

    ends: float
    chosen: tuple[str, ...]
    mean_len: float
    seconds: float


class SimDecodeWorker(SimWorker):
    role = "decode"
    def __init__(self, sim: Simulation, worker_id: str, config: SimConfig, models: CostModels,
                 truth: CostModels | None = None, host: HostCpu | None = None) -> None:
        super().__init__(sim, worker_id, config, models, truth, host)
        self._produced: dict[str, int] = {}  # tokens of steps run ahead, not yet recorded in the engine
        self._steps = 0
        self._last_end = 0.0
        self._run: list[Step] = []  # the run ahead under way
        # what the credit batcher held before the run and the SLOs it selected by (None: every
        # request ran in every step): a cut run replays the batcher to the step it keeps
        self._run_credits: dict[str, float] = {}
        self._run_slos: dict[str, float] | None = None
        self._run_id = 0  # the event of a run cut short finds a newer id and does nothing
        self._run_length = FIRST_RUN
        self._run_stretch = 1.0  # the front end's share of this worker's cores when the run began

    def forward_s(self, batch: ScheduledBatch) -> float:
        """Its decodes' step, plus the forward of the prompts it computes itself (local prefill)."""
        decodes = [s for s in batch.seqs if s.is_decode]
        seconds = self.models.decode.predict(len(decodes), sum(s.start_pos + 1 for s in decodes) / len(decodes)) \
            if decodes else 0.0
        if len(decodes) < len(batch.seqs):
            prompts = [s for s in batch.seqs if not s.is_decode]
            seconds += self.models.prefill.predict(sum(len(s.token_ids) for s in prompts), prompt_attention_work(prompts))
        return seconds

    def _step(self) -> None:
        run = self._run_ahead()
        if not run:
            self._sync()
            super()._step()
            return
        self._busy, self._run = True, run
        if self.host is not None:
            self.host.busy(self.worker_id, self.sim.now, run[-1].ends, sum(step.seconds for step in run) / self._run_stretch)
        self._run_id += 1
        self.sim.at(run[-1].ends, self._run_done, self._run_id)

    def _run_ahead(self) -> list[Step]:
        """The steps to come while the batch holds only decodes and none can finish (empty: the
        next step must be the engine's own)."""
        core = self.core
        running = core.steady_decodes()
        if not running:
            return []
        self._run_stretch = 1.0 if self.host is None else self.host.stretch(self.worker_id, self.sim.now)
        produced = self._produced
        left = {r.request_id: r.params.max_tokens - len(r.output_token_ids) - produced.get(r.request_id, 0)
                for r in running}
        length = {r.request_id: r.num_tokens + produced.get(r.request_id, 0) for r in running}
        slos = core.credit_slos(running)  # the set is fixed for the whole run
        self._run_slos, self._run_credits = slos, core.credit.credits()
        if slos is None:
            return self._all_run_ahead(tuple(left), min(left.values()) - 1, sum(length.values()))
        ids, credit, predict, noise = tuple(left), core.credit, self.models.decode.predict, self._stretched_noise
        now, limit = self.sim.now, self._run_length
        steps: list[Step] = []
        while len(steps) < limit:
            safe = min(left.values()) - 1  # steps before any request can be one token from its end
            if safe <= 0:
                break
            for _ in range(min(safe, limit - len(steps))):
                ran = credit.select(slos)
                chosen = tuple(rid for rid in ids if rid in ran)
                mean_len = sum(length[rid] for rid in chosen) / len(chosen)
                seconds = predict(len(chosen), mean_len) * noise()
                now += seconds
                for rid in chosen:
                    left[rid] -= 1
                    length[rid] += 1
                steps.append(Step(now, chosen, mean_len, seconds))
        return steps

    def _all_run_ahead(self, ids: tuple[str, ...], safe: int, total_len: int) -> list[Step]:
        """The run ahead when every request runs in every step (no credit batching): each step
        adds one token to each, so the mean length grows by exactly one a step."""
        predict, noise, n = self.models.decode.predict, self._stretched_noise, len(ids)
        now = self.sim.now
        steps: list[Step] = []
        for _ in range(max(0, min(safe, self._run_length))):
            mean_len = total_len / n
            seconds = predict(n, mean_len) * noise()
            now += seconds
            total_len += n
            steps.append(Step(now, ids, mean_len, seconds))
        return steps

    def _stretched_noise(self) -> float:
        return self._noise() * self._run_stretch

    def decoded_by_now(self) -> dict[str, int]:
        """Tokens after the first each running request has by now, the run ahead's ended steps included."""
        decoded = {r.request_id: len(r.output_token_ids) - 1 + self._produced.get(r.request_id, 0)
                   for r in self.core.running_requests()}
        now = self.sim.now
        for step in self._run:
            if step.ends > now:
                break
            for rid in step.chosen:
                decoded[rid] += 1
        return decoded

    def _interrupted(self) -> None:
        """Cuts the run ahead after the step in progress now; the call waits for that step's end."""
        run = self._run
        if not run or run[-1].ends <= self.sim.now:
            return
        keep = next(i for i, step in enumerate(run) if step.ends > self.sim.now) + 1
        if keep < len(run):
            self._run_length = max(1, self._run_length // 2)
            if self.host is not None:
                self.host.cut(self.worker_id, run[keep - 1].ends, sum(step.seconds for step in run[keep:]) / self._run_stretch)
            self._run = run[:keep]
            credit = self.core.credit
            credit.restore(self._run_credits)
            if self._run_slos is not None:
                for _ in range(keep):
                    credit.select(self._run_slos)
            self._run_id += 1
            self.sim.at(self._run[-1].ends, self._run_done, self._run_id)

    def _run_done(self, run_id: int) -> None:
        if run_id != self._run_id:
            return
        if len(self._run) == self._run_length:
            self._run_length = min(MAX_RUN, 2 * self._run_length)
        produced, exact = self._produced, self._exact
        if self._run_slos is None:  # every request ran in every step
            for rid in self._run[0].chosen:
                produced[rid] = produced.get(rid, 0) + len(self._run)
        else:
            for step in self._run:
                for rid in step.chosen:
                    produced[rid] = produced.get(rid, 0) + 1
        if not exact:  # a step exactly as predicted teaches the calibration nothing
            for step in self._run:
                self.core.observe_decode_step(len(step.chosen), step.mean_len, step.seconds)
        self._steps += len(self._run)
        self._last_end = self._run[-1].ends
        self._run = []
        self._between_steps([])

    def _sync(self) -> None:
        if self._steps:
            self.core.fast_forward(self._produced, self._steps, self._last_end)
            self._produced, self._steps = {}, 0
