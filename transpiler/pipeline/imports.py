"""Relative imports that climb out of the output tree, made absolute imports of the original package.

`transpile site-packages/transformers/models/gpt2 -o compiled/gpt2` copies one package of a
larger one: `from ...activations import ACT2FN` in `modeling_gpt2.py` would look for
`compiled.activations`, which does not exist, so it becomes `from transformers.activations import
ACT2FN`. Imports that stay inside the tree (`from .configuration_gpt2 import GPT2Config`) stay
relative: they must reach the transpiled modules, not the originals.

Only the module part of each statement is replaced, found with the tokenizer: the rest of the
text, formatting and comments included, stays byte for byte. (libcst would keep them too, but
parses 100 times slower, and a whole library has every file to rewrite.)
"""

from __future__ import annotations

import ast
import importlib.machinery
import io
import os
import re
import tokenize
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from transpiler.source.discovery import DiscoveryError, module_name
from transpiler.source.reading import read_source


class RelativeImportError(DiscoveryError):
    """A relative import leaves the output tree and there is no package to make it absolute in."""


@dataclass(frozen=True)
class ImportRewrite:
    """One `from <relative> import ...` made absolute; `line` is the source file's line."""

    path: str
    line: int
    relative: str  # "...activations"
    absolute: str  # "transformers.activations"


@dataclass(frozen=True)
class ImportPlan:
    """The imports to make absolute in a build's sources, and the sources' texts with them made so."""

    rewrites: list[ImportRewrite]
    texts: dict[Path, str]  # the files on disk with rewrites, rewritten
    depths: Mapping[Path, int]

    def apply(self, fixed: Mapping[Path, str]) -> dict[Path, str]:
        """The build's new texts: `fixed` (the fixed sources) and the files with imports to rewrite;
        in a fixed file they are rewritten again in the fixed text, whose lines may have moved."""
        again = {
            src: absolute_imports(text, src, self.depths[src])[0] for src, text in fixed.items() if src in self.texts
        }
        return {**fixed, **self.texts, **again}


def plan_imports(depths: Mapping[Path, int]) -> ImportPlan:
    """The relative imports to make absolute in the source files of `depths` (source -> number of
    directories between the output root and the file's output), in path and line order.

    Raises RelativeImportError, naming the file and line, when such an import has no absolute
    name (the file is not inside a package, or the import climbs above the top-level package).
    """
    rewrites, texts = [], {}
    for src, depth in sorted(depths.items()):
        try:
            text = read_source(src)
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue  # reported by the lint and copied as it is
        new_text, found = absolute_imports(text, src, depth)
        if found:
            rewrites += found
            texts[src] = new_text
    return ImportPlan(rewrites, texts, depths)


