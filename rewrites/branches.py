"""Data-dependent branches as dataflow, for the TP2xx fixes: when a branch is pure (analysis on
`ast`, at plan time) and how `if`/`elif`/`else` becomes `torch.where` or `torch.cond` (libcst, at
apply time). Plans carry only names and small "recipes" between the two stages.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from transpiler.analysis.kinds import Kind
from transpiler.analysis.typer import Typer

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.analysis.walker import Context
    from transpiler.lint.rule import Edit

# Callees whose heads are these are tensor operators; anything else may do anything.
_TORCH_HEADS = frozenset({"torch", "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft"})
# Tensor operators that draw random numbers: evaluating an untaken branch would move the RNG.
_RANDOM = frozenset(
    "rand randn randint randperm rand_like randn_like randint_like bernoulli multinomial normal poisson "
    "dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout rrelu gumbel_softmax".split()
)
_TORCH_EFFECTS = frozenset("manual_seed seed save load set_grad_enabled set_default_dtype set_printoptions".split())
_METHOD_EFFECTS = frozenset(
    "backward register_hook retain_grad record_stream share_memory_ set_ random_ uniform_ normal_ "
    "bernoulli exponential_ geometric_ cauchy_ log_normal_".split()
)
_BLOCKS = {ast.If: "if", ast.For: "for", ast.While: "while", ast.With: "with", ast.Try: "try", ast.Match: "match"}
_PURE_BUILTINS = frozenset("abs len min max round float int bool".split())
# Expressions that bind names, suspend, or hide a body the purity check does not look into.
_FORBIDDEN_EXPRESSIONS = (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await, ast.Lambda)
_FORBIDDEN_EXPRESSIONS += (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# Methods and functions that may return their input itself or a view of it: torch.cond
# refuses branch outputs that alias its operands, so such results are cloned.
_ALIASING = frozenset(
    "view view_as reshape reshape_as transpose t permute squeeze unsqueeze expand expand_as narrow flatten "
    "unflatten select detach contiguous movedim moveaxis swapaxes diagonal unfold as_strided to type_as float "
    "double half bfloat16 int long bool type chunk split tensor_split unbind".split()
)


# -- plan time: ast --------------------------------------------------------------------------------------


def impurity(expr: ast.expr, typer: Typer) -> str | None:
    """Why evaluating `expr` could do more than compute a value (None: it is pure).

    Pure: operators, subscripts and attributes, and calls of torch operators and tensor
    methods that are not in place and draw no random numbers.
    """
    for node in ast.walk(expr):
        if isinstance(node, _FORBIDDEN_EXPRESSIONS):
            return f"`{_short(node)}` cannot be moved into a dataflow expression"
        if isinstance(node, ast.Call):
            reason = _call_impurity(node, typer)
            if reason is not None:
                return reason
    return None


def _call_impurity(node: ast.Call, typer: Typer) -> str | None:
    shown = f"`{_short(node.func)}()`"
    if any(k.arg == "out" for k in node.keywords):
        return f"{shown} writes into `out=`"
    if any(k.arg == "inplace" and not (isinstance(k.value, ast.Constant) and not k.value.value) for k in node.keywords):
        return f"{shown} may modify a tensor in place (`inplace=`)"
    func = node.func
    qualname = typer.qualname(func)
    if qualname is None:
        if isinstance(func, ast.Attribute) and typer.kind(func.value).is_tensor:
            if func.attr in _METHOD_EFFECTS or (func.attr.endswith("_") and not func.attr.startswith("_")):
                return f"{shown} modifies a tensor in place"
            return None
        if typer.kind(func) is Kind.MODULE:
            return f"{shown} calls a submodule, which may keep state"
        return f"{shown} may have side effects"
    head, _, last = qualname.rpartition(".")
    if head in _TORCH_HEADS:
        if last in _RANDOM:
            return f"{shown} draws random numbers"
        if last in _TORCH_EFFECTS:
            return f"{shown} changes global state"
        if last.endswith("_") and not last.startswith("_"):
            return f"{shown} modifies a tensor in place"
        return None
    if qualname.startswith("math.") or qualname.removeprefix("builtins.") in _PURE_BUILTINS:
        return None
    return f"{shown} may have side effects"


def _short(node: ast.AST, limit: int = 40) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# How a condition becomes a bool tensor: ("keep",), ("nonzero",) for `t != 0`, ("zero",) for
# `not t` as `t == 0`, ("not", recipe), ("and" | "or", (recipe, ...)).
Recipe = tuple


def bool_recipe(test: ast.expr, typer: Typer) -> Recipe | None:
    """How to turn the `if` test into a bool tensor with the same truth value, or None when some
    part of it is not a tensor (a Python flag or an unknown value)."""
    if isinstance(test, ast.BoolOp):
        parts = [bool_recipe(v, typer) for v in test.values]
        if any(p is None for p in parts):
            return None
        return ("and" if isinstance(test.op, ast.And) else "or", tuple(parts))
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = bool_recipe(test.operand, typer)
        if inner is None:
            return None
        return ("zero",) if inner == ("nonzero",) else ("not", inner)
    kind = typer.kind(test)
    if isinstance(test, ast.Compare) and len(test.ops) > 1 and kind is Kind.BOOL_TENSOR:
        # `a < t < b` calls bool() on `a < t`: written as `(a < t) & (t < b)`, the middle evaluated twice.
        return ("chain",) if all(impurity(c, typer) is None for c in test.comparators[:-1]) else None
    if kind is Kind.BOOL_TENSOR:
        return ("keep",)
    # A number's truth value is `!= 0` (NaN is true on both sides).
    return ("nonzero",) if kind is Kind.TENSOR else None


def loaded_names(nodes: Iterable[ast.AST]) -> list[str]:
    """Names read by `nodes`, in order of first appearance."""
    seen: dict[str, None] = {}
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                seen.setdefault(sub.id)
    return list(seen)


class FreshNames:
    """Fresh, readable names for temporaries: `y_then`, `cond`, `then_branch`, never one the function uses."""

    def __init__(self, function: ast.AST) -> None:
        self.taken = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)}
        self.taken |= {a.arg for a in ast.walk(function) if isinstance(a, ast.arg)}
        self.taken |= {f.name for f in ast.walk(function) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def fresh(self, base: str) -> str:
        name, number = base, 2
        while name in self.taken:
            name, number = f"{base}_{number}", number + 1
        self.taken.add(name)
        return name


def branch_typer(ctx: "Context") -> Typer:
    """A private typer at the `if` (kinds of branch statements must not land in the checker's memo)."""
    return Typer(ctx.names, ctx.cls, dict(ctx.typer.env), ctx.typer.classes)


def if_chain_nodes(node: ast.If) -> list[ast.If]:
    """`node` and its `elif`s: an `elif` is a nested `if` in the same column (`else:` followed by
    an indented `if` is not one)."""
    nodes = [node]
    while len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) and node.orelse[0].col_offset == node.col_offset:
        node = node.orelse[0]
        nodes.append(node)
    return nodes


