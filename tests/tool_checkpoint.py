"""A checkpoint whose chat template defines a tool-call format (Hermes' ``<tool_call>`` JSON, as
Qwen's templates do): the tiny model's weights and tokenizer with such a template beside them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from common.model.location import ensure_model

TOOL_TEMPLATE = """{%- if tools %}<|system|>You can call these functions:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
To call one, answer <tool_call>{"name": <function name>, "arguments": <arguments object>}</tool_call>
{% endif %}
{%- for message in messages %}
{%- if message.role == "tool" %}<|tool|><tool_response>{{ message.content }}</tool_response>
{% elif message.tool_calls %}<|assistant|>{% for call in message.tool_calls %}<tool_call>{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments }}}</tool_call>{% endfor %}
{% else %}<|{{ message.role }}|>{{ message.content }}
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}"""


def tool_checkpoint(directory: Path) -> Path:
    """``directory`` made a checkpoint: the tiny preset's files (weights linked) and the template."""
    tiny = ensure_model("tiny")
    directory.mkdir(parents=True, exist_ok=True)
    for f in tiny.iterdir():
        target = directory / f.name
        if f.suffix == ".safetensors":
            os.symlink(f, target)
        else:
            shutil.copy(f, target)
    (directory / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    return directory
