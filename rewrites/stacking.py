"""When `sorted(xs, key=...)` over tensors can be done on stacked tensors (TP206's fix with a key):
the elements of `xs` stack (one shape per field across elements), the key gives one 0-dim
tensor per element, and, for `range(n)`, the indices may become 0-dim tensors.

Each proof is syntactic and per function, like `sequences.scalar_elements`: what it cannot see it
refuses, with the reason `TP206` reports.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from rewrites.sequences import FULL_REDUCTIONS, Sequences, scalar_elements, scratch
from transpiler.analysis.kinds import Kind
from transpiler.analysis.typer import Typer
from transpiler.analysis.walker import Context

# Tensor methods that keep their tensor's shape when called without arguments (elementwise).
ELEMENTWISE = frozenset(
    "abs neg relu sigmoid tanh exp log sqrt square float double half bfloat16 clone detach contiguous".split()
)
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
# Calls that make a 1-D tensor whatever their input's shape (`scores[i]` of one is 0-dim).
_FLATTENING = frozenset({"flatten", "ravel"})


@dataclass(frozen=True)
class Stacked:
    """What `sorted`'s elements are: "scalars" (0-dim tensors), "rows" (tensors of one shape),
    "tuples" (tuples of tensors, field `i` of one shape across elements; `scalar_fields` are
    0-dim) or "range" (the ints of `range(n)`)."""

    form: str
    scalar_fields: frozenset[int] = frozenset()


def stacked(values: ast.expr, ctx: Context) -> Stacked | str:
    """How the elements of `values` stack, or why they are not known to."""
    if _is_range(values, ctx):
        return Stacked("range")
    if not isinstance(values, ast.Name):
        return "the elements are evaluated twice (once for the keys, once to stack them): name the list first"
    if scalar_elements(values, ctx):
        return Stacked("scalars")
    bindings = _bindings(values.id, ctx)
    if bindings is None:
        return "the list is changed in place or bound other than by `=`: its elements are not known to stack"
    assigned, appended = bindings
    typer = scratch(ctx)
    if assigned and not appended and all(_rows(v, typer) for v in assigned):
        return Stacked("rows")
    if assigned and all(isinstance(v, ast.List) and not v.elts for v in assigned) and len(appended) == 1:
        fields = _tuple_fields(appended[0], ctx)
        if fields is not None:
            return fields
    return (
        "the elements are not known to stack: a list bound only to `t.unbind(...)`, or grown by one "
        "`append((...))` in a loop over rows, of full reductions and rows"
    )


def scalar_key(key: ast.Lambda, elements: Stacked, lists: Sequences, ctx: Context) -> bool:
    """`key` gives a 0-dim tensor for each element (`lists`: the function's lists of tensors)."""
    parameter = key.args.args[0].arg
    typer = scratch(ctx)
    typer.env.pop(parameter, None)
    return _Key(parameter, elements, lists, ctx, typer).scalar(key.body)


def index_uses(call: ast.Call, ctx: Context) -> bool:
    """The indices `sorted(range(n), ...)` gives are used only where a 0-dim int64 tensor means
    what the int does: `order[k]` as an operand of arithmetic with a tensor, and `len(order)`,
    with `order` bound once (or `sorted(...)[k]` in such arithmetic)."""
    parents = {id(child): node for node in ctx.nodes() for child in ast.iter_child_nodes(node)}
    typer = scratch(ctx)
    holder = parents.get(id(call))
    if isinstance(holder, ast.Subscript) and holder.value is call:
        return _arithmetic_element(holder, parents, typer)
    if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name)):
        return False
    name = holder.targets[0].id
    for node in ctx.nodes():
        if not (isinstance(node, ast.Name) and node.id == name) or node is holder.targets[0]:
            continue
        if not isinstance(node.ctx, ast.Load):
            return False
        parent = parents.get(id(node))
        if isinstance(parent, ast.Call) and _is_call(parent, "builtins.len", typer) and parent.args == [node]:
            continue
        if not (
            isinstance(parent, ast.Subscript) and parent.value is node and _arithmetic_element(parent, parents, typer)
        ):
            return False
    return True


