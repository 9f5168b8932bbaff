"""Settings for a run: `[tool.transpile]` of the nearest pyproject.toml (or of `--config FILE`), plus overrides."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

PYPROJECT = "pyproject.toml"

# Directories nobody means to lint. site-packages is deliberately absent: linting an
# installed package (transformers, diffusers, ...) is a main use of this tool.
DEFAULT_EXCLUDE: tuple[str, ...] = (
    ".git",
    ".hg",
    ".venv",
    "venv",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
)

# A rule selector is a code prefix such as "TP", "TP1" or "TP101", or "ALL".
_SELECTOR = re.compile(r"ALL|[A-Z]+[0-9]*")


class ConfigError(Exception):
    """Bad configuration. `source` is the file (or "command line"), `key` the offending key."""

    def __init__(self, source: str, message: str, key: str | None = None) -> None:
        self.source = source
        self.key = key
        super().__init__(f"{source}: {key}: {message}" if key else f"{source}: {message}")


@dataclass(frozen=True)
class Settings:
    """Resolved settings. Selectors are code prefixes; excludes are fnmatch globs."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    force_exclude: bool = False
    cache_dir: str | None = None
    unsafe_fixes: bool = False
    # What fixes do with prints, logging and warnings in compiled code: "guard" them with
    # `torch.compiler.is_compiling()` (eager output unchanged) or "remove" them.
    side_effects: str = "guard"
    # (file glob, selectors) pairs: the selected codes not reported in matching files (ruff's semantics:
    # the glob matches the root-relative path or the file name, `*` crosses `/`, a leading `!` negates).
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    respect_gitignore: bool = True
    root: Path = field(default_factory=Path.cwd)

    def is_selected(self, code: str) -> bool:
        """Whether rule `code` runs: the longest matching selector wins, ties go to ignore.

        An empty `select` means "ALL". So `select=["TP"], ignore=["TP1"]` turns off
        TP1xx only, and adding `extend_select=["TP101"]` turns TP101 back on.
        """
        enabling = self.extend_select + (self.select or ("ALL",))
        best_select = _longest_match(code, enabling)
        best_ignore = _longest_match(code, self.ignore)
        if best_select is None:
            return False
        return best_ignore is None or best_select > best_ignore

    def is_excluded(self, path: Path) -> bool:
        """Whether `path`, a component of it or a leading part of it matches an exclude glob.

        The path is taken relative to `root` when it lies under it, so a project that
        itself sits inside a directory called `build` is not excluded wholesale.
        Matching leading paths as well as single names lets `exclude = ["tests/data"]`
        exclude everything under tests/data.
        """
        absolute = Path(os.path.abspath(path))
        try:
            parts = absolute.relative_to(os.path.abspath(self.root)).parts
        except ValueError:
            parts = absolute.parts[1:]  # drop the anchor ("/" or "C:\\")
        candidates = set(parts)
        candidates.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        patterns = [p.rstrip("/") for p in self.exclude + self.extend_exclude]
        return any(fnmatchcase(c, p) for c in candidates for p in patterns)

    def is_excluded_entry(self, path: Path) -> bool:
        """Whether a file or directory met while walking matches by its name or root-relative path.

        Walking checks each entry once (pruning excluded directories), so the
        ancestors, which include the directory the user named, are not re-checked.
        """
        patterns = [p.rstrip("/") for p in self.exclude + self.extend_exclude]
        if any(fnmatchcase(path.name, p) for p in patterns):
            return True
        if not any("/" in p for p in patterns):
            return False  # name patterns only: no need for the relative path (a hot loop)
        try:
            relative = Path(os.path.abspath(path)).relative_to(os.path.abspath(self.root)).as_posix()
        except ValueError:
            return False
        return any(fnmatchcase(relative, p) for p in patterns)

    def ignored_in(self, path: str | Path) -> tuple[str, ...]:
        """The selectors `per_file_ignores` turns off in `path`."""
        if not self.per_file_ignores:
            return ()
        absolute = Path(os.path.abspath(path))
        try:
            relative = absolute.relative_to(os.path.abspath(self.root)).as_posix()
        except ValueError:
            relative = absolute.as_posix()
        ignored: list[str] = []
        for pattern, selectors in self.per_file_ignores:
            negated = pattern.startswith("!")
            glob = pattern[1:] if negated else pattern
            if (fnmatchcase(relative, glob) or fnmatchcase(absolute.name, glob)) != negated:
                ignored.extend(selectors)
        return tuple(ignored)


