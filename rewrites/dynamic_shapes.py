"""TP4xx: operators whose output shape depends on tensor values (`nonzero`, boolean masks, `unique`, ...)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, ClassVar

from rewrites.base import TensorMethodRule
from rewrites.conversions import flow_problem, parent_map, with_parens_of
from transpiler.analysis.walker import Context
from transpiler.lint.rule import Fix
from transpiler.analysis.kinds import Kind
from transpiler.lint.rule import Rule

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.lint.rule import Edit

_SHAPE_WHY = """The number of output elements depends on the values, so Dynamo cannot
    know the shape while tracing; with default settings it breaks the graph
    (GB0036). `fullgraph=True` captures it with an unbacked size, at the cost of
    guards later code may fail."""


def _summed(node: ast.expr, parent: ast.AST | None, ctx: Context, parents: dict[int, ast.AST]) -> bool:
    """Whether this use of a value is `value.sum()` or `torch.sum(value)`, with no other argument."""
    if isinstance(parent, ast.Attribute) and parent.attr == "sum":
        call = parents.get(id(parent))
        return isinstance(call, ast.Call) and call.func is parent and not call.args and not call.keywords
    is_call = isinstance(parent, ast.Call) and parent.args == [node] and not parent.keywords
    return is_call and ctx.qualname(parent.func) == "torch.sum"


class SummedSelection(Rule):
    """A selection of the elements under a mask that is only ever summed: summing
    `torch.where(mask, x, 0)` gives the same total with a static shape."""

    fix_safety = "unsafe"
    cst_node: ClassVar[str]  # the libcst class of the selection: "Subscript" or "Call"

    def plan_where(self, node: ast.expr, ctx: Context) -> dict:
        problem = flow_problem(node, ctx, parent_map(ctx.node), _summed)
        if problem:
            return {"no_fix": problem.replace("not only in tensor arithmetic", "not only summed")}
        return self.make_fix("sum `torch.where(mask, x, 0)` instead", self.cst_node, node, safety="unsafe")

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        values, mask = self.operands(node)
        where = cst.Call(edit.torch("where"), [cst.Arg(mask), cst.Arg(values), cst.Arg(cst.Integer("0"))])
        return with_parens_of(node, where)

    def operands(self, node: "cst.CSTNode") -> tuple["cst.BaseExpression", "cst.BaseExpression"]:
        """The libcst nodes of the selected values and of the mask."""
        raise NotImplementedError


class NonzeroCall(TensorMethodRule):
    __doc__ = f"""## What it does
    Checks for `torch.nonzero`, `torch.argwhere`, `Tensor.nonzero` and the
    one-argument `torch.where(cond)`.

    ## Why is this bad?
    {_SHAPE_WHY}

    ## Fix safety
    No automatic fix. Keep shapes static with masks: `torch.where(cond, x, 0)`.
    """

    code = "TP401"
    name = "nonzero-call"
    summary = "`nonzero`/`argwhere`/one-argument `where`"
    message = (
        "`{method}` has a data-dependent output shape and breaks the graph; use a mask with `torch.where(cond, x, y)`"
    )
    dynamo_codes = ("GB0036",)
    methods = frozenset({"nonzero", "argwhere"})
    functions = frozenset({"torch.nonzero", "torch.argwhere"})

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        if ctx.qualname(node.func) == "torch.where" and len(node.args) == 1 and not node.keywords:
            self.report(ctx, node, method="where")
        else:
            super().visit_Call(node, ctx)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                positive = torch.nonzero(y > 0)
                return y * 2, positive
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                positive = torch.where(y > 0, y, torch.zeros_like(y))
                return y * 2, positive
        """]