def _arithmetic_element(subscript: ast.Subscript, parents: dict, typer: Typer) -> bool:
    if isinstance(subscript.slice, ast.Slice):
        return False
    operation = parents.get(id(subscript))
    if not (isinstance(operation, ast.BinOp) and isinstance(operation.op, _ARITHMETIC)):
        return False
    other = operation.right if operation.left is subscript else operation.left
    return typer.kind(other).is_tensor


@dataclass
class _Key:
    """The body of a key `lambda <parameter>: ...` over elements of the form `elements`."""

    parameter: str
    elements: Stacked
    lists: Sequences
    ctx: Context
    typer: Typer

    def scalar(self, node: ast.expr) -> bool:
        """`node` is a 0-dim tensor."""
        form = self.elements.form
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self.scalar(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC):
            if _number(node.left) != _number(node.right):
                return self.scalar(node.right if _number(node.left) else node.left)
            return False
        if _is_parameter(node, self.parameter):
            return form == "scalars"
        field = _field(node, self.parameter)
        if field is not None:
            return form == "tuples" and field in self.elements.scalar_fields
        reduced = _reduced(node, self.typer)
        if reduced is not None:
            return self.tensor(reduced)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ELEMENTWISE:
            if not node.args and not node.keywords and self.typer.qualname(node.func) is None:
                return self.scalar(node.func.value)
        if isinstance(node, ast.Subscript) and form == "range" and _is_parameter(node.slice, self.parameter):
            return isinstance(node.value, ast.Name) and _one_dimensional(node.value.id, self.ctx)
        return False

    def tensor(self, node: ast.expr) -> bool:
        """`node` is a tensor, whatever its shape."""
        form = self.elements.form
        if _is_parameter(node, self.parameter):
            return form in ("scalars", "rows")
        if _field(node, self.parameter) is not None:
            return form == "tuples"  # every field is a tensor (`_uniform`)
        if isinstance(node, ast.Subscript) and form == "range" and _is_parameter(node.slice, self.parameter):
            return self.lists.elements(node.value, self.ctx, python_only=True) == {Kind.TENSOR}  # `hs[i]`
        if any(_is_parameter(n, self.parameter) for n in ast.walk(node)):
            return False
        return self.typer.kind(node).is_tensor


def _reduced(node: ast.expr, typer: Typer) -> ast.expr | None:
    """The tensor that `node` reduces to a 0-dim tensor (`h.norm()`, `h.sum(dtype=...)`)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args):
        return None
    if node.func.attr not in FULL_REDUCTIONS or any(k.arg != "dtype" for k in node.keywords):
        return None
    return node.func.value if typer.qualname(node.func) is None else None


def _is_parameter(node: ast.expr, parameter: str) -> bool:
    return isinstance(node, ast.Name) and node.id == parameter


def _field(node: ast.expr, parameter: str) -> int | None:
    """`c[k]` of the key's parameter, with `k` a literal int: `k`."""
    if isinstance(node, ast.Subscript) and _is_parameter(node.value, parameter):
        index = node.slice
        if isinstance(index, ast.Constant) and type(index.value) is int and index.value >= 0:
            return index.value
    return None


