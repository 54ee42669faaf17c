"""The SLO guards are plain code of time and state, so a simulator can drive the very same
decisions on a virtual clock: no module they reach (transitively, within pdserve) may import
gRPC, threads or an event loop."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = ("common", "gateway", "prefill_worker", "decode_worker", "client", "pdserve", "wire")
FORBIDDEN = ("grpc", "threading", "_thread", "asyncio", "concurrent", "multiprocessing")
GUARDS = ("common.slo.ttft_guard", "common.slo.tpot_guard", "common.slo.credit", "common.slo.calibration",
          "common.slo.cost_models", "common.engine.core", "common.slo.promise", "common.slo.routing",
          "common.slo.admission_round", "common.slo.class_margins", "common.slo.admission_pump", "common.slo.policy")


def _module_file(module: str) -> Path | None:
    base = REPO / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return names


def reached_imports(module: str) -> dict[str, str]:
    """Every import reached from ``module`` -> the project module that imports it."""
    seen: set[str] = set()
    found: dict[str, str] = {}
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        path = _module_file(current)
        if path is None:
            continue
        for name in _imports(path):
            found.setdefault(name, current)
            if name.split(".")[0] in PROJECT_PACKAGES:
                todo.append(name)
    return found


@pytest.mark.parametrize("guard", GUARDS)
def test_a_guard_module_reaches_no_grpc_thread_or_event_loop(guard: str) -> None:
    assert _module_file(guard) is not None, f"{guard} is missing"
    bad = {name: by for name, by in reached_imports(guard).items() if name.split(".")[0] in FORBIDDEN}
    assert not bad, f"{guard} reaches {bad}"


def test_the_check_sees_a_forbidden_import() -> None:
    # the walker itself must be able to fail: the gateway's server module does import grpc
    assert "grpc" in {name.split(".")[0] for name in reached_imports("gateway.server")}
