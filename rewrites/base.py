"""Shared shapes of rules: "a call to one of these functions", "a method call on a tensor"."""

from __future__ import annotations

import ast
from typing import ClassVar

from transpiler.checker import Context
from transpiler.rule import Rule


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
