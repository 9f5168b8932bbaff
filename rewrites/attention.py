"""Recognises hand-written scaled dot-product attention, for the TP701 rewrite.

`softmax(q @ k.transpose(-2, -1) * scale + mask, dim=-1) @ v`, written in one expression or
across consecutive statements of one block, is matched step by step; each step must have the
meaning `torch.nn.functional.scaled_dot_product_attention` gives it, else there is no match.
The match says which statements go away and what the call's arguments are, as source text.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from transpiler.analysis.walker import Context
from transpiler.analysis.kinds import Kind

SDPA = "torch.nn.functional.scaled_dot_product_attention"
_SOFTMAX = frozenset({"torch.nn.functional.softmax", "torch.softmax", "torch.special.softmax"})
_DROPOUT = frozenset({"torch.nn.functional.dropout", "torch.dropout"})
_DROPOUT_MODULES = frozenset({"torch.nn.Dropout", "torch.nn.modules.dropout.Dropout"})
_MATMUL = frozenset({"torch.matmul"})
_FLOAT32 = frozenset({"torch.float32", "torch.float"})
_INF = float("inf")
# Expressions the call may evaluate at a later point than the original did: reads only.
_PURE_NODES = (
    ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Constant, ast.Tuple, ast.UnaryOp, ast.BinOp,
    ast.Compare, ast.IfExp, ast.BoolOp, ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop,
)  # fmt: skip
_PURE_METHODS = frozenset(
    {"size", "dim", "unsqueeze", "view", "reshape", "transpose", "expand", "to", "bool", "float", "half", "bfloat16",
     "contiguous", "logical_not", "eq", "ne"}
)  # fmt: skip
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_PURE_FUNCTIONS = frozenset(
    {"math.sqrt", "builtins.float", "builtins.int", "builtins.len", "builtins.max", "builtins.min"}
)


@dataclass(frozen=True)
class Attention:
    """One match: `matmul` (the final `weights @ v`) becomes `SDPA(<arguments>)`; the statements
    `first..final` of the block at `path` (libcst indices, see `_enclosing_block`) collapse into
    the final one."""

    matmul: ast.expr
    arguments: str
    path: tuple[int, ...]
    first: int
    final: int


@dataclass(frozen=True)
class _Mask:
    text: str  # the attn_mask argument
    reads: tuple[ast.expr, ...]


class _Refused(Exception):
    """The expression is not attention, or not provably SDPA's meaning (the reason, for tests)."""


def match(node: ast.expr, ctx: Context) -> Attention | None:
    """The attention whose last step is `node` (`weights @ v` or `torch.matmul(weights, v)`), or None."""
    try:
        return _Matcher(ctx).match(node)
    except _Refused:
        return None


def refusal(node: ast.expr, ctx: Context) -> str | None:
    """Why `node` is not rewritten (None when it is): what the tests check refusals with."""
    try:
        _Matcher(ctx).match(node)
    except _Refused as err:
        return str(err)
    return None


