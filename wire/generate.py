"""Regenerates the Python stubs from the .proto files: ``python wire/generate.py [OUT_ROOT]``.

The .proto files live in ``protos/`` (``protos/wire/v1/*.proto``, proto package ``pdserve.v1``),
their stubs in ``wire/v1/`` (Python imports ``from wire.v1 import gateway_pb2``): the path under
``protos/`` is the stubs' module path, so the generated imports stay package-qualified. Stubs are
committed, because GPU images have no grpcio-tools; ``tests/unit/test_protos.py`` fails when they
drift from the .proto files.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"
PROTO_FILES = sorted(PROTO_ROOT.glob("wire/v1/*.proto"))


def generate(out_root: Path) -> None:
    """Writes ``out_root/wire/v1/*_pb2*.py[i]``."""
    from grpc_tools import protoc

    out_root.mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"-I{PROTO_ROOT}", f"--python_out={out_root}", f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}", *map(str, PROTO_FILES)]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT)
    print(f"stubs written for {', '.join(p.name for p in PROTO_FILES)}")
