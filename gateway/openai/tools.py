"""Chat tools: ``tools`` and ``tool_choice`` in, ``tool_calls`` out.

The tools go to the model's chat template (``ChatMessages.tools``); a model whose template defines
no tool-call format is refused (``gateway.front_door``). ``tool_choice``:

- ``"auto"`` (the default with tools): the model answers in text or calls tools the way its
  template says, Hermes' (Qwen's) ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
  each such block of the answer becomes a ``tool_calls`` entry, the text around them the content.
- ``"required"`` or ``{"type": "function", "function": {"name": ...}}``: the answer is constrained
  (structured output, ``gateway.openai.structured``) to one call, ``{"name", "arguments"}`` with
  the arguments valid against that function's ``parameters``, and read as that call.
- ``"none"``: the tools are not shown to the model; it answers in text.

A streamed answer holds back what could be the start of a call (``ToolCallText``) and sends the
calls in one chunk once the answer ends.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from gateway.errors import field_error
from wire.v1 import gateway_pb2

OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True, slots=True)
class ToolUse:
    forced: bool  # the answer is one call, constrained to it (``required`` or a named function)


def tool_use(tools: list[dict[str, object]] | None, choice: object,
             request: gateway_pb2.GenerateRequest) -> ToolUse | None:
    """Puts the tools into ``request`` (and the constraint of a forced call into its sampling);
    how its answer is to be read, or None when no tool is in play."""
    if not tools:
        if choice not in (None, "none", "auto"):
            raise field_error("tool_choice", "tool_choice names a tool, but no tools were given")
        return None
    functions = {_name(i, tool): tool for i, tool in enumerate(tools)}
    if choice in (None, "auto"):
        request.messages.tools = json.dumps(tools)
        return ToolUse(forced=False)
    if choice == "none":
        return None
    if choice == "required":
        wanted = list(functions)
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict) and choice["function"].get("name") in functions:
        wanted = [choice["function"]["name"]]
    else:
        raise field_error("tool_choice", "tool_choice must be none, auto, required or "
                          '{"type": "function", "function": {"name": <one of the tools>}}')
    if request.sampling.HasField("structured"):
        raise field_error("tool_choice", "a forced tool call and response_format both constrain the output: give one")
    request.messages.tools = json.dumps(tools)
    calls = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
              "properties": {"name": {"const": name},
                             "arguments": functions[name]["function"].get("parameters") or {"type": "object"}}}
             for name in wanted]  # type: ignore[union-attr]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    request.sampling.structured.CopyFrom(gateway_pb2.StructuredOutput(kind="json_schema", spec=json.dumps(schema)))
    return ToolUse(forced=True)


def _name(i: int, tool: dict[str, object]) -> str:
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise field_error(f"tools[{i}]", 'a tool is {"type": "function", "function": {"name": ..., "parameters": ...}}')
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise field_error(f"tools[{i}].function.parameters", "parameters must be a JSON Schema object")
    return function["name"]


def read_calls(text: str, use: ToolUse) -> tuple[str | None, list[dict[str, object]]]:
    """An answer's content and its tool calls (OpenAI's ``tool_calls`` entries)."""
    if use.forced:  # constrained to one call; cut short (max_tokens) it is text
        try:
            return None, [_call(text)]
        except ValueError:
            return text, []
    content, calls, rest = [], [], text
    while (start := rest.find(OPEN)) >= 0:
        end = rest.find(CLOSE, start)
        body = rest[start + len(OPEN):end if end >= 0 else len(rest)]
        try:
            calls.append(_call(body))
        except ValueError:  # not a call after all: it stays text
            content.append(rest[:end + len(CLOSE)] if end >= 0 else rest)
            rest = rest[end + len(CLOSE):] if end >= 0 else ""
            continue
        content.append(rest[:start])
        rest = rest[end + len(CLOSE):] if end >= 0 else ""
    content.append(rest)
    joined = "".join(content).strip()
    return (joined or None) if calls else "".join(content), calls


def _call(body: str) -> dict[str, object]:
    value = json.loads(body, strict=False)  # a grammar's JSON strings may hold raw tabs
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ValueError("a tool call is {\"name\": ..., \"arguments\": ...}")
    arguments = value.get("arguments", value.get("parameters", {}))
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": value["name"], "arguments": json.dumps(arguments)}}


@dataclass
class ToolCallText:
    """A streamed answer's text with what could be a tool call held back (``add``), and, at its
    end, the content left and the calls (``finish``)."""

    use: ToolUse
    held: str = ""  # from the first possible opening tag on
    _all: list[str] = field(default_factory=list)  # a forced call's whole text

    def add(self, text: str) -> str:
        """The part of the text so far that can be sent as content now."""
        if self.use.forced:
            self._all.append(text)
            return ""
        self.held += text
        at = self.held.find(OPEN)
        if at < 0:  # hold only a tail that could begin the opening tag
            at = next((len(self.held) - n for n in range(min(len(OPEN) - 1, len(self.held)), 0, -1)
                       if OPEN.startswith(self.held[-n:])), len(self.held))
        out, self.held = self.held[:at], self.held[at:]
        return out

    def finish(self) -> tuple[str | None, list[dict[str, object]]]:
        """What is left to send as content, and the answer's calls."""
        if self.use.forced:
            return read_calls("".join(self._all), self.use)
        rest, calls = read_calls(self.held, self.use)
        return (rest if calls else self.held), calls
