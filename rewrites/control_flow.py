"""TP2xx: control flow that depends on tensor values (`if`, `while`, ternaries, `and`/`or`, asserts, sorting)."""

from __future__ import annotations

import ast

from transpiler.checker import Context
from transpiler.rule import Rule


def data_dependent(test: ast.expr, ctx: Context) -> bool:
    """True when Python must read a tensor's value to decide `test`."""
    if isinstance(test, ast.BoolOp):
        return any(data_dependent(v, ctx) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return data_dependent(test.operand, ctx)
    return ctx.kind(test).is_tensor


def claim(test: ast.expr, ctx: Context) -> None:
    """Mark `test` and its `and`/`or`/`not` parts as reported by the enclosing construct."""
    ctx.claimed.add(id(test))
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            claim(value, ctx)
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        claim(test.operand, ctx)


class DataDependentIf(Rule):
    """## What it does
    Checks for `if` statements whose condition is a tensor value, such as
    `if x.sum() > 0:` or `if mask.any():`.

    ## Why is this bad?
    Python needs a `bool` to pick a branch, so Dynamo must stop the graph, run
    it, read the value back from the device and continue in a new graph
    (GB0170). Conditions on shapes, `dim()`, dtypes or `self.training` are fine:
    Dynamo knows them at compile time.

    ## Fix safety
    When both branches are pure and assign the same names, `torch.where` keeps
    the meaning; otherwise `torch.cond`. The rewrite evaluates both branches, so
    it is safe only when neither has side effects.
    """

    code = "TP201"
    name = "data-dependent-if"
    summary = "`if` on a tensor value"
    message = "`if` on a tensor value breaks the graph; use `torch.where` or `torch.cond`"
    dynamo_codes = ("GB0170",)

    def visit_If(self, node: ast.If, ctx: Context) -> None:
        if data_dependent(node.test, ctx):
            claim(node.test, ctx)
            self.report(ctx, node.test)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                if y.sum() > 0:
                    y = y * 2
                return y - 1
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                if torch.isnan(y).any():
                    y = torch.zeros_like(y)
                return y - 1
        """,
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                y = torch.where(y.sum() > 0, y * 2, y)
                return y - 1
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                if x.shape[0] > 1 and x.dim() == 1 and not self.training:
                    y = y * 2
                return y - 1
        """,
    ]


class DataDependentWhile(Rule):
    """## What it does
    Checks for `while` loops whose condition is a tensor value.

    ## Why is this bad?
    Every test of the condition reads a tensor value back into Python: the graph
    breaks at each iteration (GB0170), and a break inside a loop makes Dynamo
    give up on the whole function.

    ## Fix safety
    No automatic fix. Bound the loop by a Python number, or use
    `torch._higher_order_ops.while_loop`.
    """

    code = "TP202"
    name = "data-dependent-while"
    summary = "`while` on a tensor value"
    message = "`while` on a tensor value breaks the graph at every iteration; bound the loop by a Python int"
    dynamo_codes = ("GB0170",)

    def visit_While(self, node: ast.While, ctx: Context) -> None:
        if data_dependent(node.test, ctx):
            claim(node.test, ctx)
            self.report(ctx, node.test)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x.abs() + 1
                while y.sum() < 100:
                    y = y * 2
                return y
        """
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x.abs() + 1
                for _ in range(4):
                    y = torch.where(y.sum() < 100, y * 2, y)
                return y
        """
    ]


class DataDependentTernary(Rule):
    """## What it does
    Checks for conditional expressions (`a if cond else b`) whose condition is a
    tensor value.

    ## Why is this bad?
    Like a data-dependent `if`, the expression needs the tensor's value in
    Python: a graph break (GB0170).

    ## Fix safety
    `torch.where(cond, a, b)` evaluates both sides; safe when both are pure and
    of the same shape and dtype.
    """

    code = "TP203"
    name = "data-dependent-ternary"
    summary = "conditional expression on a tensor value"
    message = "conditional expression on a tensor value breaks the graph; use `torch.where`"
    dynamo_codes = ("GB0170",)

    def visit_IfExp(self, node: ast.IfExp, ctx: Context) -> None:
        if data_dependent(node.test, ctx):
            claim(node.test, ctx)
            self.report(ctx, node)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y * 2 if y.mean() > 0 else y * 3
                return z
        """
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = torch.where(y.mean() > 0, y * 2, y * 3)
                return z
        """
    ]


