"""A checkpoint's chat template, rendered without transformers (the gateway stays torch-free).

The template is the Jinja source the checkpoint ships (``chat_template.jinja``, or
``chat_template`` in ``tokenizer_config.json``), rendered the way transformers'
``apply_chat_template`` renders it: a sandboxed environment, ``trim_blocks`` and
``lstrip_blocks``, ``raise_exception`` for templates that refuse a conversation, and the
tokenizer's special tokens as variables. The rendered text is tokenized without adding special
tokens (the template writes them); a unit test holds both equal to transformers'.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


class ChatTemplateError(ValueError):
    """The conversation cannot be rendered: the template refused it, or it is malformed."""


def _raise(message: str) -> None:
    raise ChatTemplateError(message)


class ChatTemplate:
    def __init__(self, source: str, special_tokens: Mapping[str, str]) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
        self._template = env.from_string(source)
        self._special = dict(special_tokens)
        # how its model writes a tool call: Hermes' (Qwen's) <tool_call>{"name", "arguments"}</tool_call>
        # where the template speaks of it; None: it defines none
        self.tool_call_format: str | None = "hermes" if "<tool_call>" in source else None

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ChatTemplate | None:
        """The checkpoint's template, or None when it has none (a base model)."""
        directory = Path(model_dir)
        config_file = directory / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        jinja_file = directory / "chat_template.jinja"
        source = jinja_file.read_text() if jinja_file.is_file() else _from_config(config.get("chat_template"))
        if not source:
            return None
        special = {key: _content(config.get(key)) for key in SPECIAL_TOKEN_KEYS if config.get(key)}
        return cls(source, special)

    def render(self, messages: Sequence[Mapping[str, object]], add_generation_prompt: bool = True,
               tools: Sequence[object] | None = None) -> str:
        """The prompt text of a conversation, ready for the assistant's reply (and the tools it
        may call, for a template that renders them)."""
        extra = {} if tools is None else {"tools": list(tools)}
        try:
            return self._template.render(messages=[dict(m) for m in messages],
                                         add_generation_prompt=add_generation_prompt, **self._special, **extra)
        except ChatTemplateError:
            raise
        except TemplateError as exc:
            raise ChatTemplateError(f"the model's chat template failed on these messages: {exc}") from None


def _from_config(value: object) -> str | None:
    if isinstance(value, list):  # named templates: [{"name": "default", "template": "..."}, ...]
        named = {item.get("name"): item.get("template") for item in value if isinstance(item, dict)}
        return named.get("default")
    return value if isinstance(value, str) else None


def _content(token: object) -> str:
    return str(token.get("content", "")) if isinstance(token, dict) else str(token)


@lru_cache(maxsize=8)
def load_chat_template(model_dir: str | Path) -> ChatTemplate | None:
    return ChatTemplate.from_dir(model_dir)
