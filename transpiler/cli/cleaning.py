"""`transpile clean`: find and remove the caches transpile wrote, and only those.

The lint cache holds one folder per version of the tool (named by `engine.code_fingerprint()`, 16 hex
digits), so every upgrade or edit of an editable install leaves the previous folder behind. The C++
kernel cache holds `<kernel>-<32 hex digits>.so` libraries with their `.sha256` records and `.failed`
notes (emit/runtime/cpp_support.py). Both may share one directory (`TRANSPILE_CACHE_DIR`): the names
tell them apart, and nothing else in a directory is touched.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

_LINT_FOLDER = re.compile(r"[0-9a-f]{16}")
_KERNEL_FILE = re.compile(r".+-[0-9a-f]{32}\.(so|sha256|failed)|\.tmp-.+")


def lint_cache_folders(directory: Path, keep_current: bool = False) -> list[Path]:
    """The lint cache's folders under `directory` (with `keep_current`, all but this version's)."""
    from transpiler.lint.engine import code_fingerprint

    current = code_fingerprint() if keep_current else None
    return [
        path
        for path in _entries(directory)
        if _LINT_FOLDER.fullmatch(path.name) and path.name != current and path.is_dir() and not path.is_symlink()
    ]


def kernel_cache_files() -> tuple[Path | None, list[Path]]:
    """The C++ kernel cache's directory and its files; (None, []) without the compile backends (no torch:
    no kernel was ever built)."""
    try:
        from emit.runtime.cpp_support import cache_directory
    except ImportError:
        return None, []
    directory = cache_directory()
    files = [p for p in _entries(directory) if _KERNEL_FILE.fullmatch(p.name) and p.is_file() and not p.is_symlink()]
    return directory, files


def remove(paths: list[Path]) -> tuple[int, int]:
    """Remove `paths` (files, or folders with their contents): how many went and the bytes they held."""
    count = size = 0
    for path in paths:
        try:
            held = _size(path)
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:  # removed by a concurrent run, or not ours to remove: left as it is
            continue
        count, size = count + 1, size + held
    return count, size


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError:  # no cache there yet
        return []


def _size(path: Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)