class _Matcher:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.operands: list[ast.expr] = []  # every expression the call evaluates
        self.bound: set[str] = set()  # names the collapsed statements bind

    def match(self, node: ast.expr) -> Attention:
        weights, value = _matmul_operands(node, self.ctx)
        statement = self.ctx.statement
        if not isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)):
            raise _Refused("the final matmul is not in a simple statement")
        self.path, self.block, self.final = _enclosing_block(self.ctx.node, statement)
        self.first = self.final
        weights = self._resolve(weights)
        dropout = self._dropout(weights)
        if dropout is not None:
            weights = self._resolve(dropout[0])
        probs, cast = self._cast(weights)
        scores, upcast = self._softmax(self._resolve(probs))
        if upcast and cast is None:
            raise _Refused("a float32 softmax whose result is not cast back to the inputs' dtype")
        scores, mask = self._mask(scores)
        query, key, scale = self._scores(self._resolve(scores))
        query, key, value = (self._operand(e, tensor=True) for e in (query, key, value))
        if cast is not None and not any(ast.dump(cast) == ast.dump(e) for e in (query, key, value)):
            raise _Refused("the weights are cast to the dtype of a tensor other than q, k and v")
        arguments = [ast.unparse(e) for e in (query, key, value)]
        if mask is not None:
            arguments.append(f"attn_mask={mask.text}")
        if dropout is not None and dropout[1] is not None:
            arguments.append(f"dropout_p={dropout[1]}")
        arguments.append(f"scale={scale}")
        self._check_flow(node)
        lines = cst_indices(self.block)
        return Attention(node, ", ".join(arguments), self.path, lines[self.first], lines[self.final])

    # -- the steps, from the output back to q @ kᵀ ------------------------------------------
    def _dropout(self, node: ast.expr) -> tuple[ast.expr, str | None] | None:
        """(input, dropout_p text or None when it is always off) of a dropout step, or None."""
        if not isinstance(node, ast.Call):
            return None
        ctx = self.ctx
        module = ctx.self_attr(node.func)
        if module is not None and ctx.cls is not None and ctx.cls.attr_ctors.get(module) in _DROPOUT_MODULES:
            if len(node.args) != 1 or node.keywords:
                raise _Refused("a dropout module called with extra arguments")
            drop = ast.unparse(node.func)
            # nn.Dropout drops while the module itself is in training mode.
            return node.args[0], f"{drop}.p if {drop}.training else 0.0"
        if ctx.qualname(node.func) not in _DROPOUT:
            return None
        args = _arguments(node, ("input", "p", "training", "inplace"))
        if "input" not in args or not set(args) <= {"input", "p", "training", "inplace"}:
            raise _Refused("a dropout call with arguments it cannot take")
        if "inplace" in args and not _is_constant(args["inplace"], False):
            raise _Refused("an in-place dropout")
        p = args.get("p", ast.Constant(0.5))
        training = args.get("training", ast.Constant(True))
        if _is_constant(training, False) or _is_constant(p, 0) or _is_constant(p, 0.0):
            return args["input"], None
        self._operand(p)
        if _is_constant(training, True):
            return args["input"], ast.unparse(p)
        self._operand(training)
        return args["input"], f"{ast.unparse(p)} if {ast.unparse(training)} else 0.0"

    def _cast(self, node: ast.expr) -> tuple[ast.expr, ast.expr | None]:
        """(input, the tensor whose dtype it is cast to) of `.to(t.dtype)`, `.type(t.dtype)`, `.type_as(t)`."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and self.ctx.qualname(node.func) is None:
            method, args = node.func.attr, [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
            if len(args) == 1 and len(node.args) + len(node.keywords) == 1:
                (arg,) = args
                if method in ("to", "type") and isinstance(arg, ast.Attribute) and arg.attr == "dtype":
                    return node.func.value, arg.value
                if method == "type_as" and node.args:
                    return node.func.value, arg
        return node, None

    def _softmax(self, node: ast.expr) -> tuple[ast.expr, bool]:
        """(scores, whether it computes in float32) of a softmax over the last dimension."""
        if not isinstance(node, ast.Call):
            raise _Refused("the weights are not a softmax")
        func = node.func
        if self.ctx.qualname(func) in _SOFTMAX:
            args = _arguments(node, ("input", "dim", "_stacklevel", "dtype"))
        elif isinstance(func, ast.Attribute) and func.attr == "softmax" and self.ctx.qualname(func) is None:
            args = {"input": func.value, **_arguments(node, ("dim", "dtype"))}
        else:
            raise _Refused("the weights are not a softmax")
        if not set(args) <= {"input", "dim", "dtype", "_stacklevel"} or "input" not in args:
            raise _Refused("a softmax with arguments it cannot take")
        if "dim" not in args or not _is_constant(args["dim"], -1):
            raise _Refused("the softmax is not over the last dimension (`dim=-1`)")
        dtype = args.get("dtype")
        if dtype is not None and self.ctx.qualname(dtype) not in _FLOAT32:
            raise _Refused("a softmax computed in a dtype other than float32")
        return args["input"], dtype is not None

    def _mask(self, node: ast.expr) -> tuple[ast.expr, _Mask | None]:
        """(unmasked scores, attn_mask) of `s + mask`, `s.masked_fill(cond, -inf)`, either under
        `if mask is not None:`, or (node, None)."""
        guarded = None
        if isinstance(node, ast.Name):
            guarded = self._optional_step(node.id)
            if guarded is None:
                node = self._resolve(node)
        found = self._mask_step(guarded[1] if guarded else node)
        if found is None:
            if guarded is not None:
                raise _Refused("the statement under `if ... is not None:` is not a mask")
            return node, None
        scores, mask = found
        for read in mask.reads:
            self._operand(read)
        if guarded is None:
            return scores, mask
        name = guarded[0]
        if not (isinstance(scores, ast.Name) and scores.id == node.id):
            raise _Refused("the masked scores under `if` are not the scores it rebinds")
        if mask.text == name:
            return scores, mask
        return scores, _Mask(f"{mask.text} if {name} is not None else None", mask.reads)

    def _mask_step(self, node: ast.expr) -> tuple[ast.expr, _Mask] | None:
        """(scores, attn_mask) of `scores + mask` or `scores.masked_fill(cond, -inf)`, else None."""
        ctx = self.ctx
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            swapped = not self._is_scores(node.left) and self._is_scores(node.right)
            scores, mask = (node.right, node.left) if swapped else (node.left, node.right)
            kind = ctx.kind(mask)
            if not kind.may_be_tensor or kind is Kind.BOOL_TENSOR:
                # SDPA reads a boolean attn_mask as "may attend", `+` adds it as 0/1.
                raise _Refused("an additive mask that is boolean or not a tensor")
            return scores, _Mask(ast.unparse(mask), (mask,))
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if ctx.qualname(func) == "torch.masked_fill":
            args = _arguments(node, ("input", "mask", "value"))
        elif isinstance(func, ast.Attribute) and func.attr == "masked_fill" and ctx.qualname(func) is None:
            args = {"input": func.value, **_arguments(node, ("mask", "value"))}
        else:
            return None
        if set(args) != {"input", "mask", "value"}:
            raise _Refused("a masked_fill with arguments it cannot take")
        if not _is_minus_infinity(args["value"], ctx):
            raise _Refused("masked_fill with a finite value: fully masked rows would differ")
        keep, reads = _keep_mask(args["mask"], ctx)
        return args["input"], _Mask(keep, reads)

    def _is_scores(self, node: ast.expr) -> bool:
        """Whether `node` is the scores side of `scores + mask`: a scaled matrix product, or the
        name the statement right before the chain binds."""
        if isinstance(node, ast.Name):
            return self.first > 0 and _assigned_value(self.block[self.first - 1], node.id) is not None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            return self._is_scores(node.left) or self._is_scores(node.right)
        try:
            _matmul_operands(node, self.ctx)
        except _Refused:
            return False
        return True

    def _optional_step(self, name: str) -> tuple[str, ast.expr] | None:
        """`if m is not None: name = <value>` right before the chain: consumes it, (m, value)."""
        if self.first == 0:
            return None
        statement = self.block[self.first - 1]
        if not (isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1):
            return None
        test = statement.test
        if not (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.IsNot)
            and _is_constant(test.comparators[0], None)
        ):
            return None
        value = _assigned_value(statement.body[0], name)
        if value is None:
            return None
        self._take(name)
        return test.left.id, value

    def _scores(self, node: ast.expr) -> tuple[ast.expr, ast.expr, str]:
        """(q, k, scale text) of `q @ kᵀ`, times or divided by a Python number (or with q scaled)."""
        scale = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            if isinstance(node.op, ast.Mult) and self._is_number(node.left):
                scale, node = node.left, node.right
            elif self._is_number(node.right):
                scale = node.right if isinstance(node.op, ast.Mult) else _reciprocal(node.right)
                node = node.left
            else:
                raise _Refused("the scores are scaled by a tensor (SDPA's scale is a Python number)")
            node = self._resolve(node)
        return self._product(node, scale)

    def _product(self, node: ast.expr, scale: ast.expr | None) -> tuple[ast.expr, ast.expr, str]:
        if isinstance(node, ast.Name):
            raise _Refused(f"`{node.id}` is not bound by the statement right before the attention steps")
        query, keys = _matmul_operands(node, self.ctx)
        if (
            scale is None
            and isinstance(query, ast.BinOp)
            and isinstance(query.op, ast.Mult)
            and (self._is_number(query.left) or self._is_number(query.right))
        ):
            scale, query = (query.left, query.right) if self._is_number(query.left) else (query.right, query.left)
        key = _transposed(keys, self.ctx)
        if key is None:
            raise _Refused("the keys are not transposed over their last two dimensions")
        if scale is None:
            return query, key, "1.0"
        return query, key, ast.unparse(self._operand(scale))

    # -- names, statements and the expressions the call evaluates -------------------------
    def _resolve(self, node: ast.expr) -> ast.expr:
        """The value of `node` when it is a name bound by the statement right before the chain."""
        while isinstance(node, ast.Name) and self.first > 0:
            value = _assigned_value(self.block[self.first - 1], node.id)
            if value is None:
                break
            self._take(node.id)
            node = value
        return node

    def _take(self, name: str) -> None:
        self.first -= 1
        self.bound.add(name)

    def _is_number(self, node: ast.expr) -> bool:
        """A scale SDPA takes: a number, or a value of unknown type (`self.scale` computed from
        other attributes); SDPA raises for a tensor of more than one element there."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
        return self.ctx.kind(node) in (Kind.SCALAR, Kind.DATA_SCALAR, Kind.UNKNOWN)

    def _operand(self, node: ast.expr, tensor: bool = False) -> ast.expr:
        if tensor and not self.ctx.kind(node).may_be_tensor:
            raise _Refused(f"`{ast.unparse(node)}` is not known to be a tensor")
        if not _pure(node, self.ctx):
            raise _Refused(f"`{ast.unparse(node)}` may have side effects, and would be evaluated later")
        self.operands.append(node)
        return node

    def _check_flow(self, node: ast.expr) -> None:
        """The collapsed statements' names are read nowhere else, and the call's operands do not
        read them (they are evaluated after the statements that are gone)."""
        for operand in self.operands:
            for sub in ast.walk(operand):
                if isinstance(sub, ast.Name) and sub.id in self.bound:
                    raise _Refused(f"`{ast.unparse(operand)}` reads `{sub.id}`, which the attention steps rebind")
        final = self.block[self.final]
        written = _targets(final)
        chain = self.block[self.first : self.final]
        inside = {id(n) for s in chain for n in ast.walk(s)}
        inside |= {id(n) for n in ast.walk(node)}
        # A nested function or lambda reads a name when it runs, not where it is written.
        deferred = {
            id(n)
            for f in ast.walk(self.ctx.node)
            if f is not self.ctx.node and isinstance(f, _SCOPES)
            for n in ast.walk(f)
        }
        in_loop = any(kind == "loop" for kind, _ in self.ctx.blocks)
        start = chain[0].lineno if chain else final.lineno
        for sub in ast.walk(self.ctx.node):
            if isinstance(sub, ast.Name) and sub.id in self.bound and id(sub) not in inside:
                if isinstance(sub.ctx, ast.Store):
                    continue
                earlier = sub.lineno < start and not in_loop and id(sub) not in deferred
                if not earlier and not (sub.id in written and sub.lineno > final.end_lineno):
                    raise _Refused(f"`{sub.id}` (an attention step) is used elsewhere")
        for statement in (*chain, final):
            if _shares_lines(statement, self.block):
                raise _Refused("a statement of the attention shares its line with another")


