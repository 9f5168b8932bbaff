"""TP4xx: operators whose output shape depends on tensor values (`nonzero`, boolean masks, `unique`, ...)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, ClassVar

from rewrites.base import CallRule, TensorMethodRule
from rewrites.conversions import (
    atom,
    count_beside_tensor,
    flow_problem,
    keyword_arg,
    parent_map,
    tensor_arithmetic_step,
    with_parens_of,
)
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
    return _reduction(node, parent, ctx, parents)[0] == "sum"


def _reduction(
    node: ast.expr, parent: ast.AST | None, ctx: Context, parents: dict[int, ast.AST]
) -> tuple[str, ast.expr | None]:
    """How this use reduces the selection `node`, and the node of the use: ("sum"|"mean"|"numel"|
    "max"|"min"|"amax"|"amin" for `sel.f()` and `torch.f(sel)` without arguments, "count" for
    `len(sel)`, `sel.shape[0]` and `sel.size(0)`), or ("", None)."""
    if isinstance(parent, ast.Attribute) and parent.value is node:
        use = parents.get(id(parent))
        if isinstance(use, ast.Call) and use.func is parent and not use.keywords:
            if parent.attr in _SELECTION_REDUCTIONS and not use.args:
                return parent.attr, use
            if parent.attr == "size" and _is_zero(use.args):
                return "count", use
        if parent.attr == "shape" and isinstance(use, ast.Subscript) and _is_zero([use.slice]):
            return "count", use
        return "", None
    if isinstance(parent, ast.Call) and parent.args == [node] and not parent.keywords:
        name = ctx.qualname(parent.func)
        if name is not None and name.removeprefix("torch.") in _SELECTION_REDUCTIONS:
            return name[6:], parent
        if name == "builtins.len":
            return "count", parent
    return "", None


# Reductions of a selection that have a static form (`max` and the others reduce a `where` whose
# unselected elements repeat the first selected one).
_SELECTION_REDUCTIONS = frozenset({"sum", "mean", "numel", "max", "min", "amax", "amin"})
_EXTREMES = frozenset({"max", "min", "amax", "amin"})


def _is_zero(args: list[ast.expr]) -> bool:
    return len(args) == 1 and isinstance(args[0], ast.Constant) and args[0].value == 0


# Methods and torch functions that compute a value from their operands alone (no randomness, no
# state): an expression made of them may be evaluated twice by a rewrite with the same result.
_PURE_CALLS = frozenset(
    "bool float long int half double to detach isnan isinf isfinite isneginf isposinf signbit logical_not "
    "logical_and logical_or logical_xor eq ne lt le gt ge abs squeeze unsqueeze view reshape flatten any all "
    "sum expand expand_as contiguous".split()
)


def _pure(node: ast.AST | None, ctx: Context) -> bool:
    """Whether evaluating `node` twice gives the same value and does nothing else."""
    if node is None or isinstance(node, (ast.Name, ast.Constant)):
        return True
    if isinstance(node, ast.Attribute):
        return _pure(node.value, ctx)
    if isinstance(node, ast.Call):
        name = ctx.qualname(node.func)
        if name is not None:
            callee_ok = name.startswith("torch.") and name[6:] in _PURE_CALLS
        else:
            callee_ok = isinstance(node.func, ast.Attribute) and node.func.attr in _PURE_CALLS
            callee_ok = callee_ok and _pure(node.func.value, ctx)
        return callee_ok and all(_pure(a, ctx) for a in [*node.args, *(k.value for k in node.keywords)])
    if isinstance(node, (ast.Compare, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Subscript, ast.Slice, ast.Tuple)):
        return all(_pure(child, ctx) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))
    return False


class ReducedSelection(Rule):
    """A selection of the elements under a mask whose size is not needed: one that is only
    summed, or reduced right away by `mean()`, `numel()`, `len()`, `shape[0]` or `size(0)`.

    `x[mask].sum()` is `torch.where(mask, x, 0).sum()`; `.mean()` that sum over the count
    `mask.sum()` (0/0 is NaN, as the mean of nothing); the count alone needs no `x`. A mask
    that is not an elementwise test of `x` selects along its leading dimensions
    (`x[mask]` requires `mask.shape == x.shape[:mask.dim()]`): it is reshaped to broadcast
    over the rest, and the count of elements is multiplied by the size of the rest.
    """

    fix_safety = "safe or unsafe"
    cst_node: ClassVar[str]  # the libcst class of the selection: "Subscript" or "Call"
    # Whether the mask may select leading dimensions only (indexing), or broadcasts (masked_select).
    prefix_masks: ClassVar[bool]

    def plan_selection(self, node: ast.expr, values: ast.expr, mask: ast.expr, ctx: Context) -> dict:
        parents = parent_map(ctx.node)
        use, use_node = _reduction(node, parents.get(id(node)), ctx, parents)
        same_shape = _elementwise_test_of(mask, values, ctx)
        if not same_shape and not self.prefix_masks and use != "sum":
            return {"no_fix": "the mask is not an elementwise test of the selected tensor, so its count may differ"}
        if not same_shape and use in _EXTREMES:
            return {
                "no_fix": f"the mask is not an elementwise test of the selected tensor, so the first selected "
                f"element that `{use}()` of the static form repeats is not known"
            }
        if use in ("", "sum"):  # summed here, or bound to a name: every use must be a sum
            problem = flow_problem(node, ctx, parents, _summed)
            if problem:
                return {"no_fix": problem.replace("not only in tensor arithmetic", "not only summed or counted")}
            use_node, use = node, "sum"
        if use in ("numel", "count"):
            # The count is a tensor where it was a Python int: it may only feed tensor arithmetic.
            problem = flow_problem(use_node, ctx, parents, tensor_arithmetic_step)
            if problem:
                return {"no_fix": f"the count is a Python int; {problem}"}
        form = "same" if same_shape or not self.prefix_masks else "prefix"
        # Expressions the static form repeats (or drops, for a count) must be free of effects.
        repeated = {
            ("sum", "same"): [],
            ("mean", "same"): [mask],
            ("numel", "same"): [values],
            ("sum", "prefix"): [mask, values],
            ("mean", "prefix"): [mask, values],
            ("numel", "prefix"): [mask],
        }.get((use, form), [values] if use not in _EXTREMES else [mask, values])
        if not all(_pure(e, ctx) for e in repeated):
            return {
                "no_fix": "the static form evaluates the mask or the values twice (or not at all), "
                "and they are not plain reads"
            }
        title = {
            "sum": "sum `torch.where(mask, x, 0)` instead",
            "mean": "`torch.where(mask, x, 0).sum()` over the count `mask.sum()`",
            "numel": "count with `mask.sum()`",
            "count": "count with `mask.sum()`",
        }.get(use, f"`{use}()` of `torch.where(mask, x, first selected element)`")
        cst_node = self.cst_node if use_node is node else type(use_node).__name__
        # A count of an elementwise selection is exact, and beside a tensor an int64 0-d tensor
        # promotes as the int did: safe when it meets tensors directly in `+ - *`, a comparison or
        # as a divisor, then on the CPU as the int was (no `**`, whose number exponent takes other
        # kernels, no arithmetic among numbers; see `conversions.exact_problem`).
        divisor: list[bool] = []
        exact = use in ("numel", "count") and same_shape
        safe = exact and not flow_problem(use_node, ctx, parents, lambda *use: count_beside_tensor(*use, divisor))
        data = (use, form, _path_to(node, use_node), safe and any(divisor))
        return self.make_fix(title, cst_node, use_node, safety="safe" if safe else "unsafe", data=data)

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        use, form, path, on_cpu = fix.data
        selection = {
            (): lambda: node,
            ("method",): lambda: node.func.value,
            ("arg",): lambda: node.args[0].value,
            ("shape",): lambda: node.value.value,
        }[path]()
        values, mask = self.operands(selection)
        x, m = _code(atom(values)), _code(atom(mask))  # as receivers of methods
        if form == "prefix":
            broadcast = _mask_over(m, x)
            count = f"({m}.sum() * {x}.shape[{m}.dim():].numel())"
        else:
            broadcast, count = _code(mask), f"{m}.sum()"
        where = f"{_code(edit.torch())}.where({broadcast}, {_code(values)}, 0)"
        if use in _EXTREMES:  # the first selected element (argmax finds the first 1) stands for the others
            where = f"{_code(edit.torch())}.where({_code(mask)}, {_code(values)}, {x}.take({m}.int().argmax()))"
        rows = f"{m}.sum()"  # `len()`, `shape[0]`, `size(0)`: the selected rows
        if on_cpu:  # a divisor: CUDA kernels read a 0-d CPU tensor as they read the int, a CPU scalar
            count, rows = f"{count}.cpu()", f"{rows}.cpu()"
        text = {"mean": f"({where}.sum() / {count})", "numel": count, "count": rows}.get(use, where)
        text = f"{text}.{use}()" if use in _EXTREMES else text
        new = cst.parse_expression(text)
        return with_parens_of(node, new) if node.lpar else new

    def operands(self, node: "cst.CSTNode") -> tuple["cst.BaseExpression", "cst.BaseExpression"]:
        """The libcst nodes of the selected values and of the mask."""
        raise NotImplementedError


def _mask_over(m: str, x: str) -> str:
    """The mask `m` over the leading dimensions of `x` (as indexing reads it), broadcast over the rest."""
    return f"{m}.reshape({m}.shape + (1,) * ({x}.dim() - {m}.dim()))"


def _path_to(selection: ast.expr, use: ast.expr) -> tuple[str, ...]:
    """How `ReducedSelection.apply_fix` finds the selection inside the use."""
    if use is selection:
        return ()
    if isinstance(use, ast.Subscript):  # sel.shape[0]
        return ("shape",)
    return ("method",) if isinstance(use.func, ast.Attribute) and use.func.value is selection else ("arg",)


def _code(node: "cst.CSTNode") -> str:
    """The source of a libcst expression."""
    import libcst as cst

    return cst.Module([]).code_for_node(node)


class NonzeroCall(TensorMethodRule):
    __doc__ = f"""## What it does
    Checks for `torch.nonzero`, `torch.argwhere`, `Tensor.nonzero` and the
    one-argument `torch.where(cond)`.

    ## Why is this bad?
    {_SHAPE_WHY}

    ## Fix safety
    When the indices are only ever used as the whole index of a tensor
    (`x[torch.where(m)]`, `x[idx] = v` with `idx = m.nonzero(as_tuple=True)`),
    they become the mask itself: `x[m]` (`x[m != 0]` when `m` is not known to
    be boolean: `nonzero` keeps NaN and every value but 0). Indexing with a
    boolean mask is defined as indexing with its `nonzero` tuple, so the values
    and the order of the selected elements agree; writes through the mask
    (`x[m] = 0.0`) then keep a static shape, and reads reduced later are fixed
    by TP402. Unsafe: where `m`'s shape is not the leading shape of `x` (or `m`
    is 0-d), `x[m]` raises or adds a dimension where the indices indexed.
    `nonzero()` without `as_tuple=True`, `argwhere` and indices used any other
    way (gathered, offset, returned) are left alone.
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

    fix_safety = "unsafe"

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        if ctx.qualname(node.func) == "torch.where" and len(node.args) == 1 and not node.keywords:
            self.report(ctx, node, method="where")
        else:
            super().visit_Call(node, ctx)

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Call)
        mask = _nonzero_tuple_of(node, ctx)
        if mask is None:
            return {"no_fix": "only `nonzero(as_tuple=True)` and one-argument `where` index like a mask"}
        problem = flow_problem(node, ctx, parent_map(ctx.node), _whole_index)
        if problem:
            return {"no_fix": problem.replace("not only in tensor arithmetic", "not only as the index of a tensor")}
        boolean = ctx.kind(mask) is Kind.BOOL_TENSOR
        title = "index with the mask itself" + ("" if boolean else " (`m != 0`)")
        return self.make_fix(title, "Call", node, safety="unsafe", data=(boolean,))

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        mask = node.func.value if len(node.args) == 1 and node.args[0].keyword else node.args[0].value
        if not fix.data[0]:  # nonzero elements: those that are not 0 (NaN included)
            mask = cst.Comparison(atom(mask), [cst.ComparisonTarget(cst.NotEqual(), cst.Integer("0"))])
        # The value only ever stands alone as an index or an assigned value: no parentheses needed.
        return with_parens_of(node, mask)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                positive = torch.nonzero(y > 0)
                return y * 2, positive
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                y[torch.nonzero(y > 2, as_tuple=True)] = 0.0
                return y * 2
        """,
    ]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                positive = torch.where(y > 0, y, torch.zeros_like(y))
                return y * 2, positive
        """]


