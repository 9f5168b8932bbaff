"""Splitting statements so that their pointwise part fuses.

A statement is fusible only as a whole (regions.py), but model code mixes calls the op table
does not know with pointwise math in one statement (LLaMA's MLP):

    down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

The unknown calls inside the pointwise part are hoisted into fresh temporaries before the
statement, in evaluation order, and the pointwise part becomes a statement of its own:

    _gate_proj = self.gate_proj(x)
    _up_proj = self.up_proj(x)
    _act_mul = self.act_fn(_gate_proj) * _up_proj
    down_proj = self.down_proj(_act_mul)

which the region finder then fuses like any other. A statement is split only when its
pointwise part ends up in a region; every other line keeps its text byte for byte. The rules
that keep the meaning (what is refused) are in docs/compiler.md, "Splitting statements".
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from transpiler.analysis.walker import Walker, Context
from transpiler.compiler.inlining import Callee
from transpiler.compiler.ir import NotFused, Origin, Region
from transpiler.analysis.kinds import Kind
from transpiler.compiler.regions import (
    MIN_OPS,
    TRIVIAL,
    RegionFinder,
    cost,
    find_regions,
    named_regions,
    typed_reasons,
    outside_regions,
    translate,
    translate_part,
)

# Statements whose evaluation order the split could not keep: they are left alone.
_REFUSED = (
    ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda,  # suspends, binds, defers
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,  # a scope of their own
    ast.BoolOp, ast.IfExp,  # parts that may not run
)  # fmt: skip
# Kinds a hoisted value may have: a tensor, or what the analysis cannot tell (a helper's result).
_HOISTED_KINDS = frozenset({Kind.TENSOR, Kind.BOOL_TENSOR, Kind.MAYBE_TENSOR, Kind.UNKNOWN})
_SHORT_OPS = {"activation": "act"}  # op names as temporaries' names spell them


@dataclass(frozen=True)
class Hoisting:
    """A file's regions, found in its text with statements split."""

    text: str
    regions: list[Region]
    origin: Origin
    splits: int  # statements split
    not_fused: tuple[NotFused, ...] = ()  # on the lines of `text`


@dataclass(frozen=True)
class _Split:
    """One statement to split: its pointwise parts and what each hoists, in evaluation order."""

    function: str  # qualified name
    statement: ast.stmt
    roots: tuple[ast.expr, ...]  # the pointwise parts
    hoisted: tuple[tuple[ast.expr, ...], ...]  # per root, the subexpressions it hoists
    names: tuple[str, ...]  # per root, the operation names its temporary is named after


def hoist_regions(
    tree: ast.Module,
    path: str,
    module: str,
    is_package: bool,
    text: str,
    compiled: set[str] | None = None,
    tensor_params: dict[str, frozenset[str]] | None = None,
) -> Hoisting:
    """The regions of one file (as `regions.find_regions` finds them) after splitting the statements
    whose pointwise part then joins a region."""
    splits, taken, unsplit, left = _plan(tree, path, module, is_package, text, compiled, tensor_params)
    while True:
        split_text, ranges, temporaries, pointwise = _apply(text, splits, taken)
        if not splits:  # the plan's own passes read this very text: their regions are find_regions'
            return Hoisting(split_text, unsplit, Origin(text, ranges), 0, left)
        split_tree = ast.parse(split_text) if splits else tree
        not_fused: list[NotFused] = []
        regions = find_regions(
            split_tree, path, module, is_package, split_text, compiled, tensor_params, temporaries, not_fused
        )
        covered = [s for s, lines in zip(splits, pointwise) if all(_in_region(line, regions) for line in lines)]
        if len(covered) == len(splits):
            return Hoisting(split_text, regions, Origin(text, ranges), len(splits), tuple(not_fused))
        splits = covered  # those left out may have bounded others' regions: find them again


def _in_region(line: int, regions: list[Region]) -> bool:
    return any(r.first_line <= line <= r.last_line for r in regions)


