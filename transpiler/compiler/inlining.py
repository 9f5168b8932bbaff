"""Seeing through submodules: `self.norm(h)` of a small in-tree class, its forward inlined into the caller's region.

A class defined earlier in the same file, deriving directly from `nn.Module`, whose
`forward(self, x)` is straight-line fusible code (every statement a fragment of the region
finder, or a dtype binding `input_dtype = x.dtype`) ending in `return <expr>`, is a
`Callee`. A call of it through a submodule attribute built in `__init__` is translated
by replaying the callee's fragments with its parameter bound to the caller's argument,
its locals to the values they hold, and `self.<attr>` read as `self.<submodule>.<attr>`.
The caller's kernel is guarded by conditions saying the submodule still runs exactly that
forward: its type is the class, and no hook or per-instance forward (such as the
`kernels` library's `kernelize`) stands in between.

`kernel_view` serves the casts this produces: `x.to(t.dtype)` where `t` is a value the
region computes (the residual add before an inlined RMSNorm). Kernels know only their
inputs' storage dtypes, so `t` stands in as a tensor input it is computed from, and the
runtime checks once per call signature that torch gives `t` that input's dtype.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, replace

from transpiler.analysis.walker import Context
from transpiler.analysis.kinds import Kind
from transpiler.analysis.symbols import ClassInfo

_MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})


@dataclass(frozen=True)
class DtypeBinding:
    """`name = tensor.dtype` in a callee: later `x.to(name)` casts to `tensor`'s dtype as of this line."""

    line: int
    tensor: str


@dataclass(frozen=True)
class Callee:
    """A class whose forward can be inlined: its name in the file, its parameter, its steps in order."""

    name: str
    param: str
    steps: tuple  # Fragment (see regions.py) or DtypeBinding


def callee_of(ctx: Context, fragment_of: Callable[[ast.stmt], object]) -> Callee | None:
    """The class of the function `ctx` checks as a Callee, when it is a forward that can be inlined."""
    cls, node = ctx.cls, ctx.node
    if (
        cls is None
        or node.name != "forward"
        or node.decorator_list
        or len(cls.bases) != 1
        or cls.bases[0] not in _MODULE_BASES
    ):
        return None
    args = node.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults or len(args.args) != 2:
        return None
    param = args.args[1].arg
    body = node.body[1:] if _is_docstring(node.body[0]) else node.body
    steps = []
    for statement in body:
        fragment = fragment_of(statement)
        if fragment is None:
            binding = _dtype_binding(statement, ctx)
            if binding is None:
                return None
            steps.append(binding)
        elif fragment.conditions or fragment.inplace:
            return None  # guards of the callee's own submodules; mutations of the caller's tensor
        else:
            steps.append(fragment)
    if not body or not isinstance(body[-1], ast.Return):
        return None  # the only return is the last statement: the others are fragments or dtype bindings
    if any(ctx.self_attr(n) is not None and cls.attrs.get(n.attr) is Kind.MODULE for n in ast.walk(node)):
        return None  # a submodule of the callee: one level of inlining only
    return Callee(cls.name, param, tuple(steps))


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _dtype_binding(statement: ast.stmt, ctx: Context) -> DtypeBinding | None:
    if not (
        isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)
    ):
        return None
    value = statement.value
    if isinstance(value, ast.Attribute) and value.attr == "dtype" and isinstance(value.value, ast.Name):
        if ctx.kind(value.value).is_tensor:
            return DtypeBinding(statement.lineno, value.value.id)
    return None


def guards(callee: Callee, attr: str) -> tuple[str, ...]:
    """Conditions under which calling `self.<attr>` runs exactly the inlined forward."""
    module = f"self.{attr}"
    return (
        f"type({module}) is {callee.name}",
        f'not ({module}._forward_hooks or {module}._forward_pre_hooks or "forward" in vars({module}))',
    )


def can_inline(cls: ClassInfo) -> bool:
    """The callee's class as a whole, known once the walk has read all of it: no `__call__` of its own."""
    return "__call__" not in cls.methods


def inline(callee: Callee, attr: str, argument: tuple, emit: Callable[[str, list], tuple]) -> tuple | None:
    """Replay the callee's fragments through `emit(op, operands)` with its parameter bound to `argument`.

    Returns the Ref of the returned value, or None when a fragment reads something the
    caller cannot name (a global, a Python expression over the callee's locals).
    """
    env: dict[str, tuple] = {callee.param: argument}
    dtypes: dict[int, tuple] = {}
    result = None
    for step in callee.steps:
        if isinstance(step, DtypeBinding):
            if step.tensor not in env:
                return None
            dtypes[step.line] = env[step.tensor]
            continue
        values: list[tuple] = []
        for op, operands, _ in step.nodes:
            refs = [_resolve(ref, values, env, dtypes, attr) for ref in operands]
            if any(r is None for r in refs):
                return None
            values.append(emit(op, refs))
        result = values[step.result[1]] if step.result[0] == "tmp" else _resolve(step.result, values, env, dtypes, attr)
        if result is None:
            return None
        env[step.target] = result
    return result  # the last step's: the return


def _resolve(
    ref: tuple, values: list[tuple], env: dict[str, tuple], dtypes: dict[int, tuple], attr: str
) -> tuple | None:
    """A callee operand as the caller's: its temporaries, locals, dtype bindings, and `self` as `self.<attr>`."""
    kind, value = ref
    if kind == "const":
        return ref
    if kind == "tmp":
        return values[value]
    if value.dtype_line:
        return dtypes.get(value.dtype_line)
    if value.source in env:
        return env[value.source]
    if value.names != {"self"}:
        return None
    tree = ast.parse(value.source, mode="eval")
    owner = ast.Attribute(ast.Name("self", ast.Load()), attr, ast.Load())
    rewritten = _Rebase(owner).visit(tree)
    return ("leaf", replace(value, source=ast.unparse(rewritten)))


class _Rebase(ast.NodeTransformer):
    """`self` -> `self.<attr>` in an expression of the callee."""

    def __init__(self, owner: ast.expr) -> None:
        self.owner = owner

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.owner if node.id == "self" else node
