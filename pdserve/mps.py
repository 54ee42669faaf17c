"""CUDA MPS for worker processes that share one GPU (``pdserve up --mps``).

Every worker process has its own CUDA context, and without MPS a GPU time-slices between contexts: a
prefill worker's long forwards and a decode worker's short steps never run at the same time, each
waits out the other's slice, and the TTFT tail stretches with it (docs/decisions.md, 'CUDA MPS for
workers sharing a GPU'). Under MPS one server process holds the GPU and runs the kernels of all its
clients (the workers) side by side.

The control daemon and its clients find each other through ``CUDA_MPS_PIPE_DIRECTORY`` (Unix
sockets, so a short directory in the temp dir: a socket's path must fit in 108 bytes); the
daemon logs to ``CUDA_MPS_LOG_DIRECTORY``. The daemon and every worker get both variables, so
this cluster's daemon is its own and leaves any other one on the machine alone.

    start_mps(log_dir, devices)  →  nvidia-cuda-mps-control -d
    stop_mps(daemon)             →  echo quit | nvidia-cuda-mps-control
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pdserve.device_share import gpu_of

CONTROL = "nvidia-cuda-mps-control"

# (argv, environment added to this process's, standard input) → the finished command
Runner = Callable[[list[str], Mapping[str, str], str | None], subprocess.CompletedProcess[str]]
Finder = Callable[[str], str | None]  # a program's name → its path, or None (shutil.which)


class MpsError(RuntimeError):
    """MPS cannot be started or stopped; the message says why."""


@dataclass(frozen=True, slots=True)
class MpsDaemon:
    control: str  # path of nvidia-cuda-mps-control
    pipe_dir: Path
    log_dir: Path

    def environment(self) -> dict[str, str]:
        """What the daemon and each of its clients need in their environment."""
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}


def run_command(argv: list[str], env: Mapping[str, str], stdin: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env={**os.environ, **env}, input=stdin, capture_output=True, text=True,
                          timeout=30, check=False)


def start_mps(log_dir: Path, devices: Iterable[str], run: Runner = run_command,
              which: Finder = shutil.which) -> MpsDaemon:
    """Starts a control daemon for workers on ``devices`` (their ``--device``), logging under
    ``log_dir/mps``. Raises MpsError when no worker is on a GPU or the daemon cannot start."""
    devices = sorted(set(devices))
    if not any(gpu_of(d) for d in devices):
        raise MpsError(f"--mps needs workers on a cuda device, and they run on {', '.join(devices) or 'nothing'} "
                       "(give --device cuda)")
    control = which(CONTROL)
    if control is None:
        raise MpsError(f"--mps: {CONTROL} is not on PATH (it comes with the NVIDIA driver); "
                       "install it or leave out --mps")
    daemon = MpsDaemon(control, Path(tempfile.mkdtemp(prefix="pdserve-mps-")), log_dir / "mps")
    daemon.log_dir.mkdir(parents=True, exist_ok=True)
    try:
        _call(daemon, run, [control, "-d"], None, "start the MPS control daemon")
    except MpsError:
        shutil.rmtree(daemon.pipe_dir, ignore_errors=True)
        raise
    return daemon


def stop_mps(daemon: MpsDaemon, run: Runner = run_command) -> None:
    """Tells the daemon to quit (its server goes with it); call once its clients have exited."""
    _call(daemon, run, [daemon.control], "quit\n", "stop the MPS control daemon")
    shutil.rmtree(daemon.pipe_dir, ignore_errors=True)  # only now: while it runs, the daemon is reached there


def server_pids(daemon: MpsDaemon, run: Runner = run_command) -> list[int]:
    """Process ids of the daemon's MPS servers: one per GPU some client has connected to."""
    out = _call(daemon, run, [daemon.control], "get_server_list\n", "list the MPS servers")
    return [int(word) for word in out.split() if word.isdigit()]


def _call(daemon: MpsDaemon, run: Runner, argv: list[str], stdin: str | None, what: str) -> str:
    try:
        done = run(argv, daemon.environment(), stdin)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MpsError(f"could not {what}: {exc}") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout or "").strip()
        raise MpsError(f"could not {what}: {' '.join(argv)} exited with {done.returncode}"
                       + (f": {said}" if said else f" (see {daemon.log_dir}/control.log)"))
    return done.stdout or ""
