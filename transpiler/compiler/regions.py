"""Region extraction: maximal runs of fusible statements become regions of the IR.

A statement is fusible when it binds one name (`y = expr`, `y: T = expr`,
`y += expr`, or an in-place method such as `y.mul_(2)`) and every operation in it
is in the op table with at least one tensor operand. Consecutive fusible
statements of one block form a run; the run becomes a region whose inputs are the
tensors and Python scalars it reads and whose outputs are the names it binds that
the function reads elsewhere. Anything else (calls of submodules, matmuls, views,
indexing, unknown names) ends the run and stays as it is.

Regions with fewer than `MIN_OPS` compute nodes are dropped: one pointwise op is
already one eager kernel, so a fused kernel would only add launch overhead.
"""

from __future__ import annotations

import ast
import collections
import copy
import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from transpiler.analysis.walker import Walker, Context
from transpiler.compiler.inlining import Callee, callee_of, can_inline, guards, inline
from transpiler.compiler.ir import RETURN, Input, Node, NotFused, Output, Region
from transpiler.analysis.kinds import Kind
from transpiler.compiler.lowering import NotLowerable, has_reductions, kernel_view
from transpiler.compiler.ops import (
    ACTIVATION,
    BY_NAME,
    CAST,
    CAST_LIKE,
    CAST_METHODS,
    DTYPE_ALIASES,
    DTYPES,
    KERNEL_PATTERNS,
    MODULES,
    TRIVIAL,
    OpKind,
    Spelling,
    spellings_of,
)
from transpiler.analysis.symbols import ACTIVATION_ATTRIBUTE, NON_LITERAL, ClassInfo

MIN_OPS = 2
# Nodes a region holds at most. The largest region of transformers' models has 24; a longer run of
# statements (a generated forward of thousands) is cut into regions of this size, so that the steps
# that look at a region's nodes pairwise cost a bounded time per node, and no kernel takes minutes to build.
MAX_NODES = 64

_OPERATORS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
}
_UNARY = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}
# Python scalar expressions the caller may evaluate before the kernel: pure, cheap.
_SCALAR_CALLS = frozenset({"size", "dim", "numel"})


class _NotFusible(Exception):
    """A statement the kernels cannot compute; the message, where there is one, says why for the report, and
    `call` is the call the op table has no entry for, if that is why."""

    def __init__(self, reason: str = "", call: ast.Call | None = None) -> None:
        super().__init__(reason)
        self.call = call


# -- one statement ---------------------------------------------------------------------
@dataclass(frozen=True)
class Leaf:
    """A value the statement reads from outside: a tensor, or a Python scalar expression."""

    source: str
    is_tensor: bool
    names: frozenset[str]  # local names the expression reads
    # A tensor read only for its dtype through a variable (`dtype = x.dtype` on line
    # `dtype_line`): it is the region's input `x`, valid if `x` is not rebound on `rebound` lines
    # between that line and the region.
    dtype_line: int = 0
    rebound: tuple[int, ...] = ()
    name: str = ""  # the region input's name, where its source does not give one (`q.shape[-1] // 2`: `q_half`)


# An operand inside a fragment: ("tmp", index), ("leaf", Leaf) or ("const", value).
Ref = tuple


@dataclass(frozen=True)
class Fragment:
    """One fusible statement: its nodes (operands are Refs) and the name it binds."""

    statement: ast.stmt
    target: str
    nodes: tuple[tuple[str, tuple[Ref, ...], int], ...]  # (op, operands, line)
    result: Ref  # a node, or for `residual = h` (an alias, no nodes) the tensor it names
    inplace: bool  # mutates `target`'s tensor: only fusible when the region made that tensor
    conditions: tuple[str, ...]


@dataclass(frozen=True)
class OpFunction:
    """A module-level function of the file that computes one op of the table: a call of it is that op."""

    op: str


# In-tree callables whose calls a region sees through: classes whose forward is inlined (by the
# qualified name of the class), functions that are one op (by the function's).
Callees = dict[str, "Callee | OpFunction"]