def if_chain(node: ast.If) -> tuple[list[ast.expr], list[list[ast.stmt]]]:
    """Conditions and bodies of `if`/`elif`.../`else` (the last body is the `else`, maybe empty)."""
    nodes = if_chain_nodes(node)
    return [n.test for n in nodes], [*(n.body for n in nodes), nodes[-1].orelse]


def statement_problem(statement: ast.stmt, typer: Typer, allow_unpacking: bool = False) -> str | None:
    """Why a branch statement keeps the branch from becoming dataflow (None: a pure tensor assignment,
    whose names are then bound in `typer`)."""
    if isinstance(statement, ast.AugAssign):
        return f"`{_short(statement)}` updates a tensor in place"
    if isinstance(statement, ast.Raise):
        return "a branch raises an exception"
    if isinstance(statement, ast.Assert):
        return "a branch asserts"
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return f"a branch calls `{_short(statement.value.func)}()` for its side effects"
    if isinstance(statement, ast.Return):
        return "a branch returns"
    block = _BLOCKS.get(type(statement))
    if block is not None:
        return f"a branch holds `{block} ...:`, not only assignments"
    if not isinstance(statement, ast.Assign):
        return f"a branch holds `{_short(statement).splitlines()[0]}`, not only assignments"
    if len(statement.targets) != 1:
        return f"`{_short(statement)}` assigns several targets"
    target = statement.targets[0]
    names = target.elts if isinstance(target, ast.Tuple) and allow_unpacking else [target]
    for name in names:
        if isinstance(name, ast.Attribute):
            return f"`{_short(statement)}` changes an attribute"
        if isinstance(name, ast.Subscript):
            return f"`{_short(statement)}` writes into a tensor in place"
        if not isinstance(name, ast.Name):
            return f"`{_short(statement)}` unpacks into several names"
    reason = impurity(statement.value, typer)
    if reason is not None:
        return reason
    kind = typer.kind(statement.value)
    if isinstance(target, ast.Tuple):
        typer.bind(target, kind, statement.value)
        kinds = [typer.kind(n) for n in names]
    else:
        kinds = [kind]
        typer.bind(target, kind)
    for name, kind in zip(names, kinds):
        if not kind.is_tensor:
            what = "is not known to be a tensor" if kind in (Kind.UNKNOWN, Kind.MAYBE_TENSOR) else f"is a {kind.value}"
            return f"`{name.id}` {what} in `{_short(statement)}`"
    return None


