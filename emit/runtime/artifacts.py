"""C++ libraries built ahead of time (`transpile precompile`), found and verified at run time.

Copied into every output tree inside `_transpile_runtime/`: imports only the standard library. The
tree's root holds `transpile-artifacts.json`, written by transpiler/pipeline/precompiling.py:

    {"tool": "transpile", "version": 1, "header_sha256": ..., "libraries": {
        "models/_net_kernels.cpp": {"source_sha256": ..., "targets": {
            "x86-64-v3": {"path": "models/_net_kernels.x86-64-v3.so", "sha256": ..., "compiler": ...,
                          "flags": [...]}}}}}

A kernel file's library is used only where the file and the runtime's header are still the bytes it was
built from, the CPU runs its level, and its own bytes have the recorded SHA-256; otherwise the runtime
says why and builds the file as it would without artifacts (cpp_support.py). `TRANSPILE_ARTIFACTS=0` ignores
them (a run that compiles as if the tree had none, to compare or to debug).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent  # the output tree: the runtime package is written into its root
MANIFEST = "transpile-artifacts.json"
VERSION = 1


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def matches(path: Path, digest: str | None) -> bool:
    """Whether the file `path` exists and has the SHA-256 `digest`."""
    try:
        return digest is not None and path.is_file() and sha256(path) == digest
    except OSError:
        return False


@functools.lru_cache(maxsize=None)
def read_manifest(root: Path) -> dict | str | None:
    """The tree's manifest, why it cannot be read, or None where the tree has none (the usual case)."""
    path = root / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return f"{MANIFEST} cannot be read ({type(error).__name__})"
    if not isinstance(data, dict) or data.get("tool") != "transpile" or data.get("version") != VERSION:
        return f"{MANIFEST} is not a version {VERSION} manifest of transpile"
    return data


def precompiled(source: Path, features: frozenset[str], root: Path = ROOT) -> Path | str | None:
    """The library built ahead of time for kernel file `source` that this CPU (`features`, as /proc/cpuinfo
    names them) runs best, verified; why none can be used; or None where the tree has no artifacts."""
    from .cpp_support import CPU_LEVELS, HEADER  # cpp_support imports this module

    if os.environ.get("TRANSPILE_ARTIFACTS") == "0":
        return None
    manifest = read_manifest(root)
    if manifest is None or isinstance(manifest, str):
        return manifest
    try:
        relative = source.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None  # a kernel file outside the tree (a test's): not the artifacts' business
    entry = manifest.get("libraries", {}).get(relative)
    if not isinstance(entry, dict):
        return f"no library was built ahead of time for {relative}"
    try:
        if sha256(source) != entry.get("source_sha256"):
            return f"{relative} changed since its library was built ahead of time"
        if sha256(HEADER) != manifest.get("header_sha256"):
            return "the runtime's header changed since the libraries were built ahead of time"
    except OSError as error:
        return f"cannot read {relative} or the runtime's header ({error.strerror or error})"
    targets = entry.get("targets", {})
    runnable = [level for level in CPU_LEVELS if isinstance(targets.get(level), dict) and CPU_LEVELS[level] <= features]
    if not runnable:
        built = ", ".join(sorted(targets)) or "no target"
        return f"its library was built ahead of time for {built}, which this CPU does not run"
    level = runnable[-1]  # the highest: CPU_LEVELS is lowest first
    record = targets[level]
    library = (root / record.get("path", "")).resolve()
    if not library.is_relative_to(root.resolve()) or not library.is_file():
        return f"its {level} library is missing"
    if sha256(library) != record.get("sha256"):
        return f"its {level} library does not match its recorded SHA-256"
    return library
