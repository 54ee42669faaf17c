"""bench/engine.py's peer run as a real process: its last JSON line is read, a failure leaves it out."""

from __future__ import annotations

import json
from pathlib import Path

from bench.lib.peer_runs import run_vllm
from tests.unit.test_bench_peer import ARGS, fake_peer


def test_the_peers_last_json_line_is_read_and_a_failure_leaves_it_out(tmp_path: Path) -> None:
    result = {"peer": "vllm", "version": "x", "results": [{"batch": 1, "decode_tok_s": 10.0, "prefill_tok_s": 100.0},
                                                          {"batch": 8, "decode_tok_s": 40.0, "prefill_tok_s": 400.0}]}
    ok = fake_peer(tmp_path, f"echo 'progress'\necho '{json.dumps(result)}'")
    assert run_vllm(ok, tmp_path, ARGS) == {1: result["results"][0], 8: result["results"][1]}
    failing = tmp_path / "bad"
    failing.mkdir()
    assert run_vllm(fake_peer(failing, f"echo '{json.dumps(result)}'\nexit 3"), tmp_path, ARGS) is None
