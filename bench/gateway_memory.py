"""Resident memory and start-up time of a gateway process, from its start until it listens.

    python bench/gateway_memory.py [--source DIR] [--out FILE]

``--source`` runs the gateway of another checkout (e.g. an older commit in a git worktree) with
this interpreter, so two versions compare on one machine in one run. Prints JSON: peak and
current RSS (MiB), seconds to "listening", and whether torch was loaded.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import device_name, emit, progress  # noqa: E402
from common.model.location import ensure_model  # noqa: E402
from pdserve.ports import free_port  # noqa: E402


def _status(pid: int) -> dict[str, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


def measure(source: Path, repeats: int) -> dict[str, object]:
    runs = []
    for i in range(repeats):
        with tempfile.TemporaryFile() as log:
            started = time.perf_counter()
            proc = subprocess.Popen([sys.executable, "-m", "gateway", "--port", str(free_port()), "--preset", "tiny"],
                                    cwd=source, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONPATH": str(source)})
            try:
                while True:
                    log.seek(0)
                    if b"gateway listening on" in log.read():
                        break
                    if proc.poll() is not None or time.perf_counter() - started > 120:
                        raise RuntimeError(f"gateway did not start from {source}")
                    time.sleep(0.02)
                ready_s = time.perf_counter() - started
                time.sleep(1.0)  # settled
                status = _status(proc.pid)
                maps = Path(f"/proc/{proc.pid}/maps").read_text()
            finally:
                proc.terminate()
                proc.wait(30)
        runs.append({"ready_s": ready_s, "rss_mib": status["VmRSS"] / 1024, "peak_rss_mib": status["VmHWM"] / 1024,
                     "torch_loaded": "libtorch" in maps})
        progress(f"  run {i + 1}/{repeats}: {runs[-1]}")
    best = min(runs, key=lambda r: r["ready_s"])  # type: ignore[arg-type, return-value]
    return {"ready_s_best": best["ready_s"], "rss_mib": min(r["rss_mib"] for r in runs),  # type: ignore[type-var]
            "peak_rss_mib": min(r["peak_rss_mib"] for r in runs), "torch_loaded": runs[0]["torch_loaded"]}  # type: ignore[type-var]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    ensure_model("tiny")
    progress(f"gateway from {args.source}")
    emit({"bench": "gateway_memory", "source": str(args.source), "device": device_name(), **measure(args.source,
                                                                                                    args.repeats)},
         args.out)


if __name__ == "__main__":
    main()
