"""Unaligned linear layers: `self.lm_head(x)` of an `nn.Linear` becomes `_transpile_linear(self.lm_head, x)`.

The runtime's `linear` (emit/runtime/linear.py) pads the layer on CUDA where its output rows
are not 16-byte aligned and the problem is big enough, and calls the module otherwise. Calls
are rewritten in the emitted module, in the functions that run under `forward`, where every
assignment of the attribute in its class is an `nn.Linear(...)` whose `out_features` is a
literal not a multiple of 8 (`nn.Linear(d, 1001)`) or names a vocabulary or a label count
(`nn.Linear(d, config.vocab_size)`, `nn.Linear(d, num_classes)`). Other layers keep their
calls: the runtime's check costs ~0.3 us of Python a call and would find them aligned.
"""

from __future__ import annotations

import ast
import re

from transpiler.analysis.walker import Walker, Context
from transpiler.compiler.ir import EPILOGUE, LINEAR, SIBLINGS, Epilogue, LinearSite, Region, SiblingGroup
from transpiler.analysis.kinds import Kind
from transpiler.compiler.ops import ACTIVATIONS, EPILOGUE_OPS
from transpiler.compiler.regions import _bodies, _live_after
from transpiler.analysis.symbols import ACTIVATION_ATTRIBUTE, Names, module_level

LINEAR_CLASSES = frozenset({"torch.nn.Linear", "torch.nn.modules.linear.Linear"})
ALIGN = 8  # the runtime's ALIGN: an out_features that is a multiple of it needs no padding
# Sizes the data decides: vocabularies (GPT-2's 50257, BERT's 30522, a LLaMA with an added token's 32001)
# and label counts (ImageNet-21k's 21843). Widths a designer chose (`config.intermediate_size`, `3 * dim`)
# are multiples of 8 as a rule (those of GPT-2, BERT, LLaMA and ViT all are): their calls stay as they are.
DATA_SIZE = re.compile(r"vocab|label|class", re.IGNORECASE)


class _LinearCalls:
    """A checker pass that collects the call sites to rewrite."""

    def __init__(self, compiled: set[str] | None, linears: dict[str, set[str]]) -> None:
        self.compiled = compiled
        self.linears = linears  # per class qualname, its unaligned nn.Linear attributes
        self.sites: list[LinearSite] = []

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        if ctx.cls is None or (self.compiled is not None and ctx.function.qualname not in self.compiled):
            return
        attr = ctx.self_attr(node.func)
        if attr is None or attr not in self.linears.get(ctx.cls.qualname, ()):
            return
        # One positional argument: the runtime passes it on as it came, to whatever module is there.
        one = len(node.args) == 1 and not isinstance(node.args[0], ast.Starred) and not node.keywords
        if one and node.func.lineno == node.func.end_lineno:
            self.sites.append(LinearSite(node.func.lineno, node.func.col_offset, node.func.end_col_offset))

    def check_function(self, findings, ctx: Context) -> None:
        pass


def linear_sites(text: str, module: str, is_package: bool, compiled: set[str] | None) -> list[LinearSite]:
    """The calls of unaligned `nn.Linear` layers in `text` (an emitted module) that the host writer routes
    through the runtime's `linear` (emit/host/linears.py); none where the module already uses that name."""
    tree = ast.parse(text)
    if any(isinstance(n, ast.Name) and n.id == LINEAR for n in ast.walk(tree)):
        return []  # the name is the user's (or the module was rewritten already)
    finder = _LinearCalls(compiled, _unaligned_linears(tree, module, is_package))
    if not finder.linears:
        return []
    Walker([finder]).check(tree, module, is_package, text)
    return finder.sites


def _unaligned_linears(tree: ast.Module, module: str, is_package: bool) -> dict[str, set[str]]:
    """Per class qualname: the attributes every assignment in the class (or a base class of the file) makes an
    `nn.Linear` whose `out_features` is not a literal multiple of ALIGN."""
    names = Names(tree, module, is_package)
    found: dict[str, set[str]] = {}
    for cls in (n for n in module_level(tree) if isinstance(n, ast.ClassDef)):
        assigned: dict[str, list[bool]] = {}
        for base in cls.bases:  # attributes of base classes defined above, as the checker inherits them
            for attr in found.get(f"{module}.{ast.unparse(base)}", ()):
                assigned[attr] = [True]
        for node in ast.walk(cls):
            for target in node.targets if isinstance(node, ast.Assign) else ():
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    assigned.setdefault(target.attr, []).append(_is_unaligned_linear(node.value, names))
        found[f"{module}.{cls.name}"] = {attr for attr, each in assigned.items() if all(each)}
    return {cls: attrs for cls, attrs in found.items() if attrs}