def names_read_outside(ctx: "Context", nodes: Iterable[ast.AST]) -> set[str]:
    """The names the function mentions outside `nodes`: a name a rewrite makes local to them must not be one."""
    inside = {id(n) for node in nodes for n in ast.walk(node)}
    return {n.id for n in ctx.nodes() if isinstance(n, ast.Name) and id(n) not in inside}


def enclosing_block(function: ast.AST, statement: ast.stmt) -> tuple[ast.AST, str, list[ast.stmt]] | None:
    """The compound statement (or the function) whose block holds `statement`, the block's field and the block."""
    for node in ast.walk(function):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and any(s is statement for s in block):
                return node, field, block
    return None


def static_prefix(node: ast.If, ctx: "Context") -> int:
    """How many leading operands of `if a and b and t:` are Python values (`mask is not None`),
    when the rest are tensors and there is no `else`: those stay a Python `if` around the rewrite."""
    test = node.test
    if node.orelse or not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
        return 0
    kinds = [ctx.kind(v).is_tensor for v in test.values]
    count = kinds.index(True) if True in kinds else 0
    return count if all(kinds[count:]) else 0


def where_plan(node: ast.If, ctx: "Context", skip: int = 0) -> tuple | str:
    """The data of the `torch.where` rewrite of the `if` chain at `node`, or why there is none;
    the first `skip` operands of the condition are left to a Python `if` (see `static_prefix`).

    Data: (condition recipes, condition temporaries, per-branch statement temporaries, outputs).
    A statement gets a temporary (`y_then`) when a later statement of its branch reads it or it
    is not the name's last assignment there, or when it reads another output that an earlier
    `torch.where` may already have replaced, or when its name is local to the branch (unbound
    before, read nowhere else: not an output); otherwise its value goes into the `where` itself.
    """
    tests, bodies = if_chain(node)
    recipes = []
    for index, test in enumerate(tests):
        if index == 0 and skip:
            tensors = [bool_recipe(v, ctx.typer) for v in test.values[skip:]]
            recipe = tensors[0] if len(tensors) == 1 else ("and", tuple(tensors))
        else:
            recipe = bool_recipe(test, ctx.typer)
        if recipe is None:
            return f"the condition `{_short(test)}` is not only tensors"
        if index and (reason := impurity(test, ctx.typer)) is not None:
            return f"the `elif` condition would always run: {reason}"
        recipes.append(recipe)
    before = ctx.typer.env
    outputs: dict[str, None] = {}
    for body in bodies:
        typer = branch_typer(ctx)
        for statement in body:
            reason = statement_problem(statement, typer)
            if reason is not None:
                return reason
            outputs.setdefault(statement.targets[0].id)
    # A name one branch assigns only for its own use (unbound before, read nowhere else) stays local.
    outside = names_read_outside(ctx, [node])
    for name in list(outputs):
        if name not in before and name not in outside and any(not _assigns(body, name) for body in bodies):
            del outputs[name]
    if not outputs:
        return "the branches assign nothing"
    for name in outputs:
        if any(not _assigns(body, name) for body in bodies):
            kind = before.get(name)
            if kind is None:
                return f"`{name}` is assigned in one branch only and not bound before the `if`"
            if not kind.is_tensor:
                return f"`{name}` is not known to be a tensor before the `if`"
    names = FreshNames(ctx.node)
    labels = ["then", *(f"elif{i}" for i in range(1, len(tests))), "else"]
    several = len(outputs) > 1
    condition_temps = tuple(
        (
            names.fresh("cond" if i == 0 else f"cond_elif{i}")
            if several
            and not (isinstance(test, ast.Name) and test.id not in outputs and recipe == ("keep",) and not skip)
            else ""
        )
        for i, (test, recipe) in enumerate(zip(tests, recipes))
    )
    statement_temps = []
    for label, body in zip(labels, bodies):
        temps, renamed = [], set()
        for index, statement in enumerate(body):
            name = statement.targets[0].id
            later = body[index + 1 :]
            reads = set(loaded_names([statement.value])) - renamed - {name}
            if name not in outputs or _assigns(later, name) or name in loaded_names(later) or reads & set(outputs):
                temps.append(names.fresh(f"{name}_{label}"))
                renamed.add(name)
            else:
                temps.append("")
        statement_temps.append(tuple(temps))
    return tuple(recipes), condition_temps, tuple(statement_temps), tuple(outputs)


