"""Convolutions followed by a batch norm: `h = self.conv(x); h = self.bn(h)` becomes one folded convolution in eval.

A site is a chain of statements (or one nested call) that feeds one name through an `nn.Conv2d`
attribute, then straight into an `nn.BatchNorm2d` attribute, and maybe then into an activation
module: `out = self.bn1(self.conv1(x))`, transformers' ResNetConvLayer
(`h = self.convolution(h); h = self.normalization(h); h = self.activation(h)`), torchvision's
blocks. The emitted module calls the runtime's `conv_bn` there (emit/runtime/conv.py, written by
emit/host/convs.py), which folds the norm into the convolution's weight and bias where that is
exact (eval, plain modules, no autograd), and keeps the statements as its fallback.

Only in the functions that run under `forward`, with a plain name as the chain's argument (the
fallback evaluates it again), where every intermediate name dies with the site, and where no region
straddles the site's first or last line (a region inside it, the norm and activation as a kernel, is
its fallback; one reaching outside would be split).
"""

from __future__ import annotations

import ast

from transpiler.analysis.kinds import Kind
from transpiler.analysis.symbols import ACTIVATION_ATTRIBUTE
from transpiler.analysis.walker import Context, Walker
from transpiler.compiler.ir import CONV_BN, ConvSite, Region
from transpiler.compiler.ops import ACTIVATIONS
from transpiler.compiler.regions import _bodies, _live_after

CONV_CLASSES = frozenset({"torch.nn.Conv2d", "torch.nn.modules.conv.Conv2d"})
NORM_CLASSES = frozenset({"torch.nn.BatchNorm2d", "torch.nn.modules.batchnorm.BatchNorm2d"})
# Activation modules by class name (the runtime calls whatever module is there: the name only says what a site is).
_ACTIVATION_NAMES = frozenset(a.cls.rpartition(".")[2] for a in ACTIVATIONS) | {"ReLU6", "LeakyReLU", "Hardswish"}
_MAX_STATEMENTS = 3  # conv, norm, activation


def conv_sites(
    tree: ast.Module, module: str, is_package: bool, text: str, compiled: set[str] | None, regions: list[Region]
) -> list[ConvSite]:
    """The conv + batch-norm (+ activation) sites of `text`, in the functions that run under `forward`."""
    if any(isinstance(n, ast.Name) and n.id == CONV_BN for n in ast.walk(tree)):
        return []  # the name is the user's
    finder = _ConvSites(compiled, regions)
    Walker([finder]).check(tree, module, is_package, text)
    return finder.sites


def _outside_or_inside(region: Region, site: ConvSite) -> bool:
    """A region the site's replacement can enclose (its fallback), or one it does not touch."""
    return (
        region.last_line < site.first
        or region.first_line > site.last
        or site.first <= region.first_line <= region.last_line <= site.last
    )


class _ConvSites:
    """A checker pass that collects the sites, in the functions that run under `forward`."""

    def __init__(self, compiled: set[str] | None, regions: list[Region]) -> None:
        self.compiled = compiled
        self.regions = regions
        self.sites: list[ConvSite] = []

    def check_function(self, findings, ctx: Context) -> None:
        if ctx.cls is None or (self.compiled is not None and ctx.function.qualname not in self.compiled):
            return
        for body in _bodies(ctx.node):
            index = 0
            while index < len(body):
                site = self._site(body[index : index + _MAX_STATEMENTS], ctx)
                if site is None:
                    index += 1
                    continue
                self.sites.append(site)
                index += sum(1 for s in body[index:] if s.lineno <= site.last)

    def _site(self, statements: list[ast.stmt], ctx: Context) -> ConvSite | None:
        """The longest site starting at `statements[0]` that no region straddles, if any."""
        calls: list[str] = []  # the attributes called, innermost first
        targets: list[str] = []  # each statement's target
        argument = None
        best = None
        for statement in statements:
            chain = _chain(statement, ctx)
            if chain is None:
                break
            target, attrs, inner = chain
            if calls and not (isinstance(inner, ast.Name) and inner.id == targets[-1]):
                break  # the statement does not continue the chain
            if not calls:
                argument = inner
            calls += attrs
            targets.append(target)
            if len(calls) > 3:
                break
            kinds = [self._kind(attr, ctx) for attr in calls]
            if kinds[0] != "conv":
                break
            if len(kinds) == 1:
                continue  # `h = self.conv(x)`: the norm may follow
            if kinds[1] != "norm" or (len(kinds) == 3 and kinds[2] != "activation"):
                break
            # Intermediate names die with the site, unless the last statement binds them again.
            last = statement.end_lineno
            live = _live_after(ctx.node, statements[0].lineno, last)
            if any(t != target and t in live for t in targets[:-1]):
                break
            if not isinstance(argument, ast.Name):
                break  # the fallback evaluates the argument again: only a name is free of effects
            activation = calls[2] if len(calls) == 3 else None
            site = ConvSite(statements[0].lineno, last, target, calls[0], calls[1], activation, argument.id)
            if all(_outside_or_inside(r, site) for r in self.regions):
                best = site
        return best

    @staticmethod
    def _kind(attr: str, ctx: Context) -> str | None:
        ctor = ctx.cls.attr_ctors.get(attr)
        if ctor in CONV_CLASSES:
            return "conv"
        if ctor in NORM_CLASSES:
            return "norm"
        if ctor is None:  # chosen at run time (`ACT2FN[...]`): an attribute named like an activation
            named = ctx.cls.attrs.get(attr) is Kind.MODULE and ACTIVATION_ATTRIBUTE.fullmatch(attr) is not None
            return "activation" if named else None
        return "activation" if ctor.rpartition(".")[2] in _ACTIVATION_NAMES else None


def _chain(statement: ast.stmt, ctx: Context) -> tuple[str, list[str], ast.expr] | None:
    """`target = self.a(self.b(arg))`: (target, ["b", "a"], arg); calls of `self.<attr>` with one positional argument."""
    if not (
        isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)
    ):
        return None
    attrs: list[str] = []
    node = statement.value
    while isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        attr = ctx.self_attr(node.func)
        if attr is None or isinstance(node.args[0], ast.Starred):
            break
        attrs.insert(0, attr)
        node = node.args[0]
    return (statement.targets[0].id, attrs, node) if attrs else None
