"""The project's layers, kept by its imports (transitively, within pdserve, lazy imports included):

    common/slo      plain numbers and time: no torch, no gRPC, no threads or event loop
    common/model    the forward: nothing of common/engine (the engine drives the model, not back)
    common/engine   nothing of a worker, the gateway or the simulator
    gateway         no torch (it tokenizes and routes; a preset is written by a child process)
    workers         a prefill worker and a decode worker never import each other
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_guard_modules_are_plain import REPO, reached_imports


def _modules(package: str) -> list[str]:
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _reaching(package: str, forbidden: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Each module of ``package`` that reaches a name starting with one of ``forbidden`` -> {name: the module importing it}."""
    bad = {}
    for module in _modules(package):
        hits = {name: by for name, by in reached_imports(module).items()
                if any(name == f or name.startswith(f + ".") for f in forbidden)}
        if hits:
            bad[module] = hits
    return bad


LAYERS = [
    ("common/slo", ("torch", "grpc", "threading", "_thread", "asyncio", "concurrent", "multiprocessing")),
    ("common/model", ("common.engine",)),
    ("common/engine", ("common.worker", "gateway", "simulator", "prefill_worker", "decode_worker")),
    ("gateway", ("torch",)),
    ("prefill_worker", ("decode_worker",)),
    ("decode_worker", ("prefill_worker",)),
]


@pytest.mark.parametrize(("package", "forbidden"), LAYERS, ids=[p for p, _ in LAYERS])
def test_a_layer_reaches_nothing_above_it(package: str, forbidden: tuple[str, ...]) -> None:
    assert _modules(package), f"{package} has no modules"
    bad = _reaching(package, forbidden)
    assert not bad, f"{package} reaches what it must not: {bad}"


def test_the_layer_check_sees_a_violation() -> None:
    # the walker must be able to fail: a worker's process module does import torch and the engine
    assert _reaching("common/worker", ("torch",)) and _reaching("common/worker", ("common.engine",))


def test_module_names_are_found_for_nested_packages() -> None:
    assert "gateway.openai.app" in _modules("gateway") and all(not m.endswith("__init__") for m in _modules("gateway"))
    assert Path(REPO / "common" / "slo").is_dir()


@pytest.mark.parametrize("module", ["gateway.request_path", "gateway.router", "gateway.worker_state", "gateway.request_stages",
                                    "common.slo.promise_record"])
def test_the_decisions_the_gateway_and_the_simulator_share_are_plain(module: str) -> None:
    """What both the gateway's flow and the simulated gateway run: no gRPC, no event loop, no threads."""
    plain = ("grpc", "asyncio", "threading", "torch", "wire")
    bad = {name: by for name, by in reached_imports(module).items() if any(name == f or name.startswith(f + ".") for f in plain)}
    assert not bad, f"{module} reaches {bad}"