def _is_unaligned_linear(value: ast.expr, names: Names) -> bool:
    """`nn.Linear(...)` with an `out_features` that is a literal not a multiple of ALIGN, or that names a size
    the data decides (DATA_SIZE)."""
    if not (isinstance(value, ast.Call) and names.resolve(value.func) in LINEAR_CLASSES):
        return False
    keywords = {k.arg: k.value for k in value.keywords}
    out_features = value.args[1] if len(value.args) > 1 else keywords.get("out_features")
    if isinstance(out_features, ast.Constant):
        return isinstance(out_features.value, int) and out_features.value % ALIGN != 0
    return out_features is not None and DATA_SIZE.search(ast.unparse(out_features)) is not None


# -- sibling projections: the layers a forward applies to one input, computed at once ------------------------------
# Expressions whose calls run later or more than once: their layer calls are not grouped.
_DEFERRED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def sibling_groups(text: str, module: str, is_package: bool, compiled: set[str] | None) -> list[SiblingGroup]:
    """The groups of `nn.Linear` calls on one input in `text` (an emitted module), in the functions that run under
    `forward`: `self.a(x)`, `self.b(x)`, ... of distinct layers, one positional argument each, in one block with no
    statement between or among them rebinding `x` (a compound statement ends every group). The runtime's
    `siblings` computes them at once where that pays (autocast with autograd on: one cast of the input, one
    matmul for its gradient) and checks at each later call that the input and the layers are still those of the
    group's first call (emit/runtime/linear.py)."""
    tree = ast.parse(text)
    if any(isinstance(n, ast.Name) and n.id == SIBLINGS for n in ast.walk(tree)):
        return []  # the name is the user's
    finder = _SiblingCalls(compiled)
    Walker([finder]).check(tree, module, is_package, text)
    return finder.groups


class _Blocks:
    """A checker pass over each statement list of the methods that run under `forward` (`compiled`; every method
    where None): `_block` sees them one by one."""

    def __init__(self, compiled: set[str] | None) -> None:
        self.compiled = compiled

    def check_function(self, findings, ctx: Context) -> None:
        if ctx.cls is None or (self.compiled is not None and ctx.function.qualname not in self.compiled):
            return
        for body in _bodies(ctx.node):
            self._block(body, ctx)

    def _block(self, body: list[ast.stmt], ctx: Context) -> None:
        raise NotImplementedError


class _SiblingCalls(_Blocks):
    """A checker pass that collects sibling groups in the functions that run under `forward`."""

    def __init__(self, compiled: set[str] | None) -> None:
        super().__init__(compiled)
        self.groups: list[SiblingGroup] = []

    def _block(self, body: list[ast.stmt], ctx: Context) -> None:
        open_: dict[str, list[tuple[str, ast.Call, ast.stmt]]] = {}  # per input name: the calls so far

        def close(name: str) -> None:
            calls = open_.pop(name, [])
            if len(calls) > 1:
                first = calls[0][2]
                sites = tuple(LinearSite(c.func.lineno, c.func.col_offset, c.func.end_col_offset) for _, c, _ in calls)
                self.groups.append(SiblingGroup(sites, tuple(a for a, _, _ in calls), first.lineno, first.col_offset))

        for statement in body:
            if not isinstance(statement, _SIMPLE):
                for name in list(open_):
                    close(name)
                continue
            bound = _bound(statement)
            for attr, call, name in _linear_calls(statement, ctx):
                if name in bound:
                    continue  # `x` is rebound within the statement: its calls may see either value
                calls = open_.setdefault(name, [])
                if any(attr == a for a, _, _ in calls):
                    close(name)
                    calls = open_.setdefault(name, [])
                calls.append((attr, call, statement))
            for name in bound:
                close(name)
        for name in list(open_):
            close(name)


_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)


def _linear_calls(statement: ast.stmt, ctx: Context) -> list[tuple[str, ast.Call, str]]:
    """`self.<layer>(<name>)` calls of `nn.Linear` attributes in the statement, in evaluation order (a call's
    argument before it, left before right): (attribute, call, input name)."""
    found = []
    deferred = {id(n) for d in ast.walk(statement) if isinstance(d, _DEFERRED) for n in ast.walk(d)}
    for node in ast.walk(statement):
        if id(node) in deferred or not isinstance(node, ast.Call):
            continue
        call = _call_of(node, ctx)
        if call is None or not isinstance(call[1], ast.Name):
            continue
        if ctx.cls.attr_ctors.get(call[0]) in LINEAR_CLASSES and node.func.lineno == node.func.end_lineno:
            found.append((call[0], node, call[1].id))
    return sorted(found, key=lambda f: (f[1].end_lineno, f[1].end_col_offset))


