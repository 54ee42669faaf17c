"""Every ``PDSERVE_*`` environment variable is read here and nowhere else."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where embedded models are written (``PDSERVE_CACHE_DIR``, default ``~/.cache/pdserve``)."""
    explicit = os.environ.get("PDSERVE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pdserve"


def default_model() -> str | None:
    """A checkpoint directory to use instead of the embedded model (``PDSERVE_MODEL``)."""
    return os.environ.get("PDSERVE_MODEL") or None


def default_preset() -> str | None:
    """The model every command uses when given none (``PDSERVE_PRESET``, e.g. ``tiny`` for fast tests)."""
    return os.environ.get("PDSERVE_PRESET") or None


def default_dtype() -> str | None:
    """The engine's dtype when none is given (``PDSERVE_DTYPE``; unset: ``auto``). The tests set
    ``float32``, the precision whose greedy output is token-identical to transformers'."""
    return os.environ.get("PDSERVE_DTYPE") or None
