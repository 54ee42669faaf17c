"""bench/engine.py's peer: found or skipped with a reason, its figures joined to pdserve's entries."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

from bench.lib.peer_runs import add_peer, peer_env, peer_python, run_vllm


def fake_peer(tmp_path: Path, body: str) -> Path:
    """An interpreter stand-in: a shell script that ignores its arguments."""
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


ARGS = SimpleNamespace(batch_sizes=[1, 8], prompt_len=16, output_len=4, dtype="float32", repeats=1, device="cpu")


def test_an_absent_peer_is_skipped_with_how_to_get_one(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("PDSERVE_PEER_VLLM", raising=False)
    monkeypatch.chdir(tmp_path)
    assert peer_python(tmp_path / "nowhere" / "python") is None
    assert run_vllm(tmp_path / "nowhere" / "python", tmp_path, ARGS) is None
    assert "install-vllm-cpu.sh" in capsys.readouterr().err


def test_the_peer_interpreter_comes_from_the_environment_when_not_given(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    exe = fake_peer(tmp_path, "exit 0")
    monkeypatch.setenv("PDSERVE_PEER_VLLM", str(exe))
    assert peer_python(None) == exe


def test_every_entry_gains_the_peers_figure_and_pdserves_ratio_to_it() -> None:
    decode = [{"batch": 1, "pdserve_tok_s": 5.0}, {"batch": 8, "pdserve_tok_s": 60.0}, {"batch": 64, "pdserve_tok_s": 1.0}]
    prefill = [{"batch": 1, "pdserve_tok_s": 50.0}, {"batch": 8, "pdserve_tok_s": 200.0}, {"batch": 64, "pdserve_tok_s": 1.0}]
    add_peer(decode, prefill, {1: {"decode_tok_s": 10.0, "prefill_tok_s": 100.0},
                               8: {"decode_tok_s": 40.0, "prefill_tok_s": 400.0}})
    assert [d["vllm_tok_s"] for d in decode] == [10.0, 40.0, None]
    assert [d["ratio_to_vllm"] for d in decode] == [0.5, 1.5, None]
    assert [p["ratio_to_vllm"] for p in prefill] == [0.5, 0.5, None]


def test_the_peer_is_bound_to_as_many_cores_as_pdserves_threads(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import torch

    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {3, 5})
    assert peer_env("cpu")["VLLM_CPU_OMP_THREADS_BIND"] == "3"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in peer_env("cuda")
