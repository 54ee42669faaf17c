"""The OpenAI API's output constraints as a request's ``StructuredOutput`` (enforced on the workers
while sampling: ``common.model.grammar``): ``response_format`` ``json_object`` and ``json_schema``,
and vLLM's ``guided_json``, ``guided_regex``, ``guided_choice`` and ``guided_grammar``. At most one
may be given; what is malformed here is a 400 naming its field (a spec that is well-formed but
does not compile is refused by the worker, also with INVALID_ARGUMENT)."""

from __future__ import annotations

import json

from gateway.errors import field_error
from gateway.openai.schemas import SamplingFields
from wire.v1 import gateway_pb2


def structured_output(body: SamplingFields) -> gateway_pb2.StructuredOutput | None:
    given = [(name, getattr(body, name)) for name in ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
             if getattr(body, name) is not None]
    kind = (body.response_format or {}).get("type", "text")
    if kind != "text":
        given.insert(0, ("response_format", body.response_format))
    if not given:
        return None
    if len(given) > 1:
        raise field_error(given[1][0], f"{given[0][0]} and {given[1][0]} both constrain the output: give one")
    name, value = given[0]
    if name == "response_format":
        return _response_format(value)
    if name == "guided_json":
        return gateway_pb2.StructuredOutput(kind="json_schema", spec=_schema_text(name, value))
    if name == "guided_choice":
        if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
            raise field_error(name, "guided_choice must be a non-empty list of strings")
        return gateway_pb2.StructuredOutput(kind="choice", spec=json.dumps(value))
    if not isinstance(value, str) or not value:
        raise field_error(name, f"{name} must be a non-empty string")
    return gateway_pb2.StructuredOutput(kind="regex" if name == "guided_regex" else "grammar", spec=value)


def _response_format(value: dict[str, object]) -> gateway_pb2.StructuredOutput:
    kind = value.get("type")
    if kind == "json_object":
        return gateway_pb2.StructuredOutput(kind="json")
    if kind == "json_schema":
        wrapper = value.get("json_schema")
        if not isinstance(wrapper, dict) or "schema" not in wrapper:
            raise field_error("response_format", "response_format json_schema needs json_schema.schema")
        return gateway_pb2.StructuredOutput(kind="json_schema", spec=_schema_text("response_format", wrapper["schema"]))
    raise field_error("response_format", f"response_format type {kind!r} is not one of text, json_object, json_schema")


def _schema_text(field: str, schema: object) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise field_error(field, f"{field}: the schema is not JSON ({exc})") from None
    if not isinstance(schema, dict):
        raise field_error(field, f"{field}: a JSON Schema is an object")
    return json.dumps(schema)
