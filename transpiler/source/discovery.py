"""Turn the paths a user passes into the list of Python files to process."""

from __future__ import annotations

import errno
import functools
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from transpiler.source.diagnostics import Diagnostic, file_diagnostic


class DiscoveryError(Exception):
    """A path the user named does not exist or cannot be read."""


@dataclass(frozen=True)
class Skipped:
    """An entry that is not read: not a regular file (reading a FIFO blocks forever, a device may never
    end), or a directory that cannot be listed (its files would be silently missing otherwise)."""

    path: Path
    reason: str  # "not a regular file (a named pipe)", "cannot list the directory: Permission denied"

    def diagnostic(self, consequence: str) -> Diagnostic:
        """The TP902 finding that reports it; `consequence` says what the run did ("skipped", "not copied")."""
        return file_diagnostic(str(self.path), "TP902", f"{self.reason}; {consequence}")


@dataclass(frozen=True)
class Found:
    """The files to read, and what was skipped on the way."""

    files: list[Path]
    skipped: list[Skipped] = field(default_factory=list)


def discover(
    paths: list[Path],
    is_excluded: Callable[[Path], bool],
    is_excluded_entry: Callable[[Path], bool],
    *,
    force_exclude: bool = False,
) -> Found:
    """Python files under `paths`, sorted and without duplicates.

    Directories are walked, pruning entries that `is_excluded_entry` matches.
    Paths named explicitly are kept even when `is_excluded` matches them unless
    `force_exclude` is set: pre-commit passes every changed file by name, and
    with `--force-exclude` the configured excludes still apply to them.
    """
    found: dict[str, Path] = {}  # keyed by absolute path: `m.py` and `/abs/m.py` are one file
    skipped: list[Skipped] = []
    for path in paths:
        check_exists(path)
        if path.is_dir():
            if force_exclude and is_excluded(path):
                continue
            for file in _walk(path, is_excluded_entry, ".py", skipped):
                found.setdefault(os.path.abspath(file), file)
        elif path.suffix == ".py" and not (force_exclude and is_excluded(path)):
            if (kind := not_regular(path)) is not None:
                skipped.append(Skipped(path, kind))
            else:
                found.setdefault(os.path.abspath(path), path)
    return Found(sorted(found.values()), sorted(skipped, key=lambda s: s.path))


def check_exists(path: Path) -> None:
    """Raises DiscoveryError saying why `path`, named by the user, cannot be used: missing, a symlink loop,
    a broken symlink, not permitted."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise DiscoveryError(f"{path}: symlink loop (a symbolic link that leads back to itself)") from None
        if err.errno == errno.ENOENT and os.path.islink(path):
            raise DiscoveryError(f"{path}: broken symlink (to {os.readlink(path)}, which does not exist)") from None
        raise DiscoveryError(f"{path}: {err.strerror or err}") from None


def not_regular(path: Path) -> str | None:
    """Why `path` is not read as a file (a FIFO, a socket, a device), or None for a regular file and for
    what cannot be looked at (a broken symlink): reading that reports the error."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else f"not a regular file ({_KINDS.get(stat.S_IFMT(mode), 'special file')})"


_KINDS = {
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
}


def tree_files(root: Path, is_excluded_entry: Callable[[Path], bool]) -> Found:
    """Every file under `root` (Python or not), pruning excluded entries as `discover` does:
    the files a copy of the source tree needs."""
    skipped: list[Skipped] = []
    return Found(_walk(root, is_excluded_entry, "", skipped), skipped)


def _walk(root: Path, is_excluded: Callable[[Path], bool], suffix: str, skipped: list[Skipped]) -> list[Path]:
    """The files named `*suffix` under `root`, top down in name order, appending to `skipped` the directories
    that cannot be listed and the entries that are not regular files. Symlinks to directories are not
    followed (a loop would never end), as `os.walk` does."""
    files = []
    pending = [root]
    while pending:
        here = pending.pop()
        try:
            with os.scandir(here) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as err:
            skipped.append(Skipped(here, f"cannot list the directory: {err.strerror or err}"))
            continue
        directories = []
        for entry in entries:
            path = here / entry.name
            if is_excluded(path):
                continue
            try:  # both answered from the directory listing, without a stat, for what is not a symlink
                is_dir, is_file = entry.is_dir(), entry.is_file()
            except OSError:  # a symlink loop: reading it reports the error
                is_dir, is_file = False, True
            if is_dir:
                if not entry.is_symlink():
                    directories.append(path)
            elif entry.name.endswith(suffix):
                kind = None if is_file else not_regular(path)
                if kind is None:
                    files.append(path)
                else:
                    skipped.append(Skipped(path, kind))
        pending.extend(reversed(directories))
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