class TensorTruthinessInBoolOp(Rule):
    """## What it does
    Checks for `and`, `or` and `not` applied to tensors outside an `if`/`while`
    condition (for example `valid = a.any() or b.any()`).

    ## Why is this bad?
    `and`/`or`/`not` call `bool()` on their operands, which reads a tensor value
    into Python: a graph break (GB0170 for `and`/`or`, GB0033 for `not`).

    ## Fix safety
    `|`, `&` and `~` (or `torch.logical_or` and friends) keep the result a
    tensor; `and`/`or` short-circuit and return an operand, so the rewrite is
    safe only for boolean tensors.
    """

    code = "TP204"
    name = "tensor-truthiness-in-bool-op"
    summary = "`and`/`or`/`not` on tensors"
    message = "`{op}` on a tensor calls `bool()` and breaks the graph; use `{replacement}`"
    dynamo_codes = ("GB0170", "GB0033")

    def visit_BoolOp(self, node: ast.BoolOp, ctx: Context) -> None:
        if id(node) not in ctx.claimed and any(ctx.kind(v).is_tensor for v in node.values[:-1]):
            is_and = isinstance(node.op, ast.And)
            self.report(ctx, node, op="and" if is_and else "or", replacement="&" if is_and else "|")

    def visit_UnaryOp(self, node: ast.UnaryOp, ctx: Context) -> None:
        if isinstance(node.op, ast.Not) and id(node) not in ctx.claimed and ctx.kind(node.operand).is_tensor:
            self.report(ctx, node, op="not", replacement="~")

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                flag = (y > 0).any() or (y < -5).any()
                return y * 2, flag
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                empty = not (y > 0).any()
                return y * 2, empty
        """,
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                flag = (y > 0).any() | (y < -5).any()
                return y * 2, flag
        """
    ]


class DataDependentAssert(Rule):
    """## What it does
    Checks for `assert` statements on tensor values that Dynamo cannot turn into
    an asynchronous device assert: those with a computed message (f-string,
    variable, tuple) and those combining tensors with `and`/`or`.

    ## Why is this bad?
    Dynamo rewrites `assert <tensor>` and `assert <tensor>, "literal"` into
    `torch._assert_async`, but any other form needs the value in Python to
    decide whether to build the message or to short-circuit: a graph break
    (GB0170).

    ## Fix safety
    `torch._assert_async(cond, "message")` keeps the check without a host sync;
    the message can no longer include runtime values, so the fix is unsafe.
    """

    code = "TP205"
    name = "data-dependent-assert"
    summary = "assert on a tensor value with a computed message or `and`/`or`"
    message = "`assert` on a tensor value with {what} breaks the graph; use a literal message or `torch._assert_async`"
    dynamo_codes = ("GB0170",)

    def visit_Assert(self, node: ast.Assert, ctx: Context) -> None:
        if not data_dependent(node.test, ctx):
            return
        claim(node.test, ctx)
        if isinstance(node.test, ast.BoolOp):
            self.report(ctx, node, what="`and`/`or`")
        elif node.msg is not None and not (isinstance(node.msg, ast.Constant) and isinstance(node.msg.value, str)):
            self.report(ctx, node, what="a computed message")

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x.abs() + 1
                assert (y > 0).all(), f"non-positive values in {y.shape}"
                return y * 2
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x.abs() + 1
                assert (y > 0).all() and (y < 100).all()
                return y * 2
        """,
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x.abs() + 1
                assert (y > 0).all(), "non-positive values"
                assert x.shape[0] == 8, f"expected 8 rows, got {x.shape[0]}"
                return y * 2
        """
    ]


class SortedOnTensors(Rule):
    """## What it does
    Checks for the builtin `sorted()` applied to tensors or to lists of tensors.

    ## Why is this bad?
    Sorting Python objects compares their values in Python; with tensor keys
    Dynamo cannot keep that in a graph (GB0207).

    ## Fix safety
    No automatic fix: `torch.sort` on a stacked tensor keeps it in the graph.
    """

    code = "TP206"
    name = "sorted-on-tensors"
    summary = "`sorted()` of tensors"
    message = "`sorted()` of tensors breaks the graph; use `torch.sort` on a stacked tensor"
    dynamo_codes = ("GB0207",)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        if ctx.qualname(node.func) != "builtins.sorted" or not node.args:
            return
        items = node.args[0]
        elements = items.elts if isinstance(items, (ast.List, ast.Tuple, ast.Set)) else [items]
        if any(ctx.kind(e).is_tensor for e in elements):
            self.report(ctx, node)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                low, high = sorted([y.sum(), y.mean()])
                return y * low
        """
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                low = torch.sort(torch.stack([y.sum(), y.mean()])).values[0]
                return y * low
        """
    ]
