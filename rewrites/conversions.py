"""TP3xx: tensor values converted to Python objects (`.item()`, `.tolist()`, `float(t)`, `math.*`, `str(t)`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from rewrites.base import TensorMethodRule, skip_under_compile
from transpiler.analysis.walker import Context, branch_under_compile
from transpiler.lint.rule import Fix
from transpiler.analysis.kinds import Kind
from transpiler.lint.rule import Finding, Rule

if TYPE_CHECKING:
    import libcst as cst

    from rewrites import where_proof

    from transpiler.lint.rule import Edit

# -- where a value goes: the dataflow the conversion fixes rest on ------------------------------

# What `step(node, parent, ctx, parents)` answers about one use of a value: True (fine), an
# expression (the use makes a new value of the same nature: follow that one) or False.
Step = Callable[[ast.expr, ast.AST | None, Context, dict[int, ast.AST]], "bool | ast.expr"]


def parent_map(root: ast.AST) -> dict[int, ast.AST]:
    """The parent of every node under `root`, by `id`."""
    return {id(child): node for node in ast.walk(root) for child in ast.iter_child_nodes(node)}


def flow_problem(node: ast.expr, ctx: Context, parents: dict[int, ast.AST], step: Step) -> str | None:
    """None when `step` accepts every use of the value of `node`, else why not (for the user).

    A value bound to a name (`s = <node>`) is followed to every use of the name, which must be
    its only binding in the function; a name bound from it (`t = s`) is followed in turn.
    """
    todo, seen = [node], set()
    while todo:
        current = todo.pop()
        parent = parents.get(id(current))
        if isinstance(parent, ast.Assign) and parent.value is current:
            uses = _uses_of_binding(parent, ctx.node)
            if isinstance(uses, str):
                return uses
            todo.extend(u for u in uses if id(u) not in seen)
            seen.update(id(u) for u in uses)
            continue
        verdict = step(current, parent, ctx, parents)
        if isinstance(verdict, ast.AST):
            todo.append(verdict)
        elif not verdict:
            if isinstance(parent, ast.Expr):
                return f"its value is never used (line {current.lineno})"
            if isinstance(parent, ast.Return):
                return f"its value is returned (line {current.lineno})"
            use = ast.unparse(parent) if isinstance(parent, (ast.expr, ast.AugAssign)) else ast.unparse(current)
            if isinstance(parent, (ast.If, ast.While, ast.Assert)) and parent.test is current:
                use = f"{type(parent).__name__.lower()} {use}"  # the test, not the whole block
            use = use if len(use) <= 50 else use[:47] + "..."
            return f"its value is used at line {current.lineno} in `{use}`, not only in tensor arithmetic"
    return None


def _uses_of_binding(assign: ast.Assign, function: ast.AST) -> list[ast.Name] | str:
    """The loads of the one name `assign` binds, or why they cannot be followed."""
    if len(assign.targets) != 1 or not isinstance(assign.targets[0], ast.Name):
        return "its value is unpacked or stored somewhere other than a local name"
    name = assign.targets[0].id
    stores, loads = 0, []
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == name:
            if isinstance(node.ctx, ast.Load):
                loads.append(node)
            else:
                stores += 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return f"`{name}` is declared `{type(node).__name__.lower()}`"
        elif isinstance(node, ast.arg) and node.arg == name:
            return f"`{name}` is also the name of a parameter"
    if stores != 1:
        return f"`{name}` is assigned more than once, so its uses cannot all be followed"
    return loads


# -- values only read by code that compiled runs skip --------------------------------------------


def skippable_statement(node: ast.expr, ctx: Context, parents: dict[int, ast.AST]) -> ast.Assign | str:
    """The statement `name = <... node ...>` when no code that compiled runs execute reads `name`:
    every read lies under `if not torch.compiler.is_compiling():` (as the side-effect fixes guard
    a print or a log), or there is none. That statement can be skipped the same way; else why not."""
    statement: ast.AST | None = node
    while statement is not None and not isinstance(statement, ast.stmt):
        statement = parents.get(id(statement))
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return "it is not assigned to a local name"
    uses = _uses_of_binding(statement, ctx.node)
    if isinstance(uses, str):
        return uses
    for use in uses:
        if not _skipped_under_compile(use, ctx, parents):
            return f"`{use.id}` is read at line {use.lineno}, in code that compiled runs execute"
    if not _effect_free(statement.value, ctx):
        return "the statement may do more than compute a value (a call that is not known to be free of effects)"
    return statement


def _skipped_under_compile(node: ast.AST, ctx: Context, parents: dict[int, ast.AST]) -> bool:
    child, parent = node, parents.get(id(node))
    while parent is not None:
        if isinstance(parent, ast.If):
            taken = branch_under_compile(parent.test, ctx.typer)
            if taken is not None and any(child is s for s in (parent.orelse if taken else parent.body)):
                return True
        child, parent = parent, parents.get(id(parent))
    return False


# Builtins that compute a value from their arguments alone (formatting, conversions).
_PURE_BUILTINS = frozenset(
    f"builtins.{f}" for f in "str repr format float int bool round abs len min max tuple list".split()
)
_MUTATING_METHODS = frozenset(
    "append extend insert update pop popitem remove clear add discard setdefault write".split()
)


def _effect_free(value: ast.expr, ctx: Context) -> bool:
    """Whether evaluating `value` does nothing but compute it (or raise): its calls are torch
    functions, pure builtins, or methods that do not mutate (no `x.add_()`, `list.append()`)."""
    for node in ast.walk(value):
        if isinstance(node, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.Lambda)):
            return False
        if isinstance(node, ast.Call):
            name = ctx.qualname(node.func)
            if name is not None:
                if not (name.startswith("torch.") and not name.endswith("_")) and name not in _PURE_BUILTINS:
                    return False
            elif not isinstance(node.func, ast.Attribute) or node.func.attr.endswith("_"):
                return False
            elif node.func.attr in _MUTATING_METHODS:
                return False
    return True


# Operators whose result with a 0-d tensor operand is a tensor computed as with a number: the
# 0-d tensor takes part in type promotion like a number of its category (`x_int % s` and
# `x // s` round toward -inf like Python's, `%` takes the divisor's sign like Python's).
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_COMPARISONS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
# `mask & flag`: with a tensor on the other side only (two Python bools follow as arithmetic).
_BITWISE = (ast.BitAnd, ast.BitOr, ast.BitXor)
# Arguments that take a 0-d tensor wherever they take a number: method -> positions and keywords.
_TENSOR_ARGUMENTS = {
    "add": {0, "other"},
    "sub": {0, "other"},
    "mul": {0, "other"},
    "div": {0, "other"},
    "true_divide": {0, "other"},
    "floor_divide": {0, "other"},
    "remainder": {0, "other"},
    "fmod": {0, "other"},
    "pow": {0, "exponent"},
    "clamp": {0, 1, "min", "max"},
    "clamp_min": {0, "min"},
    "clamp_max": {0, "max"},
    "masked_fill": {1, "value"},
    "eq": {0, "other"},
    "ne": {0, "other"},
    "lt": {0, "other"},
    "le": {0, "other"},
    "gt": {0, "other"},
    "ge": {0, "other"},
}
# In-place forms: a 0-d tensor is cast into the receiver's dtype as the number was (`fill_` too).
_TENSOR_ARGUMENTS.update({f"{m}_": slots for m, slots in _TENSOR_ARGUMENTS.items()} | {"fill_": {0, "value"}})
# `torch.<function>(tensor, ...)` spellings: the same slots, counted after the tensor.
_TORCH_FUNCTIONS = {
    f"torch.{m}": {(s + 1 if isinstance(s, int) else s) for s in slots}
    for m, slots in _TENSOR_ARGUMENTS.items()
    if not m.endswith("_") and m != "masked_fill"
}


def tensor_arithmetic_step(
    node: ast.expr, parent: ast.AST | None, ctx: Context, parents: dict[int, ast.AST]
) -> bool | ast.expr:
    """Accepts a number used as an operand of arithmetic or a comparison with a tensor, or as an
    argument of a tensor function or method that takes a 0-d tensor there; follows arithmetic
    and comparisons with other numbers, `abs()`, and unary minus."""
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, _ARITHMETIC + _BITWISE):
        other = ctx.kind(parent.right if parent.left is node else parent.left)
        if other.is_tensor:
            return True
        return parent if other in (Kind.SCALAR, Kind.DATA_SCALAR) and isinstance(parent.op, _ARITHMETIC) else False
    if isinstance(parent, ast.Compare) and len(parent.ops) == 1 and isinstance(parent.ops[0], _COMPARISONS):
        # `x > s` is a boolean tensor either way; `s > 0.5` is a bool that becomes a 0-d bool tensor.
        other = ctx.kind(parent.comparators[0] if parent.left is node else parent.left)
        if other.is_tensor:
            return True
        return parent if other in (Kind.SCALAR, Kind.DATA_SCALAR) else False
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, (ast.USub, ast.UAdd)):
        return parent
    if isinstance(parent, ast.AugAssign) and isinstance(parent.op, _ARITHMETIC + _BITWISE):
        return ctx.kind(_loaded(parent.target)).is_tensor  # `t -= s` of a tensor works in place either way
    keyword = None
    if isinstance(parent, ast.keyword):
        keyword, parent = parent.arg, parents.get(id(parent))
    if not isinstance(parent, ast.Call) or node is parent.func:
        return False
    func = parent.func
    name = ctx.qualname(func)
    if name == "builtins.abs" and len(parent.args) == 1:
        return parent
    if name == "torch.where" and len(parent.args) == 3 and keyword is None:
        # `where(c, s, t)` with a tensor `t`: a 0-d `s` promotes like a number beside it.
        if node in parent.args[1:]:
            return ctx.kind(parent.args[3 - parent.args.index(node)]).is_tensor
        return False
    slot = keyword if keyword is not None else next((i for i, a in enumerate(parent.args) if a is node), None)
    if name in _TORCH_FUNCTIONS:
        return slot in _TORCH_FUNCTIONS[name] and bool(parent.args) and ctx.kind(parent.args[0]).is_tensor
    if isinstance(func, ast.Attribute) and func.attr in _TENSOR_ARGUMENTS and name is None:
        return slot in _TENSOR_ARGUMENTS[func.attr] and ctx.kind(func.value).is_tensor
    return False


# -- when the 0-d tensor gives the number's bits: what makes a conversion fix safe ---------------

# Uses where a 0-d tensor of the other operand's dtype computes the same bits as the number read out
# of it: the number held that dtype's value exactly, a Python number and a 0-d tensor both yield to
# a tensor of their own category in type promotion (so the result dtype is the other operand's), and
# these kernels compute `a op b` alike for both. A Python number reaches them as a 0-d CPU tensor,
# which CUDA kernels read as a CPU scalar: `x / s` multiplies by `1 / s` there, `x / t` of a CUDA
# tensor divides. So a number that is a divisor (`/`, `//`, `%`, `div`) becomes a 0-d tensor on the
# CPU (`.detach().cpu()`, a no-op for CPU tensors), which takes the number's kernel; `s / x` is
# `x.reciprocal() * s` for a number, not a division. Not `**` (`x ** 0.5` of a number is `sqrt`),
# `clamp` (number and tensor bounds take other kernels, not proven alike), nor arithmetic among
# numbers (float64 there, the tensor's dtype after the fix).
_EXACT_OPERATORS = (ast.Add, ast.Sub, ast.Mult)
DIVISIONS = (ast.Div, ast.FloorDiv, ast.Mod)
_EXACT_METHODS = {m: (0, "other") for m in "add sub mul eq ne lt le gt ge add_ sub_ mul_ div div_".split()}
_EXACT_METHODS |= {"masked_fill": (1, "value"), "masked_fill_": (1, "value")}
_EXACT_FUNCTIONS = {f"torch.{m}" for m in "add sub mul eq ne lt le gt ge div".split()}
_FLOATING_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


def exact_problem(
    node: ast.expr, source: ast.expr, ctx: Context, parents: dict[int, ast.AST]
) -> tuple[str | None, bool]:
    """Why the detached 0-d tensor `source` standing for the number `node` is not proven to compute
    the same bits as the number at every use (or None), and whether it must be on the CPU (a
    divisor): each use must meet a tensor proven to have `source`'s dtype
    (`rewrites/where_proof.py`) in `+ - *`, as the divisor of `/ // %`, in a comparison,
    `torch.where`'s values, `masked_fill`'s value or their methods (not `-s`: `-True` is the int
    -1, `-` of a bool tensor raises); a number bound to a name is used in later statements, so
    `source` must then read only names with one value in the function (it means the same where the
    number is used)."""
    # Bound to a name, the number is used in later statements, where the names `source` reads must
    # still hold the values they held; used in its own statement, it meets them at the same point.
    statement = node
    while statement is not None and not isinstance(statement, ast.stmt):
        statement = parents.get(id(statement))
    bound = isinstance(parents.get(id(node)), ast.Assign)
    if bound or any(isinstance(n, ast.NamedExpr) for n in ast.walk(statement or node)):
        changing = _changing_read(source, ctx.node)
        if changing:
            return f"`{changing}` is bound more than once or inside a block, so its dtype there is not known", False
    divisor = []

    def step(current: ast.expr, parent: ast.AST | None, ctx: Context, parents: dict[int, ast.AST]) -> bool | ast.expr:
        other, divides = _exact_partner(current, parent, ctx, parents)
        divisor.append(divides)
        wanted = proven_dtype(source, ctx, parent)
        if other is None or wanted is None:
            return False
        # `abs`, `norm`, `std` keep a dtype, but for complex ones: their real counterpart, whose
        # values they hold exactly and which yields to them in promotion as a number of that
        # category would.
        of_real = wanted[len("real(") : -1] if wanted.startswith("real(") else wanted
        return proven_dtype(other, ctx, parent) in (wanted, of_real)

    problem = flow_problem(node, ctx, parents, step)
    if problem:
        what = "`+`, `-`, `*`, as a divisor, in a comparison, `where` or `masked_fill`"
        return (
            problem.replace("not only in tensor arithmetic", f"not only beside a tensor of its dtype in {what}"),
            False,
        )
    return None, any(divisor)


def count_beside_tensor(
    node: ast.expr, parent: ast.AST | None, ctx: Context, parents: dict[int, ast.AST], divisor: list[bool]
) -> bool:
    """A use of an exact count (a Python int, or the int64 0-d tensor standing for it) as an operand of
    `+ - *`, the divisor of `/ // %` or a comparison whose other operand is a tensor where the int64 0-d
    tensor computes what the int did; `divisor` notes the divisions."""
    divides = isinstance(parent, ast.BinOp) and isinstance(parent.op, DIVISIONS) and parent.right is node
    direct = divides or isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Add, ast.Sub, ast.Mult))
    direct = direct or isinstance(parent, ast.Compare) and len(parent.ops) == 1
    divisor.append(divides)
    if not (direct and tensor_arithmetic_step(node, parent, ctx, parents) is True):
        return False
    # The int64 count yields to the tensor's dtype as the int did, but for a 0-d tensor of a narrower
    # integer dtype (a uint8 0-d tensor times an int stays uint8, times an int64 0-d tensor is int64):
    # the tensor must be proven int64, boolean, floating or complex.
    other = _operand_beside(node, parent)
    meta = proven_meta(other, ctx, parent)
    if meta is not None:
        return meta.dtype == "int64" or "int" not in meta.kinds
    return proven_floating(other, ctx, parent)


def _operand_beside(node: ast.expr, parent: ast.BinOp | ast.Compare) -> ast.expr:
    """The other operand of the binary operation or single comparison `parent` of `node`."""
    if isinstance(parent, ast.BinOp):
        return parent.right if parent.left is node else parent.left
    return parent.comparators[0] if parent.left is node else parent.left


def proven_dtype(expr: ast.expr, ctx: Context, at: ast.AST) -> str | None:
    """The symbolic dtype of the tensor `expr` as the branch prover knows it at `at` (`dtype(x)`,
    `float32`, ...), or None when it is not known."""
    meta = proven_meta(expr, ctx, at)
    return meta.dtype if meta is not None else None


def proven_floating(expr: ast.expr, ctx: Context, at: ast.AST) -> bool:
    """Whether the tensor `expr` is proven floating or complex at `at` (its metadata, or a call whose result
    is: a floating submodule, a loss that raises on integers, through views and reductions)."""
    from rewrites import branches, where_proof

    meta = proven_meta(expr, ctx, at)
    if meta is not None:
        return meta.kinds <= frozenset({"float", "complex"})
    return where_proof.Prover(ctx.node, branches.branch_typer(ctx), at).floating_call(expr)


def proven_meta(expr: ast.expr, ctx: Context, at: ast.AST) -> "where_proof.Meta | None":
    """What the branch prover knows of the tensor `expr` at `at` (shape, dtype, dtype categories)."""
    from rewrites import branches, where_proof  # where_proof imports the branch helpers

    meta = where_proof.Prover(ctx.node, branches.branch_typer(ctx), at).meta(expr, {}, mode="if")
    return meta if isinstance(meta, where_proof.Meta) else None


def _exact_partner(
    node: ast.expr, parent: ast.AST | None, ctx: Context, parents: dict[int, ast.AST]
) -> tuple[ast.expr | None, bool]:
    """The tensor operand that the number `node` meets in an exact use (see `_EXACT_OPERATORS`), and
    whether the number is its divisor there."""
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, _EXACT_OPERATORS):
        return (parent.right if parent.left is node else parent.left), False
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, DIVISIONS) and parent.right is node:
        return parent.left, True
    if isinstance(parent, ast.Compare) and len(parent.ops) == 1 and isinstance(parent.ops[0], _COMPARISONS):
        return (parent.comparators[0] if parent.left is node else parent.left), False
    if isinstance(parent, ast.AugAssign) and isinstance(parent.op, _EXACT_OPERATORS + DIVISIONS):
        target = _loaded(parent.target) if isinstance(parent.target, ast.Name) else None
        return target, isinstance(parent.op, DIVISIONS)
    keyword = None
    if isinstance(parent, ast.keyword):
        keyword, parent = parent.arg, parents.get(id(parent))
    if not isinstance(parent, ast.Call) or node is parent.func or any(isinstance(a, ast.Starred) for a in parent.args):
        return None, False
    name = ctx.qualname(parent.func)
    arguments = len(parent.args) + len(parent.keywords)
    slot = keyword if keyword is not None else next((i for i, a in enumerate(parent.args) if a is node), None)
    if name == "torch.where" and arguments == 3 and slot in (1, 2) and keyword is None:
        return parent.args[3 - slot], False
    if name in _EXACT_FUNCTIONS and arguments == 2 and slot in (1, "other") and parent.args:
        return parent.args[0], name == "torch.div"
    method = parent.func.attr if isinstance(parent.func, ast.Attribute) and name is None else None
    if method in _EXACT_METHODS and slot in _EXACT_METHODS[method] and arguments == _EXACT_METHODS[method][0] + 1:
        return parent.func.value, method in ("div", "div_")
    return None, False


def _loaded(target: ast.expr) -> ast.expr:
    """The read of the name an augmented assignment stores to (`t` of `t -= s`), for typing it."""
    if not isinstance(target, ast.Name):
        return target
    return ast.copy_location(ast.Name(target.id, ast.Load()), target)


def _changing_read(expr: ast.expr, function: ast.AST) -> str | None:
    """A name (or `self.name`) `expr` reads that may hold different values in the function: one
    bound more than once, or anywhere but as a parameter or the target of a top-level `=`."""
    top_level = {id(target) for s in getattr(function, "body", []) if isinstance(s, ast.Assign) for target in s.targets}
    callees = {id(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}
    for read in ast.walk(expr):
        self_attribute = isinstance(read, ast.Attribute) and isinstance(read.value, ast.Name)
        self_attribute = self_attribute and read.value.id == "self" and id(read) not in callees
        if not (isinstance(read, ast.Name) or self_attribute) or not isinstance(read.ctx, ast.Load):
            continue
        text = ast.unparse(read)
        bindings = [
            n
            for n in ast.walk(function)
            if isinstance(n, ast.arg)
            and n.arg == text
            or isinstance(n, (ast.Name, ast.Attribute))
            and not isinstance(n.ctx, ast.Load)
            and ast.unparse(n) == text
            or isinstance(n, (ast.Global, ast.Nonlocal))
            and text in n.names
        ]
        if len(bindings) != 1 or not (isinstance(bindings[0], ast.arg) or id(bindings[0]) in top_level):
            return text
    return None


# Reductions that give a 0-d tensor when called without a `dim`.
_FULL_REDUCTIONS = frozenset(
    "sum mean max min amax amin prod norm median nansum nanmean std var all any count_nonzero".split()
)


# Methods without arguments whose result has the receiver's shape.
_SHAPE_KEEPING = frozenset("long int float double half bfloat16 bool detach abs".split())


def is_zero_dim(node: ast.expr, ctx: Context) -> bool:
    """`x.sum()`, `torch.mean(x)`, ...: a reduction over every dimension (`.long()`, `.detach()`... of one)."""
    if not isinstance(node, ast.Call) or any(k.arg != "dtype" for k in node.keywords):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _SHAPE_KEEPING and not node.args and not node.keywords:
        return ctx.qualname(func) is None and is_zero_dim(func.value, ctx)
    name = ctx.qualname(func)
    if name is not None:
        return name.startswith("torch.") and name[6:] in _FULL_REDUCTIONS and len(node.args) == 1
    return isinstance(func, ast.Attribute) and func.attr in _FULL_REDUCTIONS and not node.args


# -- building the replacements (libcst, imported only when fixing) ------------------------------


def method_call(value: "cst.BaseExpression", method: str, *args: "cst.Arg") -> "cst.Call":
    """`value.method(args)`, with `value` parenthesised when it is not an atom."""
    import libcst as cst

    return cst.Call(func=cst.Attribute(value=atom(value), attr=cst.Name(method)), args=list(args))


def atom(value: "cst.BaseExpression") -> "cst.BaseExpression":
    """`value`, in parentheses unless it binds tighter than any operator already."""
    import libcst as cst

    if value.lpar or isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float)):
        return value
    return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def keyword_arg(name: str, value: "cst.BaseExpression") -> "cst.Arg":
    import libcst as cst

    no_space = cst.SimpleWhitespace("")
    return cst.Arg(value=value, keyword=cst.Name(name), equal=cst.AssignEqual(no_space, no_space))


def with_parens_of(original: "cst.BaseExpression", new: "cst.BaseExpression") -> "cst.BaseExpression":
    """`new` keeps the parentheses written around `original`."""
    return new.with_changes(lpar=original.lpar, rpar=original.rpar)


class DecidedAfterWalk(Rule):
    """A rule whose fix depends on every use of a value, later statements included, typed as
    they were when visited: `plan` only notes the node and `check_function` calls `decide`
    after the walk. A value only read by code that compiled runs skip gets the statement
    that computes it skipped too (`skippable_statement`), by the side-effects policy."""

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        self.__dict__.setdefault("_pending", {})[_span(node)] = node
        return {}

    def check_function(self, findings: list[Finding], ctx: Context) -> None:
        pending = self.__dict__.pop("_pending", {})
        if not pending:
            return
        parents = parent_map(ctx.node)
        for index, finding in enumerate(findings):
            node = pending.get((finding.line, finding.col, finding.end_line, finding.end_col))
            if finding.code == self.code and node is not None:
                decided = self.decide(node, ctx, parents)
                findings[index] = replace(finding, fix=decided.get("fix"), no_fix=decided.get("no_fix"))

    def decide(self, node: ast.expr, ctx: Context, parents: dict[int, ast.AST]) -> dict:
        raise NotImplementedError

    def skip_with_readers(self, node: ast.expr, ctx: Context, parents: dict[int, ast.AST], problem: str) -> dict:
        """The fix that skips the statement computing `node` under compile, or `problem`."""
        statement = skippable_statement(node, ctx, parents)
        if isinstance(statement, str):
            return {"no_fix": problem}
        title = "skip the statement under compile, as the code that reads it is"
        return self.make_fix(title, "SimpleStatementLine", statement, safety="safe", data=("skip",))

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        return skip_under_compile(node, edit)


class ScalarConversionRule(DecidedAfterWalk):
    """A tensor read into a Python number. Where the number only flows back into tensor
    arithmetic, the fix keeps it a detached 0-d tensor (`tensor_form`), and a
    `max(number, eps)`/`min(number, eps)` around it becomes `.clamp(min=eps)`/`.clamp(max=eps)`.
    """

    fix_safety = "safe or unsafe"
    _CLAMP: ClassVar[dict[str, str]] = {"builtins.max": "min", "builtins.min": "max"}

    def decide(self, node: ast.Call, ctx: Context, parents: dict[int, ast.AST]) -> dict:
        why_not = self.converts(node, ctx)
        if why_not:
            return {"no_fix": why_not}
        target, clamp = node, ""
        wrapper = parents.get(id(node))
        if isinstance(wrapper, ast.Call) and ctx.qualname(wrapper.func) in self._CLAMP:
            if len(wrapper.args) == 2 and not wrapper.keywords and ctx.kind(_other(wrapper.args, node)) is Kind.SCALAR:
                target, clamp = wrapper, self._CLAMP[ctx.qualname(wrapper.func)]
        problem = flow_problem(target, ctx, parents, tensor_arithmetic_step)
        if problem:
            return self.skip_with_readers(node, ctx, parents, problem)
        form = self.form(node, ctx)
        title = f"keep the value a tensor: {self.title(form)}" + (f", and `{clamp}=` of `.clamp()`" if clamp else "")
        reshape = not is_zero_dim(self.source(node), ctx)
        if clamp and not reshape and _is_count(self.source(node), ctx):
            unproven, on_cpu = _clamped_count_problem(target, _other(target.args, node), ctx, parents)
        elif clamp or reshape:
            unproven, on_cpu = "it is clamped or reshaped", False
        else:
            unproven, on_cpu = self.unproven(node, ctx, parents, form)
        data = (reshape, clamp, target.args.index(node) if clamp else 0, form, on_cpu)
        if unproven is None:
            title += ", on the CPU as the number was (a divisor)" if on_cpu else ""
            return self.make_fix(title + " (proven exact)", "Call", target, safety="safe", data=data)
        return self.make_fix(f"{title} (not proven exact: {unproven})", "Call", target, safety="unsafe", data=data)

    def unproven(self, node: ast.Call, ctx: Context, parents: dict[int, ast.AST], form: str) -> tuple[str | None, bool]:
        """Why the tensor form is not proven to compute the number's bits at every use (or None), and
        whether it must stay on the CPU (see `exact_problem`)."""
        return exact_problem(node, self.source(node), ctx, parents)

    def form(self, node: ast.Call, ctx: Context) -> str:
        """What `tensor_form` needs to know about the call (the function converting)."""
        return ""

    def title(self, form: str) -> str:
        return "`.item()` becomes `.detach()`"

    def converts(self, node: ast.Call, ctx: Context) -> str | None:
        """Why this conversion has no tensor form, or None."""
        return None if ctx.kind(self.source(node)).is_tensor else "the converted value is not known to be a tensor"

    def source(self, node: ast.Call) -> ast.expr:
        """The tensor the call converts."""
        return node.args[0]

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        if fix.data == ("skip",):
            return super().apply_fix(node, fix, edit)
        reshape, clamp, index, form, on_cpu = fix.data
        call = node.args[index].value if clamp else node
        # Detached: the number carried no gradient either.
        tensor = method_call(self.cst_source(call), "detach")
        if on_cpu:  # a CUDA kernel reads a 0-d CPU tensor as it read the number: a CPU scalar
            tensor = method_call(tensor, "cpu")
        if reshape:  # the number came from any one-element tensor; a 0-d one promotes like it did
            tensor = method_call(tensor, "reshape", cst.Arg(cst.Tuple([])))
        tensor = self.tensor_form(form, tensor, edit)
        if clamp:
            bound = node.args[1 - index].value
            if fix.safety == "safe" and isinstance(bound, cst.Float):  # proven for the integer it holds
                bound = cst.Integer(str(int(float(bound.value))))
            tensor = method_call(tensor, "clamp", keyword_arg(clamp, bound))
        return with_parens_of(node, tensor)

    def cst_source(self, call: "cst.Call") -> "cst.BaseExpression":
        return call.args[0].value

    def tensor_form(self, form: str, tensor: "cst.BaseExpression", edit: "Edit") -> "cst.BaseExpression":
        """The detached 0-d `tensor` turned into what stands for the converted number."""
        return tensor


def _is_count(source: ast.expr, ctx: Context) -> bool:
    """`b.sum()`, `torch.sum(b)` or `b.count_nonzero()` of a boolean tensor `b`: an int64 count, exact."""
    if not isinstance(source, ast.Call) or source.keywords:
        return False
    func = source.func
    if ctx.qualname(func) == "torch.sum" and len(source.args) == 1:
        return ctx.kind(source.args[0]) is Kind.BOOL_TENSOR
    return (
        isinstance(func, ast.Attribute)
        and func.attr in ("sum", "count_nonzero")
        and not source.args
        and ctx.qualname(func) is None
        and ctx.kind(func.value) is Kind.BOOL_TENSOR
    )


def _clamped_count_problem(
    target: ast.Call, bound: ast.expr, ctx: Context, parents: dict[int, ast.AST]
) -> tuple[str | None, bool]:
    """Why `max(count, k)` / `min(count, k)` as `count.clamp(min=k)` (an int64 0-d tensor, `k` written as an
    int) is not proven to compute what the Python number did (or None), and whether it must stay on the CPU.

    The count is an exact integer and `k` an integer-valued literal, so the clamp holds the same integer as
    `max`/`min` did; it may have been the float `k` (`max(0, 1.0)` is `1.0`), which meets a floating or
    complex tensor as the integer does, and an integer or boolean one otherwise: then `k` must be an int."""
    value = bound.value if isinstance(bound, ast.Constant) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        return "its bound is not an integer literal", False
    divisor: list[bool] = []

    def step(node: ast.expr, parent: ast.AST | None, ctx: Context, parents: dict[int, ast.AST]) -> bool:
        if not count_beside_tensor(node, parent, ctx, parents, divisor):
            return False
        return isinstance(value, int) or proven_floating(_operand_beside(node, parent), ctx, parent)

    problem = flow_problem(target, ctx, parents, step)
    if problem:
        return problem.replace("not only in tensor arithmetic", "not only beside a tensor it meets exactly"), False
    return None, any(divisor)


def _span(node: ast.AST) -> tuple[int, int, int, int]:
    return node.lineno, node.col_offset, node.end_lineno, node.end_col_offset


def _other(pair: list[ast.expr], node: ast.expr) -> ast.expr:
    return pair[1] if pair[0] is node else pair[0]


class TensorItemCall(ScalarConversionRule, TensorMethodRule):
    """## What it does
    Checks for `.item()` on tensors in compiled code.

    ## Why is this bad?
    `.item()` copies a value out of the tensor into Python. With default
    settings Dynamo cannot trace that (GB0124): it breaks the graph and, on a
    GPU, waits for the device.

    ## Fix safety
    When every use of the number is tensor arithmetic, `t.item()` becomes
    `t.detach()`. Tensor arithmetic is: `+ - * / // % **` or a comparison with
    a tensor (`x > s` is a boolean tensor either way); the number argument of a
    tensor function or method that takes a 0-d tensor there (`torch.where`'s
    values, `clamp`'s and `torch.clamp`'s `min`/`max`, `masked_fill`'s value,
    `add`/`sub`/`mul`/`div`/`pow`/`remainder`/`eq`/`gt`/... and their `torch.`
    and in-place forms, `fill_`); and, followed in turn, arithmetic or a
    comparison with other numbers, `abs()`, unary minus, and local names bound
    once. A 0-d tensor promotes like the number did (`x * s` keeps the dtype of
    a floating `x`; a bool `s > 0.5` times `x` is `x` or zeros either way), and
    the `detach` keeps gradients from flowing through it, as they did not
    through the number. A receiver that is not a
    full reduction (`x.sum()`, `x.max()`, ...) gets `.reshape(())` so that a
    `(1,)`-shaped tensor neither broadcasts nor promotes. `max(t.item(), eps)`
    becomes `t.detach().clamp(min=eps)` (`min` → `clamp(max=)`).

    Safe (applied by default) when proven exact: the receiver is a full
    reduction (no `reshape`, no clamp) and every use of the number meets a
    tensor proven to have the receiver's dtype (`rewrites/where_proof.py`:
    `x - x.mean().item()`, `x > x.amax().item()`, `torch.where(m,
    x.amax().item(), x)`, `x.masked_fill(m, x.min().item())`, `h.sub_(...)`,
    `h -= h.max().item()`, `x / x.abs().max().item()`) in `+`, `-`, `*`, as
    the divisor of `/`, `//`, `%`, in a comparison, `torch.where`'s values,
    `masked_fill`'s value, or the methods and `torch.` functions of these.
    The number held that dtype's value exactly (`abs`, `norm`, `std`, `var`
    of a complex tensor: its real dtype, held exactly too) and both a number and a 0-d tensor
    yield to the other tensor's dtype in type promotion, so the values,
    dtypes, shapes, gradients and errors are those of the number, bit for
    bit on CPU and CUDA (`tests/test_fix_safe_proof.py`, every dtype from
    bool to complex, NaN, inf, -0.0, empty and 0-d inputs). A Python number
    reaches a CUDA kernel as a 0-d CPU tensor, which CUDA reads as a CPU
    scalar (dividing by multiplying with its reciprocal), so a divisor
    becomes `t.detach().cpu()` (a no-op on the CPU; on a GPU the same copy
    `.item()` made). Not `s / x` (`x.reciprocal() * s` for a number), `**`
    (`x ** 0.5` of a number is `sqrt`), `clamp`, `-s` (`-True` is -1), nor
    arithmetic among numbers. A number bound to a name and used in
    later statements needs the receiver to read names with one value in the
    function (a parameter, or one top-level assignment). A clamped count,
    `max(mask.sum().item(), 1.0)` of a boolean `mask` with an integer-valued
    bound, is safe too: it becomes `mask.sum().detach().clamp(min=1)` (the
    bound written as an int), met as the counts of TP402 are, and with a
    float bound only beside tensors proven floating or complex.
    Otherwise the fix is unsafe (the title says what is not proven): arithmetic among numbers (`s + eps`) now happens in the
    tensor's dtype instead of float64; an integer tensor times a floating
    `.item()` takes the 0-d tensor's floating dtype instead of the default one;
    `max(eps, nan)` was `eps` and the clamp gives NaN; a tensor with more than
    one element fails in `reshape` instead of in `.item()`; an integer beside a
    floating `.item()` is compared in the 0-d tensor's dtype (float16 rounds
    2049 to 2048); integer arithmetic wraps at int64 where Python's does not,
    and raises on a negative power where Python gives a float; division by zero
    gives inf or NaN where Python raised.
    A number (or a string made from it) bound to a local name that only code
    compiled runs skip reads (a `print` or log the side-effect fixes guarded
    with `if not torch.compiler.is_compiling():`, TP101/TP102) gets its
    statement skipped the same way: safe, eager runs are unchanged, and with
    `--side-effects remove` it goes with the prints. The value must be
    computed by torch functions, pure builtins and methods that do not mutate.
    No fix when the number is used any other way (returned, stored, tested by
    `if`/`while`/`and`/`not`, inverted with `~`, in a chained comparison,
    formatted, as a size or index, passed to other code such as
    `torch.full_like`, which reads it as a Python number), when the name it is
    bound to is assigned more than once, or when the receiver is not known to
    be a tensor.
    """

    code = "TP301"
    name = "tensor-item-call"
    summary = "`.item()` on a tensor"
    message = "`.item()` reads a tensor value into Python and breaks the graph; keep the value a tensor"
    dynamo_codes = ("GB0124",)
    methods = frozenset({"item"})
    unknown_receivers = True

    def converts(self, node: ast.Call, ctx: Context) -> str | None:
        if node.args or node.keywords:
            return "`.item()` is called with arguments, so it is not `Tensor.item`"
        if not ctx.kind(self.source(node)).is_tensor:
            return "the receiver of `.item()` is not known to be a tensor"
        return None

    def source(self, node: ast.Call) -> ast.expr:
        return node.func.value

    def cst_source(self, call: "cst.Call") -> "cst.BaseExpression":
        return call.func.value

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                scale = y.abs().max().item()
                return y / scale
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                scale = y.abs().max().detach()
                return y / scale
        """]


