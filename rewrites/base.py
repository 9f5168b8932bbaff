"""Shared shapes of rules: "a call to one of these functions", "a method call on a tensor",
"a call whose statement can be skipped under compile"."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, ClassVar

from transpiler.analysis.walker import Context
from transpiler.lint.rule import Fix
from transpiler.lint.rule import Rule

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.lint.rule import Edit


class CallRule(Rule):
    """Reports calls whose callee resolves (through imports) to one of `callees`.

    The message may use `{callee}`, the name as written in the source's import terms.
    """

    callees: ClassVar[frozenset[str]]

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        if name in self.callees and self.applies(node, ctx):
            self.report(ctx, node, callee=name.removeprefix("builtins."))

    def applies(self, node: ast.Call, ctx: Context) -> bool:
        return True


class TensorMethodRule(Rule):
    """Reports `value.method(...)` where `value` is (or may be) a tensor and `method` is in `methods`.

    `torch.method(value, ...)` spellings are listed in `functions` (qualified names).
    """

    methods: ClassVar[frozenset[str]]
    functions: ClassVar[frozenset[str]] = frozenset()
    # Also report receivers of unknown kind: for methods that only tensors have.
    unknown_receivers: ClassVar[bool] = False

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in self.methods:
            if ctx.qualname(func) is None:  # not a module-level function such as `np.unique`
                kind = ctx.kind(func.value)
                if kind.may_be_tensor or (self.unknown_receivers and kind.name == "UNKNOWN"):
                    if self.applies(node, ctx):
                        self.report(ctx, node, method=func.attr)
                    return
        if self.functions and ctx.qualname(func) in self.functions and self.applies(node, ctx):
            self.report(ctx, node, method=func.attr if isinstance(func, ast.Attribute) else "")

    def applies(self, node: ast.Call, ctx: Context) -> bool:
        return True


class GuardableCall(CallRule):
    """A call made for its side effect alone (a statement of its own): the fix skips it under
    `torch.compile` with `if not torch.compiler.is_compiling():`, so eager runs are unchanged;
    with the `remove` side-effects policy it deletes the statement instead.
    """

    fix_safety = "safe"

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        statement = ctx.statement
        if not (isinstance(statement, ast.Expr) and statement.value is node):
            return {"no_fix": "its value is used, so it cannot be skipped"}
        return self.make_fix("guard with `if not torch.compiler.is_compiling():`", "SimpleStatementLine", statement)

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        return skip_under_compile(node, edit)


def skip_under_compile(node: "cst.CSTNode", edit: "Edit") -> "cst.CSTNode":
    """The statement line `node` under the side-effects policy: guarded by `if not
    torch.compiler.is_compiling():`, or removed."""
    import libcst as cst

    if edit.side_effects == "remove":
        return cst.RemovalSentinel.REMOVE
    is_compiling = cst.Call(edit.torch("compiler.is_compiling"))
    return cst.If(
        test=cst.UnaryOperation(cst.Not(), is_compiling),
        body=cst.IndentedBlock([node.with_changes(leading_lines=[])]),
        leading_lines=node.leading_lines,
    )