# -- planning ------------------------------------------------------------------------------
class _Planner:
    """A checker pass beside a RegionFinder (whose inlinable classes it reads): the splits of a file."""

    def __init__(self, compiled: set[str] | None, callees: dict[str, Callee], lines: list[bytes]) -> None:
        self.compiled = compiled
        self.callees = callees
        self.lines = lines  # the text's lines, encoded: `ast` columns are UTF-8 offsets
        self.splits: dict[str, list[_Split]] = {}  # per function, in the order the walk meets them
        self.taken: dict[str, frozenset[str]] = {}  # per function, every name it uses

    def _visit(self, statement: ast.stmt, ctx: Context) -> None:
        function = ctx.function.qualname
        if self.compiled is not None and function not in self.compiled:
            return
        if not alone_on_its_lines(statement, self.lines) or translate(statement, ctx, self.callees) is not None:
            return
        split = _split(statement, ctx, self.callees)
        if split is not None:
            self.splits.setdefault(function, []).append(split)
            self.taken.setdefault(function, _names_in(ctx.node))

    visit_Assign = visit_AnnAssign = visit_AugAssign = visit_Return = _visit

    def check_function(self, findings, ctx: Context) -> None:
        pass


def alone_on_its_lines(statement: ast.stmt, lines: list[bytes]) -> bool:
    """Only blanks before it on its first line, only blanks or a comment after it on its last (`lines`:
    the text's lines, encoded, as `ast` columns are UTF-8 offsets)."""
    before = lines[statement.lineno - 1][: statement.col_offset]
    after = lines[statement.end_lineno - 1][statement.end_col_offset :].strip()
    return not before.strip() and (not after or after.startswith(b"#"))


def _plan(
    tree, path, module, is_package, text, compiled, tensor_params
) -> tuple[list[_Split], dict, list[Region], tuple[NotFused, ...]]:
    """Every statement that could be split, in text order, per function the names it uses, and the regions
    of the text as it is with the statements left out of them (what `find_regions` returns for it: the plan
    runs its passes).

    As `find_regions`, helpers whose parameters the project's call sites type are planned again
    with those types."""
    lines = [line.encode("utf-8") for line in text.splitlines(keepends=True)]
    finder = RegionFinder(path, compiled)
    planner = _Planner(compiled, finder.callees, lines)
    Walker([finder, planner]).check(tree, module, is_package, text)
    splits = {f: s for f, s in planner.splits.items() if f not in (tensor_params or {})}
    taken = dict(planner.taken)
    typed_regions = []
    if tensor_params:
        typed, typed_finder = _Planner(compiled, finder.callees, lines), RegionFinder(path, compiled, finder.callees)
        Walker([typed_finder, typed]).check(tree, module, is_package, text, tensor_params)
        splits.update(typed.splits)
        taken.update(typed.taken)
        typed_regions = typed_finder.regions
    ordered = sorted((s for found in splits.values() for s in found), key=lambda s: s.statement.lineno)
    regions = named_regions(finder.regions, typed_regions, tensor_params)
    reasons = typed_reasons(finder, typed_finder if tensor_params else None, tensor_params)
    return ordered, taken, regions, outside_regions(reasons, regions)


def _split(statement: ast.stmt, ctx: Context, callees: dict[str, Callee]) -> _Split | None:
    """How to split `statement`, or None when it must stay as it is."""
    if isinstance(statement, ast.Assign):
        if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
            return None  # several targets, unpacking, attributes and subscripts (setters)
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        if not isinstance(statement.target, ast.Name):
            return None
    if statement.value is None or any(_refused(node) for node in ast.walk(statement.value)):
        return None

    def hoistable(node: ast.expr) -> bool:
        is_value = isinstance(node, (ast.Call, ast.Subscript)) or (
            isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult)
        )
        return is_value and ctx.kind(node) in _HOISTED_KINDS

    roots, hoisted, names = [], [], []
    for node, part in _pointwise_parts(statement.value, ctx, callees, hoistable):
        if node is statement.value and not part.opaque:
            return None  # nothing to hoist: the statement is not fusible for another reason
        roots.append(node)
        hoisted.append(tuple(sorted(part.opaque, key=_evaluation_order(node).index)))
        names.append("_".join(_SHORT_OPS.get(op, op) for op in dict.fromkeys(part.ops) if op not in TRIVIAL))
    if not roots or not _keeps_call_order(statement.value, roots, hoisted):
        return None
    return _Split(ctx.function.qualname, statement, tuple(roots), tuple(hoisted), tuple(names))


