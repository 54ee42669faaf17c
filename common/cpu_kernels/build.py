"""Compiling and loading the CPU kernels.

The sources are built with ``-march=native`` into a directory of the cache named by everything
the binary depends on (the sources and the header they include, torch's version, the flags and
this CPU's instruction set), so a cache shared by different machines never hands one the other's
binary. Concurrent first uses (two workers starting at once) wait on torch's build lock; a
finished build leaves a marker, and later processes import the library directly without asking
the build system.

The library links the OpenMP runtime by its soname, which torch's own runtime already answers
in the process: the kernels' threads are torch's (``torch.set_num_threads``), not a second pool.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import platform
import shutil
import sys
from pathlib import Path
from types import ModuleType

import torch

from common import env

NAME = "pdserve_cpu_kernels"
SOURCES = ("decode_attention.cpp", "layer_ops.cpp", "prefill_attention.cpp")  # the first defines the module
HEADERS = ("tile_gemm.h", "vec.h")  # what the sources include: part of the build's key as much as they are
FLAGS = ("-O3", "-march=native", "-fopenmp")
HERE = Path(__file__).resolve().parent
DONE = "built"  # written into the build directory once the library loaded

log = logging.getLogger(__name__)


class CpuKernelsUnavailable(RuntimeError):
    """The kernels could not be built here (no compiler, no ninja, an unsupported platform)."""


def load() -> ModuleType:
    """The compiled kernels (built first if this machine has none yet); raises
    ``CpuKernelsUnavailable`` with the reason when they cannot be built."""
    return _load()


@functools.cache
def _load() -> ModuleType:
    directory = build_directory()
    if is_built():
        return _import(directory / f"{NAME}.so")
    if platform.system() != "Linux":
        raise CpuKernelsUnavailable(f"the CPU kernels are built on Linux only (this is {platform.system()})")
    log.info("compiling pdserve's CPU kernels into %s (once per machine, about half a minute)", directory)
    try:
        from torch.utils.cpp_extension import load as build

        _find_ninja()
        directory.mkdir(parents=True, exist_ok=True)
        module = build(NAME, [str(HERE / s) for s in SOURCES], extra_cflags=list(FLAGS),
                       build_directory=str(directory), verbose=False)
    except Exception as exc:  # noqa: BLE001 - a compiler's failure takes many forms; the reason is kept
        raise CpuKernelsUnavailable(f"building the CPU kernels failed: {exc}") from exc
    (directory / DONE).write_text(torch.__version__)
    return module


def is_built() -> bool:
    """Whether this machine has the kernels built already (loading them then takes no compiler)."""
    directory = build_directory()
    return (directory / DONE).exists() and (directory / f"{NAME}.so").exists()


def prepare(progress: bool = False) -> str | None:
    """Builds the kernels unless built; returns why they cannot be (None: ready). A launcher calls
    this before starting CPU workers, so that the one compilation happens once, with a message,
    instead of inside a worker's start-up."""
    if progress and not is_built():
        print(f"  compiling pdserve's CPU kernels (once per machine, about half a minute) into {build_directory()}",
              file=sys.stderr, flush=True)
    try:
        load()
    except CpuKernelsUnavailable as exc:
        if progress:
            print(f"  CPU kernels unavailable, workers attend on the torch path: {exc}", file=sys.stderr, flush=True)
        return str(exc)
    return None


def _find_ninja() -> None:
    """torch's builder runs ``ninja`` from PATH; the ``ninja`` package's binary is put there when
    none is (a virtual environment's bin folder is on PATH only when activated)."""
    if shutil.which("ninja"):
        return
    import ninja

    os.environ["PATH"] = os.pathsep.join((ninja.BIN_DIR, os.environ.get("PATH", "")))


def build_directory() -> Path:
    digest = hashlib.sha256()
    for source in (*SOURCES, *HEADERS):
        digest.update((HERE / source).read_bytes())
    digest.update(" ".join((torch.__version__, *FLAGS, platform.machine(), _cpu_features())).encode())
    return env.cache_dir() / "cpu-kernels" / digest.hexdigest()[:16]


def _cpu_features() -> str:
    """This CPU's instruction-set flags (what ``-march=native`` compiles for)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _import(library: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(NAME, library)
    if spec is None or spec.loader is None:
        raise CpuKernelsUnavailable(f"cannot import {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":  # python -m common.cpu_kernels.build: build now (an image's build step, say)
    sys.exit(1 if prepare(progress=True) else 0)