def _assigns(statements: list[ast.stmt], name: str) -> bool:
    return any(isinstance(s, ast.Assign) and any(_binds(t, name) for t in s.targets) for s in statements)


def _binds(target: ast.expr, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target))


def cond_plan(node: ast.If, ctx: "Context") -> tuple | str:
    """The data of the `torch.cond` rewrite of an `if`/`else`, or why there is none.

    Either the branches `return` (each branch is its own statements, plus the rest of the function
    when it falls through, ending in `return` of tensors or equal-length tuples of them), or they
    only assign (the branch functions return the assigned names, `a, b = torch.cond(...)`).
    Statements must be pure tensor assignments. Data: (condition recipe, operands, branch
    function names, index of the `if` in the function body or -1 when the rest of the function
    stays as it is, per branch which returned values to clone, which branches return by
    themselves, the names assigned from the result when the branches only assign).
    """
    tests, _ = if_chain(node)
    if len(tests) > 1:
        return "an `elif` chain with `return` in a branch"
    recipe = bool_recipe(node.test, ctx.typer)
    if recipe is None:
        return f"the condition `{_short(node.test)}` is not only tensors"
    returns = [_ends_in_return(node.body), _ends_in_return(node.orelse)]
    index, branches, outputs = -1, [node.body, node.orelse], ()
    if not any(returns):
        outputs = tuple(dict.fromkeys(n for body in branches for s in body for n in _assigned(s)))
        if not outputs:
            return "the branches assign nothing"
    elif not all(returns):
        function_body = ctx.node.body
        if not any(s is node for s in function_body):
            return "the `return` is inside a nested block of the function"
        index = next(i for i, s in enumerate(function_body) if s is node)
        rest = function_body[index + 1 :]
        branches = [b if r else b + rest for b, r in zip(branches, returns)]
        if not _ends_in_return(rest):
            return "the function does not end in `return` after the `if`"
    before = ctx.typer.env
    kept = [n for n in outputs if not all(any(n in _assigned(s) for s in body) for body in branches)]
    for name in kept:  # a branch that leaves a name alone returns its value from before the `if`
        if not before.get(name, Kind.UNKNOWN).is_tensor:
            return f"`{name}` is assigned in one branch only and not known to be a tensor before the `if`"
    free = [n for body in branches for n in _free_names(body)]
    operands = tuple(n for n in dict.fromkeys([*free, *kept]) if before.get(n, Kind.UNKNOWN).is_tensor)
    arities, clones = set(), []
    for body in branches:
        typer = branch_typer(ctx)
        views = set(operands)  # names that may be an operand or a view of one
        for statement in body[:-1] if not outputs else body:
            reason = statement_problem(statement, typer, allow_unpacking=True)
            if reason is not None:
                return reason
            targets = set(_assigned(statement))
            views = views | targets if aliasing(statement.value, views) else views - targets
        if outputs:
            clones.append(tuple(n in views for n in outputs))
            continue
        value = body[-1].value
        values = value.elts if isinstance(value, ast.Tuple) else [value]
        for element in values:
            reason = impurity(element, typer)
            if reason is not None:
                return reason
            if not typer.kind(element).is_tensor:
                return f"the branch returns `{_short(element)}`, not known to be a tensor"
        arities.add(len(values) if isinstance(value, ast.Tuple) else 0)
        clones.append(tuple(aliasing(v, views) for v in values))
    if len(arities) > 1:
        return "the branches return different numbers of values"
    for body in branches:
        # A name a nested function assigns is local to it: reading it first needs a parameter.
        early = set(_free_names(body)) & {n for s in body for n in _assigned(s)} - set(operands)
        if early:
            return f"a branch reads and then reassigns `{early.pop()}`, which is not a tensor"
    names = FreshNames(ctx.node)
    branch_names = (names.fresh("then_branch"), names.fresh("else_branch"))
    return recipe, operands, branch_names, index, tuple(clones), tuple(returns), outputs


