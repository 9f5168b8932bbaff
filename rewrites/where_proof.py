"""Static proof that `torch.where` over the arms of a data-dependent `if` (or ternary) computes what
the `if` computes, for every input: what makes the TP201/TP203 `torch.where` fix safe.

`torch.where(c, a, b)` equals `a if c else b` bit for bit, with the same gradients, when
1. `c` has one element (a 0-d tensor: `x.sum() > 0`, `mask.any()`); otherwise `if` raises
   and `torch.where` broadcasts;
2. `a` and `b` have the same shape and dtype (otherwise `torch.where` broadcasts and promotes);
3. evaluating the untaken arm cannot raise, and the zero gradient `torch.where` sends into it
   stays zero through every operation of the arm: constant derivatives (`+`, `-`, `*` or `/`
   by a finite literal), masks (`relu`), or no gradient at all (`zeros_like`). `exp`, `sqrt`,
   `abs` or a product of two tensors turn `0 * inf` or `0 * nan` into NaN;
4. the arms draw gradients from the same tensors (a leaf reached only through the untaken arm
   would get a zero gradient where the `if` gave it none).
Shapes and dtypes are symbolic tokens (`shape(y)`, `dtype(y)`, `float(dtype(y))` for
`y * 0.5`) built from the values the names hold before the `if`; two arms are proven equal when
their tokens are. A symbolic dtype may be any dtype at run time, a boolean or complex one too, so
each value also carries the categories its dtype may fall in: an operation that raises on one of
them (`-`, `relu` on booleans; `relu`, `<` on complex) is refused where it must not raise, and one
that changes the dtype of one of them (`b + 1` of a boolean is int64) gets a new token. Aliasing is not kept: the result is always a new tensor (`y = x` in an arm
made an alias), devices are assumed to be one.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rewrites import branches
from transpiler.analysis.kinds import Kind
from transpiler.analysis.typer import Typer

if TYPE_CHECKING:
    from transpiler.analysis.walker import Context

SCALAR = "()"  # the shape token of a one-element 0-d tensor
# Categories of dtypes: a symbolic dtype may be any of them.
ANY = frozenset({"bool", "int", "float", "complex"})
_FLOATING = frozenset({"float", "complex"})
# Submodules whose output has their parameters' dtype, floating or complex.
_FLOATING_MODULES = frozenset(
    f"torch.nn.{m}" for m in "Linear Bilinear Conv1d Conv2d Conv3d Embedding LayerNorm RMSNorm GroupNorm".split()
)
# Elementwise functions whose result is floating (integers and booleans become the default float).
_TO_FLOATING = frozenset("exp log sqrt sigmoid tanh sin cos".split())
# Losses that raise on integer and boolean inputs (NotImplementedError/RuntimeError, every reduction): a
# result that exists is floating or complex.
_TO_FLOATING |= frozenset(
    "binary_cross_entropy_with_logits binary_cross_entropy mse_loss smooth_l1_loss huber_loss cross_entropy "
    "nll_loss kl_div".split()
)
# Reductions whose result stays in the receiver's dtype category when that is floating or complex
# (besides the methods that keep the dtype, `Typer.keeps_dtype`).
_CATEGORY_KEEPING = frozenset("sum mean amax amin".split())
_CATEGORY = {"bool": "bool", "float16": "float", "bfloat16": "float", "float32": "float", "float64": "float"}
_MODULES = ("torch.", "torch.nn.functional.")
# Operations whose result keeps the operand's shape, dtype and gradient sources, whose derivative
# is a mask (0 or 1): a zero gradient stays zero; with the dtype categories they never raise on.
# (`nan_to_num`'s derivative is 1 where the value is finite, else 0; on a complex tensor that
# requires grad it raises.)
_KEEPING = {"relu": frozenset({"int", "float"}), "clone": ANY, "nan_to_num": frozenset({"bool", "int", "float"})}
_NO_GRAD_LIKE = frozenset({"zeros_like", "ones_like"})
_CASTS = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16"}
# Reductions to one element without arguments; "total" ones never raise (the others raise on an
# empty tensor, or on integers for `mean`/`norm`).
_TOTAL_REDUCTIONS = {"sum": None, "any": "bool", "all": "bool"}
_DTYPE_KEEPING = frozenset({"mean", "max", "min", "amax", "amin", "median"})
# Functions whose result has the real dtype of their operand: the operand's own, or for a complex one
# its real counterpart (token `real(D)`); `norm`, `std` and `var` raise on integers and booleans.
_REAL_VALUED = frozenset({"abs", "norm", "std", "var"})
_BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)
_PARTIAL_REDUCTIONS = frozenset({"mean", "max", "min", "amax", "amin", "median", "norm", "std", "var", "prod"})
# Elementwise predicates: a boolean tensor of the operand's shape, for any dtype.
_PREDICATES = frozenset({"isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit", "logical_not"})
_REAL_PREDICATES = frozenset({"isposinf", "isneginf", "signbit"})  # these raise on complex tensors
# Elementwise functions that keep the shape, for conditions only: their derivatives are unbounded
# or NaN at NaN, so in an arm the untaken side's zero gradient could become NaN.
_ELEMENTWISE = frozenset("abs exp log sqrt sigmoid tanh square sin cos".split())


@dataclass(frozen=True)
class Meta:
    """What is statically known of a tensor value: symbolic shape and dtype, and the tensors whose
    gradients flow into it."""

    shape: str
    dtype: str
    grads: frozenset[str]
    kinds: frozenset[str] = ANY  # the categories (`ANY`) the dtype may fall in at run time

    def known(self, dtype: str, grads: frozenset[str] | None = None) -> "Meta":
        """This shape with a concrete `dtype` (its one category) and `grads` (the same by default)."""
        return Meta(self.shape, dtype, self.grads if grads is None else grads, frozenset({_CATEGORY[dtype]}))


class Prover:
    """Metadata of pure expressions in one function, from the kinds the typer knows at the `if`."""

    def __init__(self, function: ast.AST, typer: Typer, at: ast.AST) -> None:
        self.function = function
        self.typer = typer
        # The top-level statements before the one holding `at`, and that one when it is a block
        # around `at` (a loop whose earlier iterations may rebind names).
        body = function.body if isinstance(getattr(function, "body", None), list) else []  # not a lambda
        index = next((i for i, s in enumerate(body) if s.lineno <= at.lineno <= s.end_lineno), None)
        self._before = body[:index] if index is not None else []
        holder = body[index] if index is not None else at
        self._container = [] if holder is at or not isinstance(holder, _BLOCKS) else [holder]
        self._scalar_names: dict[str, bool] = {}
        self._resolving: dict[str, Meta | None] = {}

    # -- expressions -------------------------------------------------------------------------------------

    def meta(self, expr: ast.expr, env: dict[str, Meta | str], mode: str = "arm") -> Meta | str:
        """The metadata of `expr`, or why it is not known. Names take their metadata from `env` (names
        assigned in the arm so far) or else from their value before the `if`. Mode "arm": operations
        that cannot raise and keep a zero gradient zero; "elif": that cannot raise; "if": any whose
        metadata is known (a condition evaluated exactly as the `if` evaluates it)."""
        if isinstance(expr, ast.Name) and expr.id in env:
            return env[expr.id]
        if isinstance(expr, (ast.Name, ast.Attribute)) and self._is_variable(expr):
            return self._base(expr)
        if isinstance(expr, ast.UnaryOp):
            return self._unary(expr, env, mode)
        if isinstance(expr, ast.BinOp):
            return self._binary(expr, env, mode)
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
            parts = [self._operand(e, env, mode) for e in (expr.left, expr.comparators[0])]
            ordered = not isinstance(expr.ops[0], (ast.Eq, ast.NotEq))
            if ordered and mode != "if" and any(_is_meta(p) and "complex" in p.kinds for p in parts):
                return f"`{_short(expr)}` raises on complex tensors"
            return self._broadcast(parts, "bool", frozenset(), expr, frozenset({"bool"}))
        if isinstance(expr, ast.Call):
            return self._call(expr, env, mode)
        return f"`{_short(expr)}` is not among the operations whose shape, dtype and gradient are known"

    def _is_variable(self, expr: ast.expr) -> bool:
        if isinstance(expr, ast.Attribute) and self.typer.self_attr(expr) is None:
            return False
        return self.typer.kind(expr).is_tensor

    def _base(self, expr: ast.Name | ast.Attribute) -> Meta:
        """The metadata of a variable's value before the `if`: that of its only assignment when the
        names this reads never change (so `y = x * 1` has the shape of `x`), else its own tokens."""
        if isinstance(expr, ast.Name):
            resolved = self._resolved(expr.id)
            if resolved is not None:
                return resolved
        name = ast.unparse(expr)
        shape = SCALAR if isinstance(expr, ast.Name) and self._is_scalar_name(expr.id) else f"shape({name})"
        if self.typer.kind(expr) is Kind.BOOL_TENSOR:
            return Meta(shape, "bool", frozenset(), frozenset({"bool"}))
        value = self._reaching_value(expr.id, stable=False) if isinstance(expr, ast.Name) else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and not value.args:
            cast = _CASTS.get(value.func.attr) if not self.typer.qualname(value.func) else None
            if cast is not None:  # `h = self.fc(x).float()`: the dtype is known, if not the shape
                return Meta(shape, cast, frozenset({name}), frozenset({"float"}))
        kinds = _FLOATING if value is not None and self.floating_call(value) else ANY
        return Meta(shape, f"dtype({name})", frozenset({name}), kinds)

    def floating_call(self, value: ast.expr) -> bool:
        """Whether `value` is a call whose result is a floating or complex tensor: a submodule whose
        parameters set its output's dtype (`nn.Module.to` takes floating and complex dtypes only, and
        parameters of other dtypes cannot require grad), or a torch function that turns integers
        and booleans into floats."""
        if not isinstance(value, ast.Call):
            return False
        func = value.func
        keeps = isinstance(func, ast.Attribute) and func.attr in _CATEGORY_KEEPING and not self.typer.qualname(func)
        if keeps or self.typer.keeps_dtype(value):
            return self.floating_call(func.value)  # `self.head(x).squeeze(-1)`
        owner = self.typer.self_attr(value.func)
        if owner is not None and self.typer.cls is not None:
            return self.typer.cls.attr_ctors.get(owner) in _FLOATING_MODULES
        name = (self.typer.qualname(value.func) or "").rpartition(".")[2]
        return (self.typer.qualname(value.func) or "").startswith(_MODULES) and name in _TO_FLOATING

    def _resolved(self, name: str) -> Meta | None:
        if name not in self._resolving:
            self._resolving[name] = None  # a name defined from itself stays unresolved
            value = self._reaching_value(name)
            if value is not None:
                meta = self.meta(value, {}, mode="if")
                self._resolving[name] = meta if _is_meta(meta) else None
        return self._resolving[name]

    def _reaching_value(self, name: str, stable: bool = True) -> ast.expr | None:
        """The value of the top-level `name = value` that reaches the `if` when nothing rebinds `name`
        (in a loop around the `if` either) or, when `stable`, a name `value` reads before the `if`
        (its tokens then mean the same there)."""
        for index in reversed(range(len(self._before))):
            statement = self._before[index]
            if name not in _bound(statement):
                continue
            if not (isinstance(statement, ast.Assign) and [ast.unparse(t) for t in statement.targets] == [name]):
                return None
            later = [*self._before[index + 1 :], *self._container]
            changed = set().union(*(_bound(s) for s in later)) if later else set()
            if name in changed or stable and _loads(statement.value) & changed:
                return None
            return statement.value
        return None

    def _is_scalar_name(self, name: str) -> bool:
        """Whether every binding of `name` in the function is `name = <one-element tensor>`."""
        if name not in self._scalar_names:
            self._scalar_names[name] = False  # a name defined from itself is not proven
            self._scalar_names[name] = self._bindings_are_scalar(name)
        return self._scalar_names[name]

    def _bindings_are_scalar(self, name: str) -> bool:
        values = []
        for node in ast.walk(self.function):
            if isinstance(node, ast.arg) and node.arg == name:
                return False
            if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
                values.append(node)
        assigned = [
            n.value
            for n in ast.walk(self.function)
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
            if n.targets[0].id == name
        ]
        if not values or len(assigned) != len(values):
            return False  # bound by a loop, `with`, unpacking or an augmented assignment too
        return all(_is_meta(m := self.meta(v, {}, mode="if")) and m.shape == SCALAR for v in assigned)

    def _operand(self, expr: ast.expr, env: dict[str, Meta | str], mode: str) -> Meta | str | float:
        """A finite number literal (`2`, `-0.5`) as itself, anything else as its metadata."""
        value = _literal(expr)
        return value if value is not None else self.meta(expr, env, mode)

    def _unary(self, expr: ast.UnaryOp, env: dict[str, Meta | str], mode: str) -> Meta | str:
        inner = self.meta(expr.operand, env, mode)
        if not _is_meta(inner):
            return inner
        if isinstance(expr.op, ast.Invert) and inner.dtype == "bool":
            return inner
        if isinstance(expr.op, ast.UAdd):
            return inner
        if isinstance(expr.op, ast.USub) and inner.dtype != "bool":
            return _raising_on(inner, frozenset({"bool"}), mode, expr)
        return f"`{_short(expr)}` on a {'boolean' if inner.dtype == 'bool' else 'numeric'} tensor"

    def _binary(self, expr: ast.BinOp, env: dict[str, Meta | str], mode: str) -> Meta | str:
        left, right = (self._operand(e, env, mode) for e in (expr.left, expr.right))
        for side in (left, right):
            if isinstance(side, str):
                return side
        op = type(expr.op)
        if not (_is_meta(left) and _is_meta(right)):
            return self._with_number(expr, left, right, op, mode)
        if op in (ast.Add, ast.Sub) and "bool" not in (left.dtype, right.dtype):
            dtype, kinds = _promote(left.dtype, right.dtype), left.kinds | right.kinds
            result = self._broadcast([left, right], dtype, left.grads | right.grads, expr, kinds)
            return _raising_on(result, frozenset({"bool"}), mode, expr) if op is ast.Sub else result
        if op in (ast.BitAnd, ast.BitOr) and left.dtype == right.dtype == "bool":
            return self._broadcast([left, right], "bool", frozenset(), expr, frozenset({"bool"}))
        if op is ast.Mult:
            return f"`{_short(expr)}` multiplies two tensors: the untaken arm's gradient may become NaN"
        return f"`{_short(expr)}` is not among the operations whose shape, dtype and gradient are known"

    @staticmethod
    def _with_number(expr: ast.BinOp, left: Meta | float, right: Meta | float, op: type, mode: str) -> Meta | str:
        """`t op c` or `c op t` with a finite literal `c`: the tensor's shape and gradient sources; its
        dtype, or the floating dtype an integer tensor becomes (Python numbers never widen a dtype)."""
        tensor_first = _is_meta(left)
        tensor, number = (left, right) if tensor_first else (right, left)
        if not _is_meta(tensor):
            return f"`{_short(expr)}` is arithmetic on numbers"
        if tensor.dtype == "bool" and op is ast.Sub:
            return f"`{_short(expr)}` raises on a boolean tensor"
        if op is ast.Sub:
            tensor = _raising_on(tensor, frozenset({"bool"}), mode, expr)
            if isinstance(tensor, str):
                return tensor
        if op is ast.Div and (not tensor_first or number == 0):
            return f"`{_short(expr)}` divides by a tensor or by zero"
        if op not in (ast.Add, ast.Sub, ast.Mult, ast.Div):
            return f"`{_short(expr)}` may raise or have an unbounded derivative"
        if op is ast.Div or isinstance(number, float):  # integers and booleans become the default float
            if tensor.kinds <= _FLOATING:  # a floating or complex dtype stays
                return tensor
            kinds = tensor.kinds - {"bool", "int"} | ({"float"} if tensor.kinds - {"complex"} else set())
            return Meta(tensor.shape, _floating(tensor.dtype), tensor.grads, frozenset(kinds))
        if "bool" in tensor.kinds:  # `b + 1`, `b * 2` of a boolean `b` is int64, of others their dtype
            dtype = "int64" if tensor.kinds == {"bool"} else _number(tensor.dtype)
            return Meta(tensor.shape, dtype, tensor.grads, tensor.kinds - {"bool"} | {"int"})
        return tensor

    @staticmethod
    def _broadcast(
        parts: list, dtype: str, grads: frozenset[str], expr: ast.expr, kinds: frozenset[str] = ANY
    ) -> Meta | str:
        """The result of an elementwise operation on `parts` (metadata or numbers): one shape, or one
        operand's shape when the others have one element (broadcasting that cannot raise)."""
        for part in parts:
            if isinstance(part, str):
                return part
        shapes = {p.shape for p in parts if isinstance(p, Meta)} - {SCALAR} or {SCALAR}
        if len(shapes) > 1:
            return f"the shapes in `{_short(expr)}` are not proven equal"
        return Meta(shapes.pop(), dtype, grads, kinds)

    def _call(self, expr: ast.Call, env: dict[str, Meta | str], mode: str) -> Meta | str:
        func = expr.func
        qualname = self.typer.qualname(func) or ""
        if isinstance(func, ast.Attribute) and not qualname and not expr.keywords:
            receiver, args, name = func.value, expr.args, func.attr
        elif qualname.startswith(_MODULES) and expr.args and not expr.keywords:
            receiver, args, name = expr.args[0], expr.args[1:], qualname.rpartition(".")[2]
        else:
            return f"`{_short(func)}()` is not among the operations whose shape, dtype and gradient are known"
        if name == "where" and qualname and len(args) == 2:
            parts = [self.meta(e, env, mode) for e in (receiver, *args)]
            if all(_is_meta(p) for p in parts) and parts[0].dtype == "bool":
                dtype, kinds = _promote(parts[1].dtype, parts[2].dtype), parts[1].kinds | parts[2].kinds
                return self._broadcast(parts, dtype, parts[1].grads | parts[2].grads, expr, kinds)
            return next((p for p in parts if isinstance(p, str)), f"`{_short(expr)}` has a condition not boolean")
        inner = self.meta(receiver, env, mode)
        if not _is_meta(inner) or args:
            return inner if not _is_meta(inner) else f"`{_short(expr)}` takes arguments whose effect is not known"
        if name in _KEEPING and inner.dtype != "bool":
            return _raising_on(inner, ANY - _KEEPING[name], mode, expr)
        if name in _NO_GRAD_LIKE or name == "detach":
            return Meta(inner.shape, inner.dtype, frozenset(), inner.kinds)
        if name in _CASTS and isinstance(func, ast.Attribute) and not qualname:
            return inner.known(_CASTS[name])
        if name in _PREDICATES and (mode == "if" or name not in _REAL_PREDICATES or "complex" not in inner.kinds):
            return inner.known("bool", frozenset())
        if name in _ELEMENTWISE and (mode == "if" or "bool" not in inner.kinds):  # `abs` of a boolean raises
            if mode == "arm":
                return f"`{_short(expr)}` may turn the untaken arm's zero gradient into NaN"
            if name in _REAL_VALUED:  # `abs`: raised on booleans, made complex values real
                return Meta(inner.shape, f"real({inner.dtype})", inner.grads, _real(inner.kinds - {"bool"}))
            kinds = _FLOATING if name in _TO_FLOATING else ANY
            return Meta(inner.shape, f"{name}({inner.dtype})", inner.grads, kinds)
        if name in _TOTAL_REDUCTIONS:
            if _TOTAL_REDUCTIONS[name]:
                return Meta(SCALAR, "bool", frozenset(), frozenset({"bool"}))
            kinds = inner.kinds - {"bool"} | ({"int"} if "bool" in inner.kinds else set())
            return Meta(SCALAR, f"sum({inner.dtype})", inner.grads, kinds)
        if name in _PARTIAL_REDUCTIONS:
            if mode != "if":
                return f"`{_short(expr)}` raises on some inputs (empty or integer tensors)"
            # These keep the dtype (`mean` raises on integers); `sum` of integers gives int64.
            if name in _DTYPE_KEEPING:
                return Meta(SCALAR, inner.dtype, inner.grads, inner.kinds)
            if name in _REAL_VALUED:
                return Meta(SCALAR, f"real({inner.dtype})", inner.grads, _real(inner.kinds - {"bool", "int"}))
            return Meta(SCALAR, f"{name}({inner.dtype})", inner.grads)
        return f"`{_short(func)}()` is not among the operations whose shape, dtype and gradient are known"

    # -- conditions --------------------------------------------------------------------------------------

    def condition(self, test: ast.expr, mode: str) -> str | None:
        """Why `test` is not proven a one-element tensor, or None; in mode "elif" it must not raise
        either (mode "if": a raise is the same as the `if`'s)."""
        parts = test.values if isinstance(test, ast.BoolOp) else [test]
        for part in parts:
            while isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not):
                part = part.operand
            if isinstance(part, ast.BoolOp):
                reason = self.condition(part, mode)
                if reason is not None:
                    return reason
                continue
            if isinstance(part, ast.Compare) and len(part.ops) > 1:
                return f"the chained comparison `{_short(part)}` is evaluated differently"
            meta = self.meta(part, {}, mode)
            if isinstance(meta, str):
                return meta
            if meta.shape != SCALAR:
                return f"the condition `{_short(part)}` is not proven to have one element"
        return None


