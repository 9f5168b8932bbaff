"""Writing files so that a crash, an interrupt or a full disk never leaves a half-written one behind, and so
that the temporary files a killed run leaves are known as ours and removed by the next run."""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# `.<name>.transpile-<pid>-<random>.tmp`: the process that made it is in the name, so that a later run
# removes only what a run that is gone left, never a file of a run still going or anyone else's.
_TEMPORARY = re.compile(r"\..+\.transpile-(?P<pid>[0-9]+)-[a-z0-9_]+\.tmp")


class WriteError(Exception):
    """A file or directory cannot be written (read-only, a file where a directory must be, disk full)."""


def write_atomic(path: Path, data: bytes, *, like: Path | None = None) -> None:
    """Replace `path` with `data` in one rename; `like` (default: `path` itself, when it
    exists) gives the permission bits, so a fixed script stays executable."""
    source = like if like is not None else path
    mode = source.stat().st_mode & 0o7777 if source.exists() else _default_mode()
    with replacing(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)


def copy_atomic(src: Path, dst: Path) -> None:
    """Copy with `shutil.copy2` (bytes, permission bits, times) into a temporary file renamed over `dst`."""
    with replacing(dst) as tmp:
        shutil.copy2(src, tmp)


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """`with replacing(path) as tmp:` gives a new temporary file beside `path`, renamed over `path` when the
    block ends and deleted when it raises (an interrupt included). Errors writing it are WriteErrors."""
    tmp = _temporary(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as error:
        tmp.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename in (None, str(tmp)):  # not an error reading a source
            raise WriteError(f"cannot write {path}: {error.strerror or error}") from error
        raise


def _temporary(path: Path) -> Path:
    """A new empty file beside `path`, named so that `remove_stale_temporaries` knows it (the directory is
    created if missing)."""
    try:
        return _create_temporary(path.parent, path.name)
    except OSError as err:
        raise WriteError(f"cannot write {path}: {err.strerror or err}") from err


def check_writable(directory: Path) -> None:
    """Raises WriteError, before any work, when files cannot be created in `directory` (created if missing)."""
    try:
        with _interrupts_held():  # an interrupt between creating the file and removing it would leave it
            _create_temporary(directory, "check").unlink()
    except OSError as err:
        raise WriteError(f"cannot write into {directory}: {err.strerror or err}") from err


def _create_temporary(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    with _interrupts_held():  # an interrupt before the caller holds the name would leave the file
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.transpile-{os.getpid()}-", suffix=".tmp")
        os.close(fd)
    return Path(tmp)


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT held back for the block and delivered (as KeyboardInterrupt) when it ends, where the system can
    block signals; elsewhere, and off the main thread (which alone runs Python's handler), nothing changes."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def remove_stale_temporaries(root: Path) -> list[Path]:
    """Delete the temporary files under `root` that a killed run of this tool left (SIGKILL, power loss):
    named as `write_atomic` names them, by a process that is gone. Returns them."""
    removed = []
    for directory, _, names in os.walk(root):
        for name in names:
            match = _TEMPORARY.fullmatch(name)
            if match and not _alive(int(match["pid"])):
                path = Path(directory, name)
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


def _default_mode() -> int:
    """What `open()` would give a new file: 0o666 less the umask (mkstemp alone gives 0o600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