def _free_names(body: list[ast.stmt]) -> list[str]:
    """Names the statements read before assigning them (the values they take from outside)."""
    free, bound = {}, set()
    for statement in body:
        value = statement.value if isinstance(statement, (ast.Assign, ast.Return)) else statement
        free.update((n, None) for n in loaded_names([value]) if n not in bound)
        bound.update(_assigned(statement))
    return list(free)


def _assigned(statement: ast.stmt) -> list[str]:
    """Names an assignment statement binds."""
    if not isinstance(statement, ast.Assign):
        return []
    return [n.id for t in statement.targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _ends_in_return(statements: list[ast.stmt]) -> bool:
    return bool(statements) and isinstance(statements[-1], ast.Return) and statements[-1].value is not None


def aliasing(expr: ast.expr, views: set[str]) -> bool:
    """Whether `expr` may be an input itself or a view of one (torch.cond refuses such outputs);
    `views` holds the names that may be."""
    if isinstance(expr, ast.Name):
        return expr.id in views
    if isinstance(expr, (ast.Attribute, ast.Subscript)):
        return True
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _ALIASING


# -- apply time: libcst ----------------------------------------------------------------------------------


def build_condition(test: "cst.BaseExpression", recipe: Recipe) -> "cst.BaseExpression":
    """The bool-tensor form of an `if` test, following its plan-time recipe."""
    import libcst as cst

    how = recipe[0]
    if how == "keep":
        return test
    if how in ("nonzero", "zero"):
        # "zero" is the recipe of `not t`: compare the operand of `not`.
        operand, op = (test, cst.NotEqual()) if how == "nonzero" else (test.expression, cst.Equal())
        return cst.Comparison(parenthesize(operand), [cst.ComparisonTarget(op, cst.Integer("0"))])
    if how == "chain":
        pairs, left = [], test.left
        for target in test.comparisons:
            pairs.append(parenthesize(cst.Comparison(left, [target.with_changes(comparator=target.comparator)])))
            left = target.comparator
        return _join(pairs, cst.BitAnd)
    if how == "not":
        return cst.UnaryOperation(cst.BitInvert(), parenthesize(build_condition(test.expression, recipe[1])))
    # and / or: a chain of `&` / `|`, left to right like the original.
    parts = [parenthesize(build_condition(v, r)) for v, r in zip(bool_operands(test), recipe[1])]
    return _join(parts, cst.BitAnd if how == "and" else cst.BitOr)


def _join(parts: list["cst.BaseExpression"], op: type) -> "cst.BaseExpression":
    """`a & b & c` (or another binary operator) from its operands, grouped to the left."""
    import libcst as cst

    result = parts[0]
    for part in parts[1:]:
        result = cst.BinaryOperation(result, op(), part)
    return result


def join_and(operands: list["cst.BaseExpression"]) -> "cst.BaseExpression":
    """`a and b and c` from its operands."""
    import libcst as cst

    result = operands[0]
    for operand in operands[1:]:
        result = cst.BooleanOperation(result, cst.And(), operand)
    return result


def bool_operands(test: "cst.BaseExpression") -> list["cst.BaseExpression"]:
    """`a and b and c` as [a, b, c] (libcst nests it to the left)."""
    import libcst as cst

    test = test.with_changes(lpar=[], rpar=[]) if isinstance(test, cst.BooleanOperation) else test
    if isinstance(test, cst.BooleanOperation):
        op = type(test.operator)
        left = test.left
        same = isinstance(left, cst.BooleanOperation) and not left.lpar and isinstance(left.operator, op)
        return (bool_operands(left) if same else [left]) + [test.right]
    return [test]


def parenthesize(expr: "cst.BaseExpression") -> "cst.BaseExpression":
    """`expr` in parentheses unless it is an atom that binds tighter than any operator."""
    import libcst as cst

    atoms = (cst.Name, cst.Call, cst.Attribute, cst.Subscript, cst.Integer, cst.Float, cst.SimpleString, cst.Tuple)
    if isinstance(expr, atoms) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def rename(expr: "cst.CSTNode", mapping: dict[str, str]) -> "cst.CSTNode":
    """`expr` with the variables of `mapping` renamed (attribute and keyword names untouched)."""
    import libcst as cst

    if not mapping:
        return expr

    class Renamer(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
            return updated.with_changes(value=mapping.get(updated.value, updated.value))

        def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
            return updated.with_changes(attr=original.attr)

        def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
            return updated.with_changes(keyword=original.keyword)

    return expr.visit(Renamer())


def string(text: str) -> "cst.SimpleString":
    """A double-quoted literal holding `text`."""
    import libcst as cst

    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return cst.SimpleString(f'"{escaped}"')


def line_index(lines: list["cst.BaseStatement"], statements_before: int) -> int:
    """Index in a libcst block of the statement that `ast` counts as number `statements_before`
    (libcst keeps `a = 1; b = 2` on one line)."""
    import libcst as cst

    count = 0
    for index, line in enumerate(lines):
        if count == statements_before:
            return index
        count += len(line.body) if isinstance(line, cst.SimpleStatementLine) else 1
    raise ValueError("statement not found")


def comment_lines(header: "cst.TrailingWhitespace | None") -> list["cst.EmptyLine"]:
    """The comment at the end of a block header (`if c:  # why`) as a line of its own."""
    import libcst as cst

    if header is None or header.comment is None:
        return []
    return [cst.EmptyLine(comment=header.comment)]


def assign(name: str, value: "cst.BaseExpression") -> "cst.SimpleStatementLine":
    import libcst as cst

    return cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], value)])


