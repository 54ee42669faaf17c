"""Where a model's files are: ``--model``, ``PDSERVE_MODEL``, or an embedded preset in the cache.

Torch-free, so the gateway (which needs only the config and the tokenizer) can find the model
without importing the forward: a preset that does not exist yet is written by ``common.model.create``
in a child process (writing one needs torch, and the gateway's process never imports it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from common import env
from common.model.presets import DEFAULT_PRESET

CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def default_model_dir(preset: str = DEFAULT_PRESET) -> Path:
    return env.cache_dir() / "models" / f"pdserve-{preset}"


def ensure_model(preset: str = DEFAULT_PRESET) -> Path:
    """The embedded model's directory, created on first use."""
    out = default_model_dir(preset)
    if not all((out / name).is_file() for name in CHECKPOINT_FILES):
        # a child process: it needs torch, and concurrent writers are safe (each renames a whole dir into place)
        subprocess.run([sys.executable, "-m", "common.model.create", "--preset", preset, "--out", str(out)], check=True)
    return out


def resolve_model_dir(model: str | None, preset: str) -> Path:
    """``--model`` if given, else ``PDSERVE_MODEL``, else the embedded preset (created on first use)."""
    chosen = model or env.default_model()
    return Path(chosen) if chosen else ensure_model(preset)