class TensorTolistCall(TensorMethodRule):
    """## What it does
    Checks for `.tolist()` on tensors in compiled code.

    ## Why is this bad?
    `.tolist()` copies every element into Python objects: a data-dependent
    operator (GB0033), and for floating-point tensors an error even with
    `fullgraph=True` (GB0109).

    ## Fix safety
    No automatic fix: keep the values in a tensor.
    """

    code = "TP302"
    name = "tensor-tolist-call"
    summary = "`.tolist()` on a tensor"
    message = "`.tolist()` copies tensor values into Python and breaks the graph; keep them in a tensor"
    dynamo_codes = ("GB0033", "GB0109")
    methods = frozenset({"tolist"})
    unknown_receivers = True
    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                values = y.tolist()
                return y * len(values)
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * y.numel()
        """]


class TensorToPythonScalar(ScalarConversionRule):
    """## What it does
    Checks for `float(t)`, `int(t)`, `bool(t)` and `complex(t)` on tensors.

    ## Why is this bad?
    The conversion calls `.item()` under the hood: the graph breaks (GB0124)
    and, on a GPU, the host waits for the device.

    ## Fix safety
    When every use of the number is tensor arithmetic (as for `.item()`,
    TP301), the number stays a detached 0-d tensor: `float(t)` becomes
    `t.detach().mul(1.0)` (a floating tensor is unchanged, bit for bit; an
    integer or bool one becomes the default floating dtype, as `x_int *
    float(n)` would), and `int(t)` becomes `t.detach().long()` (truncating
    toward zero like `int`). A `t` that is not a full reduction gets
    `.reshape(())` first; `max(float(t), eps)` becomes a clamp. `float(t)` of
    a tensor proven floating (`h = x.double()`, `float(h.mean())`) used as a
    proven `.item()` is (TP301) is safe, applied by default: `mul(1.0)` keeps
    a floating tensor bit for bit. Otherwise the fix is
    unsafe: `float()` of an integer tensor rounds in float64, of a complex one
    raises; arithmetic among numbers happens in the tensor's dtype instead of
    float64 or Python ints; `int()` of NaN, infinity or a value beyond int64
    raised and `.long()` does not; a float64 `float(t)` beside an integer tensor
    gives float64 instead of the default dtype.
    `bool()` and `complex()` are not rewritten (a truth test belongs to
    control flow, TP2xx), nor are numbers used any other way (see TP301).
    A number only read by code skipped under compile has its statement
    skipped too (safe, as for TP301).
    """

    # float(t): `* 1.0` promotes integers to the default float dtype and leaves floats untouched.
    _FORMS: ClassVar[dict[str, tuple[str, str | None]]] = {"float": ("mul", "1.0"), "int": ("long", None)}

    code = "TP303"
    name = "tensor-to-python-scalar"
    summary = "`float()`/`int()`/`bool()` of a tensor"
    message = "`{callee}()` of a tensor reads its value into Python and breaks the graph; keep it a tensor"
    dynamo_codes = ("GB0124",)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        if name in ("builtins.float", "builtins.int", "builtins.bool", "builtins.complex") and len(node.args) == 1:
            if ctx.kind(node.args[0]).is_tensor:
                self.report(ctx, node, callee=name[9:])

    def converts(self, node: ast.Call, ctx: Context) -> str | None:
        if self.form(node, ctx) not in self._FORMS:
            return f"`{self.form(node, ctx)}()` has no tensor form that keeps its meaning"
        return None

    def form(self, node: ast.Call, ctx: Context) -> str:
        return (ctx.qualname(node.func) or "").removeprefix("builtins.")

    def unproven(self, node: ast.Call, ctx: Context, parents: dict[int, ast.AST], form: str) -> tuple[str | None, bool]:
        if form != "float":
            return "`int()` truncates in Python and raises on NaN, `.long()` does not", False
        if proven_dtype(node.args[0], ctx, node) not in _FLOATING_DTYPES:
            why = "the tensor is not proven floating (`float()` of an integer rounds to float64, of complex raises)"
            return why, False
        return super().unproven(node, ctx, parents, form)

    def title(self, form: str) -> str:
        method, argument = self._FORMS[form]
        return f"`{form}(t)` becomes `t.detach().{method}({argument or ''})`"

    def tensor_form(self, form: str, tensor: "cst.BaseExpression", edit: "Edit") -> "cst.BaseExpression":
        import libcst as cst

        method, argument = self._FORMS[form]
        return method_call(tensor, method, *([cst.Arg(cst.Float(argument))] if argument else []))

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                total = float(y.sum())
                return y / total
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                total = y.sum()
                return y / total
        """]


