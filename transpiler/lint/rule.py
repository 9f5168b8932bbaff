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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

# The rule API: everything a rule module imports from the linter.
from transpiler.analysis.kinds import Kind as Kind
from transpiler.analysis.walker import Context as Context, Finding as Finding
from transpiler.source.diagnostics import FILE_CODES as FILE_CODES, Fix as Fix, FixApplicability as FixApplicability

if TYPE_CHECKING:
    import libcst as cst


Family = Literal["break", "recompile", "perf", "meta"]
SideEffects = Literal["guard", "remove"]

REGISTRY: dict[str, type["Rule"]] = {}


class FixDeclined(Exception):
    """Raised by `apply_fix` when the whole module shows that the planned fix must not be applied (a plan
    is made per function); the message says why, and becomes the finding's `no_fix`."""


@dataclass
class Edit:
    """What a rule's `apply_fix` sees besides the node: the module's name for torch and the policy, the
    whole module, and the edits of the module a fix may ask for besides its node."""

    torch_name: str  # "torch", or the alias of `import torch as th`
    torch_bound: bool  # False: the module does not import torch; the fixer adds `import torch`
    side_effects: SideEffects = "guard"
    needs_torch_import: bool = False
    module: cst.Module | None = None  # the module as parsed, before any fix of this round
    # Module-level definitions the fixer adds once each after the imports, by the name they define
    # (skipped where the module defines that name already), and edits of the whole module, applied
    # once each by name after the planned nodes were rewritten: several findings may ask for the same.
    definitions: dict[str, str] = field(default_factory=dict)
    module_edits: dict[str, Callable[[cst.Module], cst.Module]] = field(default_factory=dict)

    def torch(self, dotted: str = "") -> cst.BaseExpression:
        """`torch.<dotted>` spelled with the module's own alias (`th.compiler.is_compiling`)."""
        self.needs_torch_import = self.needs_torch_import or not self.torch_bound
        import libcst as cst  # here: the linter does not load libcst unless a fix is applied

        return cst.parse_expression(f"{self.torch_name}.{dotted}" if dotted else self.torch_name)


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
    # The safety of the rule's fixes, for the reference: "safe", "unsafe", "safe or unsafe", None.
    fix_safety: ClassVar[str | None] = None
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[str]] = []

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            return  # an abstract intermediate class
        if cls.code in REGISTRY:
            raise ValueError(f"rule code {cls.code} used by {REGISTRY[cls.code].__name__} and {cls.__name__}")
        REGISTRY[cls.code] = cls

    def report(
        self, ctx: "Context", node: ast.AST, *, fix: Fix | None = None, no_fix: str | None = None, **fields: object
    ) -> None:
        """Report `node`; `fix` is the plan for rewriting it, or `no_fix` says why there is none
        (by default, `plan` decides)."""
        if fix is None and no_fix is None:
            planned = self.plan(node, ctx)
            fix, no_fix = planned.get("fix"), planned.get("no_fix")
        ctx.add(self.code, node, self.message.format(**fields) if fields else self.message, fix, no_fix)

    def plan(self, node: ast.AST, ctx: "Context") -> dict:
        """`{"fix": Fix}`, `{"no_fix": reason}` or `{}` (the rule has no fixes): keyword
        arguments for `report`. Rules with fixes override this and `apply_fix`."""
        return {}

    def make_fix(
        self, title: str, cst_node: str, node: ast.AST, safety: FixApplicability = "safe", data: tuple = ()
    ) -> dict:
        """A plan to rewrite the libcst node of class `cst_node` that spans what `node` spans."""
        span = (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)
        return {"fix": Fix(safety, title, cst_node, span, data)}

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode | cst.FlattenSentinel":
        """The rewritten form of `node`, the libcst node at `fix.target` (as the fixer updated it
        so far). Only called for findings that carry a `fix` this rule planned."""
        raise NotImplementedError(f"{self.code} plans fixes but does not apply them")

    def check_function(self, findings: list[Finding], ctx: "Context") -> None:
        """Called after a function was visited, with the findings of all rules so far."""

    @classmethod
    def docs(cls) -> str:
        return textwrap.dedent(inspect.getdoc(cls) or "").strip()

    @classmethod
    def examples(cls, kind: Literal["VALID", "INVALID"]) -> list[str]:
        return [textwrap.dedent(e).strip() + "\n" for e in getattr(cls, kind)]
