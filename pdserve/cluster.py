"""A local cluster: one gateway plus prefill and decode worker processes on this machine.

Used by ``pdserve up``, ``make demo``, the integration tests and the benchmarks, so they all
start, wait for and stop processes the same way.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from common.model.presets import DEFAULT_PRESET
from common.worker.cpu_plan import CoreAssignment, format_cores, gateway_shares_cores, plan_cores
from common.kv_transfer.shm import pool_segment_name, unlink_shared
from gateway.stream_interval import SHARED_CORES_S
from pdserve.device_share import device_workers, worker_device
from pdserve.mps import MpsDaemon, start_mps, stop_mps
from pdserve.ports import free_port
from wire.v1 import gateway_pb2, gateway_pb2_grpc

_counter = itertools.count()


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    port: int = 50051  # 0 picks a free port
    host: str = "127.0.0.1"
    prefill: int = 1
    decode: int = 1
    model: str | None = None
    preset: str = DEFAULT_PRESET
    kv_transport: str = "auto"
    worker_args: tuple[str, ...] = ()  # extra engine flags for every worker, e.g. ("--num-kv-blocks", "512")
    policy: str = "scorpio"  # scheduling policy of the gateway and every worker
    gateway_args: tuple[str, ...] = ()  # extra gateway flags, e.g. ("--slo-classes", "tight:200:20")
    # What the launcher itself presents to the gateway when it asks whether workers are ready:
    prefill_args: tuple[str, ...] = ()  # extra flags for prefill workers only (e.g. their certificate)
    decode_args: tuple[str, ...] = ()
    registry_port: bool = False  # a separate --registry-port for workers (needed for mutual TLS)
    metrics: bool = False  # give every process a free --metrics-port (see LocalCluster.metrics_ports)
    api_key: str = ""  # when the gateway runs with --api-keys
    tls_ca: str = ""  # when it runs with TLS (PEM file)
    # The cores divided among the processes (``common.worker.cpu_plan``); empty: every core this
    # process may use. ``threads`` overrides the compute threads per worker (0: one per core).
    cpu_cores: tuple[int, ...] = ()
    threads: int = 0
    gateway_nice: int = 0  # added to the gateway's CPU priority (nice) as it starts
    gateway_cores: str = "any"  # where a gateway without a core of its own runs (cpu_plan.GATEWAY_PLACES)
    # The workers' --device ("": as worker_args say, else the engine's default, cpu). Workers on
    # one GPU each size their KV pool from their share of it (--device-workers); ``mps`` runs
    # them under a CUDA MPS daemon of the cluster's own (``pdserve.mps``).
    device: str = ""
    mps: bool = False
    http_port: int | None = None  # the gateway's OpenAI-compatible HTTP port: None none, 0 a free one
    gateways: int = 1  # gateways over the one worker pool (every worker registers with each)


@dataclass
class LocalCluster:
    spec: ClusterSpec
    log_dir: Path
    address: str = ""  # the first gateway's
    registry_address: str = ""  # where workers register: the gateway's address or its registry port
    addresses: list[str] = field(default_factory=list)  # every gateway's, the first first
    registry_addresses: list[str] = field(default_factory=list)
    http_address: str = ""  # host:port of the OpenAI-compatible HTTP server, where the spec asks for one
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    plan: dict[str, CoreAssignment] = field(default_factory=dict)  # process name -> its cores and threads
    metrics_ports: dict[str, int] = field(default_factory=dict)  # process name -> its metrics port
    device_workers: dict[str, int] = field(default_factory=dict)  # worker -> workers on its GPU, where several
    mps: MpsDaemon | None = None  # while the cluster runs under its own MPS daemon
    _logs: list[object] = field(default_factory=list)
    _ended: set[str] = field(default_factory=set)  # ended on purpose (kill), not failed
    _log_offsets: dict[str, int] = field(default_factory=dict)

    def start(self, timeout_s: float = 120.0, progress: bool = False) -> LocalCluster:
        _exit_on_sigterm()  # so a SIGTERM to the launcher still stops its children (via __exit__)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}-{next(_counter)}"
        names = [f"{role}-{i}-{tag}" for role, count in (("prefill", self.spec.prefill), ("decode", self.spec.decode))
                 for i in range(count)]
        devices = {name: worker_device(self._engine_args(name)) for name in names}
        self.plan = self._plan(names, [name for name, device in devices.items() if not device.startswith("cpu")])
        self.device_workers = device_workers(devices)
        if progress:
            for assignment in self.plan.values():
                share = self.device_workers.get(assignment.name)
                where = f", KV pool from 1/{share} of {devices[assignment.name]}" if share else ""
                print(f"  {assignment.describe().replace('-' + tag, '')}{where}", file=sys.stderr, flush=True)
            if self._stream_interval_args():
                print(f"  gateway: on the workers' cores, so token messages are held {SHARED_CORES_S * 1000:g} ms "
                      "apart (--gateway-arg=--stream-interval-ms=0: each token as it comes)", file=sys.stderr, flush=True)
        try:
            if self.spec.mps:
                self.mps = start_mps(self.log_dir, devices.values())  # before any worker opens the GPU
            if any(d.startswith("cpu") for d in devices.values()) and self._wants_cpu_kernels():
                from common.cpu_kernels.build import prepare

                prepare(progress)  # the one compilation, here, not inside a worker's start-up
            self._start_gateway_on_a_free_port(timeout_s)
            self.addresses, self.registry_addresses = [self.address], [self.registry_address]
            for k in range(1, self.spec.gateways):
                self._start_extra_gateway(k, timeout_s)
            for name in devices:
                self.start_worker(name.split("-", 1)[0], name)
            self.wait_ready(timeout_s, progress)
        except BaseException:
            self.stop(grace_s=2.0)  # a cluster that never became ready leaves nothing running
            raise
        return self

    def _wants_cpu_kernels(self) -> bool:
        """Whether the workers may attend with the CPU kernels (no backend or ``cpu`` asked for)."""
        args = list(self.spec.worker_args)
        if "--enforce-eager" in args:
            return False
        return "--attention-backend" not in args or args[args.index("--attention-backend") + 1] in ("auto", "cpu")

    def _start_gateway_on_a_free_port(self, timeout_s: float) -> None:
        for attempt in range(3):  # a port found free can be taken before the gateway binds it
            port = self.spec.port or free_port(self.spec.host)
            self.address = f"{self.spec.host}:{port}"
            self.registry_address = (f"{self.spec.host}:{free_port(self.spec.host)}" if self.spec.registry_port
                                     else self.address)
            if self.spec.http_port is not None:
                self.http_address = f"{self.spec.host}:{self.spec.http_port or free_port(self.spec.host)}"
            self.start_gateway()
            if self._gateway_listening(timeout_s) or self.spec.port or attempt == 2:
                break
            self._ended.add("gateway")

    def _start_extra_gateway(self, k: int, timeout_s: float) -> None:
        """Gateway ``k`` (from 1) over the same workers, on a port of its own (its registry there too)."""
        for attempt in range(3):
            address = f"{self.spec.host}:{free_port(self.spec.host)}"
            name = f"gateway-{k}"
            self._spawn(name, ["gateway", "--host", self.spec.host, "--port", address.rsplit(":", 1)[1],
                               "--policy", self.spec.policy, *self._stream_interval_args(), *self._model_args(),
                               *self._metrics_args(name), *self.spec.gateway_args])
            if self._gateway_listening(timeout_s, name) or attempt == 2:
                break
            self._ended.add(name)
        self.addresses.append(address)
        self.registry_addresses.append(address)

    def start_gateway(self) -> None:
        """Starts (or, after it died, restarts) the gateway on the cluster's address."""
        port = self.address.rsplit(":", 1)[1]
        registry = ["--registry-port", self.registry_address.rsplit(":", 1)[1]] if self.spec.registry_port else []
        http = ["--http-port", self.http_address.rsplit(":", 1)[1]] if self.http_address else []
        self._spawn("gateway", ["gateway", "--host", self.spec.host, "--port", port, *registry, *http,
                                "--policy", self.spec.policy, *self._stream_interval_args(),
                                *self._model_args(), *self._metrics_args("gateway"), *self.spec.gateway_args])

    def _stream_interval_args(self) -> list[str]:
        """A gateway without a core of its own holds token messages (``gateway.stream_interval``)
        from the start, unless its args say otherwise: every message it sends is CPU its workers
        do not get."""
        given = any(arg.startswith("--stream-interval-ms") for arg in self.spec.gateway_args)
        if self.plan and not given and gateway_shares_cores(list(self.plan.values())):
            return ["--stream-interval-ms", f"{SHARED_CORES_S * 1000:g}"]
        return []

    def _plan(self, workers: list[str], on_device: list[str]) -> dict[str, CoreAssignment]:
        planned = plan_cores(workers, self.spec.cpu_cores or None, self.spec.threads or None, self.spec.gateway_nice,
                             self.spec.gateway_cores, on_device)
        return {a.name: a for a in planned}

    def start_worker(self, role: str, worker_id: str) -> None:
        """Starts a worker; with the id of one that died, a restart that rejoins under that id
        (on the same cores)."""
        module = f"{role}_worker"
        cores = self.plan[worker_id]
        share = self.device_workers.get(worker_id)
        args = [module, "--gateway", ",".join(self.registry_addresses or [self.registry_address]), "--host", self.spec.host, "--worker-id", worker_id,
                "--cpu-cores", format_cores(cores.cores), "--threads", str(cores.threads),
                "--kv-transport", self.spec.kv_transport, "--policy", self.spec.policy, *self._model_args(),
                *self._metrics_args(worker_id), *(["--device-workers", str(share)] if share else []),
                *self._engine_args(worker_id)]
        self._spawn(worker_id, args)

    def _engine_args(self, worker_id: str) -> list[str]:
        """The flags given for this worker, the last of each winning: the cluster's device, then
        worker_args, then its role's args."""
        role_args = self.spec.prefill_args if worker_id.startswith("prefill") else self.spec.decode_args
        return [*(["--device", self.spec.device] if self.spec.device else []), *self.spec.worker_args, *role_args]

    def _metrics_args(self, name: str) -> list[str]:
        if not self.spec.metrics:
            return []
        self.metrics_ports.setdefault(name, free_port(self.spec.host))
        return ["--metrics-port", str(self.metrics_ports[name]), "--metrics-host", self.spec.host]

    def pid(self, name: str) -> int:
        return self.processes[name].pid

    def wait_ready(self, timeout_s: float, progress: bool = False) -> gateway_pb2.InfoResponse:
        """Until every gateway sees every worker ready; the first gateway's Info."""
        deadline, shown = time.monotonic() + timeout_s, ""
        while True:
            self._check_alive()
            infos = [self.info(timeout_s=1.0, address=a) for a in self.addresses or [self.address]]
            info = infos[0] if all(i is not None for i in infos) else None
            counts = [_ready_counts(i) for i in infos]
            ready = {role: min(c[role] for c in counts) for role in ("prefill", "decode")}
            line = f"  ready: {ready['prefill']}/{self.spec.prefill} prefill, {ready['decode']}/{self.spec.decode} decode"
            if progress and line != shown:
                print(line, file=sys.stderr, flush=True)
                shown = line
            if info is not None and ready["prefill"] >= self.spec.prefill and ready["decode"] >= self.spec.decode:
                return info
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster not ready after {timeout_s:.0f}s ({line.strip()}); logs in {self.log_dir}")
            time.sleep(0.2)

    def info(self, timeout_s: float = 5.0, address: str = "") -> gateway_pb2.InfoResponse | None:
        """A gateway's Info (the first's unless ``address`` names another); None if it cannot answer."""
        metadata = (("authorization", f"Bearer {self.spec.api_key}"),) if self.spec.api_key else None
        try:
            with self._channel(address or self.address) as ch:
                return gateway_pb2_grpc.GatewayStub(ch).Info(gateway_pb2.InfoRequest(), timeout=timeout_s,
                                                             metadata=metadata)
        except grpc.RpcError:
            return None

    def _channel(self, address: str) -> grpc.Channel:
        if self.spec.tls_ca:
            credentials = grpc.ssl_channel_credentials(Path(self.spec.tls_ca).read_bytes())
            return grpc.secure_channel(address, credentials)
        return grpc.insecure_channel(address)

    def signal(self, name: str, sig: int) -> None:
        self.processes[name].send_signal(sig)

    def kill(self, name: str, sig: int | None = None, wait_s: float = 60.0) -> int:
        """Sends ``sig`` and waits for the process to exit; returns its exit code. A process ended
        this way no longer counts as a start-up failure in ``wait_ready``."""
        proc = self.processes[name]
        proc.send_signal(sig if sig is not None else signal.SIGKILL)
        code = proc.wait(wait_s)
        self._ended.add(name)
        return code

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to workers then the gateways; SIGKILL what is still running after ``grace_s``."""
        gateways = [n for n in self.processes if n.startswith("gateway")]
        order = [n for n in self.processes if n not in gateways] + gateways
        for name in order:
            if self.processes[name].poll() is None:
                self.processes[name].send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for name in order:
            proc = self.processes[name]
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for name in self.processes:
            if name.startswith("decode"):
                unlink_shared(pool_segment_name(name))
        for log in self._logs:
            log.close()  # type: ignore[attr-defined]
        if self.mps is not None:  # last: its clients (the workers) have exited
            daemon, self.mps = self.mps, None
            stop_mps(daemon)

    def __enter__(self) -> LocalCluster:
        return self if self.processes else self.start()  # `with LocalCluster(...).start(progress=True)` too

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _model_args(self) -> list[str]:
        return ["--model", self.spec.model] if self.spec.model else ["--preset", self.spec.preset]

    def _spawn(self, name: str, args: list[str]) -> None:
        env = dict(os.environ)
        if self.mps is not None and not name.startswith("gateway"):
            env.update(self.mps.environment())
        log = open(self.log_dir / f"{name}.log", "ab")
        self._log_offsets[name] = log.tell()
        self._logs.append(log)
        self._ended.discard(name)
        # Pinned and niced before exec, so every thread the process starts inherits both; workers
        # also pin themselves (--cpu-cores) as they do when started alone.
        planned = self.plan.get(name) or (self.plan.get("gateway") if name.startswith("gateway") else None)
        cores, nice = (planned.cores, planned.nice) if planned is not None else ((), 0)

        def place() -> None:
            if cores:
                os.sched_setaffinity(0, cores)
            if nice:
                os.nice(nice)

        self.processes[name] = subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT,
                                                env=env, start_new_session=True,
                                                preexec_fn=place if cores or nice else None)

    def _gateway_listening(self, timeout_s: float, name: str = "gateway") -> bool:
        """Waits until the gateway has bound its ports (True) or exited (False)."""
        deadline = time.monotonic() + timeout_s
        log = self.log_dir / f"{name}.log"
        start = self._log_offsets.get(name, 0)  # the log is appended to across restarts
        while time.monotonic() < deadline:
            if "gateway listening on" in log.read_text(errors="replace")[start:]:
                return True
            if self.processes[name].poll() is not None:
                return False
            time.sleep(0.05)
        return True  # let wait_ready report what is wrong

    def _check_alive(self) -> None:
        for name, proc in self.processes.items():
            if name not in self._ended and proc.poll() is not None:
                tail = (self.log_dir / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited with code {proc.returncode} during start-up:\n{tail}")


def _exit_on_sigterm() -> None:
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def _ready_counts(info: gateway_pb2.InfoResponse | None) -> dict[str, int]:
    counts = {"prefill": 0, "decode": 0}
    for worker in info.workers if info else []:
        if worker.state == "ready":
            counts[worker.role] += 1
    return counts