def _longest_match(code: str, selectors: tuple[str, ...]) -> int | None:
    """Length of the longest selector that is a prefix of `code` ("ALL" counts as length 0)."""
    lengths = [0 if s == "ALL" else len(s) for s in selectors if s == "ALL" or code.startswith(s)]
    return max(lengths, default=None)


def find_pyproject(start: Path) -> Path | None:
    """Nearest pyproject.toml with a [tool.transpile] table at or above `start` (file or dir).

    Like ruff with [tool.ruff], a pyproject.toml without our table does not stop the
    search: in a monorepo the table often lives in the top-level file only.
    """
    found = _find_table(start)
    return found[0] if found else None


def _find_table(start: Path) -> tuple[Path, dict[str, Any]] | None:
    here = Path(os.path.abspath(start))
    if not here.is_dir():
        here = here.parent
    for directory in (here, *here.parents):
        candidate = directory / PYPROJECT
        if not candidate.is_file():
            continue
        table = _read_table(candidate)
        if table is not None:
            return candidate, table
    return None


def _read_table(path: Path) -> dict[str, Any] | None:
    """The [tool.transpile] table of `path`, or None when it has none."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read: {exc.strerror}") from exc
    # A broken pyproject.toml of some unrelated enclosing project must not stop us,
    # so only files that could hold our table are parsed (and their errors reported).
    if b"transpile" not in raw:
        return None
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(str(path), f"invalid TOML: {exc}") from exc
    tool = document.get("tool", {})
    if not isinstance(tool, dict) or "transpile" not in tool:
        return None
    table = tool["transpile"]
    if not isinstance(table, dict):
        raise ConfigError(str(path), f"[tool.transpile] must be a table, got {_type_name(table)}")
    return table


def _type_name(value: object) -> str:
    """The TOML name of a value's type, for error messages."""
    names = {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "string",
        list: "array",
        tuple: "array",
        dict: "table",
    }
    return names.get(type(value), type(value).__name__)


