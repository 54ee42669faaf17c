"""Text: tokenizers and incremental detokenization."""