class _Translator:
    def __init__(
        self,
        ctx: Context,
        line: int,
        callees: Callees,
        tensors: frozenset[str] = frozenset(),
        hoist: Callable[[ast.expr], bool] | None = None,
    ) -> None:
        self.ctx = ctx
        self.line = line
        self.callees = callees  # in-tree classes whose forward a call inlines, by qualified name
        # Temporaries of split statements (hoisting.py): tensors, whatever the call they hold returned.
        self.tensors = tensors
        # Splitting statements (`translate_part`): a subexpression that cannot be translated and that
        # `hoist` accepts becomes a tensor leaf, collected in `opaque` (by id).
        self.hoist = hoist
        self.opaque: dict[int, ast.expr] = {}
        self.nodes: list[tuple[str, tuple[Ref, ...], int]] = []
        self.conditions: list[str] = []
        self.folds: dict[int, object] = {}  # what `fold` found for each subexpression (by id) so far
        # The call of a statement `t.add_(b)`: the one in-place call a fragment may hold (it updates `t`).
        self.inplace_root: ast.Call | None = None

    def emit(self, op: str, operands: Iterable[Ref]) -> Ref:
        self.nodes.append((op, tuple(operands), self.line))
        return ("tmp", len(self.nodes) - 1)

    def kind(self, node: ast.expr) -> Kind:
        return Kind.TENSOR if isinstance(node, ast.Name) and node.id in self.tensors else self.ctx.kind(node)

    def expr(self, node: ast.expr) -> Ref:
        if self.hoist is None:
            return self._expr(node)
        marks = len(self.nodes), len(self.conditions), len(self.opaque)
        try:
            return self._expr(node)
        except _NotFusible:
            if not self.hoist(node):
                raise
        # Drop what the failed attempt translated or collected inside `node`: it is hoisted whole.
        del self.nodes[marks[0] :], self.conditions[marks[1] :]
        for key in list(self.opaque)[marks[2] :]:
            del self.opaque[key]
        self.opaque[id(node)] = node
        return ("leaf", Leaf(ast.unparse(node), True, _names(node)))

    def _expr(self, node: ast.expr) -> Ref:
        if isinstance(node, ast.Name) and node.id in self.tensors:
            return ("leaf", Leaf(node.id, True, frozenset({node.id})))
        folded = fold(node, self.ctx, self.folds)
        if folded is not None:
            return ("const", folded)
        kind = self.kind(node)
        if isinstance(node, (ast.Name, ast.Attribute)) and kind.is_tensor:
            if isinstance(node, ast.Attribute) and self.ctx.self_attr(node) is None:
                raise _NotFusible
            return ("leaf", Leaf(ast.unparse(node), True, _names(node)))
        if kind is Kind.SCALAR and _is_pure_scalar(node, self.ctx):
            return ("leaf", Leaf(ast.unparse(node), False, _names(node)))
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return self.apply(f"a{_OPERATORS[type(node.op)]}b", [node.left, node.right])
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return self.apply(f"{_UNARY[type(node.op)]}a", [node.operand])
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _OPERATORS:
            return self.apply(f"a{_OPERATORS[type(node.ops[0])]}b", [node.left, node.comparators[0]])
        if isinstance(node, ast.Call):
            return self.call(node)
        raise _NotFusible

    def apply(self, key: str, operands: list[ast.expr]) -> Ref:
        (spelling,) = spellings_of(key)
        refs = [self.expr(o) for o in operands]
        return self.node(spelling.op.name, refs)

    def node(self, op: str, refs: list[Ref]) -> Ref:
        if not any(r[0] == "tmp" or (r[0] == "leaf" and r[1].is_tensor) for r in refs):
            raise _NotFusible  # Python arithmetic on scalars: not a tensor op
        return self.emit(op, refs)

    def call(self, node: ast.Call) -> Ref:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise _NotFusible
        func = node.func
        if isinstance(func, ast.Attribute) and self.kind(func.value).is_tensor:
            if _mutates(func.attr) and node is not self.inplace_root:
                raise _NotFusible  # `y = t.add_(b)` updates t too, which the region would not
            cast = self.cast(func, node)
            if cast is not None:
                return cast
            spellings = spellings_of(f"Tensor.{func.attr}")
            return self.bind(spellings, [func.value, *node.args], node.keywords, f".{func.attr}", node)
        attr = self.ctx.self_attr(func)
        if attr is not None and self.ctx.cls is not None and attr in self.ctx.cls.attr_ctors:
            return self.module_call(attr, node)
        if attr is not None and self.ctx.cls is not None and _chosen_at_run_time(self.ctx.cls, attr):
            if len(node.args) != 1 or node.keywords:
                raise _NotFusible
            module = ("leaf", Leaf(f"self.{attr}", False, frozenset({"self"})))
            return self.node(ACTIVATION.name, [self.expr(node.args[0]), module])
        qualname = self.ctx.qualname(func)
        if qualname is None or _mutates(qualname):
            raise _NotFusible  # `torch.relu_(x)` updates x
        function = self.callees.get(qualname)
        if isinstance(function, OpFunction):
            if len(node.args) != 1 or node.keywords:
                raise _NotFusible
            return self.shifted(function.op, node.args[0])
        rotated = rotated_operand(node, self.ctx)
        if rotated is not None:
            return self.shifted("rotate_half", rotated)
        return self.bind(spellings_of(qualname), node.args, node.keywords, qualname, node)

    def shifted(self, op: str, operand: ast.expr) -> Ref:
        """`op` of ops.SHIFTED_OPS on `operand`, which must be a tensor the region reads, named: the kernels
        load it at other elements, and the caller checks it first (its operand_conditions)."""
        if not (isinstance(operand, ast.Name) or self.ctx.self_attr(operand) is not None):
            raise _NotFusible
        x = self.expr(operand)
        if not (x[0] == "leaf" and x[1].is_tensor):
            raise _NotFusible
        source = x[1].source
        self.conditions += [c.format(x=source) for c in BY_NAME[op].operand_conditions]
        half = Leaf(f"{source}.shape[-1] // 2", False, x[1].names, name=f"{source.removeprefix('self.')}_half")
        return self.node(op, [x, ("leaf", half)])

    def cast(self, func: ast.Attribute, node: ast.Call) -> Ref | None:
        if func.attr in CAST_METHODS and not node.args and not node.keywords:
            dtype = CAST_METHODS[func.attr]
        elif func.attr in ("to", "type") and len(node.args) + len(node.keywords) == 1:
            arg = node.args[0] if node.args else node.keywords[0].value
            if node.keywords and node.keywords[0].arg != "dtype":
                raise _NotFusible
            dtype = _dtype(self.ctx.qualname(arg))
            if dtype is None:
                like = self.dtype_of(arg)
                if like is None:
                    raise _NotFusible  # `.to(device)`, `.to(other)`, a dtype of unknown origin
                return self.node(CAST_LIKE.name, [self.expr(func.value), like])
        else:
            return None
        return self.node(CAST.name, [self.expr(func.value), ("const", dtype)])

    def dtype_of(self, arg: ast.expr) -> Ref | None:
        """The tensor whose dtype `arg` is: `t.dtype`, or a variable bound once to `t.dtype`."""
        if isinstance(arg, ast.Attribute) and arg.attr == "dtype" and self.kind(arg.value).is_tensor:
            if isinstance(arg.value, ast.Name) or self.ctx.self_attr(arg.value) is not None:
                return ("leaf", Leaf(ast.unparse(arg.value), True, _names(arg.value)))
            return None
        if not isinstance(arg, ast.Name):
            return None
        bindings = _bindings(self.ctx.node, arg.id)
        if len(bindings) != 1 or not isinstance(bindings[0], ast.Assign) or bindings[0].lineno >= self.line:
            return None
        value = bindings[0].value
        if not (isinstance(value, ast.Attribute) and value.attr == "dtype" and isinstance(value.value, ast.Name)):
            return None
        tensor = value.value.id
        if not self.kind(value.value).is_tensor:
            return None
        rebound = tuple(n.lineno for n in _bindings(self.ctx.node, tensor))
        return ("leaf", Leaf(tensor, True, frozenset({tensor}), bindings[0].lineno, rebound))

    def module_call(self, attr: str, node: ast.Call) -> Ref:
        ctor = self.ctx.cls.attr_ctors[attr]
        if isinstance(self.callees.get(ctor), Callee):
            return self.inline(self.callees[ctor], attr, node)
        args, kwargs = self.ctx.cls.attr_ctor_args.get(attr, ((NON_LITERAL,), ()))
        for spelling in spellings_of(f"module:{ctor}"):
            if node.keywords or not _bind_constants(spelling, args, dict(kwargs)):
                continue
            if not spelling.module_operands:
                if len(node.args) != spelling.op.arity:
                    continue
                refs = [self.expr(a) for a in node.args]
            else:
                refs = self.module_operands(spelling, attr, node.args, args, dict(kwargs))
                if refs is None:
                    continue
            module = MODULES.get(ctor)
            conditions = module.conditions if module is not None else ()
            argument = refs[spelling.module_operands.index("input") if spelling.module_operands else 0]
            if any("{x}" in c for c in conditions) and not (argument[0] == "leaf" and argument[1].is_tensor):
                raise _NotFusible  # the caller checks the input before the region: not a value the region computes
            x = argument[1].source if argument[0] == "leaf" else None
            self.conditions += [c.format(m=f"self.{attr}", x=x) for c in conditions]
            return self.node(spelling.op.name, refs)
        name = ctor.rpartition(".")[2]
        if spellings_of(f"module:{ctor}"):
            raise _NotFusible(f"`self.{attr}` ({name}) is called with arguments the op table does not take")
        raise _NotFusible(f"`self.{attr}` ({name}) is not a module the kernels compute", node)

    def module_operands(
        self, spelling: Spelling, attr: str, call_args: list[ast.expr], args: tuple, kwargs: dict
    ) -> list[Ref] | None:
        """The operands a `->` module spelling names: the call's argument, constructor constants, module attributes."""
        if len(call_args) != spelling.module_operands.count("input"):
            return None
        given = {**dict(zip(spelling.params, args)), **kwargs}
        inputs = iter(call_args)
        refs: list[Ref] = []
        for position, name in enumerate(spelling.module_operands):
            if name == "input":
                refs.append(self.expr(next(inputs)))
            elif name.startswith("."):
                source = f"self.{attr}{name}"
                is_tensor = position not in spelling.op.constant_operands
                refs.append(("leaf", Leaf(source, is_tensor, frozenset({"self"}))))
            elif name in given and given[name] is not NON_LITERAL:
                refs.append(("const", given[name]))
            else:
                return None
        return refs

    def inline(self, callee: Callee, attr: str, node: ast.Call) -> Ref:
        """`self.<attr>(x)` of an in-tree class: its forward's nodes, guarded by the submodule's type (inlining.py)."""
        cls = self.ctx.typer.classes.get(self.ctx.cls.attr_ctors[attr])
        if cls is None or not can_inline(cls) or len(node.args) + len(node.keywords) != 1:
            raise _NotFusible
        if node.keywords and node.keywords[0].arg != callee.param:
            raise _NotFusible  # one argument, positional or named as the forward's parameter
        argument = self.expr(node.args[0] if node.args else node.keywords[0].value)
        if not (argument[0] == "tmp" or (argument[0] == "leaf" and argument[1].is_tensor)):
            raise _NotFusible
        result = inline(callee, attr, argument, self.emit)
        if result is None:
            raise _NotFusible
        self.conditions += guards(callee, attr)
        return result

    def bind(
        self, spellings: list[Spelling], args: list[ast.expr], keywords: list[ast.keyword], name: str, call: ast.Call
    ) -> Ref:
        if not spellings:
            raise _NotFusible(f"`{name}` is not in the op table (a library call, or an op not written yet)", call)
        given = {k.arg: k.value for k in keywords}
        if "unbiased" in given and "correction" not in given:  # var/std's older spelling
            unbiased = _constant(given.pop("unbiased"))
            if type(unbiased) is not bool:
                raise _NotFusible
            given["correction"] = ast.Constant(int(unbiased))
        for spelling in spellings:
            bound = _bind(spelling, args, given)
            if bound is None:
                continue
            refs = []
            for param in spelling.operands:
                value = bound.get(param)
                if value is None:
                    refs.append(("const", dict(spelling.defaults)[param]))
                else:
                    refs.append(self.expr(value))
            for index in spelling.op.constant_operands:
                if refs[index][0] == "tmp" or (refs[index][0] == "leaf" and refs[index][1].is_tensor):
                    raise _NotFusible  # the backends take these operands as scalars
            if spelling.op.kind is OpKind.REDUCTION:
                _check_reduction_constants(spelling, refs)
            return self.node(spelling.op.name, refs)
        keywords_given = ", ".join(f"{k.arg}=" for k in keywords)
        raise _NotFusible(
            f"`{name}` with these arguments{f' ({keywords_given})' if keywords else ''}: no spelling of the op table takes them"
        )