def arms_differ(prover: Prover, bodies: list[list[ast.stmt]], outputs: tuple[str, ...]) -> str | None:
    """Why the final values of `outputs` after each branch body (pure assignments of names) are
    not proven to have equal metadata, or None when they are."""
    finals = []
    for body in bodies:
        env: dict[str, Meta | str] = {}
        for statement in body:
            env[statement.targets[0].id] = prover.meta(statement.value, env)
        finals.append(env)
    for name in outputs:
        metas = [final.get(name) or prover.meta(ast.Name(name, ast.Load()), {}) for final in finals]
        reason = next((m for m in metas if isinstance(m, str)), None)
        if reason is not None:
            return reason
        if len({m.shape for m in metas}) > 1:
            return f"the shapes of `{name}` in the branches are not proven equal"
        if len({m.dtype for m in metas}) > 1:
            return f"the dtypes of `{name}` in the branches are not proven equal"
        if len({m.grads for m in metas}) > 1:
            return f"the branches' values of `{name}` take gradients from different tensors"
    return None


def _raising_on(meta: Meta | str, categories: frozenset[str], mode: str, expr: ast.expr) -> Meta | str:
    """`meta` for an operation that raises on dtypes of `categories`: refused where it must not raise
    (an arm, an `elif`) if its operand may have one; in an `if` condition, which raises alike in both
    forms, the value goes on without them."""
    if isinstance(meta, str) or not meta.kinds & categories:
        return meta
    if mode != "if":
        return f"`{_short(expr)}` raises on {' or '.join(sorted(meta.kinds & categories))} tensors"
    # Without booleans a dtype is its `number()` (the token `b + 1` has), so the two compare equal.
    dtype = _number(meta.dtype) if "bool" in categories else meta.dtype
    return Meta(meta.shape, dtype, meta.grads, meta.kinds - categories)


