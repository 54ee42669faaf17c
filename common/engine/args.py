"""Command-line flags for ``EngineConfig``: one flag per field, defaults from the dataclass."""

from __future__ import annotations

import argparse
import dataclasses
import types
from typing import Any, get_args, get_type_hints

from common.engine.config import ATTENTION_BACKENDS, DTYPES, EngineConfig
from common.model.presets import MODEL_NAMES
from common.engine.scheduler import MEMORY_POLICIES
from common.slo.policy import POLICIES

_CHOICES: dict[str, tuple[str, ...]] = {
    "preset": tuple(MODEL_NAMES),
    "dtype": tuple(DTYPES),
    "memory_policy": MEMORY_POLICIES,
    "attention_backend": ATTENTION_BACKENDS,
    "policy": POLICIES,
}


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine")
    hints = get_type_hints(EngineConfig)
    for field in dataclasses.fields(EngineConfig):
        if hints[field.name] is bool:  # a switch: --enforce-eager, --no-enable-prefix-caching
            group.add_argument("--" + field.name.replace("_", "-"), action=argparse.BooleanOptionalAction,
                               default=field.default, help=f"(default: {'on' if field.default else 'off'})")
            continue
        group.add_argument(
            "--" + field.name.replace("_", "-"),
            type=_scalar_type(hints[field.name]),
            default=field.default,
            choices=_CHOICES.get(field.name),
            help=f"(default: {field.default})",
        )


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(EngineConfig)}
    return EngineConfig(**values)


def _scalar_type(hint: Any) -> type:
    if isinstance(hint, types.UnionType):
        return next(a for a in get_args(hint) if a is not type(None))
    return hint
