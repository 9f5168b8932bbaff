"""Relative imports that climb out of the output tree, made absolute imports of the original package.

`transpile site-packages/transformers/models/gpt2 -o compiled/gpt2` copies one package of a
larger one: `from ...activations import ACT2FN` in `modeling_gpt2.py` would look for
`compiled.activations`, which does not exist, so it becomes `from transformers.activations import
ACT2FN`. Imports that stay inside the tree (`from .configuration_gpt2 import GPT2Config`) stay
relative: they must reach the transpiled modules, not the originals.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from transpiler.discovery import DiscoveryError, module_name
from transpiler.fixer import read_source

# Any relative import: the cheap test that lets most files skip parsing.
_RELATIVE = re.compile(r"\bfrom[ \t\\\n]*\.")


class RelativeImportError(DiscoveryError):
    """A relative import leaves the output tree and there is no package to make it absolute in."""


@dataclass(frozen=True)
class ImportRewrite:
    """One `from <relative> import ...` made absolute; `line` is the source file's line."""

    path: str
    line: int
    relative: str  # "...activations"
    absolute: str  # "transformers.activations"


def plan_imports(depths: Mapping[Path, int]) -> list[ImportRewrite]:
    """The relative imports to make absolute in the source files of `depths` (source -> number of
    directories between the output root and the file's output), in path and line order.

    A relative import leaves the tree when it climbs above the output root: more than `depth + 1`
    dots. Raises RelativeImportError, naming the file and line, when such an import has no
    absolute name (the file is not inside a package, or it climbs above the top-level package).
    """
    rewrites = []
    for src, depth in sorted(depths.items()):
        try:
            text = read_source(src)
            if not _RELATIVE.search(text):
                continue
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue  # reported by the lint and copied as it is
        package = _package_of(src)
        for node in sorted(_imports_from(tree), key=lambda n: (n.lineno, n.col_offset)):
            if node.level <= depth + 1:
                continue
            relative = "." * node.level + (node.module or "")
            base = package[: len(package) - (node.level - 1)] if node.level - 1 < len(package) else []
            if not base:
                raise RelativeImportError(_why_not(src, node.lineno, relative, package))
            absolute = ".".join(base + ([node.module] if node.module else []))
            rewrites.append(ImportRewrite(str(src), node.lineno, relative, absolute))
    return rewrites


def absolute_sources(rewrites: list[ImportRewrite], texts: Mapping[Path, str]) -> dict[Path, str]:
    """The new text of each file `rewrites` name: its text in `texts` (the fixed sources) or on disk,
    with those imports made absolute, formatting and comments kept.

    The same spelling resolves to the same module everywhere in one file, so the imports are
    matched by spelling, not by line: fixes may have moved the lines.
    """
    by_path: dict[Path, dict[str, str]] = {}
    for r in rewrites:
        by_path.setdefault(Path(r.path), {})[r.relative] = r.absolute
    return {
        src: cst.parse_module(texts[src] if src in texts else read_source(src)).visit(_Absolute(absolute)).code
        for src, absolute in by_path.items()
    }


class _Absolute(cst.CSTTransformer):
    def __init__(self, absolute: Mapping[str, str]) -> None:
        super().__init__()
        self.absolute = absolute

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> cst.ImportFrom:
        name = "." * len(updated.relative) + (cst.Module([]).code_for_node(updated.module) if updated.module else "")
        if not updated.relative or name not in self.absolute:
            return updated
        # `from ...import x` is valid Python; an absolute module needs the space before `import`.
        space = updated.whitespace_before_import
        return updated.with_changes(
            relative=(),
            module=cst.parse_expression(self.absolute[name]),
            whitespace_before_import=space if space.value else cst.SimpleWhitespace(" "),
        )


def _imports_from(tree: ast.Module) -> list[ast.ImportFrom]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]


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
