from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from common.model.config import parse_model_config
from common.model.rope import inverse_frequencies

BASE = {"vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2}


def test_qwen2_has_qkv_bias_and_no_window_unless_enabled():
    cfg = parse_model_config({**BASE, "model_type": "qwen2", "sliding_window": 32})
    assert cfg.qkv_bias and not cfg.o_bias and cfg.sliding_windows == (None,) * 4


def test_mistral_window_applies_to_every_layer():
    cfg = parse_model_config({**BASE, "model_type": "mistral", "sliding_window": 32})
    assert cfg.sliding_windows == (32,) * 4


def test_old_style_rope_scaling_is_read():
    raw = {**BASE, "rope_theta": 5e5, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
           "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    cfg = parse_model_config(raw)
    assert cfg.rope.rope_type == "llama3" and cfg.rope.theta == 5e5 and cfg.rope.factor == 8.0


def test_llama3_inverse_frequencies_match_transformers():
    params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    hf_config = LlamaConfig(hidden_size=2048, num_attention_heads=16, rope_parameters=params,
                            max_position_embeddings=131072)
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_config, "cpu")
    ours = inverse_frequencies(parse_model_config({**hf_config.to_dict()}).rope, 128)
    assert torch.allclose(ours, expected, rtol=1e-6)


def test_unsupported_architecture_is_refused_by_name():
    with pytest.raises(ValueError, match="gpt2"):
        parse_model_config({**BASE, "model_type": "gpt2"})


def test_auto_dtype_is_bfloat16_where_the_device_computes_it_natively_and_names_pass_through():
    import torch

    from common.engine.config import EngineConfig, resolve_dtype

    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    native = native and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert resolve_dtype("auto", "cpu") == ("bfloat16" if native else "float32")
    for name in ("float32", "bfloat16", "float16"):
        assert resolve_dtype(name, "cpu") == name
    assert EngineConfig(dtype="auto").torch_dtype == getattr(torch, resolve_dtype("auto", "cpu"))
    with pytest.raises(ValueError, match="dtype"):
        EngineConfig(dtype="int8")
