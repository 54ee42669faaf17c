"""The console script, run as a user would run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _pdserve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pdserve", *args], capture_output=True, text=True, timeout=120)


def test_model_create_writes_the_same_checkpoint_every_time_and_transformers_loads_it(tmp_path: Path):
    for name in ("a", "b"):
        result = _pdserve("model", "create", "--out", str(tmp_path / name))
        assert result.returncode == 0, result.stderr
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["model_type"] == "llama"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    assert AutoTokenizer.from_pretrained(tmp_path / "a").decode([104, 105]) == "hi"


def test_generate_streams_text_and_prints_a_summary():
    result = _pdserve("generate", "--prompt", "hello", "--max-tokens", "12", "--ignore-eos", "--num-kv-blocks", "32")
    assert result.returncode == 0, result.stderr
    assert "12 tokens" in result.stderr and "finish: length" in result.stderr


def test_generate_rejects_bad_sampling_values_with_the_field_name():
    result = _pdserve("generate", "--prompt", "hello", "--top-p", "2")
    assert result.returncode == 2 and "top_p" in result.stderr