def _number(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _is_call(node: ast.expr, qualname: str, typer: Typer) -> bool:
    return isinstance(node, ast.Call) and typer.qualname(node.func) == qualname


def _is_range(values: ast.expr, ctx: Context) -> bool:
    """`range(n)` with one argument that is cheap and pure to evaluate twice (the fix tests `n > 0`)."""
    if not (_is_call(values, "builtins.range", ctx.typer) and len(values.args) == 1 and not values.keywords):
        return False
    bound = values.args[0]
    if isinstance(bound, ast.Constant):
        return type(bound.value) is int and bound.value > 0
    if isinstance(bound, ast.Call) and _is_call(bound, "builtins.len", ctx.typer):
        return len(bound.args) == 1 and isinstance(bound.args[0], ast.Name)
    if isinstance(bound, ast.Subscript) and isinstance(bound.value, ast.Attribute) and bound.value.attr == "shape":
        return isinstance(bound.value.value, ast.Name) and isinstance(bound.slice, ast.Constant)
    return isinstance(bound, ast.Name) and not scratch(ctx).kind(bound).may_be_tensor


def _bindings(name: str, ctx: Context) -> tuple[list[ast.expr], list[ast.Call]] | None:
    """The values `name = ...` binds and the `name.append(...)` calls of the function, or None when
    it is bound or changed another way (a loop target, `+=`, an item assigned, `extend`, `insert`)."""
    assigned: list[ast.expr] = []
    appended: list[ast.Call] = []
    targets = set()
    for node in ctx.nodes():
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == name:
                targets.add(id(node.targets[0]))
                assigned.append(node.value)
    for node in ctx.nodes():
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            if id(node) not in targets:
                return None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name:
            if not isinstance(node.ctx, ast.Load):
                return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if isinstance(func.value, ast.Name) and func.value.id == name:
                if func.attr in ("extend", "insert", "__setitem__", "__iadd__"):
                    return None
                if func.attr == "append":
                    appended.append(node)
    return assigned, appended


def _rows(value: ast.expr, typer: Typer) -> bool:
    """The pieces of one tensor along one dimension: `t.unbind(d)`, `torch.unbind(t, d)`, and
    `list(...)`/`tuple(...)` of those or of a tensor."""
    if isinstance(value, ast.Call) and typer.qualname(value.func) in ("builtins.list", "builtins.tuple"):
        if len(value.args) != 1 or value.keywords:
            return False
        return typer.kind(value.args[0]).is_tensor or _rows(value.args[0], typer)
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if typer.qualname(func) == "torch.unbind":
        return bool(value.args) and typer.kind(value.args[0]).is_tensor
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "unbind"
        and typer.qualname(func) is None
        and typer.kind(func.value).is_tensor
    )


def _tuple_fields(append: ast.Call, ctx: Context) -> Stacked | None:
    """The one `xs.append((a, b, ...))` of the function: its fields have one shape across the
    iterations of the loops around it (`_uniform`)."""
    element = append.args[0] if len(append.args) == 1 and not append.keywords else None
    if not isinstance(element, ast.Tuple) or not element.elts:
        return None
    loops = _loops_around(ctx.node, append)
    if loops is None:
        return None
    typer = scratch(ctx)
    for loop in loops:
        if isinstance(loop, ast.For):
            Sequences().bind(typer, loop.target, loop.iter, ctx)
    changing = {
        n.id
        for loop in loops[:1]
        for n in ast.walk(loop)
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }
    scalars = set()
    for index, field in enumerate(element.elts):
        reduced = _reduced(field, typer)
        if reduced is not None and typer.kind(reduced).may_be_tensor:
            scalars.add(index)
        elif not _uniform(field, loops, changing, typer):
            return None
    return Stacked("tuples", frozenset(scalars))


