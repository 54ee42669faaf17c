"""Shared test setup: an isolated model cache, and Triton in interpreter mode on CPU machines."""

from __future__ import annotations

import os
from pathlib import Path

# Must happen before anything imports triton: without a GPU, kernels run in the interpreter.
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:  # pragma: no cover
    pass

# Embedded models are deterministic, so one cache inside the checkout serves every run.
os.environ.setdefault("PDSERVE_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".pdserve-cache"))

# Tests run on the tiny random-weight model unless they name another (the real default is slower).
os.environ.setdefault("PDSERVE_PRESET", "tiny")

# float32: the precision whose greedy output is token-identical to transformers' (``auto`` would
# pick bfloat16 on CPUs with AVX512-BF16); tests of other dtypes name theirs.
os.environ.setdefault("PDSERVE_DTYPE", "float32")