def absolute_imports(text: str, src: Path, depth: int) -> tuple[str, list[ImportRewrite]]:
    """`text` (of `src`, `depth` directories below the output root) with its relative imports that
    leave the tree made absolute, and what was rewritten. An import leaves the tree when it climbs
    above the output root: more than `depth + 1` dots."""
    # Cheap test first: most files have no import with that many dots.
    if not re.search(rf"\bfrom[ \t\\\n]*(\.[ \t\\\n]*){{{depth + 2}}}", text):
        return text, []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return text, []  # reported by the lint and copied as it is
    package = _package_of(src)
    lines = text.splitlines(keepends=True)
    rewrites = []
    leaving = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level > depth + 1]
    # Bottom up, so that earlier statements keep their positions.
    for node in sorted(leaving, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        relative = "." * node.level + (node.module or "")
        base = package[: len(package) - (node.level - 1)] if node.level - 1 < len(package) else []
        if not base:
            raise RelativeImportError(_why_not(src, node.lineno, relative, package))
        absolute = ".".join(base + ([node.module] if node.module else []))
        _replace_module(lines, node, absolute)
        rewrites.append(ImportRewrite(str(src), node.lineno, relative, absolute))
    return "".join(lines), rewrites[::-1]


def _replace_module(lines: list[str], node: ast.ImportFrom, absolute: str) -> None:
    """Replace the dots and module name of the statement `node` in `lines` with `absolute`."""
    first = lines[node.lineno - 1]
    col = len(first.encode("utf-8")[: node.col_offset].decode("utf-8"))  # ast's offsets are UTF-8 bytes
    statement = first[col:] + "".join(lines[node.lineno : node.end_lineno])
    tokens = tokenize.generate_tokens(io.StringIO(statement).readline)
    next(tokens)  # `from`
    start = end = None
    for token in tokens:
        if token.type in (tokenize.NL, tokenize.COMMENT):
            continue
        if token.type == tokenize.NAME and token.string == "import":
            break
        start, end = start or token.start, token.end
    # Positions in `statement`: row 1 starts at `col` of the statement's first line.
    (row, start_col), (end_row, end_col) = start, end
    start_col += col if row == 1 else 0
    end_col += col if end_row == 1 else 0
    head, tail = lines[node.lineno + row - 2][:start_col], lines[node.lineno + end_row - 2][end_col:]
    space = "" if tail[:1].isspace() or tail.startswith("\\") else " "  # `from ...import x` has none
    lines[node.lineno + row - 2 : node.lineno + end_row - 1] = [head + absolute + space + tail]


def _package_of(src: Path) -> list[str]:
    """The dotted package `src` belongs to, as parts ([] when its directory is not a package)."""
    name = module_name(src)
    parts = name.split(".") if name else []
    return parts if src.name == "__init__.py" else parts[:-1]


def _why_not(src: Path, line: int, relative: str, package: list[str]) -> str:
    where = f"{src}:{line}: `from {relative} import ...` leaves the output tree"
    if not package:
        return (
            f"{where} and {src.parent} is not a package (no __init__.py): it has no absolute name to import instead;"
            " transpile the package that contains it, or make the import absolute"
        )
    return f"{where} and climbs above the top-level package `{package[0]}`; Python cannot import it either"


# -- modules shared with the original ----------------------------------------------------------
SHARED_HEADER = "# transpile: shared with the original module"


def shared_modules(depths: Mapping[Path, int], changed: Collection[Path]) -> dict[Path, str]:
    """The modules of a build that its output imports from the original package instead of its copy,
    by source file: module -> its original's absolute name.

    A drop-in must accept the original's objects: transformers' `AlignModel` checks
    `isinstance(config.text_config, AlignTextConfig)`, which a config made by `transformers`
    fails against a copy of the class. So where the tree is a copy of an installed package's
    modules (Python imports each of them from this very file under its module name), a module
    the build leaves as it is (`changed`: the files it fixes or compiles; making outward imports
    absolute changes nothing) and that imports nothing the build changes (transitively, inside
    the tree) is the original module: its classes keep their identity, and it computes the same.
    Packages (`__init__.py`) are never shared: their submodules must be found under OUT.
    """
    names = {module_name(src): src for src in depths if src.suffix == ".py"}
    shared = {
        src: name
        for name, src in names.items()
        if src.name != "__init__.py" and src not in changed and _installed(src) and _imported_from(name) == _real(src)
    }
    if not shared:
        return {}
    needs = {src: _tree_imports(src, depths[src], names) for src in shared}
    # Greatest fixpoint: drop a module while it imports one of the tree that is neither shared nor an unchanged package.
    while True:
        blocked = [
            src
            for src, targets in needs.items()
            if src in shared and any(t not in shared and (t.name != "__init__.py" or t in changed) for t in targets)
        ]
        if not blocked:
            return shared
        for src in blocked:
            del shared[src]


def _installed(src: Path) -> bool:
    """Whether `src` belongs to an installed package: a source tree that is merely on sys.path (the
    current directory) is shadowed at run time by the output of the same name, which must stay a copy."""
    return any(part in ("site-packages", "dist-packages") for part in _real(src).parts)


def shared_module_text(name: str) -> str:
    """The output file of a module shared with the original `name`: it makes itself that module."""
    return (
        f'{SHARED_HEADER} `{name}` (docs/compiler.md, "Modules shared with the original"):\n'
        "# the build left this file as it is, so it is imported from there and its classes stay the original's.\n"
        "import importlib\n"
        "import sys\n\n"
        f"sys.modules[__name__] = importlib.import_module({name!r})\n"
    )


def _imported_from(name: str) -> Path | None:
    """The file Python imports for the module `name` here, found without running any package's code
    (the top-level package on sys.path, then directories), or None."""
    top, *rest = name.split(".")
    try:
        spec = importlib.machinery.PathFinder.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations or spec.origin is None:
        return None  # not found, or a namespace package: no single directory to look in
    path = Path(spec.origin).parent.joinpath(*rest)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return _real(candidate)
    return None


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _tree_imports(src: Path, depth: int, names: Mapping[str, Path]) -> set[Path]:
    """The files of the tree (`names`: module name -> file) that `src`'s imports load."""
    try:
        tree = ast.parse(read_source(src))
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return set()
    package = _package_of(src)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level > depth + 1 or node.level - 1 > len(package):
                continue  # leaves the tree: the original package's module either way
            base = package[: len(package) - (node.level - 1)] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            candidates = [module] + [f"{module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {names[c] for c in candidates if c in names}
    return found