def _loops_around(root: ast.AST, target: ast.AST) -> list[ast.stmt] | None:
    """The `for`/`while` statements around `target`, outermost first; None when `target` is in a
    nested function, a class, a comprehension, or not found."""
    for child in ast.iter_child_nodes(root):
        if child is target:
            return []
        if any(n is target for n in ast.walk(child)):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                return None
            if isinstance(child, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                return None
            inner = _loops_around(child, target)
            if inner is None:
                return None
            return ([child] if isinstance(child, (ast.For, ast.While, ast.AsyncFor)) else []) + inner
    return None


def _uniform(node: ast.expr, loops: list[ast.stmt], changing: set[str], typer: Typer) -> bool:
    """`node` is a tensor whose shape is the same in every iteration of `loops`: a row of the
    tensor a loop iterates (`for h in t.unbind(0)`, `for h in t`), `t[i]` of a tensor `t` bound
    outside the loops by a `for i in range(...)`, or elementwise math on one."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _uniform(node.operand, loops, changing, typer)
    if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC):
        if _number(node.left) or _number(node.right):
            operand = node.left if _number(node.right) else node.right
            return _uniform(operand, loops, changing, typer)
        return False
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ELEMENTWISE:
        if not node.args and not node.keywords and typer.qualname(node.func) is None:
            return _uniform(node.func.value, loops, changing, typer)
        return False
    if isinstance(node, ast.Name):
        return any(_row_target(loop, node.id, changing, typer) for loop in loops)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Name):
        tensor, index = node.value.id, node.slice.id
        if tensor in changing or not typer.kind(node.value).is_tensor:
            return False
        return any(_range_target(loop, index, typer) for loop in loops)
    return False


def _row_target(loop: ast.stmt, name: str, changing: set[str], typer: Typer) -> bool:
    """`loop` binds `name` to the rows of a tensor bound outside the loops (`for h in t`,
    `for h in t.unbind(0)`, `for i, h in enumerate(...)`), and nothing else binds it in there."""
    if not isinstance(loop, ast.For):
        return False
    target, iterable = loop.target, loop.iter
    if _is_call(iterable, "builtins.enumerate", typer) and len(iterable.args) == 1:
        if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
            return False
        target, iterable = target.elts[1], iterable.args[0]
    if not (isinstance(target, ast.Name) and target.id == name):
        return False
    if _rebound(loop, name):
        return False
    if any(isinstance(n, ast.Name) and n.id in changing for n in ast.walk(iterable)):
        return False
    return typer.kind(iterable).is_tensor or _rows(iterable, typer)


def _range_target(loop: ast.stmt, name: str, typer: Typer) -> bool:
    return (
        isinstance(loop, ast.For)
        and isinstance(loop.target, ast.Name)
        and loop.target.id == name
        and _is_call(loop.iter, "builtins.range", typer)
        and not _rebound(loop, name)
    )


def _rebound(loop: ast.For, name: str) -> bool:
    """Something in the loop's body binds `name` again."""
    return any(
        isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
        for statement in loop.body + loop.orelse
        for n in ast.walk(statement)
    )


def _one_dimensional(name: str, ctx: Context) -> bool:
    """Every binding of `name` in the function makes a 1-D tensor: `torch.stack` of 0-dim
    tensors, `t.flatten()`, `t.ravel()`, `t.view(-1)`, `t.reshape(-1)`."""
    bindings = _bindings(name, ctx)
    if bindings is None or not bindings[0] or bindings[1]:
        return False
    typer = scratch(ctx)
    return all(_flat(value, ctx, typer) for value in bindings[0])


def _flat(value: ast.expr, ctx: Context, typer: Typer) -> bool:
    if not isinstance(value, ast.Call):
        return False
    if typer.qualname(value.func) == "torch.stack" and len(value.args) == 1:
        return not value.keywords and scalar_elements(value.args[0], ctx)
    if typer.qualname(value.func) == "torch.flatten":
        return len(value.args) == 1 and not value.keywords and typer.kind(value.args[0]).is_tensor
    func = value.func
    if not (isinstance(func, ast.Attribute) and typer.qualname(func) is None and typer.kind(func.value).is_tensor):
        return False
    if func.attr in _FLATTENING:
        return not value.args and not value.keywords
    minus_one = len(value.args) == 1 and isinstance(value.args[0], ast.UnaryOp) and _is_one(value.args[0])
    return func.attr in ("view", "reshape") and minus_one and not value.keywords


def _is_one(node: ast.UnaryOp) -> bool:
    return isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) and node.operand.value == 1
