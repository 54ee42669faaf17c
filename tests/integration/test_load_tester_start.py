"""The load tester starts before its first request: what it imports is paid on the cores it measures."""

from __future__ import annotations

import subprocess
import sys


def test_the_load_tester_loads_matplotlib_only_when_plots_are_asked_for() -> None:
    code = ("import sys, client.bench.cli; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