def _keep_mask(condition: ast.expr, ctx: Context) -> tuple[str, tuple[ast.expr, ...]]:
    """SDPA's boolean attn_mask (True: attend) for the positions `masked_fill(condition, -inf)`
    hides; masked_fill only takes boolean masks, so `~m` there means `m` is boolean."""
    if isinstance(condition, ast.UnaryOp) and isinstance(condition.op, ast.Invert):
        return ast.unparse(condition.operand), (condition.operand,)
    if isinstance(condition, ast.Call) and not condition.keywords:
        func = condition.func
        if ctx.qualname(func) == "torch.logical_not" and len(condition.args) == 1:
            return ast.unparse(condition.args[0]), (condition.args[0],)
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "logical_not"
            and not condition.args
            and ctx.qualname(func) is None
        ):
            return ast.unparse(func.value), (func.value,)
    if isinstance(condition, ast.Compare) and len(condition.ops) == 1:
        negated = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}.get(type(condition.ops[0]))
        if negated is not None:  # `==` and `!=` are exact negations, NaN included
            flipped = ast.Compare(condition.left, [negated()], condition.comparators)
            return ast.unparse(flipped), (condition,)
    return ast.unparse(ast.UnaryOp(ast.Invert(), condition)), (condition,)


def _is_minus_infinity(node: ast.expr, ctx: Context) -> bool:
    """`float("-inf")`, `-float("inf")`, `-math.inf`, `-torch.inf`."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return (
            ctx.qualname(node.operand) in ("math.inf", "torch.inf", "numpy.inf")
            or _float_literal(node.operand, ctx) == _INF
        )
    return _float_literal(node, ctx) == -_INF


def _float_literal(node: ast.expr, ctx: Context) -> float | None:
    """The value of `float("<literal>")`."""
    if isinstance(node, ast.Call) and ctx.qualname(node.func) == "builtins.float" and len(node.args) == 1:
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            try:
                return float(arg.value)
            except ValueError:
                return None
    return None


def _matmul_operands(node: ast.expr, ctx: Context) -> tuple[ast.expr, ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return node.left, node.right
    if isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords:
        if ctx.qualname(node.func) in _MATMUL:
            return node.args[0], node.args[1]
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "matmul" and ctx.qualname(func) is None:
            return func.value, node.args[0]
    raise _Refused("not a matrix product")


def _transposed(node: ast.expr, ctx: Context) -> ast.expr | None:
    """`k` of `k.transpose(-2, -1)`, `k.transpose(-1, -2)`, `torch.transpose(k, -2, -1)`, `k.mT`."""
    if isinstance(node, ast.Attribute) and node.attr == "mT":
        return node.value
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    if isinstance(node.func, ast.Attribute) and node.func.attr == "transpose" and ctx.qualname(node.func) is None:
        tensor, dims = node.func.value, node.args
    elif ctx.qualname(node.func) == "torch.transpose" and node.args:
        tensor, dims = node.args[0], node.args[1:]
    else:
        return None
    last_two = len(dims) == 2 and {_constant(d) for d in dims} == {-1, -2}
    return tensor if last_two else None


def _arguments(call: ast.Call, positional: tuple[str, ...]) -> dict[str, ast.expr]:
    """Arguments by parameter name; raises for `*args`/`**kwargs` and surplus positionals."""
    if len(call.args) > len(positional) or any(isinstance(a, ast.Starred) for a in call.args):
        raise _Refused("a call with arguments it cannot take")
    args = dict(zip(positional, call.args))
    for keyword in call.keywords:
        if keyword.arg is None or keyword.arg in args:
            raise _Refused("a call with arguments it cannot take")
        args[keyword.arg] = keyword.value
    return args


def _assigned_value(statement: ast.stmt, name: str) -> ast.expr | None:
    """`value` of `name = value` (or `name: T = value`)."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None and statement.simple:
        target = statement.target
    else:
        return None
    return statement.value if isinstance(target, ast.Name) and target.id == name else None


