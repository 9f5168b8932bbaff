"""The one diagnostic type every stage reports, and the documentation URL scheme."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FixApplicability = Literal["safe", "unsafe"]

DOCS_URL = "https://github.com/transpile-dev/transpile/blob/main/docs/rules.md"


def rule_url(code: str, name: str) -> str:
    """Anchor of a rule in the generated rule reference (docs/rules.md)."""
    return f"{DOCS_URL}#{code.lower()}-{name}"


# The codes reported about a file itself rather than its code, by every stage (rewrites/meta.py documents
# them as rules): their names live here, where discovery and the build can reach them.
FILE_CODES = {"TP900": "unused-noqa", "TP901": "syntax-error", "TP902": "unreadable-file"}


def file_diagnostic(path: str, code: str, message: str) -> "Diagnostic":
    """A `FILE_CODES` finding, placed at the start of the file."""
    return Diagnostic(path, 1, 1, 1, 1, code, FILE_CODES[code], message)


@dataclass(frozen=True)
class Fix:
    """A rule's plan for rewriting one finding, decided where the analysis knows the types.

    `target` locates the libcst node to rewrite: its class name and its span as
    (line, column, end line, end column), lines 1-based, columns 0-based characters,
    end exclusive (the same span `ast` and libcst's PositionProvider give).
    `data` holds what the rule's `apply_fix` needs beyond the node (picklable,
    as plans are cached with the analysis).
    """

    safety: FixApplicability
    title: str  # what the fix does, in the imperative: "guard `print()` with `is_compiling()`"
    node: str
    target: tuple[int, int, int, int]
    data: tuple = ()


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One finding. Lines and columns are 1-based; columns count characters, not bytes."""

    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    code: str
    name: str
    message: str
    fix_applicability: FixApplicability | None = None
    dynamo_codes: tuple[str, ...] = ()
    fix: Fix | None = field(default=None, compare=False)
    no_fix: str | None = field(default=None, compare=False)  # why a fixable rule left this alone

    @property
    def url(self) -> str:
        return rule_url(self.code, self.name)

    @property
    def fixable(self) -> bool:
        return self.fix_applicability is not None