class BooleanMaskIndex(SummedSelection):
    __doc__ = f"""## What it does
    Checks for reading a tensor through a boolean mask: `x[mask]` where `mask`
    holds booleans (a comparison, `isnan`, `~m`, ...).

    ## Why is this bad?
    {_SHAPE_WHY}
    (Writing through a mask, `x[mask] = 0`, keeps the shape and is fine.)

    ## Fix safety
    When the selection is only ever summed (`x[mask].sum()`, or `sel =
    x[mask]` whose every use is `sel.sum()`) and the mask is an elementwise
    test of `x` itself (`x > 0`, `~torch.isnan(x)`, ...), so that it has the
    shape of `x`, `x[mask]` becomes `torch.where(mask, x, 0)`: the same total,
    dtype and gradients with a static shape. Unsafe: the sum adds the elements
    in another order (floating-point rounding may differ). Other masks (which
    may select whole rows of `x`) and other uses of the selection are left
    alone.
    """

    code = "TP402"
    name = "boolean-mask-index"
    summary = "indexing with a boolean mask"
    message = (
        "indexing with a boolean mask has a data-dependent shape and breaks the graph; use `torch.where(mask, x, 0)`"
    )
    dynamo_codes = ("GB0036",)

    def visit_Subscript(self, node: ast.Subscript, ctx: Context) -> None:
        if isinstance(node.ctx, ast.Load) and ctx.kind(node.value).may_be_tensor:
            if ctx.kind(node.slice) is Kind.BOOL_TENSOR:
                self.report(ctx, node)

    cst_node = "Subscript"

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Subscript)
        if not ctx.kind(node.value).is_tensor:
            return {"no_fix": "the indexed value is not known to be a tensor"}
        if not _elementwise_test_of(node.slice, node.value, ctx):
            return {"no_fix": "the mask is not an elementwise test of the indexed tensor, so it may select rows"}
        return self.plan_where(node, ctx)

    def operands(self, node: "cst.CSTNode") -> tuple["cst.BaseExpression", "cst.BaseExpression"]:
        return node.value, node.slice[0].slice.value  # `x[mask]`: one plain index (planned from ast)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                total = y[y > 0].sum()
                return y * total
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                total = torch.where(y > 0, y, 0).sum()
                y[y < -1] = 0
                return y * total
        """]


_ELEMENTWISE_TESTS = frozenset("isnan isinf isfinite isneginf isposinf signbit logical_not".split())


def _elementwise_test_of(mask: ast.expr, x: ast.expr, ctx: Context) -> bool:
    """Whether `mask` is a test of each element of `x` (so it has `x`'s shape): `x > 0`,
    `0 <= x`, `x.isnan()`, `torch.isfinite(x)`, `~(...)` of one."""
    same = ast.dump(x)
    if isinstance(mask, ast.UnaryOp) and isinstance(mask.op, ast.Invert):
        return _elementwise_test_of(mask.operand, x, ctx)
    if isinstance(mask, ast.Compare) and len(mask.ops) == 1:
        left, right = mask.left, mask.comparators[0]
        if ast.dump(left) == same:
            return ctx.kind(right) is Kind.SCALAR
        return ast.dump(right) == same and ctx.kind(left) is Kind.SCALAR
    if isinstance(mask, ast.Call) and not mask.keywords:
        func = mask.func
        name = ctx.qualname(func)
        if name is not None:  # torch.isnan(x)
            tested = mask.args[0] if len(mask.args) == 1 else None
            return name.removeprefix("torch.") in _ELEMENTWISE_TESTS and tested is not None and ast.dump(tested) == same
        # x.isnan()
        is_test = isinstance(func, ast.Attribute) and func.attr in _ELEMENTWISE_TESTS and not mask.args
        return is_test and ast.dump(func.value) == same
    return False


class MaskedSelectCall(SummedSelection, TensorMethodRule):
    __doc__ = f"""## What it does
    Checks for `torch.masked_select` and `Tensor.masked_select`.

    ## Why is this bad?
    {_SHAPE_WHY}

    ## Fix safety
    When the selection is only ever summed (`torch.masked_select(x,
    mask).sum()`, or a name bound to it whose every use is `.sum()`), it
    becomes `torch.where(mask, x, 0)`: `masked_select` broadcasts `x` and
    `mask` as `where` does, so the total, dtype and gradients agree. Unsafe:
    the elements are added in another order (floating-point rounding may
    differ). Other uses of the selection are left alone.
    """

    code = "TP403"
    name = "masked-select-call"
    summary = "`masked_select`"
    message = "`masked_select` has a data-dependent output shape and breaks the graph; use `torch.where(mask, x, 0)`"
    dynamo_codes = ("GB0036",)
    methods = frozenset({"masked_select"})
    functions = frozenset({"torch.masked_select"})
    cst_node = "Call"

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Call)
        is_method = ctx.qualname(node.func) is None
        operands = [node.func.value, *node.args] if is_method else node.args
        if node.keywords or len(operands) != 2 or any(isinstance(a, ast.Starred) for a in node.args):
            return {"no_fix": "`masked_select` is called with keywords or an unexpected number of arguments"}
        if not ctx.kind(operands[0]).is_tensor:
            return {"no_fix": "the selected value is not known to be a tensor"}
        return self.plan_where(node, ctx)

    def operands(self, node: "cst.CSTNode") -> tuple["cst.BaseExpression", "cst.BaseExpression"]:
        if len(node.args) == 1:  # x.masked_select(mask)
            return node.func.value, node.args[0].value
        return node.args[0].value, node.args[1].value

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                kept = torch.masked_select(y, y > 0)
                return y * kept.sum()
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                kept = torch.where(y > 0, y, 0)
                return y * kept.sum()
        """]


