"""Capturing data-dependent values in Dynamo's graph: the fix of breaks no local rewrite removes.

`.item()`, `int(t)`, `nonzero`, `x[mask]`, `unique`, `repeat_interleave(x, t)`, `bincount` break the
graph because Dynamo's defaults refuse values it cannot know while tracing. Dynamo can trace them all
the same, as unbacked symbols: it does so under `fullgraph=True`, and for one function when its config
says so while that function is traced,

    @torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)
    def forward(self, x, lengths):

The decorator sets the two flags while the function runs and restores them after; eager runs compute
exactly what they computed (Dynamo reads the flags, nothing else does). The fix is unsafe all the same: a
backend may fail to compile what Dynamo captured (Inductor of torch 2.11 on CUDA did, for a length read
with `int()` and used both as `arange`'s size and as a slice), where the original compiled around a break. Compiled from its own frame (the
model given to `torch.compile`), the function becomes one graph. Called from a frame Dynamo is tracing,
the call is a break (Dynamo cannot enter the patch while tracing) and the function a graph of its own:
a break inside it made the caller break at that call already, since 2.13 does not resume graphs inside a
callee. That is why the break must run on every call (`_conditional`): the call of a decorated function
that would not have broken would break now.

A captured value is a symbol the graph carries, not a number: branching on it, iterating over it,
formatting it or indexing a Python list with it still breaks, and some such uses make Dynamo raise
instead. `capture_problem` follows the value through the function and accepts only uses that stay
in the graph: tensor arithmetic and torch calls (sizes, slices, losses), arithmetic among numbers,
submodule calls, returning it.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import TYPE_CHECKING

from transpiler.analysis.kinds import Kind
from transpiler.lint.rule import SHARED_FIXES, Fix

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.analysis.walker import Context, Finding
    from transpiler.lint.rule import Edit

PATCH = "torch._dynamo.config.patch"
FLAGS = ("capture_scalar_outputs", "capture_dynamic_output_shape_ops")
# The rules whose breaks the flags remove: a number read from a tensor, or an operator whose result's shape
# is the data. Not `bool(t)`, `.tolist()` (floats stay unsupported), `math.f(t)`, `one_hot` or `ctc_loss`,
# which break under the flags too (measured with torch 2.13: docs/fixes.md, "Capturing data-dependent values").
CAPTURED = frozenset({"TP301", "TP303", "TP520", "TP401", "TP402", "TP403", "TP404", "TP405", "TP407"})
# Uses that keep a captured value (or what is computed from it) a value in the graph.
_NUMBER_BUILTINS = frozenset(f"builtins.{f}" for f in ("int", "float", "abs", "max", "min", "round"))
_GROWING = frozenset({"append", "extend", "insert"})
_CONDITIONAL = (ast.If, ast.IfExp, ast.While, ast.Try, ast.Match, ast.BoolOp, ast.ExceptHandler)
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
TAG = ("capture data-dependent values",)  # the `data` of the fix, shared by every rule of CAPTURED
_COMMENT = (
    "# transpile: Dynamo captures the numbers this function reads from tensors, and the tensors whose shapes",
    '# they decide, in its graph instead of breaking it (docs/fixes.md, "Capturing data-dependent values").',
)


def captured_flags(function: ast.AST, ctx: "Context") -> frozenset[str]:
    """The capture flags a `torch._dynamo.config.patch(...)` decorator of `function` turns on."""
    flags: set[str] = set()
    for decorator in getattr(function, "decorator_list", ()):
        if isinstance(decorator, ast.Call) and ctx.qualname(decorator.func) == PATCH:
            for keyword in decorator.keywords:
                if keyword.arg in FLAGS and isinstance(keyword.value, ast.Constant) and keyword.value.value is True:
                    flags.add(keyword.arg)
    return frozenset(flags)


def offer(findings: list["Finding"], ctx: "Context") -> None:
    """Give each capturable break of the function without a fix of its own the capture fix; in a function
    already captured, drop the breaks the flags remove (Dynamo traces them). Runs before the rules that
    copy a break into the loop or block holding it (a captured break is none)."""
    candidates = [(i, f) for i, f in enumerate(findings) if f.code in CAPTURED]
    if not candidates:
        return
    nodes = {_span(n): n for n in ctx.nodes() if isinstance(n, ast.expr)}
    parents = {id(child): node for node in ctx.nodes() for child in ast.iter_child_nodes(node)}
    flags = captured_flags(ctx.node, ctx)
    dropped = set()
    for index, finding in candidates:
        node = nodes.get((finding.line, finding.col, finding.end_line, finding.end_col))
        if node is None:
            continue
        problem = capture_problem(node, ctx, parents)
        if flags == frozenset(FLAGS):
            if problem is None:
                dropped.add(index)
            continue
        if finding.fix is not None:
            continue
        if problem is None:
            problem = _undecoratable(ctx)
        if problem is None:
            title = (
                f"capture the value in the graph: decorate `{ctx.node.name}` with `{PATCH}"
                "(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)` (eager is unchanged; a"
                " backend may fail to compile what it captures)"
            )
            span = (ctx.node.lineno, ctx.node.col_offset, ctx.node.end_lineno, ctx.node.end_col_offset)
            findings[index] = replace(finding, fix=Fix("unsafe", title, "FunctionDef", span, TAG), no_fix=None)
        elif "not captured in the graph" not in (finding.no_fix or ""):  # each block rule offers: say it once
            reason = f"not captured in the graph either: {problem}"
            findings[index] = replace(finding, no_fix=f"{finding.no_fix}; {reason}" if finding.no_fix else reason)
    findings[:] = [f for i, f in enumerate(findings) if i not in dropped]


def capture_problem(node: ast.expr, ctx: "Context", parents: dict[int, ast.AST]) -> str | None:
    """None when the value of `node` (a number read from a tensor, or a tensor whose shape is data), and
    everything computed from it in the function, stays a value of the graph; else the first use that does
    not, for the user. Names are followed without regard to order (a name bound from the value anywhere is
    the value everywhere), which only ever refuses more."""
    conditional = _conditional(node, ctx, parents)
    if conditional:
        return conditional
    todo, seen, names = [node], set(), set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        parent = parents.get(id(current))
        verdict = _use(current, parent, ctx)
        if isinstance(verdict, str):
            return verdict
        for target in verdict:
            if isinstance(target, ast.Name):
                if target.id not in names:
                    names.add(target.id)
                    todo.extend(
                        n
                        for n in ctx.nodes()
                        if isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Load)
                    )
            else:
                todo.append(target)
    return None


def _use(current: ast.AST, parent: ast.AST | None, ctx: "Context") -> list[ast.AST] | str:
    """What one use of a captured value makes captured in turn (nodes to follow, names bound), or why
    the use leaves the graph."""
    where = f"line {getattr(current, 'lineno', '?')}"
    if parent is None or isinstance(parent, (ast.Return, ast.Expr)):
        return []
    if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        if current is getattr(parent, "value", None) or isinstance(parent, ast.AugAssign):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            return (
                [n for t in targets for n in _bound(t, ctx)]
                if all(_bound_ok(t, ctx) for t in targets)
                else (f"it is stored outside the function's tensors at {where} (`{_text(parent)}`)")
            )
        return []  # an index or attribute of a target: `out[idx] = y` writes a tensor
    if isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)) and current is parent.test:
        return f"it decides a branch at {where} (`{_text(parent.test)}`)"
    if isinstance(parent, (ast.BoolOp, ast.JoinedStr, ast.FormattedValue, ast.Dict, ast.Set, ast.Starred)):
        return f"it is used at {where} in `{_text(parent)}`, which reads it in Python"
    if isinstance(parent, ast.UnaryOp):
        return f"it decides a branch at {where} (`{_text(parent)}`)" if isinstance(parent.op, ast.Not) else [parent]
    if isinstance(parent, (ast.BinOp, ast.Compare, ast.Tuple, ast.List, ast.Slice, ast.keyword)):
        return [parent]
    if isinstance(parent, (ast.For, ast.comprehension)):
        if current is parent.iter:
            return f"it is iterated over at {where}"
        return []
    if isinstance(parent, ast.Subscript):
        if current is parent.value or ctx.kind(parent.value).is_tensor:
            return [parent]
        return f"it indexes a Python object at {where} (`{_text(parent)}`)"
    if isinstance(parent, ast.Attribute):
        return [parent]  # `.shape`, `.sum`: the call or value is followed next
    if isinstance(parent, ast.Call):
        return _call_use(current, parent, ctx, where)
    return f"it is used at {where} in `{_text(parent)}`"


def _call_use(current: ast.AST, call: ast.Call, ctx: "Context", where: str) -> list[ast.AST] | str:
    func = call.func
    if current is func:  # `v.sum()` (its attribute was followed): a method of a tensor of the graph
        method = func.attr if isinstance(func, ast.Attribute) else ""
        if method in ("tolist", "numpy", "item", "__bool__", "__index__", "__len__", "__iter__"):
            return f"`.{method}()` reads it in Python at {where}"
        return [call]
    if isinstance(func, ast.Attribute) and func.attr in _GROWING and isinstance(func.value, ast.Name):
        if not ctx.kind(func.value).may_be_tensor:
            return [func.value]  # a local list grown with it: the list is followed in turn
    name = ctx.qualname(func) or ""
    if name in _NUMBER_BUILTINS or name.startswith("torch.") or name == "builtins.len":
        return [call]
    if isinstance(func, ast.Attribute) and ctx.kind(func.value).is_tensor:
        return [call]  # a tensor method taking it as an argument: `x.new_zeros(n)`, `x.narrow(0, 0, n)`
    if ctx.kind(func) is Kind.MODULE:
        return [call]  # a submodule of torch or of the project, traced with the same flags
    return f"it is passed at {where} to `{_text(func)}`, which the analysis does not follow"


def _bound(target: ast.expr, ctx: "Context") -> list[ast.AST]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _bound(e, ctx)]
    return [target] if isinstance(target, ast.Name) else []


def _bound_ok(target: ast.expr, ctx: "Context") -> bool:
    """A target a captured value may be stored into: local names, a tensor's elements."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_bound_ok(e, ctx) for e in target.elts)
    if isinstance(target, ast.Subscript):
        return ctx.kind(target.value).is_tensor
    return isinstance(target, ast.Name)


