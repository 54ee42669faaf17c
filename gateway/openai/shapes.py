"""How the OpenAI endpoints' answers look: whole (one choice or several), and as stream chunks,
each naming its choice's ``index``."""

from __future__ import annotations

import abc

from gateway.openai.convert import created


class Shape(abc.ABC):
    """How one endpoint's answers look: whole, and as stream chunks."""

    object_whole = object_chunk = id_prefix = ""

    def __init__(self, rid: str, model: str) -> None:
        self.rid, self.model, self.created = rid, model, created()

    def _envelope(self, obj: str, choices: list[dict[str, object]]) -> dict[str, object]:
        return {"id": f"{self.id_prefix}-{self.rid}", "object": obj, "created": self.created, "model": self.model, "choices": choices}

    def whole(self, text: str, finish: str, counts: dict[str, object]) -> dict[str, object]:
        return self.whole_of([self.choice(0, text, finish)], counts)

    def whole_of(self, choices: list[dict[str, object]], counts: dict[str, object]) -> dict[str, object]:
        return {**self._envelope(self.object_whole, choices), "usage": counts}

    @abc.abstractmethod
    def choice(self, index: int, text: str, finish: str) -> dict[str, object]: ...

    def opening(self, index: int = 0) -> list[dict[str, object]]:
        return []

    @abc.abstractmethod
    def delta(self, text: str, index: int = 0) -> dict[str, object]: ...

    @abc.abstractmethod
    def finish(self, reason: str, index: int = 0) -> dict[str, object]: ...

    def usage_chunk(self, counts: dict[str, object]) -> dict[str, object]:
        return {**self._envelope(self.object_chunk, []), "usage": counts}


class CompletionShape(Shape):
    object_whole = object_chunk = "text_completion"
    id_prefix = "cmpl"

    def choice(self, index: int, text: str, finish: str) -> dict[str, object]:
        return {"index": index, "text": text, "finish_reason": finish, "logprobs": None}

    def delta(self, text: str, index: int = 0) -> dict[str, object]:
        return self._envelope(self.object_chunk, [{"index": index, "text": text, "finish_reason": None,
                                                   "logprobs": None}])

    def finish(self, reason: str, index: int = 0) -> dict[str, object]:
        return self._envelope(self.object_chunk, [{"index": index, "text": "", "finish_reason": reason,
                                                   "logprobs": None}])


class ChatShape(Shape):
    object_whole, object_chunk = "chat.completion", "chat.completion.chunk"
    id_prefix = "chatcmpl"

    def choice(self, index: int, text: str, finish: str) -> dict[str, object]:
        return {"index": index, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                "logprobs": None}

    def opening(self, index: int = 0) -> list[dict[str, object]]:
        return [self._chunk({"role": "assistant", "content": ""}, None, index)]

    def delta(self, text: str, index: int = 0) -> dict[str, object]:
        return self._chunk({"content": text}, None, index)

    def finish(self, reason: str, index: int = 0) -> dict[str, object]:
        return self._chunk({}, reason, index)

    def _chunk(self, delta: dict[str, object], finish: str | None, index: int) -> dict[str, object]:
        return self._envelope(self.object_chunk, [{"index": index, "delta": delta, "finish_reason": finish,
                                                   "logprobs": None}])
