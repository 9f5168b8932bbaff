"""The one diagnostic type every stage reports, and the documentation URL scheme."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FixApplicability = Literal["safe", "unsafe"]

DOCS_URL = "https://github.com/transpile-dev/transpile/blob/main/docs/rules.md"


def rule_url(code: str, name: str) -> str:
    """Anchor of a rule in the generated rule reference (docs/rules.md)."""
    return f"{DOCS_URL}#{code.lower()}-{name}"


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

    @property
    def url(self) -> str:
        return rule_url(self.code, self.name)

    @property
    def fixable(self) -> bool:
        return self.fix_applicability is not None
