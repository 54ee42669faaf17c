"""Chat tools in the OpenAI front (``gateway.openai.tools``): the tools and earlier calls reach the
model's chat template, a forced call becomes a constraint on the answer, and the answer's
Hermes-style ``<tool_call>`` blocks are read back as calls, whole or streamed."""

from __future__ import annotations

import json

import jsonschema
import pytest

from common.text.chat_template import ChatTemplate
from gateway.chat_messages import template_messages, template_tools
from gateway.errors import RequestError
from gateway.openai.convert import chat_request
from gateway.openai.schemas import ChatCompletionRequest
from gateway.openai.tools import ToolCallText, ToolUse, read_calls
from tests.tool_checkpoint import TOOL_TEMPLATE

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def _body(**fields: object) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=fields.pop("messages", [{"role": "user", "content": "Weather?"}]),
                                 **fields)  # type: ignore[arg-type]


def test_the_template_is_given_the_tools_the_earlier_call_and_its_result():
    messages = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    request = chat_request(_body(messages=messages, tools=[WEATHER, TIME]), {}, "r")
    template = ChatTemplate(TOOL_TEMPLATE, {})
    assert template.tool_call_format == "hermes"
    text = template.render(template_messages(request.messages), tools=template_tools(request.messages))
    assert json.dumps(WEATHER) in text and json.dumps(TIME) in text
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' in text
    assert "<tool_response>sunny, 21 C</tool_response>" in text and text.endswith("<|assistant|>")
    assert not request.sampling.HasField("structured")  # auto: the model decides


def test_a_forced_call_constrains_the_answer_to_that_functions_arguments():
    request = chat_request(_body(tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_weather"}}),
                           {}, "r")
    schema = json.loads(request.sampling.structured.spec)
    jsonschema.validate({"name": "get_weather", "arguments": {"city": "Oslo"}}, schema)
    for wrong in ({"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)
    required = json.loads(chat_request(_body(tools=[WEATHER, TIME], tool_choice="required"), {}, "r").sampling.structured.spec)
    jsonschema.validate({"name": "get_time", "arguments": {}}, required)
    none = chat_request(_body(tools=[WEATHER], tool_choice="none"), {}, "r")
    assert not none.messages.tools and not none.sampling.HasField("structured")


@pytest.mark.parametrize("fields, param", [
    ({"tools": [{"type": "function"}]}, "tools[0]"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
])
def test_bad_tool_fields_are_refused_naming_the_field(fields, param):
    with pytest.raises(RequestError) as caught:
        chat_request(_body(**fields), {}, "r")
    assert caught.value.param == param  # type: ignore[attr-defined]


def test_calls_are_read_from_the_answer_whole_and_streamed():
    text = 'Let me look. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    content, calls = read_calls(text, ToolUse(forced=False))
    assert content == "Let me look." and [c["function"] for c in calls] == [
        {"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    stream = ToolCallText(ToolUse(forced=False))
    sent = "".join(stream.add(text[i:i + 4]) for i in range(0, len(text), 4))
    rest, streamed = stream.finish()
    assert sent == "Let me look. " and not rest and [c["function"] for c in streamed] == [c["function"] for c in calls]
    assert read_calls("no call <tool_call>not json</tool_call>", ToolUse(forced=False)) == (
        "no call <tool_call>not json</tool_call>", [])
    held = ToolCallText(ToolUse(forced=False))
    assert held.add("1 < 2 <tool") == "1 < 2 " and held.finish() == ("<tool", [])
    forced = read_calls('{"name": "get_time", "arguments": {}}', ToolUse(forced=True))
    assert forced[0] is None and forced[1][0]["function"] == {"name": "get_time", "arguments": "{}"}