def _refused(node: ast.AST) -> bool:
    if isinstance(node, _REFUSED):
        return True
    # An in-place method (`x.add_(y)`) changes what the parts evaluated before it read.
    func = node.func if isinstance(node, ast.Call) else None
    return isinstance(func, ast.Attribute) and func.attr.endswith("_") and not func.attr.startswith("__")


def _pointwise_parts(value: ast.expr, ctx: Context, callees: dict[str, Callee], hoistable) -> Iterator:
    """The outermost subexpressions of `value` that are fusible once their unknown calls are
    hoisted and compute at least MIN_OPS, with their translation, in evaluation order."""
    pending = [value]
    while pending:
        node = pending.pop()
        part = translate_part(node, ctx, callees, hoistable) if _may_be_root(node, ctx, callees) else None
        if part is not None and cost(part.ops) >= MIN_OPS:
            yield node, part
            continue
        pending += reversed(_children(node))


def _may_be_root(node: ast.expr, ctx: Context, callees: dict[str, Callee]) -> bool:
    """A tensor computed by an op, other than a lone call of an inlined submodule (`self.norm(x)`
    of an RMSNorm class): its own forward is a kernel already, nothing would fuse with it."""
    if not isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call)) or not ctx.kind(node).is_tensor:
        return False
    if isinstance(node, ast.Call) and all(isinstance(a, (ast.Name, ast.Attribute)) for a in node.args):
        attr = ctx.self_attr(node.func)
        return not (attr is not None and ctx.cls is not None and ctx.cls.attr_ctors.get(attr) in callees)
    return True


def _keeps_call_order(value: ast.expr, roots: list[ast.expr], hoisted: list[tuple]) -> bool:
    """Whether the calls of the statement still run in their order: every hoisted subexpression ran
    before every call left in the statement (only pure pointwise ops move)."""
    order = _evaluation_order(value)
    position = {id(n): i for i, n in enumerate(order)}
    inside = {id(n) for root in roots for n in ast.walk(root)}
    outer = [i for i, n in enumerate(order) if isinstance(n, ast.Call) and id(n) not in inside]
    last_hoisted = max((position[id(h)] for found in hoisted for h in found), default=-1)
    return not (outer and last_hoisted > min(outer))


def _evaluation_order(node: ast.AST) -> list[ast.AST]:
    """The subexpressions of `node` in the order Python finishes evaluating them (a call after its arguments)."""
    return [n for child in _children(node) for n in _evaluation_order(child)] + [node]


def _children(node: ast.AST) -> list[ast.expr]:
    """Subexpressions in evaluation order (a dict's keys and values interleave)."""
    if isinstance(node, ast.Dict):
        return [n for pair in zip(node.keys, node.values) for n in pair if n is not None]
    children = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.expr):
            children.append(child)
        elif isinstance(child, ast.keyword):
            children.append(child.value)
    return children


def _names_in(function: ast.AST) -> frozenset[str]:
    names = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)}
    return frozenset(names | {a.arg for a in ast.walk(function) if isinstance(a, ast.arg)})


