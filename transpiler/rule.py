"""The base class of lint rules, the registry they join, and what a rule sees while it runs.

A rule declares its code, name, message, documentation and examples as class
attributes and implements `visit_<AstNode>(node, ctx)` methods; the checker
visits every function once and calls each rule for the nodes it asked for.
Suppression (`# noqa`) and selection are applied later, once, by the engine.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from transpiler.diagnostics import FixApplicability

if TYPE_CHECKING:
    from transpiler.checker import Context

Family = Literal["break", "recompile", "meta"]

REGISTRY: dict[str, type["Rule"]] = {}


@dataclass(frozen=True)
class Finding:
    """A raw report inside one function, before columns and suppressions are settled."""

    code: str
    line: int
    col: int  # 0-based UTF-8 byte offset, as `ast` gives it
    end_line: int
    end_col: int
    message: str
    # Enclosing constructs a graph break cannot be resumed in: ("loop" | "try" | "with", line).
    blocks: tuple[tuple[str, int], ...] = ()


class Rule:
    """One anti-pattern. Subclasses set the class attributes and visit methods.

    The class docstring holds the documentation sections `## What it does`,
    `## Why is this bad?` and `## Fix safety`; the rule reference shows the first
    `INVALID` example as "Example" and the first `VALID` one as "Use instead".
    """

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    summary: ClassVar[str]
    family: ClassVar[Family] = "break"
    dynamo_codes: ClassVar[tuple[str, ...]] = ()
    fix: ClassVar[FixApplicability | None] = None
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[str]] = []

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            return  # an abstract intermediate class
        if cls.code in REGISTRY:
            raise ValueError(f"rule code {cls.code} used by {REGISTRY[cls.code].__name__} and {cls.__name__}")
        REGISTRY[cls.code] = cls

    def report(self, ctx: "Context", node: ast.AST, **fields: object) -> None:
        ctx.add(self.code, node, self.message.format(**fields) if fields else self.message)

    def check_function(self, findings: list[Finding], ctx: "Context") -> None:
        """Called after a function was visited, with the findings of all rules so far."""

    @classmethod
    def docs(cls) -> str:
        return textwrap.dedent(inspect.getdoc(cls) or "").strip()

    @classmethod
    def examples(cls, kind: Literal["VALID", "INVALID"]) -> list[str]:
        return [textwrap.dedent(e).strip() + "\n" for e in getattr(cls, kind)]
