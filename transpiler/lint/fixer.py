"""Applying fixes: each rule's plan becomes a libcst edit of the node it names.

Rules decide *whether* and *how* to fix while the analysis knows the types (the
plan, `Fix`, travels with the diagnostic); this module finds the planned node in
a lossless libcst tree, lets the rule rewrite it, and writes the module back with
every untouched byte, comment and blank line as it was. Plans whose nodes contain
another fixed node wait for the next round, when they are planned afresh on the
new source; `fix_project` repeats lint-and-fix until nothing more applies.
"""

from __future__ import annotations

import bisect
import difflib
import io
import os
import re
import tokenize
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from transpiler.source.diagnostics import Diagnostic
from transpiler.lint.rule import REGISTRY, Edit, FixDeclined, SideEffects
from transpiler.source.reading import decode, encode_source as encode_source, read_source as read_source

# Each round fixes what does not overlap; nested fixes (a print inside a branch that
# becomes `torch.where`) need a few rounds. More than this means a fix that undoes another.
MAX_ROUNDS = 8


def apply_fixes(
    text: str,
    diagnostics: list[Diagnostic],
    side_effects: SideEffects = "guard",
    declined: dict[Diagnostic, str] | None = None,
) -> tuple[str, list[Diagnostic]]:
    """`text` with the planned fixes of `diagnostics` applied, and the diagnostics that were; `declined`
    receives those whose rule declined the fix on seeing the whole module, with the reason."""
    planned: dict[tuple, Diagnostic] = {}
    for d in diagnostics:
        # Two plans for one node (two rules on one call): the first wins, the other is
        # re-planned next round on the rewritten code.
        if d.fix is not None:
            planned.setdefault((d.fix.node, d.fix.target), d)
    if not planned:
        return text, []
    return _Parsed(text).apply(planned, side_effects, declined)


class _Parsed:
    """A module parsed once, to apply several sets of plans to (each to the original text)."""

    def __init__(self, text: str) -> None:
        module = cst.parse_module(text)
        self.binding = _torch_binding(module)
        self.wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        self.positions = self.wrapper.resolve(PositionProvider)

    def apply(
        self, planned: Mapping[tuple, Diagnostic], side_effects: SideEffects, declined: dict | None = None
    ) -> tuple[str, list[Diagnostic]]:
        edit = Edit(*self.binding, side_effects, module=self.wrapper.module)
        applier = _Applier(planned, self.positions, edit)
        fixed = self.wrapper.module.visit(applier).visit(_FillEmptyBlocks())
        if declined is not None:
            declined.update(applier.declined)
        for module_edit in edit.module_edits.values():
            fixed = module_edit(fixed)
        if edit.definitions:
            fixed = _add_definitions(fixed, edit.definitions)
        if edit.needs_torch_import:
            fixed = _add_import_torch(fixed)
        return fixed.code, applier.applied


@dataclass(frozen=True)
class TextEdit:
    """Replace `start` to `end` (row, column: 1-based, columns in characters, end exclusive) by `content`."""

    content: str
    start: tuple[int, int]
    end: tuple[int, int]


def fix_edits(
    text: str, diagnostics: list[Diagnostic], side_effects: SideEffects = "guard"
) -> dict[Diagnostic, tuple[TextEdit, ...]]:
    """Each planned fix of `diagnostics` (findings of `text`) applied alone, as the edits that turn `text`
    into the fixed text: what `--format json` and SARIF show of a fix, as ruff does."""
    planned = [d for d in diagnostics if d.fix is not None]
    if not planned:
        return {}
    parsed = _Parsed(text)
    edits = {}
    for d in planned:
        fixed, applied = parsed.apply({(d.fix.node, d.fix.target): d}, side_effects)
        if applied:
            edits[d] = text_edits(text, fixed)
    return edits


# A line with its ending, as editors count lines (not str.splitlines, which also splits at form feeds).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def text_edits(before: str, after: str) -> tuple[TextEdit, ...]:
    """The fewest whole-line changes that turn `before` into `after`, each narrowed to the characters
    that differ."""
    old, new = _LINE.findall(before), _LINE.findall(after)
    starts = [0]
    for line in old:
        starts.append(starts[-1] + len(line))

    def position(offset: int) -> tuple[int, int]:
        row = bisect.bisect_right(starts, offset) - 1
        return row + 1, offset - starts[row] + 1

    edits = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        removed, added = "".join(old[i1:i2]), "".join(new[j1:j2])
        head = len(os.path.commonprefix([removed, added]))
        tail = len(os.path.commonprefix([removed[head:][::-1], added[head:][::-1]]))
        start, end = starts[i1] + head, starts[i1] + len(removed) - tail
        edits.append(TextEdit(added[head : len(added) - tail], position(start), position(end)))
    return tuple(edits)


class _Applier(cst.CSTTransformer):
    def __init__(self, planned: Mapping[tuple, Diagnostic], positions: Mapping, edit: Edit) -> None:
        super().__init__()
        self.planned = planned
        self.positions = positions
        self.edit = edit
        self.applied: list[Diagnostic] = []
        self.declined: dict[Diagnostic, str] = {}
        # One counter per open node: how many fixes were applied inside it so far.
        self.inside: list[int] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.inside.append(0)
        return True

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        nested = self.inside.pop()
        result = updated
        diagnostic = self.planned.get(self._key(original)) if nested == 0 else None
        if diagnostic is not None:
            try:
                result = REGISTRY[diagnostic.code]().apply_fix(updated, diagnostic.fix, self.edit)
            except FixDeclined as declined:
                self.declined[diagnostic] = str(declined)
            else:
                self.applied.append(diagnostic)
                nested = 1
        if self.inside:
            self.inside[-1] += nested
        return result

    def _key(self, node: cst.CSTNode) -> tuple | None:
        position = self.positions.get(node)
        if position is None:
            return None
        start, end = position.start, position.end
        return type(node).__name__, (start.line, start.column, end.line, end.column)


