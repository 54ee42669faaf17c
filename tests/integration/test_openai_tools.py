"""Tool calls through the OpenAI port of a real cluster, on a checkpoint whose chat template
defines Hermes' ``<tool_call>`` format (the tiny model's weights: its answers are random, so every
call below is shaped by a constraint, and what is checked is that pdserve reads it back as a call,
whole and streamed, with its arguments valid against the function's parameters)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import openai
import pytest

from pdserve.cluster import LocalCluster
from tests.integration.conftest import assert_pools_whole, start_cluster
from tests.tool_checkpoint import tool_checkpoint

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1,
                                                                                          "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    tmp = tmp_path_factory.mktemp("tools")
    cluster = start_cluster(tmp, model=str(tool_checkpoint(tmp / "checkpoint")), http_port=0)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def client(served: LocalCluster) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{served.http_address}/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def model(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def _arguments_valid(call) -> None:  # type: ignore[no-untyped-def]
    schema = {"get_weather": WEATHER, "get_time": TIME}[call.function.name]["function"]["parameters"]
    jsonschema.validate(json.loads(call.function.arguments), schema)


def test_a_forced_call_is_returned_as_tool_calls(served, client, model):
    for seed in range(4):
        reply = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
                                               temperature=1.0, seed=seed, max_tokens=80)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None, choice
        assert len(choice.message.tool_calls) == 1 and choice.message.tool_calls[0].id.startswith("call_")
        _arguments_valid(choice.message.tool_calls[0])
    named = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER, TIME], temperature=1.0, seed=9,
                                           max_tokens=80, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert named.choices[0].message.tool_calls[0].function.name == "get_weather"
    _arguments_valid(named.choices[0].message.tool_calls[0])
    assert_pools_whole(served)


def test_a_streamed_forced_call_comes_in_the_last_chunk(client, model):
    chunks = list(client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER], tool_choice="required",
                                                 temperature=1.0, seed=3, max_tokens=80, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    calls = [t for c in chunks if c.choices and c.choices[0].delta.tool_calls for t in c.choices[0].delta.tool_calls]
    assert len(calls) == 1 and calls[0].function.name == "get_weather" and chunks[-1].choices[0].finish_reason == "tool_calls"
    _arguments_valid(calls[0])


def test_an_auto_answer_with_a_call_block_is_read_as_a_call_and_its_text(client, model):
    """The model decides (tool_choice auto); a regular expression makes this random model write a
    call block the way the template says, after some text."""
    shape = r'Checking\. <tool_call>\{"name": "get_weather", "arguments": \{"city": "[A-Z][a-z]{2,8}", "days": [1-7]\}\}</tool_call>'
    kwargs = dict(model=model, messages=ASK, tools=[WEATHER, TIME], temperature=1.0, seed=5, max_tokens=400,
                  extra_body={"guided_regex": shape})
    reply = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking."
    _arguments_valid(choice.message.tool_calls[0])
    chunks = list(client.chat.completions.create(stream=True, **kwargs))  # type: ignore[call-overload]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [t for c in chunks if c.choices and c.choices[0].delta.tool_calls for t in c.choices[0].delta.tool_calls]
    assert text.strip() == "Checking." and "<tool_call>" not in text
    assert [c.function.arguments for c in calls] == [choice.message.tool_calls[0].function.arguments]


def test_a_conversation_with_an_earlier_call_and_its_result_is_served(client, model):
    history = [*ASK, {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris", "days": 1}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    reply = client.chat.completions.create(model=model, messages=history, tools=[WEATHER], max_tokens=4,  # type: ignore[arg-type]
                                           temperature=0)
    plain = client.chat.completions.create(model=model, messages=ASK, max_tokens=4, temperature=0)
    assert reply.usage.prompt_tokens > plain.usage.prompt_tokens + 20  # the tools, the call and its result rendered
    assert reply.choices[0].finish_reason in ("length", "stop")
