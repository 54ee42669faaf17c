"""Token ids → text deltas for one request: whole characters only, stop strings cut out.

Text that could be the start of a stop string is held back until it is known not to be,
so a client never sees part of a stop string.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.text.detokenizer import Decoder, IncrementalDetokenizer


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    stopped: bool  # a stop string was reached: the request ends here


class TextStream:
    def __init__(self, tokenizer: Decoder, stop: tuple[str, ...] = ()) -> None:
        self._detok = IncrementalDetokenizer(tokenizer)
        self._stop = stop
        self._pending = ""  # decoded but not yet sent
        self._done = False

    def add(self, token_ids: list[int] | tuple[int, ...]) -> TextDelta:
        if self._done:
            return TextDelta("", True)
        self._pending += self._detok.add(token_ids)
        return self._release(final=False)

    def finish(self) -> TextDelta:
        if not self._done:
            self._pending += self._detok.flush()
        return self._release(final=True)

    def _release(self, final: bool) -> TextDelta:
        for stop in self._stop:
            at = self._pending.find(stop)
            if at >= 0:
                self._done = True
                text, self._pending = self._pending[:at], ""
                return TextDelta(text, True)
        keep = 0 if final else self._possible_stop_prefix()
        text = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(text):]
        return TextDelta(text, False)

    def _possible_stop_prefix(self) -> int:
        """Length of the longest tail of the pending text that begins some stop string."""
        longest = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(self._pending)), longest, -1):
                if stop.startswith(self._pending[-n:]):
                    longest = n
                    break
        return longest