# -- rewriting the text ------------------------------------------------------------------------
def _apply(text: str, splits: list[_Split], taken: dict[str, frozenset[str]]):
    """The text with `splits` applied; per line, the lines of `text` it comes from; per function, the
    temporaries that hold tensors; per split, the lines of its pointwise statements."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    ranges: list[tuple[int, int]] = []
    temporaries: dict[str, set[str]] = {}
    pointwise: list[list[int]] = []
    names = {function: set(used) for function, used in taken.items()}
    done = 0  # lines of `text` copied or replaced so far
    for split in splits:
        first, last = split.statement.lineno, split.statement.end_lineno
        for n in range(done + 1, first):
            out.append(lines[n - 1])
            ranges.append((n, n))
        statements, pure = _rewrite(split, lines, names[split.function], temporaries.setdefault(split.function, set()))
        lines_of = []
        for index, statement in enumerate(statements):
            if index in pure:
                lines_of += range(len(out) + 1, len(out) + statement.count("\n") + 1)
            out.append(statement)
            ranges += [(first, last)] * statement.count("\n")
        pointwise.append(lines_of)
        done = last
    for n in range(done + 1, len(lines) + 1):
        out.append(lines[n - 1])
        ranges.append((n, n))
    return "".join(out), tuple(ranges), {f: frozenset(t) for f, t in temporaries.items()}, pointwise


def _rewrite(split: _Split, lines: list[str], names: set[str], temporaries: set[str]) -> tuple[list[str], set[int]]:
    """The statements replacing `split.statement` (each a text ending in a newline) and the
    positions of the pointwise ones among them."""
    statement = split.statement
    source = _Source(lines, statement)
    end = lines[statement.end_lineno - 1]
    newline = end[len(end.rstrip("\r\n")) :] or "\n"
    indent = source.text[: source.offset(statement.lineno, statement.col_offset)]
    statements, pure, replacements = [], set(), []
    for root, hoisted, ops in zip(split.roots, split.hoisted, split.names):
        inner = []
        for node in hoisted:
            name = _fresh(_hoisted_name(node), names)
            temporaries.add(name)
            statements.append(f"{indent}{name} = {_parenthesized(source.segment(node, []))}{newline}")
            inner.append((node, name))
        if root is statement.value:
            replacements += inner
            continue
        name = _fresh(ops, names)
        temporaries.add(name)
        pure.add(len(statements))
        statements.append(f"{indent}{name} = {_parenthesized(source.segment(root, inner))}{newline}")
        replacements.append((root, name))
    rewritten = source.segment(None, replacements)
    if any(root is statement.value for root in split.roots):
        pure.add(len(statements))
    statements.append(rewritten)
    return statements, pure


class _Source:
    """The text of one statement's lines, addressed by `ast` positions."""

    def __init__(self, lines: list[str], statement: ast.stmt) -> None:
        self.lines = lines
        self.first = statement.lineno
        self.text = "".join(lines[statement.lineno - 1 : statement.end_lineno])

    def offset(self, line: int, byte_col: int) -> int:
        """Characters from the start of the statement's first line (`ast` columns count UTF-8 bytes)."""
        before = sum(len(self.lines[n - 1]) for n in range(self.first, line))
        return before + len(self.lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8"))

    def span(self, node: ast.expr) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.expr | None, replacements: list[tuple[ast.expr, str]]) -> str:
        """The text of `node` (None: all lines) with the text of each replaced node replaced by its name."""
        start, end = self.span(node) if node is not None else (0, len(self.text))
        pieces, at = [], start
        for replaced, name in sorted(replacements, key=lambda r: self.span(r[0])):
            begin, stop = self.span(replaced)
            pieces += [self.text[at:begin], name]
            at = stop
        pieces.append(self.text[at:end])
        return "".join(pieces)


def _parenthesized(expression: str) -> str:
    """An expression spanning lines needs brackets of its own once it stands alone."""
    return f"({expression})" if "\n" in expression else expression


def _hoisted_name(node: ast.expr) -> str:
    """What a hoisted value is called after: the function or method (`self.gate_proj(x)`: `gate_proj`)."""
    if isinstance(node, ast.Call):
        func = node.func
        return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else "call"
    if isinstance(node, ast.Subscript):
        value = node.value
        base = value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else "value"
        return f"{base}_indexed"
    return "matmul"


def _fresh(base: str, names: set[str]) -> str:
    """`_<base>`, numbered where the function already uses the name; taken from then on."""
    stem = "_" + (base.lstrip("_") or "value")
    name, n = stem, 2
    while name in names:
        name, n = f"{stem}_{n}", n + 1
    names.add(name)
    return name