def _chosen_at_run_time(cls: ClassInfo, attr: str) -> bool:
    """`self.<attr>` is an activation module whose class only the running program knows (`ACT2FN[...]`).

    The attribute is a module the analysis has no constructor for (a subscript, a call of a
    function, a conditional) and its name says it is an activation (`symbols.ACTIVATION_ATTRIBUTE`).
    """
    return cls.attrs.get(attr) is Kind.MODULE and ACTIVATION_ATTRIBUTE.fullmatch(attr) is not None


# A reduction's dim, keepdim and correction shape the kernel: they must be literals of these types.
_REDUCTION_CONSTANTS = {"dim": int, "keepdim": bool, "correction": int}


def _mutates(name: str) -> bool:
    """Whether a method or function name is torch's in-place spelling (`add_`, `torch.relu_`)."""
    return name.endswith("_") and not name.endswith("__")


def _check_reduction_constants(spelling: Spelling, refs: list[Ref]) -> None:
    for param, ref in zip(spelling.operands, refs):
        wanted = _REDUCTION_CONSTANTS.get(param)
        if wanted is not None and (ref[0] != "const" or type(ref[1]) is not wanted):
            raise _NotFusible


def _bind(spelling: Spelling, args: list[ast.expr], keywords: dict[str, ast.expr]) -> dict[str, ast.expr] | None:
    """Arguments of a call by parameter name, when the call matches the spelling."""
    if len(args) > len(spelling.params) or set(keywords) - set(spelling.params):
        return None
    bound = dict(zip(spelling.params, args))
    if set(bound) & set(keywords):
        return None
    bound.update(keywords)
    for param, wanted in spelling.pinned:
        if param in bound:
            value = _constant(bound.pop(param))
            if value is NON_LITERAL or (wanted is not Ellipsis and value != wanted):
                return None
    defaults = dict(spelling.defaults)
    if any(p not in bound and p not in defaults for p in spelling.operands):
        return None
    return bound


