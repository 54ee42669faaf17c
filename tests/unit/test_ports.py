"""Ports for started processes come from below the kernel's ephemeral range, free, never twice."""

from __future__ import annotations

import socket

import pytest

from pdserve import ports


def test_ports_are_free_below_the_ephemeral_range_and_never_given_twice():
    first_ephemeral = ports._first_ephemeral()
    chosen = [ports.free_port() for _ in range(40)]
    assert len(set(chosen)) == len(chosen)
    assert all(ports.LOWEST <= p < first_ephemeral for p in chosen)
    with socket.socket() as s:
        s.bind(("127.0.0.1", chosen[0]))  # still free: nothing held it


def test_a_port_held_by_another_socket_is_not_chosen(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        monkeypatch.setattr(ports, "LOWEST", taken)
        monkeypatch.setattr(ports, "_first_ephemeral", lambda: taken + ports.TRIES)
        monkeypatch.setattr(ports.random, "randrange", lambda lo, hi: lo)  # always the held port: every try fails
        port = ports.free_port()
    assert port != taken  # fell back to the kernel's choice


@pytest.mark.parametrize("text", ["", "garbage", "12"])
def test_an_unreadable_range_is_linux_default(monkeypatch, tmp_path, text):
    path = tmp_path / "range"
    path.write_text(text)
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", path)
    assert ports._first_ephemeral() == (12 if text == "12" else 32768)
