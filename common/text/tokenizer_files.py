"""An offline byte-level tokenizer that ``AutoTokenizer.from_pretrained`` loads.

Token ids 0..255 are the raw bytes, so any text round-trips with no vocabulary download;
then the specials ``<s>`` (BOS, added in front of every prompt), ``</s>`` (EOS), ``<pad>``,
and filler specials up to the model's vocabulary size.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
BOS_ID, EOS_ID, PAD_ID = 256, 257, 258
MIN_VOCAB_SIZE = 259


def byte_to_unicode() -> dict[int, str]:
    """The printable stand-in character for each byte used by byte-level BPE (GPT-2's scheme)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def build_tokenizer(vocab_size: int) -> Tokenizer:
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be at least {MIN_VOCAB_SIZE} for the byte tokenizer")
    vocab = {char: byte for byte, char in byte_to_unicode().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fillers = [f"<extra_{i}>" for i in range(vocab_size - MIN_VOCAB_SIZE)]
    tokenizer.add_special_tokens([BOS, EOS, PAD, *fillers])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, BOS_ID)]
    )
    return tokenizer


def write_tokenizer(out_dir: Path, vocab_size: int, model_max_length: int) -> None:
    build_tokenizer(vocab_size).save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
