"""Writing files so that a crash or a full disk never leaves a half-written one behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, like: Path | None = None) -> None:
    """Replace `path` with `data` in one rename; `like` (default: `path` itself, when it
    exists) gives the permission bits, so a fixed script stays executable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    source = like if like is not None else path
    mode = source.stat().st_mode & 0o7777 if source.exists() else _default_mode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _default_mode() -> int:
    """What `open()` would give a new file: 0o666 less the umask (mkstemp alone gives 0o600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