class MathFunctionOnTensor(ScalarConversionRule):
    """## What it does
    Checks for functions of Python's `math` module applied to tensors.

    ## Why is this bad?
    `math.sqrt(t)` converts the tensor to a Python float first: a
    data-dependent operator (GB0033) and a graph break.

    ## Fix safety
    For one-argument functions with a `torch` twin (`sqrt`, `exp`, `log`,
    `sin`, `tanh`, `erf`, ...) whose result only flows into tensor arithmetic
    (as for `.item()`, TP301), `math.sqrt(t)` becomes `torch.sqrt(t.detach())`
    (`.reshape(())` added when `t` is not a full reduction). Unsafe: `math`
    computes in float64 and the tensor function in the tensor's dtype (integers
    go to the default float dtype, as Python's float beside a tensor would), so
    rounding differs; `math` raised on a domain error (`sqrt(-1)`, `log(0)`)
    where torch gives NaN or -inf. Functions that return ints or bools
    (`floor`, `ceil`, `isnan`, ...) or take several arguments (`pow`, `log(t,
    base)`, `atan2`) are not rewritten.
    """

    code = "TP304"
    name = "math-function-on-tensor"
    summary = "`math` function applied to a tensor"
    message = "`{callee}()` of a tensor converts it to a Python float and breaks the graph; use the `torch` function"
    dynamo_codes = ("GB0033",)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func) or ""
        if name.startswith("math.") and any(ctx.kind(a).is_tensor for a in node.args):
            self.report(ctx, node, callee=name)

    # math functions of one float whose torch function of the same name computes the same thing.
    _TWINS = frozenset(
        "sqrt exp expm1 log log2 log10 log1p sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh "
        "erf erfc lgamma".split()
    )

    def converts(self, node: ast.Call, ctx: Context) -> str | None:
        function = self.form(node, ctx)
        if function not in self._TWINS or len(node.args) != 1 or node.keywords:
            return f"`math.{function}` with these arguments has no torch function with the same meaning"
        return super().converts(node, ctx)

    def form(self, node: ast.Call, ctx: Context) -> str:
        return (ctx.qualname(node.func) or "").removeprefix("math.")

    def unproven(self, node: ast.Call, ctx: Context, parents: dict[int, ast.AST], form: str) -> tuple[str, bool]:
        return "`math` computes in float64 and raises on a domain error, torch in the tensor's dtype", False

    def title(self, form: str) -> str:
        return f"`math.{form}(t)` becomes `torch.{form}(t.detach())`"

    def tensor_form(self, form: str, tensor: "cst.BaseExpression", edit: "Edit") -> "cst.BaseExpression":
        import libcst as cst

        return cst.Call(func=edit.torch(form), args=[cst.Arg(tensor)])

    INVALID = ["""
        import math

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                norm = math.sqrt(y.pow(2).sum())
                return y / norm
        """]
    VALID = ["""
        import math

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                norm = torch.sqrt(y.pow(2).sum()) * math.sqrt(2.0)
                return y / norm
        """]


