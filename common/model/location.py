"""Where a model's files are: ``--model``, ``PDSERVE_MODEL``, or an embedded preset in the cache.

Torch-free, so the gateway (which needs only the config and the tokenizer) can find the model
without importing the forward; a preset that does not exist yet is written by
``common.model.create``, imported only then.
"""

from __future__ import annotations

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
        from common.model.create import create_model  # needs torch: only when there is something to write

        create_model(preset, out)
    return out


def resolve_model_dir(model: str | None, preset: str) -> Path:
    """``--model`` if given, else ``PDSERVE_MODEL``, else the embedded preset (created on first use)."""
    chosen = model or env.default_model()
    return Path(chosen) if chosen else ensure_model(preset)