class UniqueCall(TensorMethodRule):
    __doc__ = f"""## What it does
    Checks for `torch.unique`, `torch.unique_consecutive` and their method forms.

    ## Why is this bad?
    {_SHAPE_WHY}

    ## Fix safety
    No automatic fix. Counting with `torch.bincount(x, minlength=n)` or
    one-hot sums keeps shapes static when the value range is known.
    """

    code = "TP404"
    name = "unique-call"
    summary = "`unique`/`unique_consecutive`"
    message = "`{method}` has a data-dependent output shape and breaks the graph"
    dynamo_codes = ("GB0036",)
    methods = frozenset({"unique", "unique_consecutive"})
    functions = frozenset({"torch.unique", "torch.unique_consecutive"})
    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                values = torch.unique(y.round())
                return y * values.numel()
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                values = torch.sort(y.round()).values
                return y * values.numel()
        """]


class RepeatInterleaveWithTensorRepeats(TensorMethodRule):
    __doc__ = f"""## What it does
    Checks for `repeat_interleave` with a tensor of repeats and no `output_size`.

    ## Why is this bad?
    {_SHAPE_WHY}

    ## Fix safety
    Passing `output_size=` (when the total is known) keeps the shape static;
    it must equal `repeats.sum()` for every input, so the fix is not automatic.
    """

    code = "TP405"
    name = "repeat-interleave-with-tensor-repeats"
    summary = "`repeat_interleave` with tensor repeats"
    message = "`repeat_interleave` with tensor repeats has a data-dependent shape; pass `output_size=`"
    dynamo_codes = ("GB0036",)
    methods = frozenset({"repeat_interleave"})
    functions = frozenset({"torch.repeat_interleave"})

    def applies(self, node: ast.Call, ctx: Context) -> bool:
        if any(k.arg == "output_size" for k in node.keywords):
            return False
        is_function = ctx.qualname(node.func) is not None
        args = node.args[1:] if is_function else node.args
        repeats = args[0] if args else next((k.value for k in node.keywords if k.arg == "repeats"), None)
        if repeats is None:
            return is_function and len(node.args) == 1  # torch.repeat_interleave(counts)
        return ctx.kind(repeats).is_tensor

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                counts = y.abs().long() % 3
                expanded = torch.repeat_interleave(y, counts)
                return y * expanded.sum()
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                expanded = torch.repeat_interleave(y, 2)
                return y * expanded.sum()
        """]


class OneHotWithoutNumClasses(Rule):
    """## What it does
    Checks for `torch.nn.functional.one_hot` without `num_classes`.

    ## Why is this bad?
    Without `num_classes` the width of the output is `x.max() + 1`, read from
    the data: Dynamo breaks the graph (GB0246).

    ## Fix safety
    Passing `num_classes=` is equivalent only if it equals `x.max() + 1` for
    every input; not automatic.
    """

    code = "TP406"
    name = "one-hot-without-num-classes"
    summary = "`one_hot` without `num_classes`"
    message = "`one_hot` without `num_classes` has a data-dependent width and breaks the graph; pass `num_classes=`"
    dynamo_codes = ("GB0246",)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        if ctx.qualname(node.func) not in ("torch.nn.functional.one_hot", "torch._C._nn.one_hot"):
            return
        num = (
            node.args[1]
            if len(node.args) > 1
            else next((k.value for k in node.keywords if k.arg == "num_classes"), None)
        )
        if num is None or (
            isinstance(num, ast.UnaryOp) and isinstance(num.operand, ast.Constant) and num.operand.value == 1
        ):
            self.report(ctx, node)

    INVALID = ["""
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                labels = x.abs().long() % 4
                return F.one_hot(labels).float() * 2
        """]
    VALID = ["""
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                labels = x.abs().long() % 4
                return F.one_hot(labels, num_classes=4).float() * 2
        """]


class BincountCall(TensorMethodRule):
    __doc__ = f"""## What it does
    Checks for `torch.bincount` and `Tensor.bincount`.

    ## Why is this bad?
    The output has `max(x) + 1` bins (at least `minlength`), read from the
    data. {_SHAPE_WHY}

    ## Fix safety
    No automatic fix. With a known number of classes `n`, a one-hot sum
    (`F.one_hot(x, n).sum(0)`) or `torch.zeros(n).scatter_add_(0, x, ones)` keeps
    the shape static.
    """

    code = "TP407"
    name = "bincount-call"
    summary = "`bincount`"
    message = "`bincount` has a data-dependent output size and breaks the graph; use `scatter_add_` into a fixed size"
    dynamo_codes = ("GB0036",)
    methods = frozenset({"bincount"})
    functions = frozenset({"torch.bincount"})
    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                labels = x.abs().long() % 4
                counts = torch.bincount(labels, minlength=4)
                return x * counts.sum()
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                labels = x.abs().long() % 4
                counts = torch.zeros(4, dtype=torch.long).scatter_add_(0, labels, torch.ones_like(labels))
                return x * counts.sum()
        """]