def _bind_constants(spelling: Spelling, args: tuple, kwargs: dict[str, object]) -> bool:
    """Whether a module's constructor arguments match the spelling's pinned values."""
    if len(args) > len(spelling.params) or set(kwargs) - set(spelling.params):
        return False
    given = {**dict(zip(spelling.params, args)), **kwargs}
    # `...` accepts any argument here, expressions too (`nn.Dropout(config.p)`): the value is unused.
    return all(wanted is Ellipsis or given.get(param, wanted) == wanted for param, wanted in spelling.pinned)


def _constant(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NON_LITERAL


def _dtype(qualname: str | None) -> str | None:
    if qualname is None or not qualname.startswith("torch."):
        return None
    name = qualname.removeprefix("torch.")
    name = DTYPE_ALIASES.get(name, name)
    return name if name in DTYPES else None


def fold(node: ast.expr, ctx: Context, memo: dict[int, object] | None = None) -> float | int | bool | None:
    """The value of a constant expression (`0.5`, `math.sqrt(2 / math.pi)`, `float("-inf")`), or None.

    `memo` keeps what each subexpression folded to across calls: the translator folds every node of an
    operator chain, top down, and without it would fold each one's whole subtree again (quadratic time)."""
    try:
        value = _fold(node, ctx, {} if memo is None else memo)
    except (_NotFusible, ArithmeticError, ValueError, TypeError):
        return None
    return value if type(value) in (int, float, bool) else None


_UNFOLDED = object()  # in a fold memo: the subexpression is not a constant


def _fold(node: ast.expr, ctx: Context, memo: dict[int, object]):
    found = memo.get(id(node))
    if found is _UNFOLDED:
        raise _NotFusible
    if found is not None:
        return found
    try:
        memo[id(node)] = value = _fold_node(node, ctx, memo)
    except Exception:
        memo[id(node)] = _UNFOLDED
        raise
    return value


def _fold_node(node: ast.expr, ctx: Context, memo: dict[int, object]):
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in (ast.USub, ast.UAdd):
        value = _fold(node.operand, ctx, memo)
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _fold(node.left, ctx, memo), _fold(node.right, ctx, memo)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise _NotFusible  # keep folding cheap: no huge integers
        return eval(f"left {_OPERATORS[type(node.op)]} right", {}, {"left": left, "right": right})
    qualname = ctx.qualname(node.func if isinstance(node, ast.Call) else node)
    if isinstance(node, ast.Attribute) and qualname in ("math.pi", "math.e", "math.inf", "math.nan", "math.tau"):
        return getattr(math, qualname[5:])
    if isinstance(node, ast.Call) and not node.keywords and qualname is not None:
        if qualname.startswith("math.") and callable(getattr(math, qualname[5:], None)):
            return getattr(math, qualname[5:])(*(_fold(a, ctx, memo) for a in node.args))
        if qualname == "builtins.float" and len(node.args) == 1:
            arg = node.args[0]
            if (
                isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and arg.value.strip().lower() in ("inf", "-inf", "nan", "+inf")
            ):
                return float(arg.value)
            return float(_fold(arg, ctx, memo))
    raise _NotFusible


def _is_pure_scalar(node: ast.expr, ctx: Context) -> bool:
    """A Python value expression that is cheap and side-effect free to evaluate twice."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            method = sub.func.attr if isinstance(sub.func, ast.Attribute) else None
            qualname = ctx.qualname(sub.func)
            if not (method in _SCALAR_CALLS or (qualname or "").startswith("math.")):
                return False
        elif not isinstance(
            sub,
            (
                ast.Name,
                ast.Attribute,
                ast.Constant,
                ast.BinOp,
                ast.UnaryOp,
                ast.Subscript,
                ast.operator,
                ast.unaryop,
                ast.expr_context,
            ),
        ):
            return False
    return True


# The targets each kind of binding assigns.
_TARGETS = {
    ast.Assign: lambda n: n.targets,
    ast.AugAssign: lambda n: [n.target],
    ast.AnnAssign: lambda n: [n.target],
    ast.For: lambda n: [n.target],
    ast.NamedExpr: lambda n: [n.target],
    ast.With: lambda n: [i.optional_vars for i in n.items if i.optional_vars is not None],
}


def _bindings(function: ast.AST, name: str) -> list[ast.AST]:
    """The statements and expressions in `function` that bind `name`."""
    return [
        n
        for n in ast.walk(function)
        if type(n) in _TARGETS
        and any(isinstance(t, ast.Name) and t.id == name for target in _TARGETS[type(n)](n) for t in ast.walk(target))
    ]


def _names(node: ast.expr) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))


# -- ops recognised from their source ------------------------------------------------------------
_CAT = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})


def op_function(ctx: Context) -> OpFunction | None:
    """The module-level function `ctx` checks as an op, when its body is transformers' `rotate_half`:

        def rotate_half(x):
            x1 = x[..., : x.shape[-1] // 2]
            x2 = x[..., x.shape[-1] // 2 :]
            return torch.cat((-x2, x1), dim=-1)

    (any names, the halves bound in either order or written inline, a list for the tuple, `dim`
    given as `-1` or `<tensor>.ndim - 1`); one parameter, no decorator, a docstring at most besides.
    """
    node, args = ctx.node, ctx.node.args
    if not isinstance(node, ast.FunctionDef) or node.decorator_list or args.posonlyargs or args.vararg:
        return None
    if args.kwonlyargs or args.kwarg or args.defaults or len(args.args) != 1:
        return None
    param = args.args[0].arg
    body = node.body[1:] if ast.get_docstring(node, clean=False) is not None else node.body
    halves: dict[str, ast.expr] = {}
    for statement in body[:-1]:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            return None
        target = statement.targets[0]
        if not isinstance(target, ast.Name) or target.id in (param, *halves) or _half_of(statement.value) is None:
            return None
        halves[target.id] = statement.value
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return None
    rotated = rotated_operand(body[-1].value, ctx, halves)
    return OpFunction("rotate_half") if isinstance(rotated, ast.Name) and rotated.id == param else None


def rotated_operand(node: ast.expr, ctx: Context, halves: Mapping[str, ast.expr] | None = None) -> ast.expr | None:
    """`x` where `node` is `torch.cat((-x[..., h:], x[..., :h]), dim=-1)` with `h = x.shape[-1] // 2`,
    i.e. rotate_half(x); None otherwise. `halves`: local names bound to such halves (a function's body)."""
    halves = halves or {}
    if not isinstance(node, ast.Call) or ctx.qualname(node.func) not in _CAT:
        return None
    keywords = {k.arg: k.value for k in node.keywords}
    if len(node.args) == 2 and not keywords:
        tensors, dim = node.args
    elif len(node.args) == 1 and set(keywords) == {"dim"}:
        tensors, dim = node.args[0], keywords["dim"]
    else:
        return None  # no dim: torch.cat joins along dim 0
    if not isinstance(tensors, (ast.Tuple, ast.List)) or len(tensors.elts) != 2:
        return None
    negated, kept = tensors.elts
    if not (isinstance(negated, ast.UnaryOp) and isinstance(negated.op, ast.USub)):
        return None
    second, first = (_half_of(halves.get(getattr(n, "id", None), n)) for n in (negated.operand, kept))
    if second is None or first is None or second[1] != "second" or first[1] != "first":
        return None
    x = second[0]
    if ast.unparse(x) != ast.unparse(first[0]):
        return None
    ranks = "|".join(re.escape(name) for name in (ast.unparse(x), *halves))
    literal = _constant(dim)
    last = re.fullmatch(rf"(?:{ranks})\.(?:ndim|dim\(\)) - 1", ast.unparse(dim))  # x1 and x2 have x's ndim
    return x if (type(literal) is int and literal == -1) or last else None


def _half_of(node: ast.expr) -> tuple[ast.expr, str] | None:
    """(x, "first") for `x[..., : x.shape[-1] // 2]`, (x, "second") for `x[..., x.shape[-1] // 2 :]`, else None."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2):
        return None
    dots, part = node.slice.elts
    if not (isinstance(dots, ast.Constant) and dots.value is Ellipsis and isinstance(part, ast.Slice)):
        return None
    half = f"{ast.unparse(node.value)}.shape[-1] // 2"
    if part.step is not None or (part.lower is None) == (part.upper is None):
        return None
    bound = part.upper if part.lower is None else part.lower
    if ast.unparse(bound) != half:
        return None
    return node.value, "first" if part.lower is None else "second"


def translate(
    statement: ast.stmt,
    ctx: Context,
    callees: Callees | None = None,
    tensors: frozenset[str] = frozenset(),
    why: list[str] | None = None,
) -> Fragment | None:
    """The statement as a fragment, or None when it is not fusible. `callees`: classes whose calls are
    inlined, functions that are one op; `tensors`: names holding tensors whatever the analysis says (temporaries of split statements);
    `why`: gets the reason a statement with tensor operations is not fusible, where the translation knows one.
    """
    line = statement.lineno
    translator = _Translator(ctx, line, callees or {}, tensors)
    inplace = False
    try:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            target, result = statement.targets[0].id, translator.expr(statement.value)
        elif (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.value is not None
        ):
            target, result = statement.target.id, translator.expr(statement.value)
        elif isinstance(statement, ast.Return) and statement.value is not None:
            target, result = RETURN, translator.expr(statement.value)
        elif (
            isinstance(statement, ast.AugAssign)
            and isinstance(statement.target, ast.Name)
            and type(statement.op) in _OPERATORS
        ):
            target = statement.target.id
            inplace = ctx.kind(statement.target).is_tensor
            load = ast.copy_location(ast.Name(target, ast.Load()), statement.target)
            result = translator.apply(f"a{_OPERATORS[type(statement.op)]}b", [load, statement.value])
        elif (
            isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Attribute)
            and statement.value.func.attr.endswith("_")
            and isinstance(statement.value.func.value, ast.Name)
        ):
            target, inplace = statement.value.func.value.id, True
            translator.inplace_root = statement.value
            result = translator.expr(statement.value)
        else:
            return None
    except _NotFusible as error:
        # A statement that is one library call (`y = self.proj(h)`, `return torch.matmul(a, b)`) is not what a
        # reader expects in a kernel: only tensor code around or inside it gets a reason.
        value = getattr(statement, "value", None)
        if why is not None and str(error) and (error.call is None or error.call is not value):
            why.append(str(error))
        return None
    is_alias = (
        result[0] == "leaf" and result[1].is_tensor and isinstance(statement, ast.Assign) and not translator.nodes
    )
    if result[0] != "tmp" and not is_alias:
        return None  # `y = 2.0`, `return x`: nothing to compute
    return Fragment(statement, target, tuple(translator.nodes), result, inplace, tuple(translator.conditions))


@dataclass(frozen=True)
class Part:
    """A subexpression as region nodes, with the subexpressions it would hoist (hoisting.py)."""

    ops: tuple[str, ...]  # in the order they are computed
    opaque: tuple[ast.expr, ...]  # the subexpressions read as tensor leaves, in no particular order


def translate_part(node: ast.expr, ctx: Context, callees: Callees, hoist: Callable[[ast.expr], bool]) -> Part | None:
    """`node` translated with the subexpressions that `hoist` accepts and the op table does not know
    read as tensor leaves; None when something else is not fusible or `node` computes nothing."""
    translator = _Translator(ctx, node.lineno, callees, hoist=hoist)
    try:
        result = translator.expr(node)
    except _NotFusible:
        return None
    if result[0] != "tmp":
        return None
    return Part(tuple(op for op, _, _ in translator.nodes), tuple(translator.opaque.values()))


def cost(ops: Iterable[str]) -> int:
    """What ops count towards MIN_OPS (ops.Op.cost): compute ops, an activation chosen at run time as MIN_OPS."""
    return sum(BY_NAME[op].cost for op in ops)


# -- runs of statements to regions ----------------------------------------------------------
class _Builder:
    """Links consecutive fragments into one region with SSA names."""

    def __init__(self) -> None:
        self.fragments: list[Fragment] = []
        self.env: dict[str, str] = {}  # Python name -> SSA value holding it now
        self.fresh: set[str] = set()  # SSA values computed by the region (safe to mutate)
        # Values an op may have returned as its operand's very tensor (ops.Op.may_alias: `h = x.float()`
        # of a float32 x is x): the value they may be, followed to a value no such op made.
        self.roots: dict[str, str] = {}
        self.inputs: dict[str, Input] = {}  # by source text
        self.nodes: list[Node] = []
        self.taken: set[str] = set()
        self.conditions: list[str] = []

    def accepts(self, fragment: Fragment) -> bool:
        if len(self.nodes) + len(fragment.nodes) > MAX_NODES:
            return False  # the next region takes it (or none: one statement of more ops than that)
        leaves = [r[1] for _, operands, _ in fragment.nodes for r in operands if r[0] == "leaf"]
        if any(not leaf.is_tensor and leaf.names & set(self.env) for leaf in leaves):
            return False  # a scalar expression reading a name the region rebinds
        if any(_names(ast.parse(c, mode="eval")) & set(self.env) for c in fragment.conditions):
            return False  # a condition the caller checks before the region, on a name the region rebinds
        if fragment.inplace and self.root(self.env.get(fragment.target)) not in self.fresh:
            return False  # mutates a tensor made outside the region (maybe through `h = x.float()`): others see it
        if (
            fragment.inplace
            and [self.root(v) for v in self.env.values()].count(self.root(self.env[fragment.target])) > 1
        ):
            return False  # mutates a tensor another name holds too (`r = h; h += x`, `h = r.float()`): r must see it
        if fragment.result[0] == "leaf" and fragment.result[1].source not in self.env:
            return False  # `residual = x` of an input: only names of values the region computes are carried along
        if self.fragments and _independent_shifted(fragment, self.nodes, self.env):
            return False  # q's and k's rotations: under grouped-query attention their shapes differ
        if self.fragments and _independent_rows(fragment, self.nodes, {*self.env, *self.inputs}):
            return False  # norms of unrelated tensors (jamba's of dt, B and C): their rows need not agree
        first = (self.fragments[0] if self.fragments else fragment).statement.lineno
        for leaf in leaves:
            if leaf.dtype_line and any(leaf.dtype_line < line < first for line in leaf.rebound):
                return False  # the dtype's tensor was rebound before the region: not the region's input
        return self.lowerable_with(fragment)

    def lowerable_with(self, fragment: Fragment) -> bool:
        """Whether one kernel can still compute the region with `fragment` added (see `lowering.lower`)."""
        if not any(BY_NAME[op].kind is OpKind.REDUCTION for op, _, _ in fragment.nodes) and not has_reductions(
            self.region()
        ):
            return True
        trial = copy.deepcopy(self)
        trial.add(fragment)
        try:
            kernel_view(trial.region())
        except NotLowerable:
            return False
        return True

    def region(self) -> Region:
        """The nodes so far as a region (name, place and outputs are the caller's)."""
        return Region("", "", "", 0, 0, tuple(self.inputs.values()), tuple(self.nodes), ())

    def add(self, fragment: Fragment) -> None:
        self.fragments.append(fragment)
        values: list[str] = []
        for op, operands, line in fragment.nodes:
            resolved, constants = [], []
            for index, ref in enumerate(operands):
                if ref[0] == "const":
                    resolved.append(ref[1])
                    constants.append(index)
                elif ref[0] == "tmp":
                    resolved.append(values[ref[1]])
                else:
                    resolved.append(self.leaf(ref[1]))
            last = len(values) == len(fragment.nodes) - 1
            out = self.name(fragment.target if last and fragment.target != RETURN else "t")
            values.append(out)
            self.nodes.append(Node(op, tuple(resolved), out, line, tuple(constants), inplace=fragment.inplace and last))
            self.fresh.add(out)
            if BY_NAME[op].may_alias and 0 not in constants:
                self.roots[out] = self.root(resolved[0])
        self.env[fragment.target] = (
            self.env[fragment.result[1].source] if fragment.result[0] == "leaf" else values[fragment.result[1]]
        )
        self.conditions += [c for c in fragment.conditions if c not in self.conditions]

    def root(self, value: str | None) -> str | None:
        """The value whose tensor `value` may be (itself unless an op may have returned its operand)."""
        return self.roots.get(value, value)

    def aliases_outside(self, outputs: Iterable[Output]) -> bool:
        """Whether an output may be a tensor the caller holds (`return x.float()`), or two outputs may be
        one tensor: eager returns that tensor itself, a kernel a new one."""
        roots = [self.root(o.value) for o in outputs]
        return any(r not in self.fresh for r in roots) or len(set(roots)) < len(roots)

    def leaf(self, leaf: Leaf) -> str:
        if leaf.source in self.env and not leaf.dtype_line:
            return self.env[leaf.source]
        if leaf.source not in self.inputs:
            # A view of a tensor is named after it (`self.bn.weight[:, None, None]`: `bn_weight`); a shape's element is not.
            dotted = re.fullmatch(r"(?:self\.)?(\w+(?:\.\w+)*)(\[.*\])?", leaf.source)
            named = dotted is not None and (leaf.is_tensor or dotted.group(2) is None)
            base = leaf.name.replace(".", "_") or (dotted.group(1).replace(".", "_") if named else "scalar")
            self.inputs[leaf.source] = Input(self.name(base, exact=True), leaf.source, leaf.is_tensor)
        return self.inputs[leaf.source].name

    def name(self, base: str, exact: bool = False) -> str:
        if base != "t" and base not in self.taken:
            self.taken.add(base)
            return base
        n = 0 if base == "t" else 1
        while f"{base}{n}" in self.taken or f"{base}_{n}" in self.taken:
            n += 1
        name = f"{base}{n}" if base == "t" else f"{base}_{n}"
        self.taken.add(name)
        return name


def _independent_shifted(fragment: Fragment, nodes: list[Node], env: dict[str, str]) -> bool:
    """Whether `fragment` reads no tensor the region computed while it or the region reads an input at
    shifted elements (ops.SHIFTED_OPS): one kernel's iteration space holds both only where their shapes
    agree, which LLaMA's `q_embed` and `k_embed` do not under grouped-query attention (fewer key heads)."""
    shifted = [op for op, _, _ in fragment.nodes] + [n.op for n in nodes]
    if not any(BY_NAME[op].kind is OpKind.SHIFTED for op in shifted):
        return False
    refs = [fragment.result] + [r for _, operands, _ in fragment.nodes for r in operands]
    return not any(r[0] == "leaf" and r[1].is_tensor and r[1].source in env for r in refs)


def _independent_rows(fragment: Fragment, nodes: list[Node], names: set[str]) -> bool:
    """Whether `fragment` shares no tensor with the region (`names`: the names it binds and the sources of its
    inputs) while it or the region reduces rows: one kernel's rows are those of every tensor it reduces, and
    nothing says that unrelated tensors' agree (jamba's norms of `time_step`, `B` and `C` are of three widths)."""
    ops = [op for op, _, _ in fragment.nodes] + [n.op for n in nodes]
    if not any(BY_NAME[op].kind is OpKind.REDUCTION for op in ops):
        return False
    refs = [fragment.result] + [r for _, operands, _ in fragment.nodes for r in operands]
    return not any(r[0] == "leaf" and r[1].is_tensor and r[1].source in names for r in refs)


def _live_after(function: ast.AST, first: int, last: int) -> set[str]:
    """Names the function reads after lines first..last, or anywhere outside them when a loop
    encloses the region (a read before it may run after it)."""
    loops, reads = _reads(function)
    in_loop = any(start < first and end >= last for start, end in loops)
    return {name for lineno, name in reads if not (first <= lineno <= last or (lineno < first and not in_loop))}


@functools.lru_cache(maxsize=16)
def _reads(function: ast.AST) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, str], ...]]:
    """The function's loops (first and last line) and the names it reads, by line: one walk of the function
    for all of its regions (walking it for each region made a long forward quadratic)."""
    loops, reads = [], []
    for node in ast.walk(function):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            loops.append((node.lineno, node.end_lineno))
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Load, ast.Del)):
            reads.append((node.lineno, node.id))  # `del x` needs x bound as much as a read does
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            reads.append((node.lineno, node.target.id))
    return tuple(loops), tuple(reads)


