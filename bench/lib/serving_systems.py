"""The servers ``bench/vs_vllm.py`` compares, each behind its OpenAI HTTP API."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.lib.peer_runs import peer_env
from pdserve.cluster import ClusterSpec, LocalCluster
from pdserve.ports import free_port

READY_TIMEOUT_S = 600.0


def wait_for_models(base_url: str, timeout_s: float, alive: "subprocess.Popen[bytes] | None" = None) -> None:
    """Until ``GET /v1/models`` answers (the server has loaded its model)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"the server at {base_url} exited with {alive.returncode} while starting")
        try:
            with urllib.request.urlopen(f"{base_url}/v1/models", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"{base_url} did not serve /v1/models within {timeout_s:.0f} s")


class VllmSystem:
    """vLLM's OpenAI server on ``model_dir``, from its own environment, on pdserve's cores."""

    def __init__(self, python: Path, model_dir: Path, dtype: str, log: Path) -> None:
        self.python, self.model_dir, self.dtype, self.log = python, model_dir, dtype, log
        self.base_url = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> VllmSystem:
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        cmd = [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
               "--host", "127.0.0.1", "--port", str(port), "--dtype", self.dtype]
        started = time.monotonic()
        with self.log.open("wb") as out:
            self._process = subprocess.Popen(cmd, env=peer_env("cpu"), stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_models(self.base_url, READY_TIMEOUT_S, self._process)
        except Exception:
            self.stop()
            raise
        print(f"  vLLM ready in {time.monotonic() - started:.0f} s (log: {self.log})", file=sys.stderr, flush=True)
        return self

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def __enter__(self) -> VllmSystem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PdserveSystem:
    """A cluster as ``pdserve up`` starts it (its defaults but the policy), with its HTTP front door."""

    def __init__(self, preset: str, policy: str, dtype: str, log_dir: Path) -> None:
        spec = ClusterSpec(port=0, preset=preset, policy=policy, http_port=0,
                           worker_args=("--dtype", dtype))
        self.cluster = LocalCluster(spec, log_dir)
        self.base_url = ""

    def start(self) -> PdserveSystem:
        self.cluster.start(progress=True)
        self.base_url = f"http://{self.cluster.http_address}"
        wait_for_models(self.base_url, 60.0)
        return self

    def __enter__(self) -> PdserveSystem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cluster.stop()