def chain_parts(node: "cst.If") -> tuple[list["cst.BaseExpression"], list[list["cst.BaseSmallStatement"]]]:
    """Tests and bodies (small statements, in order) of an `if`/`elif`/`else` chain; libcst's
    mirror of `if_chain`."""
    import libcst as cst

    tests, bodies = [], []
    current: cst.CSTNode | None = node
    while isinstance(current, cst.If):
        tests.append(current.test)
        bodies.append(list(small_statements(current.body)))
        current = current.orelse
    bodies.append(list(small_statements(current.body)) if current is not None else [])
    return tests, bodies


def small_statements(block: "cst.BaseSuite") -> Iterator["cst.CSTNode"]:
    """The statements of a block, `a = 1; b = 2` counting as two (as in `ast`)."""
    import libcst as cst

    if isinstance(block, cst.SimpleStatementSuite):
        yield from block.body
        return
    for line in block.body:
        if isinstance(line, cst.SimpleStatementLine):
            yield from line.body
        else:
            yield line


def chain_comments(node: "cst.If", header: bool = True) -> list["cst.EmptyLine"]:
    """Every comment of an `if` chain except those above it and inside expressions (and on its first
    line, without `header`), in source order: the rewrite puts them above the new statements."""
    import libcst as cst

    comments: list[cst.EmptyLine] = []

    def add(comment: cst.Comment | None) -> None:
        if comment is not None:
            comments.append(cst.EmptyLine(comment=comment))

    def block(suite: cst.BaseSuite) -> None:
        if isinstance(suite, cst.SimpleStatementSuite):
            add(suite.trailing_whitespace.comment)
            return
        add(suite.header.comment)
        for line in suite.body:
            add_lines(line.leading_lines)
            if isinstance(line, cst.SimpleStatementLine):
                add(line.trailing_whitespace.comment)
        add_lines(suite.footer)

    def add_lines(lines: Iterable[cst.EmptyLine]) -> None:
        for line in lines:
            add(line.comment)

    current: cst.CSTNode | None = node
    first = True
    while current is not None:
        if not first:
            add_lines(current.leading_lines)
        elif not header and isinstance(current.body, cst.IndentedBlock):
            current = current.with_changes(body=current.body.with_changes(header=cst.TrailingWhitespace()))
        first = False
        block(current.body)
        current = current.orelse if isinstance(current, cst.If) else None
    return comments


