"""A chat as the public API carries it (``ChatMessages``) into what a chat template reads: each
message's role and content, an assistant's tool calls and a tool message's call id, and the tools
the model may call. Malformed JSON in them is INVALID_ARGUMENT naming the message."""

from __future__ import annotations

import json

from gateway.errors import field_error, invalid
from wire.v1 import gateway_pb2


def template_messages(chat: gateway_pb2.ChatMessages) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i, m in enumerate(chat.messages):
        if not m.role:
            raise invalid(f"messages[{i}].role is empty")
        message: dict[str, object] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            message["tool_calls"] = _json_list(m.tool_calls, f"messages[{i}].tool_calls")
        if m.tool_call_id:
            message["tool_call_id"] = m.tool_call_id
        if m.name:
            message["name"] = m.name
        out.append(message)
    return out


def template_tools(chat: gateway_pb2.ChatMessages) -> list[object] | None:
    return _json_list(chat.tools, "tools") if chat.tools else None


def _json_list(text: str, field: str) -> list[object]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise field_error(field, f"{field} is not JSON: {exc}") from None
    if not isinstance(value, list):
        raise field_error(field, f"{field} must be a JSON list")
    return value
