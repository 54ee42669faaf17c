"""The committed stubs are exactly what protoc makes of the committed .proto files."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None, reason="grpcio-tools not installed")
def test_generated_stubs_match_the_proto_files(tmp_path: Path):
    sys.path.insert(0, str(REPO / "wire"))
    try:
        from generate import generate
    finally:
        sys.path.pop(0)
    generate(tmp_path)
    fresh = sorted(p.relative_to(tmp_path) for p in (tmp_path / "wire" / "v1").glob("*_pb2*"))
    assert fresh, "protoc produced nothing"
    for rel in fresh:
        committed = REPO / rel
        assert committed.is_file(), f"{rel} is not committed: run python wire/generate.py"
        assert committed.read_text() == (tmp_path / rel).read_text(), f"{rel} drifted: run python wire/generate.py"


def test_stubs_use_package_qualified_imports():
    text = (REPO / "wire" / "v1" / "worker_pb2.py").read_text()
    assert "from wire.v1 import gateway_pb2" in text