def _nonzero_tuple_of(node: ast.Call, ctx: Context) -> ast.expr | None:
    """`m` for `m.nonzero(as_tuple=True)`, `torch.nonzero(m, as_tuple=True)` or `torch.where(m)` on a tensor `m`."""
    name = ctx.qualname(node.func)
    as_tuple = [k for k in node.keywords if k.arg == "as_tuple"]
    tuple_flag = len(node.keywords) == 1 and as_tuple and isinstance(as_tuple[0].value, ast.Constant)
    tuple_flag = tuple_flag and as_tuple[0].value.value is True
    if name == "torch.where":
        mask = node.args[0]
    elif name == "torch.nonzero" and len(node.args) == 1 and tuple_flag:
        mask = node.args[0]
    elif name is None and isinstance(node.func, ast.Attribute) and not node.args and tuple_flag:
        mask = node.func.value
    else:
        return None
    return mask if ctx.kind(mask).is_tensor else None


def _whole_index(node: ast.expr, parent: ast.AST | None, ctx: Context, parents: dict[int, ast.AST]) -> bool:
    """Whether this use of a value is the whole index of a tensor: `x[value]`, read or written."""
    return isinstance(parent, ast.Subscript) and parent.slice is node and ctx.kind(parent.value).is_tensor


class BooleanMaskIndex(ReducedSelection):
    __doc__ = f"""## What it does
    Checks for reading a tensor through a boolean mask: `x[mask]` where `mask`
    holds booleans (a comparison, `isnan`, `~m`, ...), also beside other
    indices (`edge_index[:, mask]`).

    ## Why is this bad?
    {_SHAPE_WHY}
    (Writing through a mask, `x[mask] = 0`, keeps the shape and is fine.)

    ## Fix safety
    When the selection is only summed (`x[m].sum()`, or `sel = x[m]` whose
    every use is `sel.sum()`), `x[m]` becomes `torch.where(m, x, 0)`: the same
    total, dtype (`where` with 0 keeps `x`'s dtype; bools sum to int64 either
    way) and gradients with a static shape. `x[m].mean()` becomes
    `(torch.where(m, x, 0).sum() / m.sum())` (an empty selection gives 0/0 =
    NaN, as eager's mean of nothing); `x[m].numel()` becomes `m.sum()`, and so
    do `len(x[m])`, `x[m].shape[0]` and `x[m].size(0)`, when the count only
    feeds tensor arithmetic (it is a 0-d tensor where it was an int).
    When `m` is not an elementwise test of `x` (`x > 0`, `~x.isnan()`, ...)
    it may select along the leading dimensions only: indexing requires
    `m.shape == x.shape[:m.dim()]`, so `m.reshape(m.shape + (1,) * (x.dim() -
    m.dim()))` broadcasts it over the rest exactly, and the count of elements
    is `m.sum() * x.shape[m.dim():].numel()`. The mask and values must be
    plain reads wherever the static form evaluates them twice (or drops them).
    Safe (applied by default): a count of a selection by an elementwise test
    of `x` whose every use is `+ - *`, a comparison or the divisor of `/ // %`
    with a tensor proven int64, boolean, floating or complex: the count is
    exact and an int64 0-d tensor promotes as the int did (a 0-d tensor of a
    narrower integer dtype yields to an int but not to an int64 tensor). A
    divisor is `m.sum().cpu()`: CUDA divides by a Python number, a CPU scalar,
    by multiplying with its reciprocal, and reads a 0-d CPU tensor alike. `x[m].max()` (and `min`, `amax`, `amin`, for a mask that is an
    elementwise test of `x`) becomes `torch.where(m, x,
    x.take(m.int().argmax())).max()`: the unselected elements are replaced by
    the first selected one, so the extreme is the selection's, bit for bit, in
    any dtype (integers and bools too, where a `-inf` fill would not do) and
    NaN propagates as before. `x[m] = y[m]` (the same mask, a plain read,
    written through the same subscript) becomes `x.copy_(torch.where(m, y,
    x))`: `x` is written in place as `index_put_` wrote it (views of `x` see
    the values, the version counter moves, a leaf that requires grad raises
    alike), and the gradients are those of the store: `y`'s where selected,
    `x`'s old values elsewhere; a mask over leading dimensions is reshaped as
    above. Unsafe otherwise: sums add in another order (rounding may differ; a float16 mean
    rounds its sum before dividing, so it can overflow where the mean did
    not); an integer mean, which raised, now divides; a mask of the wrong
    shape broadcasts or raises another error instead of `IndexError`; the
    `max()` of an empty selection, which raised, is the first element; a
    gradient split between tied maxima counts the copies of the first
    selected element; `x[m] = y[m]` with `y` of another shape than `x`
    broadcasts where indexing raised, and with another dtype casts where
    `index_put_` raised. Other uses of the selection are left alone.
    """

    code = "TP402"
    name = "boolean-mask-index"
    summary = "indexing with a boolean mask"
    message = (
        "indexing with a boolean mask has a data-dependent shape and breaks the graph; use `torch.where(mask, x, 0)`"
    )
    dynamo_codes = ("GB0036",)

    def visit_Subscript(self, node: ast.Subscript, ctx: Context) -> None:
        # Only tensors (and arrays) take a boolean tensor as an index: a list or tuple raises, so a value of
        # unknown kind (an unannotated parameter) indexed by one is a tensor where the code runs.
        if isinstance(node.ctx, ast.Load) and (
            ctx.kind(node.value).may_be_tensor or ctx.kind(node.value) is Kind.UNKNOWN
        ):
            indices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(ctx.kind(index) is Kind.BOOL_TENSOR for index in indices):  # `x[m]`, `edge_index[:, m]`
                self.report(ctx, node)

    cst_node = "Subscript"
    prefix_masks = True

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Subscript)
        if not ctx.kind(node.value).is_tensor:
            return {"no_fix": "the indexed value is not known to be a tensor"}
        if isinstance(node.slice, ast.Tuple):
            return {"no_fix": "a mask beside other indices is left alone (no static form is written for it)"}
        statement = ctx.statement
        if isinstance(statement, ast.Assign) and statement.value is node:
            if any(isinstance(t, ast.Subscript) for t in statement.targets):
                return self.plan_masked_copy(statement, ctx)
        return self.plan_selection(node, node.value, node.slice, ctx)

    def plan_masked_copy(self, statement: ast.Assign, ctx: Context) -> dict:
        """`x[m] = y[m]`: `x.copy_(torch.where(m, y, x))`, in place as the store was."""
        (target, *more), value = statement.targets, statement.value
        same_mask = isinstance(target, ast.Subscript) and ast.dump(target.slice) == ast.dump(value.slice)
        if more or not same_mask:
            return {"no_fix": "the selection is stored somewhere other than through the same mask"}
        if not ctx.kind(target.value).is_tensor:
            return {"no_fix": "the tensor written through the mask is not known to be a tensor"}
        if not (_pure(target.value, ctx) and _pure(value.slice, ctx)):
            return {
                "no_fix": "the static form evaluates the mask once and the target twice, and they are not plain reads"
            }
        form = "same" if _elementwise_test_of(value.slice, target.value, ctx) else "prefix"
        return self.make_fix(
            "write `torch.where(mask, y, x)` into `x` with `copy_`",
            "Assign",
            statement,
            safety="unsafe",
            data=("copy", form, ()),
        )

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        if fix.data[0] != "copy":
            return super().apply_fix(node, fix, edit)
        target, values = node.targets[0].target, node.value
        x, m = _code(atom(target.value)), _code(atom(target.slice[0].slice.value))
        mask = _mask_over(m, x) if fix.data[1] == "prefix" else _code(target.slice[0].slice.value)
        where = f"{_code(edit.torch())}.where({mask}, {_code(values.value)}, {_code(target.value)})"
        return cst.Expr(cst.parse_expression(f"{x}.copy_({where})"))

    def operands(self, node: "cst.CSTNode") -> tuple["cst.BaseExpression", "cst.BaseExpression"]:
        return node.value, node.slice[0].slice.value  # `x[mask]`: one plain index (planned from ast)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                total = y[y > 0].sum()
                return y * total
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                edges = torch.stack([x.argsort(), x.argsort().flip(0)])
                kept = edges[:, x.argsort() != x.argsort().flip(0)]
                return x * kept.sum()
        """,
    ]
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


class MaskedSelectCall(ReducedSelection, TensorMethodRule):
    __doc__ = f"""## What it does
    Checks for `torch.masked_select` and `Tensor.masked_select`.

    ## Why is this bad?
    {_SHAPE_WHY}

    ## Fix safety
    When the selection is only ever summed (`torch.masked_select(x,
    mask).sum()`, or a name bound to it whose every use is `.sum()`), it
    becomes `torch.where(mask, x, 0)`: `masked_select` broadcasts `x` and
    `mask` as `where` does, so the total, dtype and gradients agree. With a
    mask that is an elementwise test of `x` (same shape), `.mean()` and the
    counts (`numel()`, `len()`, ...) and `max()`/`min()`/`amax()`/`amin()`
    are rewritten as for TP402. Unsafe: the
    elements are added in another order (floating-point rounding may differ).
    Other uses of the selection are left alone.
    """

    code = "TP403"
    name = "masked-select-call"
    summary = "`masked_select`"
    message = "`masked_select` has a data-dependent output shape and breaks the graph; use `torch.where(mask, x, 0)`"
    dynamo_codes = ("GB0036",)
    methods = frozenset({"masked_select"})
    functions = frozenset({"torch.masked_select"})
    cst_node = "Call"
    prefix_masks = False

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Call)
        is_method = ctx.qualname(node.func) is None
        operands = [node.func.value, *node.args] if is_method else node.args
        if node.keywords or len(operands) != 2 or any(isinstance(a, ast.Starred) for a in node.args):
            return {"no_fix": "`masked_select` is called with keywords or an unexpected number of arguments"}
        if not ctx.kind(operands[0]).is_tensor:
            return {"no_fix": "the selected value is not known to be a tensor"}
        return self.plan_selection(node, operands[0], operands[1], ctx)

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
    No automatic fix, and none keeps the meaning: the number of distinct
    values is read from the data, sorted (`sorted=True`) or not, even when
    their range is known from the config or a module (`n` classes: the
    result still has one element per class present). With a known range,
    write the static forms the code needs instead: the classes present as a
    mask `torch.zeros(n, dtype=torch.bool).index_fill_(0, x.flatten(), True)`, their
    counts `torch.bincount(x, minlength=n)` (TP407 fixes it), the inverse
    indices `x` itself. The finding's reason says which case it is.
    """

    code = "TP404"
    name = "unique-call"
    summary = "`unique`/`unique_consecutive`"
    message = "`{method}` has a data-dependent output shape and breaks the graph"
    dynamo_codes = ("GB0036",)
    methods = frozenset({"unique", "unique_consecutive"})
    functions = frozenset({"torch.unique", "torch.unique_consecutive"})

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Call)
        extra = sorted(k.arg for k in node.keywords if k.arg in ("return_inverse", "return_counts", "dim"))
        if extra:
            what = ", ".join(f"`{k}`" for k in extra)
            return {"no_fix": f"with {what} the outputs are sized by the number of distinct values, read from the data"}
        return {
            "no_fix": "the number of distinct values is read from the data (sorted or not), so the result has no "
            "static shape even when their range is known; use a mask of the classes present or `bincount` with "
            "`minlength=`"
        }

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
    Passing `num_classes=n` is equivalent only if `n` equals `x.max() + 1`
    for every input. That is proven when the one-hot value (through dtype
    conversions and local names) only feeds layers whose width is fixed: the
    input of an `nn.Linear` submodule (`n = self.lin.in_features`) or the left
    side of a product with an `nn.Embedding`'s weight (`n =
    self.emb.num_embeddings`). Matrix products never broadcast the contracted
    dimension, so every run that did not raise had exactly that width, and the
    output is the same. Unsafe only because a run that raised (a width
    mismatch in the layer) may now compute or raise in `one_hot`.
    Also when the one-hot value only meets, by `* + - /`, a tensor `t` read
    from a name bound before the `one_hot` statement and never rebound (a
    parameter, a local assigned once above it, a `self.` attribute never
    assigned in the function): `n = t.shape[-1]` (`-(F.one_hot(y).float() *
    logp).sum(-1)` gets `num_classes=logp.shape[-1]`). Broadcasting lines the
    one-hot width up with `t`'s last dimension, so it equals `n` in every run
    that did not raise, except where one side broadcasts: all labels 0 (width
    1, spread over `t`'s width in the original, a true one-hot now) or `n ==
    1` (`one_hot` now raises for a label above 0). Unsafe for those.
    A config size (`config.num_labels`) is not passed: when the labels do not
    reach it the width differs (and a width of 1 broadcasts silently), so
    those stay findings, as do one-hot values beside tensors computed in the
    same expression (`* x.unsqueeze(-1)`: its width may be the broadcast 1).
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

    fix_safety = "unsafe"

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Call)
        if len(node.args) + len(node.keywords) > 2 or any(k.arg != "num_classes" for k in node.keywords):
            return {"no_fix": "`one_hot` is called with other arguments than the labels and `num_classes=-1`"}
        sizes: set[str] = set()
        problem = flow_problem(node, ctx, parent_map(ctx.node), _class_width_step(sizes, ctx.statement))
        if problem or len(sizes) != 1:
            return {
                "no_fix": "the width `labels.max() + 1` is not known to equal a size of the module: "
                + (problem or "the one-hot value feeds layers of different widths").replace(
                    "not only in tensor arithmetic",
                    "not only as the input of a layer of fixed width or beside a tensor bound before the `one_hot`",
                )
            }
        (size,) = sizes
        return self.make_fix(f"pass `num_classes={size}`", "Call", node, safety="unsafe", data=(size,))

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        return node.with_changes(args=[node.args[0], keyword_arg("num_classes", cst.parse_expression(fix.data[0]))])

    INVALID = [
        """
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                labels = x.abs().long() % 4
                return F.one_hot(labels).float() * 2
        """,
        """
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 2)

            def forward(self, x):
                labels = torch.arange(x.numel() + 4) % 4
                return self.proj(F.one_hot(labels).float()).sum() * x
        """,
    ]
    VALID = ["""
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                labels = x.abs().long() % 4
                return F.one_hot(labels, num_classes=4).float() * 2
        """]


# Conversions that keep a one-hot tensor's width.
_WIDTH_KEEPING = frozenset("float double half bfloat16 long int to type_as".split())


def _class_width_step(sizes: set[str], origin: ast.stmt | None):
    """A flow step that accepts a one-hot value used where its last dimension must equal a size the
    module holds, and records that size: the input of an `nn.Linear` submodule (`in_features`),
    the left side of a product with an `nn.Embedding`'s weight (`num_embeddings`). Matrix
    products never broadcast the contracted dimension, so a run that did not raise had that width.
    Also an operand of `* + - /` beside a tensor read from a name bound before `origin` (the
    statement of the `one_hot`) and never again: that tensor's last dimension, which the one-hot
    width equals unless one of the two broadcasts (a width of 1)."""

    def step(node: ast.expr, parent: ast.AST | None, ctx: Context, parents: dict[int, ast.AST]) -> bool | ast.expr:
        if isinstance(parent, ast.Attribute) and parent.attr in _WIDTH_KEEPING:
            call = parents.get(id(parent))
            return call if isinstance(call, ast.Call) and call.func is parent else False
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Mult, ast.Add, ast.Sub, ast.Div)):
            other = parent.right if parent.left is node else parent.left
            if ctx.kind(other).is_tensor and _bound_before(other, origin, ctx):
                sizes.add(f"{ast.unparse(other)}.shape[-1]")
                return True
            return False
        if isinstance(parent, ast.Call) and parent.args == [node] and not parent.keywords:
            submodule = ctx.self_attr(parent.func)
            if submodule is not None and _constructor(ctx, submodule) == "torch.nn.Linear":
                sizes.add(f"self.{submodule}.in_features")
                return True
        product = isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.MatMult) and parent.left is node
        if product or isinstance(parent, ast.Call) and ctx.qualname(parent.func) == "torch.matmul":
            other = parent.right if product else (parent.args[1:] or [None])[0]
            if not product and (parent.args[:1] != [node] or len(parent.args) != 2 or parent.keywords):
                return False
            if isinstance(other, ast.Attribute) and other.attr == "weight":
                submodule = ctx.self_attr(other.value)
                if submodule is not None and _constructor(ctx, submodule) == "torch.nn.Embedding":
                    sizes.add(f"self.{submodule}.num_embeddings")
                    return True
        return False

    return step


def _bound_before(value: ast.expr, origin: ast.stmt | None, ctx: Context) -> bool:
    """Whether `value` is a name (or `self.<name>`) that holds the same tensor at `origin` as where it
    is read: a parameter never assigned, or a local assigned once, above `origin`."""
    if isinstance(value, ast.Attribute) and ctx.self_attr(value) is not None:
        return not any(_stored(n, value.attr) for n in ctx.nodes() if isinstance(n, ast.Attribute))
    if not isinstance(value, ast.Name) or origin is None:
        return False
    stores = [n for n in ctx.nodes() if isinstance(n, ast.Name) and _stored(n, value.id)]
    if value.id in {a.arg for a in ast.walk(ctx.node.args) if isinstance(a, ast.arg)}:
        return not stores
    return len(stores) == 1 and stores[0].end_lineno < origin.lineno


def _stored(node: ast.Name | ast.Attribute, name: str) -> bool:
    """Whether `node` is an assignment (or deletion) target called `name`."""
    return (node.id if isinstance(node, ast.Name) else node.attr) == name and not isinstance(node.ctx, ast.Load)


def _constructor(ctx: Context, attribute: str) -> str | None:
    return ctx.cls.attr_ctors.get(attribute) if ctx.cls is not None else None


class BincountCall(TensorMethodRule):
    __doc__ = f"""## What it does
    Checks for `torch.bincount` and `Tensor.bincount`.

    ## Why is this bad?
    The output has `max(x) + 1` bins (at least `minlength`), read from the
    data. {_SHAPE_WHY}

    ## Fix safety
    With `minlength=n` (a number, not tensor data) and no weights, the counts
    become `torch.zeros(n, dtype=torch.long, device=x.device).index_add_(0, x,
    torch.ones_like(x, dtype=torch.long))`: the same int64 counts of every
    value below `n`, exactly (integer sums do not depend on their order), an
    empty `x` included. Unsafe: a value `>= n`, for which `bincount` returned
    more bins, raises in `index_add_`; a uint8 `x` raises (`index_add_` takes
    int32/int64 indices). Without `minlength` the number of bins is read from
    the data and nothing static equals it; weighted counts are left alone.
    """

    code = "TP407"
    name = "bincount-call"
    summary = "`bincount`"
    message = "`bincount` has a data-dependent output size and breaks the graph; use `scatter_add_` into a fixed size"
    dynamo_codes = ("GB0036",)
    methods = frozenset({"bincount"})
    functions = frozenset({"torch.bincount"})
    fix_safety = "unsafe"

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Call)
        is_method = ctx.qualname(node.func) is None
        values = node.func.value if is_method else (node.args or [None])[0]
        named = dict(zip(("weights", "minlength"), node.args[0 if is_method else 1 :]))
        named.update((k.arg, k.value) for k in node.keywords)
        if (
            values is None
            or set(named) - {"weights", "minlength"}
            or any(isinstance(a, ast.Starred) for a in node.args)
        ):
            return {"no_fix": "`bincount` is called with unexpected arguments"}
        weights, size = named.get("weights"), named.get("minlength")
        if weights is not None and not (isinstance(weights, ast.Constant) and weights.value is None):
            return {"no_fix": "weighted counts are left alone (their sums would be added in another order)"}
        if size is None:
            return {
                "no_fix": "without `minlength` the number of bins is `x.max() + 1`, read from the data; "
                "pass `minlength=` the number of classes and the fix applies"
            }
        if ctx.kind(size).is_tensor or ctx.kind(size) is Kind.DATA_SCALAR:
            return {"no_fix": "`minlength` is read from tensor data"}
        if not _pure(values, ctx):
            return {"no_fix": "the static form reads the counted tensor three times, and it is not a plain read"}
        return self.make_fix(
            "count into `minlength` bins with `index_add_`", "Call", node, safety="unsafe", data=(is_method,)
        )

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        (is_method,) = fix.data
        values = node.func.value if is_method else node.args[0].value
        size = next((a.value for a in node.args if a.keyword and a.keyword.value == "minlength"), None)
        size = size if size is not None else node.args[1 if is_method else 2].value
        x, n, long = _code(atom(values)), _code(size), _code(edit.torch("long"))
        text = f"{_code(edit.torch('zeros'))}({n}, dtype={long}, device={x}.device).index_add_(0, {_code(values)}, "
        text += f"{_code(edit.torch('ones_like'))}({_code(values)}, dtype={long}))"
        return with_parens_of(node, cst.parse_expression(text))

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


class CtcLossCall(CallRule):
    __doc__ = f"""## What it does
    Checks for `F.ctc_loss` and `torch.ctc_loss`.

    ## Why is this bad?
    The kernel's intermediate (the forward variables, one row per target label and
    blank) is as long as the longest target, read from `target_lengths`: an
    operator with a data-dependent output shape, even when the lengths are Python
    lists. {_SHAPE_WHY}

    ## Fix safety
    No fix: no static form computes the same loss. Compute the loss outside the
    compiled function (return the log-probabilities), or isolate it.
    """

    code = "TP408"
    name = "ctc-loss-call"
    summary = "`ctc_loss`"
    message = "`ctc_loss` has a data-dependent intermediate shape and breaks the graph; compute it outside"
    dynamo_codes = ("GB0036",)
    callees = frozenset({"torch.nn.functional.ctc_loss", "torch.ctc_loss"})

    INVALID = ["""
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                log_probs = x.reshape(8, 1, 1).expand(8, 1, 5).log_softmax(-1)
                targets = torch.ones(1, 2, dtype=torch.long)
                loss = F.ctc_loss(log_probs, targets, [8], [2])
                return x * loss
        """]
    VALID = ["""
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                log_probs = x.reshape(8, 1, 1).expand(8, 1, 5).log_softmax(-1)
                return x * log_probs.sum()
        """]
