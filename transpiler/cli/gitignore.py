""".gitignore files, as ruff respects them: inside a git repository only, for the entries met while walking
a directory (a path named on the command line is linted whatever they say)."""

from __future__ import annotations

import os
from pathlib import Path

try:  # pathspec comes with black, a dependency; without it .gitignore files are not read (and we say so)
    from pathspec import GitIgnoreSpec
except ImportError:  # pragma: no cover - exercised by a test that hides the module
    GitIgnoreSpec = None

MISSING = "pathspec is not installed: .gitignore files are not read (pip install pathspec)"


class GitIgnore:
    """`ignored(path)`: whether the `.gitignore` files of `path`'s repository (the root's, then each directory's
    down to `path`'s, deeper files overriding) and `.git/info/exclude` ignore the entry `path` itself. An entry
    inside an ignored directory is only reached when the walk starts there (a directory named on the command
    line, or below one): it is not ignored then, as in ruff, which lints `versions/pkg` of a repository that
    ignores `/versions` (pyenv's: every installed package lives there). Files are read once."""

    def __init__(self) -> None:
        self._specs: dict[Path, object | None] = {}
        self._repositories: dict[Path, Path | None] = {}

    def ignored(self, path: Path) -> bool:
        absolute = Path(os.path.abspath(path))
        repository = self._repository(absolute.parent)
        if repository is None or absolute == repository:
            return False
        verdict, suffix = None, "/" if absolute.is_dir() else ""
        directories = [absolute.parent, *absolute.parent.parents]
        for directory in reversed(directories[: directories.index(repository) + 1]):
            spec = self._spec(directory, repository)
            if spec is None:
                continue
            relative = absolute.relative_to(directory).as_posix()
            included = spec.check_file(relative + suffix).include
            # A file's match that holds because its directory matches comes from a directory above the walk.
            parent = relative.rpartition("/")[0]
            if included and parent and spec.check_file(f"{parent}/").include:
                continue
            if included is not None:
                verdict = included
        return bool(verdict)

    def _repository(self, directory: Path) -> Path | None:
        """The work tree `directory` lies in (where `.git` is), or None outside git."""
        if directory not in self._repositories:
            if os.path.exists(directory / ".git"):
                self._repositories[directory] = directory
            else:
                parent = directory.parent
                self._repositories[directory] = None if parent == directory else self._repository(parent)
        return self._repositories[directory]

    def _spec(self, directory: Path, repository: Path):
        if directory not in self._specs:
            lines = _lines(directory / ".gitignore")
            if directory == repository:  # the repository's own excludes, before its .gitignore
                lines = _lines(directory / ".git" / "info" / "exclude") + lines
            self._specs[directory] = GitIgnoreSpec.from_lines(lines) if lines else None
        return self._specs[directory]


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:  # absent (the usual case), a directory, unreadable: nothing ignored
        return []


def available() -> bool:
    return GitIgnoreSpec is not None
