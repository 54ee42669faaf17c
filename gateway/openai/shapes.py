"""How the OpenAI endpoints' answers look: whole (one choice or several), and as stream chunks,
each naming its choice's ``index``, with its tokens' log probabilities where they were asked for
(``gateway.openai.logprobs``)."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from gateway.openai.convert import created
from gateway.openai.logprobs import TokenText, chat_content, completion_lists
from gateway.openai.tools import ToolCallText, ToolUse, read_calls
from wire.v1 import gateway_pb2

Logprobs = Sequence[gateway_pb2.TokenLogprobs]


class Shape(abc.ABC):
    """How one endpoint's answers look: whole, and as stream chunks."""

    object_whole = object_chunk = id_prefix = ""

    def __init__(self, rid: str, model: str, token_text: TokenText | None = None) -> None:
        self.rid, self.model, self.created = rid, model, created()
        self.token_text = token_text  # a token's own text, for its logprobs (None: none are shown)

    def _envelope(self, obj: str, choices: list[dict[str, object]]) -> dict[str, object]:
        return {"id": f"{self.id_prefix}-{self.rid}", "object": obj, "created": self.created, "model": self.model, "choices": choices}

    def whole(self, text: str, finish: str, counts: dict[str, object], ids: Sequence[int] = (),
              logprobs: Logprobs = ()) -> dict[str, object]:
        return self.whole_of([self.choice(0, text, finish, ids, logprobs)], counts)

    def whole_of(self, choices: list[dict[str, object]], counts: dict[str, object]) -> dict[str, object]:
        return {**self._envelope(self.object_whole, choices), "usage": counts}

    @abc.abstractmethod
    def choice(self, index: int, text: str, finish: str, ids: Sequence[int] = (),
               logprobs: Logprobs = ()) -> dict[str, object]: ...

    def opening(self, index: int = 0) -> list[dict[str, object]]:
        return []

    @abc.abstractmethod
    def delta(self, text: str, index: int = 0, ids: Sequence[int] = (), logprobs: Logprobs = ()) -> dict[str, object]: ...

    @abc.abstractmethod
    def finish(self, reason: str, index: int = 0) -> dict[str, object]: ...

    def usage_chunk(self, counts: dict[str, object]) -> dict[str, object]:
        return {**self._envelope(self.object_chunk, []), "usage": counts}


class CompletionShape(Shape):
    object_whole = object_chunk = "text_completion"
    id_prefix = "cmpl"

    def __init__(self, rid: str, model: str, token_text: TokenText | None = None) -> None:
        super().__init__(rid, model, token_text)
        self._offsets: dict[int, int] = {}  # choice index -> characters of its tokens' texts shown so far

    def choice(self, index: int, text: str, finish: str, ids: Sequence[int] = (),
               logprobs: Logprobs = ()) -> dict[str, object]:
        return {"index": index, "text": text, "finish_reason": finish, "logprobs": self._logprobs(index, ids, logprobs)}

    def delta(self, text: str, index: int = 0, ids: Sequence[int] = (), logprobs: Logprobs = ()) -> dict[str, object]:
        return self._envelope(self.object_chunk, [{"index": index, "text": text, "finish_reason": None,
                                                   "logprobs": self._logprobs(index, ids, logprobs)}])

    def finish(self, reason: str, index: int = 0) -> dict[str, object]:
        return self._envelope(self.object_chunk, [{"index": index, "text": "", "finish_reason": reason,
                                                   "logprobs": None}])

    def _logprobs(self, index: int, ids: Sequence[int], logprobs: Logprobs) -> dict[str, list[object]] | None:
        if not logprobs or self.token_text is None:
            return None
        lists, self._offsets[index] = completion_lists(ids, logprobs, self.token_text, self._offsets.get(index, 0))
        return lists


class ChatShape(Shape):
    """With ``tools`` (``gateway.openai.tools``), an answer's tool calls come as ``tool_calls``
    (streamed: in the last chunk), and its finish reason is ``tool_calls``."""

    object_whole, object_chunk = "chat.completion", "chat.completion.chunk"
    id_prefix = "chatcmpl"

    def __init__(self, rid: str, model: str, token_text: TokenText | None = None, tools: ToolUse | None = None) -> None:
        super().__init__(rid, model, token_text)
        self.tools = tools
        self._streamed: dict[int, ToolCallText] = {}  # choice index -> its text so far, calls held back

    def choice(self, index: int, text: str, finish: str, ids: Sequence[int] = (),
               logprobs: Logprobs = ()) -> dict[str, object]:
        message: dict[str, object] = {"role": "assistant", "content": text}
        if self.tools is not None:
            message["content"], calls = read_calls(text, self.tools)
            if calls:
                message["tool_calls"], finish = calls, "tool_calls" if finish == "stop" else finish
        return {"index": index, "message": message, "finish_reason": finish, "logprobs": self._logprobs(ids, logprobs)}

    def opening(self, index: int = 0) -> list[dict[str, object]]:
        return [self._chunk({"role": "assistant", "content": ""}, None, index)]

    def delta(self, text: str, index: int = 0, ids: Sequence[int] = (), logprobs: Logprobs = ()) -> dict[str, object]:
        if self.tools is not None:
            text = self._streamed.setdefault(index, ToolCallText(self.tools)).add(text)
        return self._chunk({"content": text}, None, index, self._logprobs(ids, logprobs))

    def finish(self, reason: str, index: int = 0) -> dict[str, object]:
        if self.tools is None:
            return self._chunk({}, reason, index)
        rest, calls = self._streamed.setdefault(index, ToolCallText(self.tools)).finish()
        delta: dict[str, object] = {"content": rest} if rest else {}
        if calls:
            delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(calls)]
            reason = "tool_calls" if reason == "stop" else reason
        return self._chunk(delta, reason, index)

    def _logprobs(self, ids: Sequence[int], logprobs: Logprobs) -> dict[str, object] | None:
        if not logprobs or self.token_text is None:
            return None
        return {"content": chat_content(ids, logprobs, self.token_text)}

    def _chunk(self, delta: dict[str, object], finish: str | None, index: int,
               logprobs: dict[str, object] | None = None) -> dict[str, object]:
        return self._envelope(self.object_chunk, [{"index": index, "delta": delta, "finish_reason": finish,
                                                   "logprobs": logprobs}])