def _bound(statement: ast.stmt) -> set[str]:
    """The names a simple statement binds (its targets, and walrus targets inside it)."""
    targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
    names = {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names | {n.target.id for n in ast.walk(statement) if isinstance(n, ast.NamedExpr)}


# -- linear + activation: the activation in cuBLASLt's epilogue ------------------------------------------
# Layers whose forward is one matmul with a bias: nn.Linear, and transformers' `Conv1D` (GPT-2's MLP),
# `torch.addmm(bias, x, weight)` with the weight stored transposed; imported relatively, it resolves to a
# tail of its qualified name (`pytorch_utils.Conv1D`). The runtime checks the exact class.
CONV1D = "transformers.pytorch_utils.Conv1D"


def epilogue_sites(
    tree: ast.Module, module: str, is_package: bool, text: str, compiled: set[str] | None, regions: list[Region]
) -> list[Epilogue]:
    """Each `h = self.fc(x)` followed by `h = self.act(h)` (or `h = self.act(self.fc(x))`) of an `nn.Linear` or
    `Conv1D` layer and an activation module, in the functions that run under `forward`. The emitted module
    calls the runtime's `LinearActivation` there and keeps the statements as its fallback (emit/host/module.py).

    Not where the activation's statement shares a region with others: that region is one kernel already,
    and the epilogue would split it.
    """
    if any(isinstance(n, ast.Name) and n.id == EPILOGUE for n in ast.walk(tree)):
        return []  # the name is the user's
    finder = _EpilogueSites(compiled)
    Walker([finder]).check(tree, module, is_package, text)
    return [
        site
        for site in finder.sites
        if all(
            r.last_line < site.first
            or r.first_line > site.last
            or site.first <= r.first_line <= r.last_line <= site.last
            for r in regions
        )
    ]


class _EpilogueSites(_Blocks):
    """A checker pass that collects linear + activation pairs in the functions that run under `forward`."""

    def __init__(self, compiled: set[str] | None) -> None:
        super().__init__(compiled)
        self.sites: list[Epilogue] = []

    def _block(self, body: list[ast.stmt], ctx: Context) -> None:
        for index in range(len(body)):
            site = self._site(body[index : index + 2], ctx)
            if site:
                self.sites.append(site)

    def _site(self, statements: list[ast.stmt], ctx: Context):
        first = _assigned_call(statements[0], ctx)
        if first is None:
            return None
        target, attr, argument = first
        if self._is_activation(attr, ctx) and (inner := _call_of(argument, ctx)) and self._is_linear(inner[0], ctx):
            return Epilogue(
                statements[0].lineno, statements[0].end_lineno, target, inner[0], attr, ast.unparse(inner[1])
            )
        second = _assigned_call(statements[1], ctx) if len(statements) == 2 else None
        if not (second and self._is_linear(attr, ctx) and self._is_activation(second[1], ctx)):
            return None
        if not (isinstance(second[2], ast.Name) and second[2].id == target):
            return None
        # The layer's output is no longer bound: nothing else may read it, unless the activation rebinds the name.
        if second[0] != target and target in _live_after(ctx.node, statements[0].lineno, statements[1].end_lineno):
            return None
        return Epilogue(
            statements[0].lineno, statements[1].end_lineno, second[0], attr, second[1], ast.unparse(argument)
        )

    @staticmethod
    def _is_linear(attr: str, ctx: Context) -> bool:
        ctor = ctx.cls.attr_ctors.get(attr, "")
        return ctor in LINEAR_CLASSES or (ctor != "" and f".{CONV1D}".endswith(f".{ctor}"))

    @staticmethod
    def _is_activation(attr: str, ctx: Context) -> bool:
        """An activation module chosen at run time (`ACT2FN[...]`) or built from a class of EPILOGUE_OPS."""
        ctor = ctx.cls.attr_ctors.get(attr)
        if ctor is None:
            return ctx.cls.attrs.get(attr) is Kind.MODULE and ACTIVATION_ATTRIBUTE.fullmatch(attr) is not None
        name = ctor.rpartition(".")[2]
        return any(entry.op in EPILOGUE_OPS and entry.cls.rpartition(".")[2] == name for entry in ACTIVATIONS)


def _assigned_call(statement: ast.stmt, ctx: Context) -> tuple[str, str, ast.expr] | None:
    """`target = self.<attr>(argument)`: (target, attr, argument)."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return None
    target = statement.targets[0]
    call = _call_of(statement.value, ctx)
    return (target.id, *call) if isinstance(target, ast.Name) and call else None


def _call_of(node: ast.expr, ctx: Context) -> tuple[str, ast.expr] | None:
    """`self.<attr>(argument)` with one positional argument: (attr, argument)."""
    if not (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords):
        return None
    attr = ctx.self_attr(node.func)
    return (attr, node.args[0]) if attr and not isinstance(node.args[0], ast.Starred) else None