def where_statements(node: "cst.If", data: tuple, edit: "Edit") -> list["cst.SimpleStatementLine"]:
    """The statements replacing an `if` chain, following `where_plan`'s data."""
    import libcst as cst

    recipes, condition_temps, statement_temps, outputs = data
    tests, bodies = chain_parts(node)
    conditions: list[cst.BaseExpression] = []
    lines = []
    for test, recipe, temp in zip(tests, recipes, condition_temps):
        condition = build_condition(test, recipe)
        if temp:
            lines.append(assign(temp, condition))
            condition = cst.Name(temp)
        conditions.append(condition)
    finals: list[dict[str, cst.BaseExpression]] = []
    for body, temps in zip(bodies, statement_temps):
        mapping: dict[str, str] = {}
        values: dict[str, cst.BaseExpression] = {}
        for statement, temp in zip(body, temps):
            name = statement.targets[0].target.value
            value = rename(statement.value, mapping)
            if temp:
                lines.append(assign(temp, value))
                mapping[name] = temp
                value = cst.Name(temp)
            values[name] = value
        finals.append(values)
    for name in outputs:
        # None stands for the value from before the `if`: `where(c, y, y)` is just `y`.
        value = finals[-1].get(name)
        for condition, branch in zip(reversed(conditions), reversed(finals[:-1])):
            then = branch.get(name)
            if then is not None or value is not None:
                args = [cst.Arg(condition), cst.Arg(then or cst.Name(name)), cst.Arg(value or cst.Name(name))]
                value = cst.Call(edit.torch("where"), args)
        lines.append(assign(name, value))
    return lines


def cond_statements(
    node: "cst.If", rest: list["cst.BaseStatement"], data: tuple, edit: "Edit"
) -> list["cst.BaseStatement"]:
    """Two nested functions and `return torch.cond(...)`, following `cond_plan`'s data. A branch
    that does not return takes `rest` (the statements after the `if`)."""
    import libcst as cst

    recipe, operands, names, _, clones, returns, outputs = data
    then_body = list(_block_lines(node.body))
    else_body = list(_block_lines(node.orelse.body)) if node.orelse is not None else []
    bodies = [b if r else b + rest for b, r in zip((then_body, else_body), returns)]
    if outputs:  # assigning branches return what they assign
        result = _names_expression(outputs, parens=False)
        bodies = [b + [cst.SimpleStatementLine([cst.Return(result)])] for b in bodies]
    params = cst.Parameters([cst.Param(cst.Name(o)) for o in operands])
    defs = []
    for name, body, clone in zip(names, bodies, clones):
        body = body[:-1] + [_clone_returned(body[-1], clone)]
        defs.append(cst.FunctionDef(cst.Name(name), params, cst.IndentedBlock(body)))
    operand_tuple = cst.parse_expression(f"({operands[0]},)") if len(operands) == 1 else _names_expression(operands)
    condition = build_condition(node.test, recipe)
    args = [cst.Arg(condition), cst.Arg(cst.Name(names[0])), cst.Arg(cst.Name(names[1])), cst.Arg(operand_tuple)]
    call = cst.Call(edit.torch("cond"), args)
    if outputs:
        target = _names_expression(outputs, parens=False)
        return [*defs, cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(target)], call)])]
    return [*defs, cst.SimpleStatementLine([cst.Return(call)])]


def _names_expression(names: tuple[str, ...], parens: bool = True) -> "cst.BaseExpression":
    """`a` for one name, `(a, b)` (or `a, b`) for several, `()` for none."""
    import libcst as cst

    if len(names) == 1:
        return cst.Name(names[0])
    elements = [cst.Element(cst.Name(n)) for n in names]
    return cst.Tuple(elements) if parens or not names else cst.Tuple(elements, lpar=[], rpar=[])


def _block_lines(suite: "cst.BaseSuite") -> Iterator["cst.BaseStatement"]:
    import libcst as cst

    if isinstance(suite, cst.SimpleStatementSuite):
        for small in suite.body:
            yield cst.SimpleStatementLine([small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])
    else:
        yield from suite.body


def _clone_returned(line: "cst.SimpleStatementLine", clone: tuple[bool, ...]) -> "cst.SimpleStatementLine":
    """The final `return` with `.clone()` on the values that may alias an operand."""
    import libcst as cst

    returned = line.body[-1]
    value = returned.value

    def cloned(expr: cst.BaseExpression) -> cst.BaseExpression:
        return cst.Call(cst.Attribute(parenthesize(expr), cst.Name("clone")))

    if isinstance(value, cst.Tuple):
        elements = [e.with_changes(value=cloned(e.value)) if c else e for e, c in zip(value.elements, clone)]
        value = value.with_changes(elements=elements)
    elif clone[0]:
        value = cloned(value)
    return line.with_changes(body=[*line.body[:-1], returned.with_changes(value=value)])


