"""Prefix caching across processes: the gateway compares its own block hashes of a prompt with the
ones a worker publishes, so they must not depend on the process (its hash seed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from common.engine.prefix_cache import chain_hashes


def test_hashes_are_the_same_in_another_process():
    # the gateway compares its own hashes of a prompt with the ones a worker publishes
    code = "from common.engine.prefix_cache import chain_hashes; print(chain_hashes(list(range(64)), 16, 7))"
    root = Path(__file__).resolve().parents[2]
    out = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                          env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert out == {f"{chain_hashes(list(range(64)), 16, 7)}\n"}