def _real(kinds: frozenset[str]) -> frozenset[str]:
    """The categories of a real-valued function's result: complex ones become floating."""
    return kinds - {"complex"} | ({"float"} if "complex" in kinds else set())


def _number(dtype: str) -> str:
    """The dtype token of `t + 1` for `t` of `dtype`: int64 for a boolean `t`, else `dtype` itself."""
    return dtype if dtype.startswith("number(") else f"number({dtype})"


def _is_meta(value: object) -> bool:
    return isinstance(value, Meta)


def _bound(statement: ast.stmt) -> set[str]:
    """Names and `self.attr`s a statement (or a block, anywhere inside) binds."""
    stores = (n for n in ast.walk(statement) if isinstance(n, (ast.Name, ast.Attribute)))
    return {ast.unparse(n) for n in stores if not isinstance(n.ctx, ast.Load)}


def _loads(expr: ast.expr) -> set[str]:
    """The names and `self.attr` reads in `expr`."""
    return {
        ast.unparse(n)
        for n in ast.walk(expr)
        if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load)
    }


def _literal(expr: ast.expr) -> int | float | None:
    """The value of a finite int or float literal, possibly negated (booleans are not numbers here)."""
    sign = 1
    while isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        sign, expr = (-sign if isinstance(expr.op, ast.USub) else sign), expr.operand
    if isinstance(expr, ast.Constant) and type(expr.value) in (int, float) and math.isfinite(expr.value):
        return sign * expr.value
    return None


