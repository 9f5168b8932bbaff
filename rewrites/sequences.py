"""Python lists of tensors, as Dynamo sees them: the kinds of a sequence's elements, of the keys
that sorting and `min`/`max` compare (TP206, TP207), of what a comprehension yields (TP519), and
which lists a tensor indexes (TP520).

Dynamo sorts a list (`sorted`, `list.sort`) only when the keys it compares are constants to it
(ints, shapes, strings): a tensor key has to be read (GB0207). `min`/`max` with `key=` or
`default=` it does not trace at all over tensors or modules, whatever the key (GB0193), while the
plain forms over tensors become `torch.maximum`/`minimum` and stay in the graph.

The typer has no kind for "a list of tensors", so the rules keep, per function, the names bound
to such lists (`parts = [a, b]`, `parts.append(h)`, `parts = x.unbind(0)`): a name counts from its
first such binding on, whatever the branch (lists built in loops are the common case).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from transpiler.analysis.kinds import Kind
from transpiler.analysis.typer import Typer
from transpiler.analysis.walker import Context
from transpiler.lint.rule import Rule

# Functions and tensor methods that return a sequence of tensors.
_SPLITTING = frozenset({"unbind", "split", "chunk", "tensor_split", "split_with_sizes", "hsplit", "vsplit", "dsplit"})
_PASSING = frozenset({"builtins.list", "builtins.tuple", "builtins.reversed", "builtins.sorted", "builtins.set"})
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp)
ELEMENTS = frozenset({Kind.TENSOR, Kind.MODULE})  # the elements that make `min`/`max` with a key break


class Sequences:
    """Names of one function bound to sequences, with the kinds of their elements."""

    def __init__(self) -> None:
        self.node: ast.AST | None = None
        self.names: dict[str, frozenset[Kind]] = {}

    def enter(self, ctx: Context) -> None:
        """Start afresh in a new function (the walker visits functions one after another)."""
        if self.node is not ctx.node:
            self.node, self.names = ctx.node, {}

    def record(self, target: ast.expr, kinds: frozenset[Kind]) -> None:
        if isinstance(target, ast.Name) and kinds:
            self.names[target.id] = self.names.get(target.id, frozenset()) | kinds

    def visit_assign(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign, ctx: Context) -> None:
        self.enter(ctx)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if node.value is None or not any(isinstance(t, ast.Name) for t in targets):
            return
        kinds = self.elements(node.value, ctx, literal_only=isinstance(node, ast.AugAssign), python_only=True)
        for target in targets:
            self.record(target, kinds)

    def visit_call(self, node: ast.Call, ctx: Context) -> None:
        """`parts.append(h)`, `parts.extend(hs)`, `parts.insert(0, h)`."""
        self.enter(ctx)
        func = node.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and node.args):
            return
        if func.attr in ("append", "insert"):
            kind = ctx.kind(node.args[-1])
            self.record(func.value, frozenset({_element(kind)}) - {Kind.UNKNOWN})
        elif func.attr == "extend":
            self.record(func.value, self.elements(node.args[0], ctx))  # `parts.extend(h)` of a tensor: rows

    def elements(
        self,
        seq: ast.expr,
        ctx: Context,
        literal_only: bool = False,
        python_only: bool = False,
        typer: Typer | None = None,
    ) -> frozenset[Kind]:
        """Kinds of what iterating `seq` yields, as far as known (unknown elements are left out);
        `python_only`: only for Python lists and tuples, not for tensors and modules. `typer`
        types the expressions inside (a scratch one under a comprehension's loop variables)."""
        typer = typer or ctx.typer
        if isinstance(seq, (ast.List, ast.Tuple, ast.Set)):
            kinds: set[Kind] = set()
            for element in seq.elts:
                if isinstance(element, ast.Starred):
                    kinds |= self.elements(element.value, ctx, typer=typer)
                else:
                    kinds.add(_element(typer.kind(element)))
            return frozenset(kinds - {Kind.UNKNOWN})
        if literal_only:
            return frozenset()
        if isinstance(seq, _COMPREHENSIONS):
            inner = scratch(ctx)
            for generator in seq.generators:
                self.bind(inner, generator.target, generator.iter, ctx)
            return frozenset({_element(inner.kind(seq.elt))} - {Kind.UNKNOWN})
        if isinstance(seq, ast.Name) and seq.id in self.names:
            return self.names[seq.id]
        if isinstance(seq, ast.Call):
            name = typer.qualname(seq.func)
            if name in _PASSING and seq.args:
                python = python_only and name == "builtins.reversed"
                return self.elements(seq.args[0], ctx, python_only=python, typer=typer)
            func = seq.func
            if name is not None and name.startswith("torch.") and name.rpartition(".")[2] in _SPLITTING:
                return frozenset({Kind.TENSOR})
            if isinstance(func, ast.Attribute) and func.attr in _SPLITTING and typer.kind(func.value).may_be_tensor:
                return frozenset({Kind.TENSOR})
        kind = Kind.UNKNOWN if python_only else typer.kind(seq)
        if kind.is_tensor:
            return frozenset({Kind.TENSOR})  # iterating a tensor yields tensors
        return frozenset({Kind.MODULE}) if kind is Kind.MODULE else frozenset()  # an nn.ModuleList

    def is_tensor(self, node: ast.expr, ctx: Context) -> bool:
        """A tensor, also `max(parts)`, `min(parts)` and `parts[i]` of a list of tensors."""
        if ctx.kind(node).is_tensor:
            return True
        if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
            if ctx.qualname(node.func) in ("builtins.max", "builtins.min"):
                return Kind.TENSOR in self.elements(node.args[0], ctx)
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            return Kind.TENSOR in self.elements(node.value, ctx, python_only=True)
        return False

    def keys(self, elements: frozenset[Kind], key: ast.expr | None, ctx: Context) -> frozenset[Kind]:
        """Kinds of the values `sorted`, `min` or `max` compare: the elements, or what `key` gives for them."""
        if key is None or isinstance(key, ast.Constant) and key.value is None:
            return elements
        typer = scratch(ctx)
        element = Kind.TENSOR if Kind.TENSOR in elements else next(iter(elements), Kind.UNKNOWN)
        if isinstance(key, ast.Lambda):
            args = key.args
            if len(args.args) != 1 or args.vararg or args.kwonlyargs:
                return frozenset()
            typer.env[args.args[0].arg] = element
            result = typer.kind(key.body)
        else:  # `key=torch.norm`, `key=len`, `key=self.score`: typed as a call on one element
            parameter = "_transpile_element"
            typer.env[parameter] = element
            call = ast.Call(func=key, args=[ast.Name(parameter, ast.Load())], keywords=[])
            result = typer.kind(call)
        return frozenset({_element(result)} - {Kind.UNKNOWN})

    def captures(self, key: ast.expr | None, ctx: Context) -> frozenset[Kind]:
        """Kinds of the function's locals that a `key` lambda closes over (or of the object whose
        method `key` is): Dynamo calls a key that captures only constants (ints, shapes) as a
        constant, one that captures `self` or tensors it does not."""
        if isinstance(key, ast.Attribute) and ctx.qualname(key) is None:
            return frozenset({_element(ctx.kind(key.value))} - {Kind.UNKNOWN})  # `key=self.score`
        if not isinstance(key, ast.Lambda):
            return frozenset()
        own = {a.arg for a in key.args.args}
        kinds: set[Kind] = set()
        for node in ast.walk(key.body):
            if isinstance(node, ast.Name) and node.id not in own:
                if node.id in self.names:
                    kinds |= self.names[node.id]
                elif node.id in ctx.typer.env:
                    kinds.add(_element(ctx.typer.env[node.id]))
        return frozenset(kinds - {Kind.UNKNOWN})

    def bind(self, typer: Typer, target: ast.expr, iterable: ast.expr, ctx: Context) -> None:
        kinds = self.elements(iterable, ctx, typer=typer)
        if isinstance(target, ast.Name) and len(kinds) == 1:
            typer.env[target.id] = next(iter(kinds))
        else:
            typer.bind_iteration(target, iterable)


def scratch(ctx: Context) -> Typer:
    """A typer with the function's environment and its own memo. The walker types a node once
    and keeps its kind: looking ahead (into a comprehension before its loop variables are bound,
    a lambda, another statement) with the walker's own typer would leave wrong kinds behind."""
    return Typer(ctx.names, ctx.cls, dict(ctx.typer.env), ctx.typer.classes)


# Tensor methods that reduce to a 0-dim tensor when called without a dimension.
FULL_REDUCTIONS = frozenset(
    "sum mean nansum nanmean prod max min amax amin norm std var logsumexp median nanmedian count_nonzero".split()
)


def scalar_elements(seq: ast.expr, ctx: Context) -> bool:
    """The elements of a list or tuple written out, of a list comprehension, or of a name bound
    only to such lists (and appended only such values) are 0-dim tensors: each a full
    reduction (`h.sum()`, `h.norm(dtype=...)`) of a tensor."""
    if isinstance(seq, ast.Name):
        return _scalar_name(seq.id, ctx)
    if isinstance(seq, ast.ListComp):
        elements = [seq.elt]
        typer = scratch(ctx)
        for generator in seq.generators:
            Sequences().bind(typer, generator.target, generator.iter, ctx)
    elif isinstance(seq, (ast.List, ast.Tuple)) and seq.elts:
        elements, typer = seq.elts, ctx.typer
    else:
        return False
    return all(_full_reduction(e, typer) for e in elements)


def _scalar_name(name: str, ctx: Context) -> bool:
    """Every binding and growth of `name` in the function holds 0-dim tensors, and no item of
    it is assigned."""
    typer = scratch(ctx)  # the other statements are typed out of order: not with the walker's memo
    bound = False
    for node in ctx.nodes():
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    if target.value.id == name:
                        return False
                elif any(isinstance(t, ast.Name) and t.id == name for t in ast.walk(target)):
                    if not (isinstance(target, ast.Name) and node.value is not None):
                        return False
                    empty = isinstance(node.value, (ast.List, ast.Tuple)) and not node.value.elts
                    if not empty and (isinstance(node.value, ast.Name) or not scalar_elements(node.value, ctx)):
                        return False  # an alias of another list, or other values
                    bound = True
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.With, ast.NamedExpr)):
            targets = [node.target] if not isinstance(node, ast.With) else [i.optional_vars for i in node.items]
            if any(isinstance(t, ast.Name) and t.id == name for target in targets if target for t in ast.walk(target)):
                return False
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            func = node.func
            if isinstance(func.value, ast.Name) and func.value.id == name:
                if func.attr in ("append", "insert") and not _full_reduction(node.args[-1], typer):
                    return False
                if func.attr == "extend" and not scalar_elements(node.args[0], ctx):
                    return False
    return bound


