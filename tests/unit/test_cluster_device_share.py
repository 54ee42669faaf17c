"""What ``LocalCluster`` tells workers that share a GPU, and how it runs them under MPS: the
command lines and environments it would start, with processes that are recorded, not run."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from pdserve import cluster as cluster_module
from pdserve.cluster import ClusterSpec, LocalCluster
from pdserve.device_share import device_workers, gpu_of, worker_device
from pdserve.mps import MpsDaemon

PIPE_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY"


class RecordedProcess:
    """Stands in for ``subprocess.Popen``: keeps the command and environment, exits when signalled."""

    def __init__(self, argv: list[str], env: dict[str, str], **_: Any) -> None:
        self.argv, self.env, self.pid = argv, env, 1
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.returncode = -sig

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@pytest.fixture()
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Processes are recorded instead of started; returns the MPS calls made, in order."""
    calls: list[str] = []
    monkeypatch.setattr(cluster_module.subprocess, "Popen", RecordedProcess)
    monkeypatch.setattr(LocalCluster, "_gateway_listening", lambda self, timeout_s: True)
    monkeypatch.setattr(LocalCluster, "wait_ready", lambda self, timeout_s, progress=False: None)

    def start_mps(log_dir: Path, devices: Any) -> MpsDaemon:
        calls.append(f"start {','.join(sorted(set(devices)))}")
        return MpsDaemon("nvidia-cuda-mps-control", Path("/tmp/pipes"), log_dir / "mps")

    monkeypatch.setattr(cluster_module, "start_mps", start_mps)
    monkeypatch.setattr(cluster_module, "stop_mps", lambda daemon: calls.append("stop"))
    return calls


def _started(tmp_path: Path, **spec: Any) -> LocalCluster:
    return LocalCluster(ClusterSpec(port=50999, **spec), tmp_path / "logs").start()


def _argv(cluster: LocalCluster, role: str) -> list[str]:
    return next(p.argv for name, p in cluster.processes.items() if name.startswith(role))  # type: ignore[attr-defined]


def _flag(argv: list[str], name: str) -> str | None:
    """The value argparse would keep: the last one given."""
    values = [argv[i + 1] for i, arg in enumerate(argv) if arg == name]
    return values[-1] if values else None


def test_the_device_a_worker_runs_on_is_its_last_device_flag():
    assert worker_device([]) == "cpu"
    assert worker_device(["--device", "cuda", "--num-kv-blocks", "8"]) == "cuda"
    assert worker_device(["--device", "cuda", "--device=cuda:1", "--device-workers", "2"]) == "cuda:1"


def test_cuda_without_an_index_is_gpu_zero():
    assert (gpu_of("cuda"), gpu_of("cuda:0"), gpu_of("cuda:3"), gpu_of("cpu")) == ("cuda:0", "cuda:0", "cuda:3", None)


def test_only_workers_that_share_a_gpu_are_counted():
    devices = {"prefill-0": "cuda", "prefill-1": "cuda:1", "decode-0": "cuda:0", "decode-1": "cpu"}
    assert device_workers(devices) == {"prefill-0": 2, "decode-0": 2}
    assert device_workers({"prefill-0": "cuda:0", "decode-0": "cuda:1"}) == {}
    assert device_workers({"prefill-0": "cpu", "decode-0": "cpu"}) == {}


def test_workers_on_one_gpu_are_each_told_their_share(tmp_path, recorded):
    cluster = _started(tmp_path, device="cuda", prefill=2, decode=1)
    try:
        for name, process in cluster.processes.items():
            if name != "gateway":
                argv = process.argv  # type: ignore[attr-defined]
                assert (_flag(argv, "--device"), _flag(argv, "--device-workers")) == ("cuda", "3"), name
        assert "--device" not in _argv(cluster, "gateway")
    finally:
        cluster.stop()


def test_workers_on_different_gpus_do_not_share(tmp_path, recorded):
    cluster = _started(tmp_path, device="cuda", prefill_args=("--device", "cuda:1"))
    try:
        assert _flag(_argv(cluster, "prefill"), "--device") == "cuda:1"
        assert _flag(_argv(cluster, "prefill"), "--device-workers") is None
        assert _flag(_argv(cluster, "decode"), "--device-workers") is None
    finally:
        cluster.stop()


def test_a_device_given_through_worker_args_is_shared_too(tmp_path, recorded):
    cluster = _started(tmp_path, worker_args=("--device=cuda:0",))
    try:
        assert _flag(_argv(cluster, "decode"), "--device-workers") == "2"
    finally:
        cluster.stop()


def test_cpu_workers_are_told_nothing_and_the_users_flags_win(tmp_path, recorded):
    cluster = _started(tmp_path)
    try:
        assert _flag(_argv(cluster, "decode"), "--device-workers") is None
    finally:
        cluster.stop()
    cluster = _started(tmp_path, device="cuda", worker_args=("--device-workers", "4", "--num-kv-blocks", "64"))
    try:
        argv = _argv(cluster, "decode")
        assert (_flag(argv, "--device-workers"), _flag(argv, "--num-kv-blocks")) == ("4", "64")
    finally:
        cluster.stop()


def test_mps_starts_before_the_workers_reaches_only_them_and_stops_after_them(tmp_path, recorded):
    cluster = _started(tmp_path, device="cuda", mps=True)
    assert recorded == ["start cuda"]
    for name, process in cluster.processes.items():
        env = process.env  # type: ignore[attr-defined]
        assert env.get(PIPE_VARIABLE) == (None if name == "gateway" else "/tmp/pipes"), name
    cluster.stop()
    assert recorded == ["start cuda", "stop"]
    assert all(p.poll() is not None for p in cluster.processes.values())
    cluster.stop()  # a second stop does not quit the daemon twice
    assert recorded == ["start cuda", "stop"]


def test_a_cluster_whose_daemon_cannot_start_starts_nothing(tmp_path, recorded, monkeypatch):
    from pdserve.mps import MpsError

    def refuses(log_dir: Path, devices: Any) -> MpsDaemon:
        raise MpsError("--mps needs workers on a cuda device")

    monkeypatch.setattr(cluster_module, "start_mps", refuses)
    cluster = LocalCluster(ClusterSpec(port=50999, mps=True), tmp_path / "logs")
    with pytest.raises(MpsError, match="--mps needs workers on a cuda device"):
        cluster.start()
    assert cluster.processes == {}


def test_the_share_reaches_the_workers_engine_config(tmp_path, recorded):
    from common.engine.args import engine_config_from_args
    from pdserve.cli import build_parser

    cluster = _started(tmp_path, device="cuda:0")
    try:
        for role in ("prefill", "decode"):
            argv = _argv(cluster, role)
            assert argv[1:3] == ["-m", f"{role}_worker"]
            config = engine_config_from_args(build_parser().parse_args([role, *argv[3:]]))
            assert (config.device, config.device_workers) == ("cuda:0", 2)
    finally:
        cluster.stop()