class TensorToString(DecidedAfterWalk):
    """## What it does
    Checks for `str(t)`, `repr(t)`, `format(t)` and `%`-formatting (`"%.3f" % t`)
    of tensors in compiled code.

    ## Why is this bad?
    Formatting a tensor reads its values; Dynamo cannot trace the C
    implementation (GB0059, GB0569); `"%.3f" % t` reads a data-dependent
    number (GB0033) and Dynamo gives up on the whole function (it runs without
    a graph), and `format(t)` fails inside Dynamo
    (InternalTorchDynamoError). (f-strings and `str.format` of tensors are
    formatted after the graph and do not break it, unless the string is used
    as a key while tracing: `self.experts[f"expert_{idx[0]}"]` or
    `getattr(self, f"head_{i}")` with a tensor `idx`/`i` has no string to look
    up (GB0088), and Dynamo gives up on the function.)

    ## Fix safety
    A string only read by code that compiled runs skip (a `print` or a log
    that the side-effect fixes guarded with `if not
    torch.compiler.is_compiling():`, or nobody): its statement is skipped the
    same way, which is safe (`remove` deletes it with the prints).
    Otherwise `format(t, spec)` becomes `"{:{}}".format(t, spec)` (`format(t)`:
    `"{}".format(t)`): `str.format` calls the same `format()`, so the string
    and the errors are the same (safe). (Dynamo makes such a string after the
    graph: the fix removes the break where the string is returned, stored or
    logged, not where the compiled code goes on to concatenate it.)
    `"...%.3f..." % t` or `% (a, t)`
    becomes `"...{:.3f}...".format(t)` (unsafe): each conversion maps to its
    format spec (`-` to `<`, `+`, space, `#`, `0`, width, precision; `%s`,
    `%r`, `%a` of other values to `{!s:>w.p}`, `{!r}`, `{!a}`; `%d`, `%i`, `%u`
    to `{:d}` of `int(v)`, of `t.long()` for a tensor). A tensor becomes a
    0-d tensor, whose `format` is its number's: `t.reshape(())` unless it is a
    full reduction. What differs: a complex tensor, which `%` could not
    convert, is formatted; `reshape` raises another error for several
    elements; `%d` of NaN gives a number where it raised. No fix for `%s`/`%r`
    of a tensor (its text, `tensor(...)`, cannot be made while tracing), for
    mapping keys (`%(name)s`), `*` widths, precision on integers, and other
    conversions (`%x`, `%c`).
    """

    code = "TP305"
    name = "tensor-to-string"
    summary = "`str()`/`repr()`/`format()`/`%` of a tensor"
    message = "`{callee}` of a tensor breaks the graph; format tensors outside the compiled function"
    dynamo_codes = ("GB0059", "GB0569", "GB0033", "GB0088")
    fix_safety = "safe or unsafe"

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        if name in ("builtins.str", "builtins.repr") and len(node.args) == 1 and ctx.kind(node.args[0]).is_tensor:
            self.report(ctx, node, callee=f"{name[9:]}()")
        elif name == "builtins.format" and node.args and ctx.kind(node.args[0]).is_tensor:
            self.report(ctx, node, callee="format()")
        elif name == "builtins.getattr" and len(node.args) >= 2 and _formats_tensor(node.args[1], ctx):
            self.report(ctx, node.args[1], no_fix=_NO_KEY_FIX, callee="an f-string key")

    def visit_Subscript(self, node: ast.Subscript, ctx: Context) -> None:
        if isinstance(node.ctx, ast.Load) and _formats_tensor(node.slice, ctx):
            self.report(ctx, node.slice, no_fix=_NO_KEY_FIX, callee="an f-string key")

    def visit_BinOp(self, node: ast.BinOp, ctx: Context) -> None:
        if isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            values = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            if any(ctx.kind(v).is_tensor for v in values):
                self.report(ctx, node, callee="%")

    def decide(self, node: ast.expr, ctx: Context, parents: dict[int, ast.AST]) -> dict:
        if isinstance(node, ast.BinOp):
            form = _format_template(node, ctx)
        elif ctx.qualname(node.func) == "builtins.format" and len(node.args) <= 2 and not node.keywords:
            form = ("{:{}}" if len(node.args) == 2 else "{}", ("",) * len(node.args))
        else:
            form = f"`{ast.unparse(node.func)}()` of a tensor has no form Dynamo traces (its text reads every value)"
        if isinstance(form, str):
            return self.skip_with_readers(node, ctx, parents, form)
        skip = self.skip_with_readers(node, ctx, parents, "")
        if "fix" in skip:
            return skip
        template, conversions = form
        safety = "safe" if isinstance(node, ast.Call) else "unsafe"
        title = f"format with `{template!r}.format(...)`, which Dynamo formats after the graph"
        cst_node = "Call" if isinstance(node, ast.Call) else "BinaryOperation"
        return self.make_fix(title, cst_node, node, safety=safety, data=form)

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        if fix.data == ("skip",):
            return super().apply_fix(node, fix, edit)
        template, conversions = fix.data
        if isinstance(node, cst.Call):
            values = [a.value for a in node.args]
        else:
            values = [e.value for e in node.right.elements] if isinstance(node.right, cst.Tuple) else [node.right]
        args = [cst.Arg(_converted(v, c)) for v, c in zip(values, conversions)]
        call = cst.Call(cst.Attribute(cst.SimpleString(repr(template)), cst.Name("format")), args)
        return with_parens_of(node, call)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                self.last = repr(y)
                return y * 2
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                message = "mean %.3f" % y.mean()
                print(message)
                return y * 2
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.heads = nn.ModuleDict({f"head_{i}": nn.Linear(8, 8) for i in range(3)})

            def forward(self, x):
                choice = x.abs().sum(dim=-1).argmax() % 3
                return self.heads[f"head_{choice}"](x) * 2
        """,
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                self.last = str(y.shape)
                return y * 2
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.heads = nn.ModuleDict({f"head_{i}": nn.Linear(8, 8) for i in range(3)})

            def forward(self, x):
                return self.heads[f"head_{x.shape[0] % 3}"](x) * 2
        """,
    ]


