"""Turn the paths a user passes into the list of Python files to process."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable


class DiscoveryError(Exception):
    """A path the user named does not exist or cannot be read."""


def discover(
    paths: list[Path],
    is_excluded: Callable[[Path], bool],
    is_excluded_entry: Callable[[Path], bool],
    *,
    force_exclude: bool = False,
) -> list[Path]:
    """Python files under `paths`, sorted and without duplicates.

    Directories are walked, pruning entries that `is_excluded_entry` matches.
    Paths named explicitly are kept even when `is_excluded` matches them unless
    `force_exclude` is set: pre-commit passes every changed file by name, and
    with `--force-exclude` the configured excludes still apply to them.
    """
    found: dict[str, Path] = {}  # keyed by absolute path: `m.py` and `/abs/m.py` are one file
    for path in paths:
        if not path.exists():
            raise DiscoveryError(f"{path}: No such file or directory")
        if path.is_dir():
            if force_exclude and is_excluded(path):
                continue
            for file in _walk(path, is_excluded_entry):
                found.setdefault(os.path.abspath(file), file)
        elif path.suffix == ".py" and not (force_exclude and is_excluded(path)):
            found.setdefault(os.path.abspath(path), path)
    return sorted(found.values())


def tree_files(root: Path, is_excluded_entry: Callable[[Path], bool]) -> list[Path]:
    """Every file under `root` (Python or not), pruning excluded entries as `discover` does:
    the files a copy of the source tree needs."""
    return _walk(root, is_excluded_entry, suffix="")


def _walk(root: Path, is_excluded: Callable[[Path], bool], suffix: str = ".py") -> list[Path]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not is_excluded(here / d))
        files.extend(
            here / name
            for name in filenames
            if name.endswith(suffix) and not is_excluded(here / name)
        )
    return files


def module_name(path: Path) -> str:
    """Dotted module name of a file, found by walking up through packages.

    `site-packages/transformers/models/gpt2/modeling_gpt2.py` gives
    `transformers.models.gpt2.modeling_gpt2`, so relative imports resolve to the
    same names whichever directory of the tree the user passed.
    """
    path = Path(os.path.abspath(path))
    package = _package(str(path.parent))
    if path.stem == "__init__":
        return package
    return f"{package}.{path.stem}" if package else path.stem


@functools.lru_cache(maxsize=None)
def _package(directory: str) -> str:
    """Dotted name of the package a directory is ("" when it is not one)."""
    parent = os.path.dirname(directory)
    if parent == directory or not os.path.exists(os.path.join(directory, "__init__.py")):
        return ""
    outer = _package(parent)
    name = os.path.basename(directory)
    return f"{outer}.{name}" if outer else name