def _targets(statement: ast.stmt) -> set[str]:
    targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)


def _enclosing_block(function: ast.AST, statement: ast.stmt) -> tuple[tuple[int, ...], list[ast.stmt], int]:
    """(path, statements, index) of the block that holds `statement` directly. Only the `body`
    of the function and of `if`, `for`, `while`, `with` and `try` statements count; the path
    indexes each enclosing compound statement in its block as libcst counts (one line of
    `a = 1; b = 2` is one statement there)."""
    found = _find_block(function.body, (), statement)
    if found is None:
        raise _Refused("the attention is not in a block the rewrite edits")
    return found


def _find_block(block: list[ast.stmt], path: tuple[int, ...], statement: ast.stmt):
    lines = cst_indices(block)
    for index, item in enumerate(block):
        if item is statement:
            return path, block, index
        if isinstance(item, _COMPOUND):
            found = _find_block(item.body, (*path, lines[index]), statement)
            if found is not None:
                return found
    return None


def cst_indices(block: list[ast.stmt]) -> list[int]:
    """For each statement of `block`, the index of its libcst statement line."""
    indices: list[int] = []
    line = -1
    for statement in block:
        if not indices:
            indices.append(0)
        else:
            indices.append(indices[-1] if statement.lineno == line else indices[-1] + 1)
        line = statement.end_lineno
    return indices


def _shares_lines(statement: ast.stmt, block: list[ast.stmt]) -> bool:
    return any(
        other is not statement and other.lineno <= statement.end_lineno and statement.lineno <= other.end_lineno
        for other in block
    )


def _pure(node: ast.expr, ctx: Context) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            if ctx.qualname(func) in _PURE_FUNCTIONS:
                continue
            if isinstance(func, ast.Attribute) and func.attr in _PURE_METHODS and ctx.qualname(func) is None:
                continue
            return False
        if not isinstance(sub, (*_PURE_NODES, ast.Call, ast.keyword)):
            return False
    return True


def _reciprocal(node: ast.expr) -> ast.expr:
    return ast.BinOp(ast.Constant(1.0), ast.Div(), node)


def _constant(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None


def _is_constant(node: ast.expr, value: object) -> bool:
    found = _constant(node)
    return type(found) is type(value) and found == value