_NO_KEY_FIX = "the key names a module or entry by a tensor's value, which only eager code can read"


def _formats_tensor(node: ast.expr, ctx: Context) -> bool:
    """An f-string that formats a tensor: a key Dynamo only makes after the graph. A bare `forward` parameter
    is not taken for one here: names put into keys are mostly strings (`f"{layer_type}_inv_freq"`)."""
    return isinstance(node, ast.JoinedStr) and any(
        isinstance(part, ast.FormattedValue) and ctx.kind(part.value).is_tensor and not ctx.guessed(part.value)
        for part in node.values
    )


# One %-conversion: `%[flags][width][.precision][length]type` (mapping keys and `*` are not rewritten).
_CONVERSION = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\d*)(?:\.(?P<precision>\d*))?[hlL]?(?P<type>.)", re.S)


def _format_template(node: ast.BinOp, ctx: Context) -> tuple[str, tuple[str, ...]] | str:
    """`str.format`'s template for `"..." % values` and how each value is converted for it
    ("" as is, "int", "long", "reshape", "reshape long"), or why there is none."""
    text = node.left.value
    values = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
    if any(isinstance(v, ast.Starred) for v in values):
        return "the values are unpacked with `*`"
    pieces, conversions, position = [], [], 0
    for match in _CONVERSION.finditer(text):
        pieces.append(_escape(text[position : match.start()]))
        position = match.end()
        kind = match["type"]
        if kind == "%" and match.group(0) == "%%":
            pieces.append("%")
            continue
        if len(conversions) == len(values):
            return "it has more conversions than values"
        value = values[len(conversions)]
        field = _field(match, ctx.kind(value).is_tensor)
        if isinstance(field, str) and not field.startswith("{"):
            return field
        pieces.append(field)
        tensor = ctx.kind(value).is_tensor
        shaped = "" if is_zero_dim(value, ctx) else "reshape"
        if kind in "diu":
            conversion = f"{shaped} long".strip() if tensor else ("" if _is_int_literal(value) else "int")
        else:
            conversion = shaped if tensor else ""
        conversions.append(conversion)
    pieces.append(_escape(text[position:]))
    if len(conversions) != len(values):
        return "its conversions do not match its values"
    return "".join(pieces), tuple(conversions)


