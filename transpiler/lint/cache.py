"""The lint cache on disk: entries that can only hold data, in a directory only this user can write.

Entries are pickles: the fastest way to store and load a few million small objects (an
unchanged tree is answered in one read; with one file changed, every other file's entry
is loaded). A pickle names the callables that rebuild it, and a plain `pickle.load`
calls whatever a planted entry names (`os.system`, ...). So entries are read by an
unpickler that resolves only the classes of a fixed registry (the project's own
dataclasses and enums, whose constructors only store fields) and builtin containers:
an entry that names anything else is a cache miss, and nothing it names is called.
JSON with a tagged decoder was measured too: loading the per-file entries of
transformers' models took 3.4x pickle's CPU time, and a warm lint with one file changed
47% more.
"""

from __future__ import annotations

import builtins
import os
import pickle
import stat
import tempfile
import warnings
from pathlib import Path

# The builtins a pickle of plain data names (sets and frozensets of protocol 4 have opcodes instead).
_BUILTINS = {name: getattr(builtins, name) for name in ("set", "frozenset", "complex", "Ellipsis")}


class _DataUnpickler(pickle.Unpickler):
    """Resolves the names of the registry and of `_BUILTINS`, and nothing else."""

    def __init__(self, file, registry: dict[tuple[str, str], type]) -> None:
        super().__init__(file)
        self._registry = registry

    def find_class(self, module: str, name: str) -> object:
        if (module, name) in self._registry:
            return self._registry[module, name]
        if module == "builtins" and name in _BUILTINS:
            return _BUILTINS[name]
        raise pickle.UnpicklingError(f"not data: {module}.{name}")


def private_directory(path: Path) -> Path:
    """`path`, created with its missing parents (mode 0700) if needed; OSError unless it is a
    directory of this user that no one else can write (another user could plant entries).

    emit/runtime/cpp_support.py checks the C++ kernel cache the same way (the runtime copied
    into output trees imports nothing of transpile's).
    """
    missing = []
    for directory in (path, *path.parents):
        if os.path.lexists(directory):
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # made by a concurrent process: checked below like any other
            pass
    status = os.stat(path)
    if not stat.S_ISDIR(status.st_mode):
        raise NotADirectoryError(f"{path} is not a directory")
    if status.st_uid != os.geteuid():
        raise PermissionError(f"{path} belongs to another user (uid {status.st_uid})")
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(f"{path} is writable by other users (mode {stat.S_IMODE(status.st_mode):o})")
    return path


class Store:
    """Entries by key under `base / name`, written atomically; `base` and `base / name` must be
    private (see `private_directory`). A directory that cannot be used turns the store off,
    with a warning: the lint then runs uncached. `classes`: the only classes an entry may
    hold; `expected`, those an entry itself may be.
    """

    def __init__(self, base: Path, name: str, classes: tuple[type, ...], expected: tuple[type, ...]) -> None:
        self._registry = {(cls.__module__, cls.__qualname__): cls for cls in classes}
        self.expected = expected
        self.directory: Path | None = base / name
        try:
            private_directory(base)
            private_directory(base / name)
        except OSError as error:
            warnings.warn(f"lint cache not used: {error}", RuntimeWarning, stacklevel=3)
            self.directory = None

    def get(self, key: str) -> object | None:
        """The entry of `key`, or None when there is none or it holds anything but data of the registry."""
        if self.directory is None:
            return None
        try:
            with open(self.directory / key[:2] / key, "rb") as handle:
                value = _DataUnpickler(handle, self._registry).load()
        except (
            OSError,
            pickle.UnpicklingError,
            EOFError,
            ValueError,
            TypeError,
            AttributeError,
            IndexError,
            KeyError,
            RecursionError,
        ):
            return None
        return value if isinstance(value, self.expected) else None

    def put(self, key: str, value: object) -> None:
        if self.directory is None:
            return
        folder = self.directory / key[:2]
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(temporary, folder / key)
            finally:
                if os.path.exists(temporary):
                    os.unlink(temporary)
        except OSError:
            pass  # a read-only or full cache directory must not fail the lint