class _FillEmptyBlocks(cst.CSTTransformer):
    """A block whose only statement a fix removed gets `pass`, so the module stays valid."""

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        if updated.body:
            return updated
        return updated.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])


def _torch_binding(module: cst.Module) -> tuple[str, bool]:
    """The module-level name `import torch [as x]` binds, and whether there is one."""
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        if isinstance(alias.name, cst.Name) and alias.name.value == "torch":
                            asname = alias.asname
                            return (asname.name.value if asname else "torch"), True
    return "torch", False


def _add_import_torch(module: cst.Module) -> cst.Module:
    """Insert `import torch` after the docstring and `__future__` imports."""
    body = list(module.body)
    index = 0
    while index < len(body) and _is_preamble(body[index], index):
        index += 1
    new = cst.parse_statement("import torch\n")
    if index < len(body):  # take over the blank lines that separated the next statement
        new = new.with_changes(leading_lines=body[index].leading_lines)
        body[index] = body[index].with_changes(leading_lines=[])
    body.insert(index, new)
    return module.with_changes(body=body)


def _add_definitions(module: cst.Module, definitions: Mapping[str, str]) -> cst.Module:
    """`definitions` (name: source of a module-level statement defining it) inserted after the imports that
    open the module, two blank lines around each, except those whose name the module defines already."""
    body = list(module.body)
    defined = {statement.name.value for statement in body if isinstance(statement, cst.ClassDef | cst.FunctionDef)}
    index = 0
    for position, statement in enumerate(body):
        if isinstance(statement, cst.ClassDef | cst.FunctionDef):
            break
        if _is_preamble(statement, position) or _is_import(statement):
            index = position + 1
    new = [
        cst.parse_statement(source).with_changes(leading_lines=[cst.EmptyLine()] * 2)
        for name, source in definitions.items()
        if name not in defined
    ]
    if not new:
        return module
    if index < len(body):
        body[index] = body[index].with_changes(leading_lines=[cst.EmptyLine()] * 2)
    body[index:index] = new
    return module.with_changes(body=body)


def _is_import(statement: cst.CSTNode) -> bool:
    """`import x`, `from x import y`, or a `try:`/`if` block of imports (optional dependencies)."""
    if isinstance(statement, cst.SimpleStatementLine):
        return all(isinstance(small, cst.Import | cst.ImportFrom) for small in statement.body)
    if isinstance(statement, cst.Try | cst.If):
        return all(_is_import(inner) for inner in statement.body.body)
    return False


def _is_preamble(statement: cst.CSTNode, index: int) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if (
        index == 0
        and isinstance(small, cst.Expr)
        and isinstance(small.value, cst.SimpleString | cst.ConcatenatedString)
    ):
        return True
    return (
        isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name) and small.module.value == "__future__"
    )


@dataclass
class FixResult:
    """Where a fix run ended: new text per changed file, what was fixed, what is left."""

    sources: dict[Path, str] = field(default_factory=dict)
    applied: list[Diagnostic] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)


def fix_project(
    files: list[Path],
    lint: Callable[[Mapping[Path, bytes]], list[Diagnostic]],
    unsafe: bool = False,
    side_effects: SideEffects = "guard",
    given: Mapping[Path, bytes] | None = None,
) -> FixResult:
    """Lint, fix, lint again until no fix applies; nothing is written.

    `lint(overlay)` lints `files` as if each path in `overlay` held those bytes. `given` holds the
    contents of files that are not on disk as they are linted (standard input, an editor's buffer).
    """
    result = FixResult()
    given = dict(given or {})
    overlay: dict[Path, bytes] = dict(given)
    for _ in range(MAX_ROUNDS):
        diagnostics = lint(overlay)
        wanted: dict[str, list[Diagnostic]] = {}
        for d in diagnostics:
            if d.fix is not None and (unsafe or d.fix.safety == "safe"):
                wanted.setdefault(d.path, []).append(d)
        progress = False
        declined: dict[Diagnostic, str] = {}
        for path, todo in wanted.items():
            key = Path(path)
            if key in result.sources:
                text = result.sources[key]
            else:
                text = decode(given[key]) if key in given else read_source(key)
            new_text, applied = apply_fixes(text, todo, side_effects, declined)
            if applied and new_text != text:
                overlay[key] = encode_like(given[key], new_text) if key in given else encode_source(key, new_text)
                result.sources[key] = new_text
                result.applied.extend(applied)
                progress = True
        if not progress:
            # A declined fix is not there to enable: the finding says why, as one never planned would.
            result.remaining = [replace(d, fix=None, no_fix=declined[d]) if d in declined else d for d in diagnostics]
            return result
    result.remaining = lint(overlay)
    return result


def encode_like(original: bytes, text: str) -> bytes:
    """`text` encoded as `original` is (its PEP 263 cookie or BOM, else UTF-8), as `encode_source` does for a file."""
    return text.encode(tokenize.detect_encoding(io.BytesIO(original).readline)[0])


def why_not_fixed(d: Diagnostic) -> str:
    """The reason a finding is still there after a fix run, for summaries."""
    if d.no_fix:
        return d.no_fix
    if d.fix is not None:
        enable = "--fix" if d.fix.safety == "safe" else "--fix --unsafe-fixes"  # a safe fix needs only --fix
        return f"{d.fix.safety} fix not enabled ({d.fix.title}); use {enable}"
    return "no automatic fix"