def _field(match: re.Match, tensor: bool) -> str:
    """The `str.format` field of one %-conversion, or why it has none (a text without `{`)."""
    flags, width, precision, kind = match["flags"], match["width"], match["precision"], match["type"]
    precision = None if precision is None else f".{precision or '0'}"
    if kind in "sra":
        if tensor:
            return f"`%{kind}` of a tensor is its text (`tensor(...)`), which Dynamo cannot make while tracing"
        align = ("<" if "-" in flags else ">") if width else ""
        spec = f"{align}{width}{precision or ''}"
        return f"{{!{kind}{':' + spec if spec else ''}}}"
    if kind not in "diueEfFgG":
        return f"`%{kind}` conversions are not rewritten"
    if kind in "diu" and precision is not None:
        return "a precision on an integer conversion has no format spec"
    sign = "+" if "+" in flags else " " if " " in flags else ""
    zero = "0" if "0" in flags and "-" not in flags else ""
    spec = ("<" if "-" in flags and width else "") + sign + ("#" if "#" in flags else "") + zero + width
    spec += (precision or "") + ("d" if kind in "diu" else kind)
    return f"{{:{spec}}}"


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _is_int_literal(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _converted(value: "cst.BaseExpression", conversion: str) -> "cst.BaseExpression":
    """`value` as `str.format` must see it to print what `%` printed."""
    import libcst as cst

    if conversion == "int":
        return cst.Call(cst.Name("int"), [cst.Arg(value)])
    for step in conversion.split():
        value = method_call(value, step, *([cst.Arg(cst.Tuple([]))] if step == "reshape" else []))
    return value