def _as_str_tuple(value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected an array of strings")
    return tuple(value)


def _as_selectors(value: object) -> tuple[str, ...]:
    selectors = _as_str_tuple(value)
    bad = [s for s in selectors if not _SELECTOR.fullmatch(s)]
    if bad:
        raise ValueError(f"not a rule code or prefix (like 'TP1' or 'ALL'): {', '.join(map(repr, bad))}")
    return selectors


def _as_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected a boolean")
    return value


def _as_str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _as_per_file_ignores(value: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        raise TypeError("expected a table of file globs to arrays of rule codes")
    pairs = []
    for pattern, selectors in value.items():
        try:
            pairs.append((pattern, _as_selectors(selectors)))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{pattern!r}: {exc}") from None
    return tuple(pairs)


def _as_side_effects(value: object) -> str:
    if value not in ("guard", "remove"):
        raise ValueError("expected 'guard' or 'remove'")
    return value


# Settings field -> converter that checks a raw value. The TOML key is the field
# name in kebab-case; `root` is not configurable, it is where the file was found.
_CONVERTERS: dict[str, Callable[[object], Any]] = {
    "select": _as_selectors,
    "ignore": _as_selectors,
    "extend_select": _as_selectors,
    "exclude": _as_str_tuple,
    "extend_exclude": _as_str_tuple,
    "force_exclude": _as_bool,
    "cache_dir": _as_str,
    "unsafe_fixes": _as_bool,
    "side_effects": _as_side_effects,
    "per_file_ignores": _as_per_file_ignores,
    "respect_gitignore": _as_bool,
}


def _convert(source: str, raw: Mapping[str, object], *, kebab: bool) -> dict[str, Any]:
    """Check and convert raw values into Settings fields, naming `source` and the key on error.

    None values are skipped: they are options the command line did not get (TOML has no null).
    """
    known = {(name.replace("_", "-") if kebab else name): name for name in _CONVERTERS}
    where = " in [tool.transpile]" if kebab else ""
    converted: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            # Suggest the kebab-case spelling for the common `extend_select` slip.
            hint = difflib.get_close_matches(key.replace("_", "-") if kebab else key, known, n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise ConfigError(source, f"unknown key{where}{suggestion}", key=key)
        if value is None:
            continue
        name = known[key]
        try:
            converted[name] = _CONVERTERS[name](value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(source, f"{exc}, got {_type_name(value)} {value!r}", key=key) from None
    return converted


def load_settings(
    start: Path,
    overrides: Mapping[str, object] | None = None,
    codes: Collection[str] | None = None,
    config: Path | None = None,
) -> Settings:
    """Settings from the nearest [tool.transpile] at or above `start` (or from `config`), then `overrides`.

    `overrides` uses Settings field names (snake_case); a None value means "not given"
    and keeps the file's value, anything else replaces it (so `exclude` replaces the
    defaults and `extend_exclude` adds to them, as in ruff). `root` is the directory
    of the pyproject.toml, or the current directory when there is none. With `codes`
    (the rule codes that exist), a selector that matches none of them is an error.

    `config` (`--config FILE`) replaces the search, as in ruff: a pyproject.toml gives its [tool.transpile],
    any other TOML file is the table itself; its relative paths and globs are relative to the current
    directory, the root of a run that names its configuration.
    """
    if config is not None:
        source, table, root = str(config), _read_config(config), Path.cwd()
    elif (found := _find_table(start)) is not None:
        source, table, root = str(found[0]), found[1], found[0].parent
    else:
        source, table, root = "", {}, Path.cwd()
    settings = Settings(root=root, **_checked(source, _convert(source, table, kebab=True), codes, "{}"))
    converted = _checked("command line", _convert("command line", overrides or {}, kebab=False), codes, "--{}")
    return replace(settings, **converted)


def _read_config(path: Path) -> dict[str, Any]:
    """The settings table of a file named with `--config`."""
    if path.name == PYPROJECT:
        table = _read_table(path)
        if table is None:
            raise ConfigError(str(path), "has no [tool.transpile] table")
        return table
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(str(path), f"invalid TOML: {exc}") from exc
    return document


def _checked(source: str, converted: dict[str, Any], codes: Collection[str] | None, key: str) -> dict[str, Any]:
    """`converted`, once every selector in it matches a code of `codes` (unless None): a typo such as
    `TP999` would otherwise select nothing, and a pre-commit hook would pass on every commit, as ruff
    refuses too. `key` spells the option's name (`{}` its kebab-case field name) in the error."""
    if codes is None:
        return converted
    for name in ("select", "extend_select", "ignore"):
        _known_codes(source, converted.get(name, ()), codes, key.format(name.replace("_", "-")))
    for pattern, selectors in converted.get("per_file_ignores", ()):
        _known_codes(source, selectors, codes, f"{key.format('per-file-ignores')}.{pattern!r}")
    return converted


def _known_codes(source: str, selectors: Collection[str], codes: Collection[str], key: str) -> None:
    unknown = [s for s in selectors if s != "ALL" and not any(c.startswith(s) for c in codes)]
    if unknown:
        raise ConfigError(
            source,
            f"unknown rule code or prefix {', '.join(map(repr, unknown))} (`transpile rules` lists the codes)",
            key=key,
        )


def settings_fingerprint(settings: Settings) -> str:
    """A short stable hash of the settings that change a file's diagnostics, for cache keys.

    Only rule selection counts: excludes decide which files are visited, not what a
    file yields, and root/cache_dir change neither. Selectors are sorted because
    their order does not matter to `is_selected`.
    """
    payload = {name: sorted(getattr(settings, name)) for name in ("select", "ignore", "extend_select")}
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8"))
    return digest.hexdigest()[:16]