def while_plan(node: ast.While, ctx: "Context") -> tuple | str:
    """The data of the `torch.while_loop` rewrite of a `while` on a tensor condition, or why there is
    none: (condition recipe, carried names, per carried name whether it may alias another tensor and
    is returned as a clone, names of the condition and body functions and of the condition's first
    value, names of the loop's results).

    The body must be pure tensor assignments; the names it assigns are carried through the loop and
    must be tensors before it (a name the loop only uses inside may stay local to the body function
    when nothing reads it after the loop). Other tensors are read by the functions as closures.
    """
    if node.orelse:
        return "the loop has an `else:`"
    recipe = bool_recipe(node.test, ctx.typer)
    if recipe is None:
        return f"the condition `{_short(node.test)}` is not only tensors"
    reason = impurity(node.test, ctx.typer)
    if reason is not None:
        return reason
    typer = branch_typer(ctx)
    before = ctx.typer.env
    views = {name for name, kind in before.items() if kind.is_tensor}
    for statement in node.body:
        reason = statement_problem(statement, typer, allow_unpacking=True)
        if reason is not None:
            return reason
        targets = set(_assigned(statement))
        views = views | targets if aliasing(statement.value, views) else views - targets
    assigned = list(dict.fromkeys(n for s in node.body for n in _assigned(s)))
    inside = {id(n) for statement in node.body for n in ast.walk(statement)}
    read_outside = {
        n.id for n in ctx.nodes() if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in inside
    }
    free = set(_free_names(node.body))
    carried = []
    for name in assigned:
        if before.get(name, Kind.UNKNOWN).is_tensor:
            carried.append(name)
        elif name in free or name in read_outside:
            return f"`{name}` is assigned in the loop and is not known to be a tensor before it"
    if not carried:
        return "the loop assigns no tensor"
    names = FreshNames(ctx.node)
    functions = (names.fresh("loop_cond"), names.fresh("loop_body"), names.fresh("loop_entered"))
    looped = tuple(names.fresh(f"{n}_looped") for n in carried)
    return recipe, tuple(carried), tuple(n in views for n in carried), functions, looped


def while_statements(node: "cst.While", data: tuple, edit: "Edit") -> list["cst.BaseStatement"]:
    """The two functions and the `torch.while_loop` call replacing a `while`, following `while_plan`.

    The loop's results replace the carried names through `torch.where` on the condition's first value:
    `torch.while_loop`'s backward gives no gradient to the inputs of a loop that runs zero times (torch
    2.13), and `torch.where` passes them through then, values and gradients unchanged."""
    import libcst as cst

    recipe, carried, clones, (cond_name, body_name, entered), looped = data
    params = cst.Parameters([cst.Param(cst.Name(n)) for n in carried])
    test = cst.SimpleStatementLine([cst.Return(build_condition(node.test, recipe))])
    returned = [
        cst.Call(cst.Attribute(cst.Name(n), cst.Name("clone"))) if c else cst.Name(n) for n, c in zip(carried, clones)
    ]
    result = cst.Tuple([cst.Element(v) for v in returned])
    body = [*_block_lines(node.body), cst.SimpleStatementLine([cst.Return(result)])]
    functions = [
        cst.FunctionDef(cst.Name(cond_name), params, cst.IndentedBlock([test])),
        cst.FunctionDef(cst.Name(body_name), params, cst.IndentedBlock(body)),
    ]

    def names(items: tuple) -> "cst.Tuple":
        return cst.Tuple([cst.Element(cst.Name(n)) for n in items])

    first = cst.Call(cst.Name(cond_name), [cst.Arg(cst.Name(n)) for n in carried])
    call = cst.Call(
        edit.torch("while_loop"), [cst.Arg(cst.Name(cond_name)), cst.Arg(cst.Name(body_name)), cst.Arg(names(carried))]
    )
    target = names(looped).with_changes(lpar=[], rpar=[]) if len(carried) > 1 else names(looped)
    why = cst.EmptyLine(comment=cst.Comment("# a loop that runs zero times keeps its inputs and their gradients"))
    picks = [
        cst.SimpleStatementLine(
            [
                cst.Assign(
                    [cst.AssignTarget(cst.Name(n))],
                    cst.Call(edit.torch("where"), [cst.Arg(cst.Name(a)) for a in (entered, out, n)]),
                )
            ],
            leading_lines=[why] if index == 0 else [],
        )
        for index, (n, out) in enumerate(zip(carried, looped))
    ]
    return [
        *functions,
        cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(entered))], first)]),
        cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(target)], call)]),
        *picks,
    ]