def _full_reduction(node: ast.expr, typer: Typer) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args):
        return False
    if node.func.attr not in FULL_REDUCTIONS or any(k.arg != "dtype" for k in node.keywords):
        return False
    return typer.kind(node.func.value).may_be_tensor and typer.qualname(node.func) is None


def _element(kind: Kind) -> Kind:
    return Kind.TENSOR if kind.is_tensor else kind if kind is Kind.MODULE else Kind.UNKNOWN


def keyword(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def any_tensor(kinds: Iterable[Kind]) -> bool:
    return any(k.is_tensor for k in kinds)


class SequenceRule(Rule):
    """A rule that knows the function's names bound to lists of tensors (`Sequences`): it
    implements `check_call` where other rules implement `visit_Call`."""

    def __init__(self) -> None:
        self.sequences = Sequences()

    def visit_Assign(self, node: ast.Assign, ctx: Context) -> None:
        self.sequences.visit_assign(node, ctx)

    def visit_AnnAssign(self, node: ast.AnnAssign, ctx: Context) -> None:
        self.sequences.visit_assign(node, ctx)

    def visit_AugAssign(self, node: ast.AugAssign, ctx: Context) -> None:
        self.sequences.visit_assign(node, ctx)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        self.sequences.visit_call(node, ctx)
        self.check_call(node, ctx)

    def check_call(self, node: ast.Call, ctx: Context) -> None:
        """Rules that look at calls override this."""