def _floating(dtype: str) -> str:
    """The dtype of an operation with a Python float: floating dtypes stay, integers become the default."""
    if dtype.startswith("float") or dtype in ("bfloat16",):
        return dtype
    return f"float({dtype})"


def _promote(a: str, b: str) -> str:
    return a if a == b else f"promote({min(a, b)}, {max(a, b)})"


def _short(node: ast.AST, limit: int = 40) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def where_unproven(node: ast.If, ctx: "Context", skip: int, outputs: tuple[str, ...]) -> str | None:
    """Why the `torch.where` rewrite of the `if` chain at `node` (see `branches.where_plan`) is not
    proven equal to it, or None when it is; `skip` leading operands of the test stay a Python `if`."""
    prover = Prover(ctx.node, branches.branch_typer(ctx), node)
    tests, bodies = branches.if_chain(node)
    for index, test in enumerate(tests):
        # An `elif` condition now always runs: it must not raise where the `if` skipped it.
        for part in test.values[skip:] if index == 0 and skip else [test]:
            reason = prover.condition(part, mode="elif" if index else "if")
            if reason is not None:
                return reason
    return arms_differ(prover, bodies, outputs)


def ternary_unproven(node: ast.IfExp, ctx: "Context") -> str | None:
    """Why `torch.where(c, a, b)` is not proven equal to `a if c else b`, or None when it is."""
    prover = Prover(ctx.node, branches.branch_typer(ctx), node)
    reason = prover.condition(node.test, mode="if")
    if reason is not None:
        return reason
    metas = [prover.meta(side, {}) for side in (node.body, node.orelse)]
    reason = next((m for m in metas if isinstance(m, str)), None)
    if reason is not None:
        return reason
    if metas[0] != metas[1]:
        what = "shapes" if metas[0].shape != metas[1].shape else "dtypes"
        what = what if metas[0].grads == metas[1].grads else "gradient sources"
        return f"the {what} of the two sides are not proven equal"
    return None


def carried_unproven(node: ast.While, ctx: "Context", carried: tuple[str, ...]) -> str | None:
    """Why the loop body is not proven to keep the metadata of the `carried` names (which
    `torch.while_loop` requires, raising otherwise), or None when it is."""
    return arms_differ(Prover(ctx.node, branches.branch_typer(ctx), node), [node.body, []], carried)