def _kernel_name(nodes: list[Node]) -> str:
    """`fused_` and what the region computes (ops.KERNEL_PATTERNS): its non-arithmetic ops, else its arithmetic."""
    ops = [n.op for n in nodes if n.op not in TRIVIAL]
    for pattern, required in KERNEL_PATTERNS.items():
        if required <= set(ops):
            ops = [pattern] + [o for o in ops if o not in required]
    named = list(dict.fromkeys(o for o in ops if o in KERNEL_PATTERNS or not BY_NAME[o].arithmetic))
    named = named or list(dict.fromkeys(ops))
    return "fused_" + "_".join(named[:3])


# A call of torch's that computes on tensors, by its callee's text: not its namespaces of state and tools, nor
# its helpers of state, types and devices (`torch.compiler.is_compiling()`, `torch.finfo`). The report counts
# library calls with it too.
TORCH_OP = re.compile(
    r"(torch|F|nn\.functional)\.(?!(compiler|jit|cuda|backends|autograd|distributed|_\w*)\.)"
    r"(?!(is_\w+|no_grad|enable_grad|inference_mode|autocast|finfo|iinfo|device|dtype|get_\w+|set_\w+|manual_seed)$)"
    r"[\w.]+$"
)


class RegionFinder:
    """A checker pass (like a rule, reporting nothing) that collects the regions of a file."""

    def __init__(
        self,
        path: str,
        compiled: set[str] | None = None,
        callees: Callees | None = None,
        temporaries: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self.path = path
        self.compiled = compiled  # qualified names of compiled functions; None: all
        # Classes of the file whose forward can be inlined and functions that are one op, by qualified
        # name, as the walk meets them.
        self.callees: Callees = {} if callees is None else callees
        self.temporaries = temporaries or {}  # per function, the tensor temporaries of split statements
        self.regions: list[Region] = []
        self.left: list[NotFused] = []  # tensor statements left eager in compiled functions, and why
        self._fragments: dict[int, Fragment | None] = {}
        self._why: dict[int, str] = {}
        # Module-level functions not compiled, with the line of their first torch op; and the names that
        # compiled functions pass to calls, with the function and the call: a function passed on (an attention
        # interface's default, `get_interface(..., eager_attention_forward)`) runs where the build does not follow.
        self._uncompiled: dict[str, tuple[str, int]] = {}
        self._passed: dict[str, tuple[str, str]] = {}

    @property
    def not_fused(self) -> list[NotFused]:
        """Tensor code left eager, and why: statements of compiled functions, and functions only passed on."""
        passed = [
            NotFused(
                qualname,
                line,
                f"`{name}` is not compiled: `{user}` passes it on as a value (`{how}`) rather than calling it,"
                " and the build compiles only what a forward calls",
            )
            for name, (qualname, line) in self._uncompiled.items()
            if name in self._passed
            for user, how in [self._passed[name]]
        ]
        return [*self.left, *passed]

    def _visit(self, node: ast.stmt, ctx: Context) -> None:
        if id(node) not in self._fragments:
            tensors = self.temporaries.get(ctx.function.qualname, frozenset())
            why: list[str] = []
            self._fragments[id(node)] = translate(node, ctx, self.callees, tensors, why)
            if why:
                self._why[id(node)] = why[0]

    visit_Assign = visit_AnnAssign = visit_AugAssign = visit_Expr = visit_Return = _visit

    def check_function(self, findings, ctx: Context) -> None:
        callee = callee_of(ctx, lambda statement: self._fragments.get(id(statement)))
        if callee is not None:
            self.callees[ctx.cls.qualname] = callee
        if ctx.cls is None:  # a module-level function: calls below it may compute it as one op
            function = op_function(ctx)
            if function is not None:
                self.callees[ctx.function.qualname] = function
            else:  # a later definition of the name: calls below it run this one
                self.callees.pop(ctx.function.qualname, None)
        if self.compiled is not None and ctx.function.qualname not in self.compiled:
            if ctx.cls is None:  # its parameters are untyped here: its torch ops say it holds tensor code
                torch_calls = [
                    n.lineno
                    for n in ast.walk(ctx.node)
                    if isinstance(n, ast.Call) and TORCH_OP.match(ast.unparse(n.func))
                ]
                if torch_calls:
                    self._uncompiled[ctx.node.name] = (ctx.function.qualname, min(torch_calls))
            return
        if self.compiled is not None:
            self._note_passed(ctx)
        for body in _bodies(ctx.node):
            run: list[Fragment] = []
            for statement in [*body, None]:
                fragment = self._fragments.get(id(statement)) if statement is not None else None
                if statement is not None and id(statement) in self._why:
                    self.left.append(NotFused(ctx.function.qualname, statement.lineno, self._why[id(statement)]))
                if fragment is not None and _alone_on_its_lines(statement, body):
                    run.append(fragment)
                    if fragment.target != RETURN:
                        continue
                self._close(run, ctx)
                run = []

    def _note_passed(self, ctx: Context) -> None:
        """The names a compiled function uses as a call's argument, with the function's name and the call."""
        short = f"{ctx.cls.name}.{ctx.function.name}" if ctx.cls is not None else ctx.function.name
        for call in ast.walk(ctx.node):
            if isinstance(call, ast.Call):
                for argument in [*call.args, *(k.value for k in call.keywords)]:
                    if isinstance(argument, ast.Name):
                        shown = ast.unparse(call)
                        shown = shown if len(shown) <= 80 else f"{shown[:77]}..."
                        self._passed.setdefault(argument.id, (short, shown))

    def _close(self, run: list[Fragment], ctx: Context) -> None:
        builder = _Builder()
        for fragment in run:
            if not builder.accepts(fragment):
                self._finish(builder, ctx)
                builder = _Builder()
                if not builder.accepts(fragment):
                    continue
            builder.add(fragment)
        self._finish(builder, ctx)

    def _finish(self, builder: _Builder, ctx: Context) -> None:
        if cost(n.op for n in builder.nodes) < MIN_OPS:
            if builder.nodes:
                ops = ", ".join(f"`{n.op}`" for n in builder.nodes)
                self._refuse(
                    builder,
                    ctx,
                    f"{ops} alone, between statements the kernels do not compute: eager runs it as one kernel already",
                )
            return
        first = builder.fragments[0].statement.lineno
        last = builder.fragments[-1].statement.end_lineno
        live = _live_after(ctx.node, first, last)
        outputs = _outputs(builder.env, live)
        if not outputs:
            return
        if builder.aliases_outside(outputs):
            self._refuse(
                builder,
                ctx,
                "a result would be a tensor made before the region (a view or the same tensor), which a kernel cannot return",
            )
            return
        region = Region(
            _kernel_name(builder.nodes),
            self.path,
            ctx.function.qualname,
            first,
            last,
            tuple(builder.inputs.values()),
            tuple(builder.nodes),
            outputs,
            tuple(builder.conditions),
        )
        if has_reductions(region):
            try:
                kernel_view(region)
            except NotLowerable as error:
                self._refuse(builder, ctx, f"no kernel for its reductions ({error})")
                return
        self.regions.append(region)

    def _refuse(self, builder: _Builder, ctx: Context, reason: str) -> None:
        first = builder.fragments[0].statement.lineno
        self.left.append(NotFused(ctx.function.qualname, first, reason))


def _outputs(env: Mapping[str, str], live: set[str]) -> tuple[Output, ...]:
    """One output per value that a live name (or the return) holds after the region, in binding order.

    Names bound to the same value (`h = norm(h); residual = h`) share one output: the first
    is assigned the kernel's tensor and the others alias it, as they do in eager (one tensor,
    so an in-place update through one name is seen through the others)."""
    outputs: dict[str, Output] = {}
    for name, value in env.items():
        if name not in live and name != RETURN:
            continue
        if value in outputs:
            outputs[value] = replace(outputs[value], aliases=(*outputs[value].aliases, name))
        else:
            outputs[value] = Output(value, name)
    return tuple(outputs.values())


# The fields that hold statements, or the handlers and cases that do: no expression holds a statement.
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _bodies(function: ast.AST) -> Iterable[list[ast.stmt]]:
    """Every statement list in the function (nested blocks and nested functions included), in `ast.walk`'s
    order; the walk visits statements, handlers and cases only (the whole tree was 9% of a compile)."""
    queue = collections.deque([function])
    while queue:
        node = queue.popleft()
        for field in node._fields:
            if field not in _BLOCKS:
                continue
            block = getattr(node, field)
            if isinstance(block, list) and block:
                if field in ("body", "orelse", "finalbody") and isinstance(block[0], ast.stmt):
                    yield block
                queue.extend(block)


def _alone_on_its_lines(statement: ast.stmt, body: list[ast.stmt]) -> bool:
    """No other statement shares a line with it (`a = x; b = y`): regions replace whole lines."""
    index = body.index(statement)
    before = body[index - 1] if index else None
    after = body[index + 1] if index + 1 < len(body) else None
    return (before is None or before.end_lineno < statement.lineno) and (
        after is None or after.lineno > statement.end_lineno
    )


def find_regions(
    tree: ast.Module,
    path: str,
    module: str,
    is_package: bool,
    text: str,
    compiled: set[str] | None = None,
    tensor_params: dict[str, frozenset[str]] | None = None,
    temporaries: Mapping[str, frozenset[str]] | None = None,
    not_fused: list[NotFused] | None = None,
) -> list[Region]:
    """The regions of one parsed file, in functions named in `compiled` (all when None); `not_fused` gets the
    tensor statements left out of them, and why, where it is given.

    `tensor_params` (from the project's call sites, see `engine.project_facts`) types
    the parameters of helpers such as `def gelu(x)`, whose regions are found again
    with those parameters known to be tensors. `temporaries`: per function, the names
    that split statements bind to the tensors they hoist (hoisting.py).
    """
    finder = RegionFinder(path, compiled, temporaries=temporaries)
    Walker([finder]).check(tree, module, is_package, text)
    typed = None
    if tensor_params:
        typed = RegionFinder(path, compiled, finder.callees, temporaries)
        Walker([typed]).check(tree, module, is_package, text, tensor_params)
    regions = named_regions(finder.regions, typed.regions if typed else [], tensor_params)
    if not_fused is not None:
        not_fused.extend(outside_regions(typed_reasons(finder, typed, tensor_params), regions))
    return regions


def typed_reasons(
    finder: RegionFinder, typed: RegionFinder | None, tensor_params: Mapping[str, frozenset[str]] | None
) -> list[NotFused]:
    """The reasons of the walk over the file, but for the functions the typed walk checked again (it checks only
    those, and knows more of their parameters): its reasons for them."""
    if typed is None or not tensor_params:
        return finder.not_fused
    return [n for n in finder.not_fused if n.function not in tensor_params] + [
        n for n in typed.not_fused if n.function in tensor_params
    ]


def outside_regions(reasons: Iterable[NotFused], regions: list[Region]) -> tuple[NotFused, ...]:
    """The reasons at lines no region covers, once each, in line order."""
    kept = dict.fromkeys(n for n in reasons if not any(r.first_line <= n.line <= r.last_line for r in regions))
    return tuple(sorted(kept, key=lambda n: n.line))


def named_regions(
    regions: list[Region], typed: list[Region], tensor_params: Mapping[str, frozenset[str]] | None
) -> list[Region]:
    """`regions` with those of the functions in `tensor_params` replaced by `typed` (found again with their
    parameters typed), in text order, named apart (`fused_add`, `fused_add_2`)."""
    if tensor_params:
        regions = [r for r in regions if r.function not in tensor_params] + typed
    named, taken = [], set()
    for region in sorted(regions, key=lambda r: r.first_line):
        name, n = region.name, 2
        while name in taken:
            name, n = f"{region.name}_{n}", n + 1
        taken.add(name)
        named.append(replace(region, name=name))
    return named
