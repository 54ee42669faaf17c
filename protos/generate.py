"""Regenerates the Python stubs from the .proto files: ``python protos/generate.py [OUT_DIR]``.

Stubs land in ``pdserve/v1/`` (package-qualified imports: ``from pdserve.v1 import gateway_pb2``)
and are committed, because GPU images have no grpcio-tools. ``tests/unit/test_protos.py``
fails when they drift from the .proto files.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
REPO_ROOT = PROTO_ROOT.parent
PROTO_FILES = sorted(PROTO_ROOT.glob("pdserve/v1/*.proto"))


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"-I{PROTO_ROOT}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}", *map(str, PROTO_FILES)]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT)
    print(f"stubs written for {', '.join(p.name for p in PROTO_FILES)}")
