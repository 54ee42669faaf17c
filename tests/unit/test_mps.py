"""Starting and stopping the CUDA MPS daemon, with the commands recorded instead of run."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping

import pytest

from pdserve.mps import CONTROL, MpsError, server_pids, start_mps, stop_mps

CONTROL_PATH = "/usr/bin/nvidia-cuda-mps-control"


class RecordingRunner:
    """Stands in for ``run_command``: records each call and answers with a fixed result."""

    def __init__(self, returncode: int = 0, stdout: str = "", stderr: str = "") -> None:
        self.calls: list[tuple[list[str], dict[str, str], str | None]] = []
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __call__(self, argv: list[str], env: Mapping[str, str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        self.calls.append((argv, dict(env), stdin))
        return subprocess.CompletedProcess(argv, self.returncode, self.stdout, self.stderr)


def found(name: str) -> str | None:
    return CONTROL_PATH if name == CONTROL else None


def test_start_runs_the_control_daemon_with_its_own_pipe_and_log_directories(tmp_path):
    run = RecordingRunner()
    daemon = start_mps(tmp_path, ["cuda", "cuda"], run=run, which=found)
    try:
        assert run.calls == [([CONTROL_PATH, "-d"], daemon.environment(), None)]
        env = daemon.environment()
        assert env == {"CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "mps")}
        assert daemon.pipe_dir.is_dir() and daemon.log_dir.is_dir()
        assert len(str(daemon.pipe_dir)) < 80  # room for the socket names under the 108-byte limit
    finally:
        stop_mps(daemon, run=run)


def test_stop_sends_quit_with_the_same_environment_and_removes_the_pipe_directory(tmp_path):
    run = RecordingRunner()
    daemon = start_mps(tmp_path, ["cuda:0"], run=run, which=found)
    stop_mps(daemon, run=run)
    assert run.calls[-1] == ([CONTROL_PATH], daemon.environment(), "quit\n")
    assert not daemon.pipe_dir.exists()


def test_no_worker_on_a_gpu_is_refused_before_anything_runs(tmp_path):
    run = RecordingRunner()
    with pytest.raises(MpsError, match=r"--mps needs workers on a cuda device, and they run on cpu \(give --device"):
        start_mps(tmp_path, ["cpu", "cpu"], run=run, which=found)
    assert run.calls == []


def test_a_missing_control_binary_is_named(tmp_path):
    with pytest.raises(MpsError, match=f"--mps: {CONTROL} is not on PATH"):
        start_mps(tmp_path, ["cuda"], run=RecordingRunner(), which=lambda name: None)


def test_a_daemon_that_fails_to_start_reports_its_error_and_leaves_no_pipe_directory(tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    run = RecordingRunner(returncode=1, stderr="An instance of this daemon is already running")
    with pytest.raises(MpsError, match="could not start the MPS control daemon: .* exited with 1: An instance"):
        start_mps(tmp_path, ["cuda"], run=run, which=found)
    assert len(run.calls) == 1 and list(temp.iterdir()) == []


def test_a_daemon_that_does_not_stop_keeps_its_pipe_directory(tmp_path):
    daemon = start_mps(tmp_path, ["cuda"], run=RecordingRunner(), which=found)
    with pytest.raises(MpsError, match="could not stop the MPS control daemon"):
        stop_mps(daemon, run=RecordingRunner(returncode=1))
    assert daemon.pipe_dir.is_dir()  # still the only way to reach the daemon
    stop_mps(daemon, run=RecordingRunner())


def test_a_runner_that_times_out_is_an_mps_error(tmp_path):
    def hangs(argv: list[str], env: Mapping[str, str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, 30)

    with pytest.raises(MpsError, match="could not start the MPS control daemon"):
        start_mps(tmp_path, ["cuda"], run=hangs, which=found)


def test_server_pids_reads_the_server_list(tmp_path):
    daemon = start_mps(tmp_path, ["cuda"], run=RecordingRunner(), which=found)
    run = RecordingRunner(stdout="4242\n4243\n")
    assert server_pids(daemon, run=run) == [4242, 4243]
    assert run.calls == [([CONTROL_PATH], daemon.environment(), "get_server_list\n")]
    stop_mps(daemon, run=RecordingRunner())
