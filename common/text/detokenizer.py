"""Incremental detokenization that only ever emits whole characters.

Byte-level tokens can split a UTF-8 character; text is released once the decoded tail no
longer ends in U+FFFD (the replacement character an incomplete sequence decodes to).
"""

from __future__ import annotations

from typing import Protocol


class Decoder(Protocol):
    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Decoder, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.token_ids: list[int] = []
        self._prefix_offset = 0  # tokens before this are never decoded again
        self._read_offset = 0  # tokens before this have been emitted as text
        self.text = ""

    def add(self, new_token_ids: list[int] | tuple[int, ...]) -> str:
        """Appends tokens; returns the newly completed text (possibly empty)."""
        self.token_ids.extend(new_token_ids)
        prefix = self._decode(self.token_ids[self._prefix_offset:self._read_offset])
        full = self._decode(self.token_ids[self._prefix_offset:])
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return ""
        delta = full[len(prefix):]
        self._prefix_offset, self._read_offset = self._read_offset, len(self.token_ids)
        self.text += delta
        return delta

    def flush(self) -> str:
        """At the end of a stream: whatever is left, replacement characters included."""
        full = self._decode(self.token_ids[self._prefix_offset:])
        prefix = self._decode(self.token_ids[self._prefix_offset:self._read_offset])
        delta = full[len(prefix):]
        self._prefix_offset = self._read_offset = len(self.token_ids)
        self.text += delta
        return delta

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens) if ids else ""
