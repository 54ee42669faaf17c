"""Reading a process's Prometheus endpoint back (benchmarks and tests of real clusters)."""

from __future__ import annotations

import urllib.request


def scrape_metrics(port: int, host: str = "127.0.0.1", timeout_s: float = 5.0) -> dict[str, float]:
    """Every sample of the ``/metrics`` endpoint at ``host:port``, by its name with labels."""
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout_s).read().decode()
    return {name: float(value) for name, value in (line.rsplit(" ", 1) for line in text.splitlines()
                                                   if line and not line.startswith("#"))}
