"""Ports for the processes a launcher starts, chosen where nothing else will take them first.

A port found free by binding port 0 comes from the kernel's ephemeral range, the same range every
outgoing connection's source port is drawn from: between the launcher's choosing it and the
child's binding it, any connection on the host (the gateway dialing a worker, a health check) can
take it, and the child exits with "address already in use" (seen starting a worker's metrics
port). So ports are drawn at random below that range (``/proc/sys/net/ipv4/ip_local_port_range``),
where only a process binding that very number can collide, and each is checked free now and
never handed out twice by this process. Without such room, the kernel chooses.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 20000  # below the ephemeral range, above what services commonly hold
TRIES = 50
_given: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, on ``host``, that outgoing connections do not use."""
    first_ephemeral = _first_ephemeral()
    if first_ephemeral - LOWEST >= TRIES:
        for _ in range(TRIES):
            port = random.randrange(LOWEST, first_ephemeral)
            if port not in _given and _bindable(host, port):
                _given.add(port)
                return port
    with socket.socket() as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    _given.add(port)
    return port


def _first_ephemeral() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
