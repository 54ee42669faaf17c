"""The gateway tokenizes and routes; it must not carry torch (hundreds of MB, seconds to import)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_gateway_loads_no_torch() -> None:
    code = "import sys, gateway.server; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