def _conditional(node: ast.AST, ctx: "Context", parents: dict[int, ast.AST]) -> str | None:
    """Why the break at `node` may not run on every call of the function, or None."""
    current = node
    while current is not ctx.node:
        parent = parents.get(id(current))
        if parent is None:
            return None
        if isinstance(parent, _NESTED) and parent is not ctx.node:
            return "it is in a nested function, which runs only where it is called"
        if isinstance(parent, _CONDITIONAL) and not (isinstance(parent, ast.IfExp | ast.If) and current is parent.test):
            if not (isinstance(parent, ast.BoolOp) and current is parent.values[0]):
                return (
                    f"it runs only on some calls (inside the `{type(parent).__name__.lower()}` at line {parent.lineno}):"
                    " a call of the captured function from a compiled caller would break where it did not"
                )
        current = parent
    return None


def _undecoratable(ctx: "Context") -> str | None:
    """Why the function cannot take the decorator, or None."""
    function = ctx.node
    if not isinstance(function, ast.FunctionDef):
        return "it is not in a plain function (`async def` or a lambda)"
    if function.decorator_list:
        return f"`{function.name}` has decorators already (the patch must wrap the function itself)"
    if not ctx.is_forward or function.name != "forward":
        # A helper's callers are what `torch.compile` starts from; a decorated helper called from a captured
        # forward would break at the call, where the forward's flags alone would have traced it.
        return f"it is in `{function.name}`, not in a module's `forward` (only a forward is decorated)"
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ctx.nodes()):
        return f"`{function.name}` is a generator (the patch would end before its body runs)"
    return None


def apply(node: "cst.CSTNode", edit: "Edit") -> "cst.CSTNode":
    """`node`, a function without decorators, with the capture patch as its decorator."""
    import libcst as cst

    flags = ", ".join(f"{flag}=True" for flag in FLAGS)
    comments = [cst.EmptyLine(comment=cst.Comment(text)) for text in _COMMENT]
    decorator = cst.Decorator(edit.torch(f"_dynamo.config.patch({flags})"), leading_lines=comments)
    assert isinstance(node, cst.FunctionDef)
    return node.with_changes(decorators=[*node.decorators, decorator])


def _span(node: ast.AST) -> tuple:
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def _text(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 50 else text[:47] + "..."


SHARED_FIXES[TAG] = apply
