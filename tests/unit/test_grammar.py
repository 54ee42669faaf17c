"""Structured output is enforced where tokens are sampled (``common.model.grammar``): at
temperature 1.0 on the tiny model, whose random weights favour no format at all, every output
is one of the choices, matches the regular expression, or is JSON valid against its schema, and
ends there ("stop"); a spec that does not compile is refused with the request."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from common.model.location import ensure_model
from common.model.sampling_params import SamplingParams, StructuredOutput
from common.text.auto_tokenizer import load_tokenizer
from tests.engine_helpers import checked_engine

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green", "blue"]},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["ok", "color", "n"], "additionalProperties": False}


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return ensure_model("tiny")


def _outputs(model_dir: Path, structured: StructuredOutput, n: int, **extra: object) -> list[tuple[str, str]]:
    tokenizer = load_tokenizer(model_dir)
    with checked_engine(model_dir, **extra) as engine:  # type: ignore[arg-type]
        for i in range(n):
            engine.add_request(f"r{i}", [1, 2, 3, 4 + i], SamplingParams(max_tokens=48, temperature=1.0, seed=i,
                                                                           structured=structured))
        ids: dict[str, list[int]] = {f"r{i}": [] for i in range(n)}
        reasons: dict[str, str] = {}
        while engine.has_unfinished_requests():
            for out in engine.step():
                ids[out.request_id] += out.new_token_ids
                if out.finished:
                    reasons[out.request_id] = out.finish_reason or ""
        assert len(engine.runner.grammars) == 0, "a finished request's matcher was kept"
    return [(tokenizer.decode(ids[f"r{i}"], skip_special_tokens=True), reasons[f"r{i}"]) for i in range(n)]


def test_choices_and_regular_expressions_hold_at_temperature_one(model_dir):
    choices = ["yes", "no", "not sure"]
    for text, reason in _outputs(model_dir, StructuredOutput("choice", json.dumps(choices)), 12):
        assert text in choices and reason == "stop"
    for text, reason in _outputs(model_dir, StructuredOutput("regex", r"[0-9]{3}-[a-z]{2}"), 12):
        assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", text) and reason == "stop", text


@pytest.mark.parametrize("max_num_tokens", [4096, 2])  # one forward per prompt; and prompts in chunks
def test_json_schema_output_validates(model_dir, max_num_tokens):
    for text, reason in _outputs(model_dir, StructuredOutput("json_schema", json.dumps(SCHEMA)), 10,
                                 max_num_tokens=max_num_tokens):
        assert reason == "stop", text
        jsonschema.validate(json.loads(text), SCHEMA)
    # any object: the random model may write one string until max_tokens; whatever ended is one
    ended = [text for text, reason in _outputs(model_dir, StructuredOutput("json"), 6) if reason == "stop"]
    assert all(isinstance(json.loads(text), dict) for text in ended), ended


def test_a_spec_that_does_not_compile_is_refused_with_the_request(model_dir):
    with checked_engine(model_dir) as engine:
        for bad in (StructuredOutput("json_schema", "{not json"), StructuredOutput("regex", "[a-"),
                    StructuredOutput("choice", '"one"'), StructuredOutput("grammar", "root ::= undefined_rule")):
            with pytest.raises(ValueError, match="structured output"):
                engine.add_request("bad", [1, 2, 3], SamplingParams(structured=bad))
    with pytest.raises(ValueError, match="ignore_eos"):
        SamplingParams(structured=StructuredOutput("json"), ignore_eos=True)
