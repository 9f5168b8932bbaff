"""Visit every function of a file once, typing expressions and running the rules on them.

Each function is checked as if it ran under `torch.compile`; `project.py` later
keeps only the findings of functions that really do (reachable from a module's
`forward` or from `torch.compile`). That split lets the per-file work be cached
by content alone, since which functions are compiled depends on other files.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

from transpiler.source.diagnostics import Fix
from transpiler.analysis.kinds import Kind, Returned
from transpiler.analysis.symbols import (
    ACTIVATION_ATTRIBUTE,
    NON_LITERAL,
    ClassInfo,
    FileSummary,
    FunctionInfo,
    Names,
    module_level,
    is_library_module_class,
)
from transpiler.analysis.calls import Unit, infer_calls
from transpiler.analysis.typer import Typer, open_parameters, parameter_kinds

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_ARRAYS_NO_FIX = "it is about a NumPy array made from a tensor, and the fix writes torch code"
_COMPILE_DECORATORS = frozenset({"torch.compile", "torch._dynamo.optimize"})
_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Finding:
    """A raw report inside one function, before columns and suppressions are settled."""

    code: str
    line: int
    col: int  # 0-based UTF-8 byte offset, as `ast` gives it
    end_line: int
    end_col: int
    message: str
    # Enclosing constructs a graph break cannot be resumed in: ("loop" | "try" | "with", line).
    blocks: tuple[tuple[str, int], ...] = ()
    fix: Fix | None = None
    # Why a rule that has fixes left this finding alone (shown to the user).
    no_fix: str | None = None


class Visitor(Protocol):
    """What the walker calls: `visit_<AstNode>(node, ctx)` methods (found by name) and, once a function's
    statements are walked, `check_function(findings, ctx)`. Lint rules and the compiler's analyses both are."""

    def check_function(self, findings: list[Finding], ctx: "Context") -> None: ...


@dataclass
class Context:
    """What a rule sees: the function being checked, kinds of expressions, and `add`."""

    names: Names
    typer: Typer
    function: FunctionInfo
    node: _FunctionNode
    cls: ClassInfo | None
    is_forward: bool
    findings: list[Finding] = field(default_factory=list)
    blocks: list[tuple[str, int]] = field(default_factory=list)
    # Expressions already reported as part of an enclosing construct (an `if` test).
    claimed: set[int] = field(default_factory=set)
    statement: ast.stmt | None = None  # the innermost statement being visited
    parameters: dict[str, Kind] = field(default_factory=dict)  # the kinds the parameters start with
    _nodes: list[ast.AST] | None = None

    def nodes(self) -> list[ast.AST]:
        """Every node of the function, in `ast.walk` order: built once, since rules scan the whole
        function for each candidate (a name's other assignments and reads)."""
        if self._nodes is None:
            self._nodes = list(ast.walk(self.node))
        return self._nodes

    def kind(self, node: ast.expr) -> Kind:
        return self.typer.kind(node)

    def guessed(self, node: ast.expr) -> bool:
        """`node` is an unannotated parameter of an entry point, never rebound: a tensor by guess alone
        (`layer_type` in `forward(self, x, layer_type)` is often a string)."""
        if not self.is_forward or not isinstance(node, ast.Name):
            return False
        args = self.node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        if not any(a.arg == node.id and a.annotation is None for a in params):
            return False
        return not any(
            isinstance(n, ast.Name) and n.id == node.id and not isinstance(n.ctx, ast.Load) for n in self.nodes()
        )

    def qualname(self, node: ast.expr) -> str | None:
        return self.typer.qualname(node)

    def self_attr(self, node: ast.expr) -> str | None:
        return self.typer.self_attr(node)

    def add(self, code: str, node: ast.AST, message: str, fix: Fix | None = None, no_fix: str | None = None) -> None:
        line = node.lineno
        end_line = getattr(node, "end_lineno", None) or line
        end_col = getattr(node, "end_col_offset", None)
        self.findings.append(
            Finding(
                code,
                line,
                node.col_offset,
                end_line,
                node.col_offset if end_col is None else end_col,
                message,
                tuple(self.blocks),
                fix,
                no_fix,
            )
        )


class Walker:
    def __init__(self, rules: Iterable[Visitor], lint: bool | None = None) -> None:
        """With `lint`, kinds also flow between the functions of a file (calls.py) and NumPy arrays made from
        tensors are typed as Dynamo traces them (Kind.ARRAY): what graph-break rules ask. By default when
        the visitors are such rules (they name the Dynamo codes they report). The compiler's walks keep the
        kinds it was built and tested on: it asks what is a torch.Tensor at run time, and learns a helper's
        parameters from the project's call sites (`tensor_params`)."""
        self.rules = list(rules)
        self.lint = any(hasattr(rule, "dynamo_codes") for rule in self.rules) if lint is None else lint
        self._plain: Walker | None = None  # the same rules, fresh, with arrays unknown (for their fixes)
        self.handlers: dict[type, list] = {}
        for rule in self.rules:
            for attr in dir(rule):
                if attr.startswith("visit_"):
                    node_type = getattr(ast, attr[6:])
                    self.handlers.setdefault(node_type, []).append(getattr(rule, attr))

    def check(
        self,
        tree: ast.Module,
        module: str,
        is_package: bool,
        text: str,
        tensor_params: dict[str, frozenset[str]] | None = None,
    ) -> tuple[FileSummary, dict[str, list[Finding]]]:
        """Summary and findings of one file.

        With `tensor_params` (per function qualified name, parameters known to be
        tensors from the function's compiled call sites) only those functions are
        checked again; the summary then describes just them.
        """
        names = Names(tree, module, is_package)
        names.arrays = self.lint
        summary = FileSummary(module, aliases=dict(names.aliases))
        findings: dict[str, list[Finding]] = {}
        if ".compile" in text or "compile(" in text:  # skips the many `is_compiling()` mentions
            _find_compile_calls(tree, names, summary)
        units: list[Unit] = []
        for node in module_level(tree):  # also definitions under `try:`/`if` (optional imports)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info = FunctionInfo(f"{module}.{node.name}", node.name, node.lineno)
                units.append(_unit(node, info, None, dict(summary.classes), names, summary, tensor_params or {}))
            elif isinstance(node, ast.ClassDef):
                cls = _class_info(node, module, names)
                _inherit_local(cls, summary)
                summary.classes[cls.qualname] = cls
                view = dict(summary.classes)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        info = FunctionInfo(f"{cls.qualname}.{item.name}", item.name, item.lineno, cls.qualname)
                        units.append(_unit(item, info, cls, view, names, summary, tensor_params or {}))
        if self.lint:
            infer_calls(tree, units, names, text, summary.classes, _walk_for_facts)
        for unit in units:
            info = unit.info
            if tensor_params is None or info.qualname in tensor_params:
                if unit.cls is None:
                    summary.functions[info.qualname] = info
                else:
                    unit.cls.methods[info.name] = info
                if unit.compiled:
                    summary.compile_roots.add(("name", info.qualname))
                self._check_function(unit, names, findings)
        return summary, findings

    def _check_function(self, unit: Unit, names: Names, findings: dict[str, list[Finding]]) -> None:
        found, arrays = self._walk(unit, names, unit.kinds, record_calls=True)
        if arrays:
            found = self._fixes_without_arrays(unit, names, found)
        if found:
            findings[unit.info.qualname] = found

    def _walk(self, unit: Unit, names: Names, kinds: dict[str, Kind], record_calls: bool) -> tuple[list[Finding], bool]:
        """The findings of one function, and whether it holds NumPy arrays made from tensors."""
        typer = Typer(names, unit.cls, dict(kinds), unit.classes)
        ctx = Context(names, typer, unit.info, unit.node, unit.cls, unit.is_forward, parameters=dict(kinds))
        _Walker(self.handlers, ctx, record_calls=record_calls).body(unit.node.body)
        for rule in self.rules:
            rule.check_function(ctx.findings, ctx)
        if record_calls and unit.is_forward and unit.cls is not None:
            _record_forward_returns(unit, typer, names)
        return ctx.findings, typer.saw_arrays

    def _fixes_without_arrays(self, unit: Unit, names: Names, found: list[Finding]) -> list[Finding]:
        """`found` with the fixes the function gets when its NumPy arrays are unknown: the fixes write torch
        code for what they take for tensors. A finding only the arrays show gets none."""
        if self._plain is None:
            self._plain = Walker((type(rule)() for rule in self.rules), lint=False)
        names.arrays = False
        try:
            kinds = {name: Kind.UNKNOWN if kind is Kind.ARRAY else kind for name, kind in unit.kinds.items()}
            plain, _ = self._plain._walk(unit, names, kinds, record_calls=False)
        finally:
            names.arrays = True
        fixes = {(f.code, f.line, f.col, f.end_line, f.end_col): f for f in plain}
        kept = []
        for finding in found:
            twin = fixes.get((finding.code, finding.line, finding.col, finding.end_line, finding.end_col))
            if twin is not None:
                kept.append(replace(finding, fix=twin.fix, no_fix=twin.no_fix))
            else:
                kept.append(replace(finding, fix=None, no_fix=_ARRAYS_NO_FIX if finding.fix else finding.no_fix))
        return kept


def _record_forward_returns(unit: Unit, typer: Typer, names: Names) -> None:
    """What the class's `forward` gives, for the classes after it in the file that hold it as a submodule and
    unpack its result (`embeddings, num_frames, width = self.patch_embed(x)`: the ints are no tensors). Only a
    forward whose one `return` ends it with a tuple, typed with the kinds the walk ended with."""
    body = unit.node.body
    last = body[-1] if body else None
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Tuple)):
        return
    if sum(isinstance(n, ast.Return) for n in ast.walk(unit.node)) != 1:
        return
    key = f"{unit.cls.qualname}.forward"
    if key not in names.returns and not any(isinstance(e, ast.Starred) for e in last.value.elts):
        names.returns[key] = Returned(elements=tuple(typer.kind(e) for e in last.value.elts))


def _unit(
    node: _FunctionNode,
    info: FunctionInfo,
    cls: ClassInfo | None,
    classes: dict[str, ClassInfo],
    names: Names,
    summary: FileSummary,
    tensor_params: dict[str, frozenset[str]],
) -> Unit:
    decorators = {names.resolve(_decorator_callee(d)) for d in node.decorator_list}
    compiled = bool(decorators & _COMPILE_DECORATORS)
    info.disabled = names.is_disabled(node)
    # Entry points get tensor-typed parameters: `forward` and torch.compile targets.
    is_forward = (
        cls is not None and node.name == "forward" or compiled or ("name", info.qualname) in summary.compile_roots
    )
    info.params, info.open_params = open_parameters(node)
    kinds = parameter_kinds(node, is_forward)
    kinds.update(dict.fromkeys(tensor_params.get(info.qualname, ()), Kind.TENSOR))
    return Unit(node, info, cls, classes, is_forward, compiled, kinds)


def _walk_for_facts(unit: Unit, names: Names, handlers: dict[type, list], stop: float, lines: list[int]) -> None:
    """Walk `unit` with only `handlers` (no rules, no call graph), up to the statements starting on line
    `stop`, visiting only the expressions on `lines` (statements are all dispatched)."""
    typer = Typer(names, unit.cls, dict(unit.kinds), unit.classes)
    ctx = Context(names, typer, unit.info, unit.node, unit.cls, unit.is_forward, parameters=dict(unit.kinds))
    _Walker(handlers, ctx, record_calls=False, stop=stop, lines=lines).body(unit.node.body)


class _Walker:
    """Walks statements in order, keeping the typing environment up to date."""

    def __init__(
        self,
        handlers: dict[type, list],
        ctx: Context,
        record_calls: bool = True,
        stop: float = float("inf"),
        lines: list[int] | None = None,
    ) -> None:
        self.handlers = handlers
        self.ctx = ctx
        self.typer = ctx.typer
        self.record_calls = record_calls  # the call graph and its tensor arguments, in ctx.function
        self.stop = stop  # statements starting after this line are not walked
        # With `lines` (sorted), only expressions on them are visited: statements still bind their names.
        self.lines = lines

    def dispatch(self, node: ast.AST) -> None:
        for handler in self.handlers.get(type(node), ()):
            handler(node, self.ctx)

    def body(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            if statement.lineno > self.stop:
                return
            self.statement(statement)
            if isinstance(statement, ast.If) and _leaves_when_compiling(statement, self.typer):
                return  # `if torch.compiler.is_compiling(): return ...`: what follows runs in eager only

    def branches(self, *bodies: list[ast.stmt]) -> None:
        before = dict(self.typer.env)
        ends = []
        for body in bodies:
            self.typer.env.clear()
            self.typer.env.update(before)
            self.body(body)
            ends.append(dict(self.typer.env))
        self.typer.merge(*ends)

    def statement(self, node: ast.stmt) -> None:
        outer, self.ctx.statement = self.ctx.statement, node
        try:
            self._statement(node)
        finally:
            self.ctx.statement = outer

    def _statement(self, node: ast.stmt) -> None:
        typer = self.typer
        if isinstance(node, ast.If):
            taken = branch_under_compile(node.test, typer)
            if taken is not None:  # Dynamo folds the check: only that branch is ever traced
                self.body(node.body if taken else node.orelse)
                return
        self.dispatch(node)
        if isinstance(node, ast.If):
            self.expr(node.test)
            self.branches(node.body, node.orelse)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            if isinstance(node, ast.While):
                # The test runs again after each iteration (a jump back): Dynamo skips the frame for a break in
                # it as for one in the body. A `for` iterable runs once, before the loop: resumable.
                self.ctx.blocks.append(("loop", node.lineno))
                self.expr(node.test)
                self.ctx.blocks.pop()
            else:
                self.expr(node.iter)
                typer.bind_iteration(node.target, node.iter)
            self.ctx.blocks.append(("loop", node.lineno))
            self.branches(node.body, [])
            self.ctx.blocks.pop()
            self.body(node.orelse)
        elif isinstance(node, (ast.Try, ast.TryStar)):
            self.ctx.blocks.append(("try", node.lineno))
            self.body(node.body)
            self.ctx.blocks.pop()
            for handler in node.handlers:
                if handler.type is not None:
                    self.expr(handler.type)
                if handler.name:
                    typer.env[handler.name] = Kind.UNKNOWN
                self.body(handler.body)
            self.body(node.orelse)
            self.body(node.finalbody)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            resumable = True
            for item in node.items:
                self.expr(item.context_expr)
                if item.optional_vars is not None:
                    typer.bind(item.optional_vars, Kind.UNKNOWN)
                resumable = resumable and _resumable_context(item.context_expr, typer)
            if not resumable:
                self.ctx.blocks.append(("with", node.lineno))
            self.body(node.body)
            if not resumable:
                self.ctx.blocks.pop()
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                self.expr(decorator)
            saved = dict(typer.env)
            typer.env.update(parameter_kinds(node, is_forward=False))
            self.body(node.body)
            typer.env.clear()
            typer.env.update(saved)
            typer.env[node.name] = Kind.UNKNOWN
        elif isinstance(node, ast.ClassDef):
            typer.env[node.name] = Kind.UNKNOWN
        elif isinstance(node, ast.Assign):
            self.expr(node.value)
            for target in node.targets:
                self.expr(target)
            kind = typer.kind(node.value)
            for target in node.targets:
                typer.bind(target, kind, node.value)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.expr(node.value)
                typer.bind(node.target, typer.kind(node.value), node.value)
            self.expr(node.target)
        elif isinstance(node, ast.AugAssign):
            self.expr(node.value)
            self.expr(node.target)
            if isinstance(node.target, ast.Name):
                current, value = typer.kind(node.target), typer.kind(node.value)
                if current.may_be_tensor or value.may_be_tensor:
                    typer.env[node.target.id] = Kind.ARRAY if Kind.ARRAY in (current, value) else Kind.TENSOR
        elif isinstance(node, ast.Match):
            self.expr(node.subject)
            self.branches(*[case.body for case in node.cases])
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child)

    def expr(self, node: ast.expr) -> None:
        if self.lines is not None:
            index = bisect.bisect_left(self.lines, node.lineno)
            if index == len(self.lines) or self.lines[index] > (node.end_lineno or node.lineno):
                return
        if isinstance(node, ast.IfExp):
            taken = branch_under_compile(node.test, self.typer)
            if taken is not None:  # `a if torch.compiler.is_compiling() else b`: Dynamo traces one arm
                self.expr(node.body if taken else node.orelse)
                return
        self.dispatch(node)
        if isinstance(node, ast.Call):
            if self.record_calls:
                self._record_call(node)
            if _is_check(node, self.typer):
                # `torch._check(cond, lambda: f"...")`: the message lambda only runs on failure.
                for child in [node.func, *node.args, *(k.value for k in node.keywords)]:
                    if not isinstance(child, ast.Lambda):
                        self.expr(child)
                return
        if isinstance(node, _COMPREHENSIONS):
            saved = dict(self.typer.env)
            for generator in node.generators:
                self.expr(generator.iter)
                self.typer.bind_iteration(generator.target, generator.iter)
                for condition in generator.ifs:
                    self.expr(condition)
            elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            for element in elements:
                self.expr(element)
                self.typer.kind(element)  # typed while the loop variables are bound (unpacking reads it)
            self.typer.env.clear()
            self.typer.env.update(saved)
            return
        if isinstance(node, ast.Lambda):
            saved = dict(self.typer.env)
            for arg in node.args.args + node.args.kwonlyargs:
                self.typer.env[arg.arg] = Kind.UNKNOWN
            self.expr(node.body)
            self.typer.env.clear()
            self.typer.env.update(saved)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child)
            elif isinstance(child, ast.keyword):
                self.expr(child.value)

    def _record_call(self, node: ast.Call) -> None:
        """Call-graph edges, with the positions and names of the tensor arguments of each site."""
        edge = self._call_edge(node.func)
        if edge is None:
            return
        self.ctx.function.calls.add(edge)
        tensors: set[int | str] = {i for i, a in enumerate(node.args) if _is_torch_tensor(self.typer.kind(a))}
        tensors |= {k.arg for k in node.keywords if k.arg and _is_torch_tensor(self.typer.kind(k.value))}
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            tensors = set()  # *args / **kwargs: positions unknown
        self.ctx.function.tensor_args.setdefault(edge, []).append(frozenset(tensors))

    def _call_edge(self, func: ast.expr) -> tuple[str, str] | None:
        """self.method(...), super().method(...), imported_or_local_function(...), and
        self.submodule.method(...) as `SubmoduleClass.method`."""
        if isinstance(func, ast.Attribute):
            cls = self.ctx.cls
            if self.typer.self_attr(func) is not None:
                if cls is not None and func.attr in cls.attr_ctors:  # self.assigner(...): its class's __call__
                    return ("name", f"{cls.attr_ctors[func.attr]}.__call__")
                return ("self", func.attr)
            owner = self.typer.self_attr(func.value)
            if owner is not None and cls is not None and owner in cls.attr_ctors:
                return ("name", f"{cls.attr_ctors[owner]}.{func.attr}")
            value = func.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
                return ("super", func.attr)
        qualname = self.typer.qualname(func)
        if qualname and not qualname.startswith(("builtins.", "torch.", "math.")):
            return ("name", qualname)
        return None


def _is_torch_tensor(kind: Kind) -> bool:
    """A torch.Tensor at run time: what a helper's parameter may be typed as from its call sites."""
    return kind.is_tensor and kind is not Kind.ARRAY


def _resumable_context(expr: ast.expr, typer: Typer) -> bool:
    """Whether Dynamo can resume a graph broken inside `with expr:`.

    It can for the context managers it models (grad mode, autocast,
    `nullcontext`, most of torch's); a break under any other one, such as a
    user class or a `@contextmanager` function, skips the whole frame.
    """
    callee = expr.func if isinstance(expr, ast.Call) else expr
    name = typer.qualname(callee)
    # Unknown (local) context managers are given the benefit of the doubt.
    return name is None or name.startswith(("torch.", "contextlib.", "builtins."))


_COMPILING_CHECKS = frozenset({"is_compiling", "is_dynamo_compiling", "is_torchdynamo_compiling", "is_exporting"})


def branch_under_compile(test: ast.expr, typer: Typer) -> bool | None:
    """Value of an `if` test under compilation when it is a `torch.compiler.is_compiling()` check."""
    if isinstance(test, ast.Call) and not test.args:
        name = typer.qualname(test.func) or ""
        return True if name.rpartition(".")[2] in _COMPILING_CHECKS else None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = branch_under_compile(test.operand, typer)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [branch_under_compile(v, typer) for v in test.values]
        decisive = isinstance(test.op, ast.Or)  # True decides `or`, False decides `and`
        return decisive if decisive in values else None
    return None


def _leaves_when_compiling(node: ast.If, typer: Typer) -> bool:
    """`if torch.compiler.is_compiling(): ... return` (or `raise`): Dynamo folds the check and leaves the block."""
    if branch_under_compile(node.test, typer) is not True or not node.body:
        return False
    return isinstance(node.body[-1], (ast.Return, ast.Raise))


def _is_check(node: ast.Call, typer: Typer) -> bool:
    """A call of a check function (`torch._check`, `torch._check_with`, a project's `*_check`)."""
    func = node.func
    name = typer.qualname(func) or (func.attr if isinstance(func, ast.Attribute) else "")
    last = name.rpartition(".")[2]
    return "check" in last or last.startswith("_assert")


def _decorator_callee(node: ast.expr) -> ast.expr:
    return node.func if isinstance(node, ast.Call) else node


def _class_info(node: ast.ClassDef, module: str, names: Names) -> ClassInfo:
    bases = [names.resolve(b) or ast.unparse(b) for b in node.bases]
    cls = ClassInfo(f"{module}.{node.name}", node.name, node.lineno, bases)
    cls.disabled_methods = {
        item.name
        for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and names.is_disabled(item)
    }
    for item in node.body:
        if isinstance(item, (ast.Assign, ast.AnnAssign)) and item.value is not None:
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    _record_attr(cls, target.id, item.value, None)
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == "__init__":
            typer = Typer(names, None, parameter_kinds(item, is_forward=False))
            for sub in ast.walk(item):
                if isinstance(sub, ast.Assign):
                    for target in sub.targets:
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            _record_attr(cls, target.attr, sub.value, typer)
                elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.args:
                    first = sub.args[0]
                    if sub.func.attr in ("register_buffer", "register_parameter") and isinstance(first, ast.Constant):
                        cls.attrs[str(first.value)] = Kind.TENSOR
                        if sub.func.attr == "register_buffer":
                            cls.buffers.add(str(first.value))
                    elif sub.func.attr == "add_module" and isinstance(first, ast.Constant):
                        cls.attrs[str(first.value)] = Kind.MODULE
    return cls


def _inherit_local(cls: ClassInfo, summary: FileSummary) -> None:
    """Attributes set by the `__init__` of base classes defined earlier in the same file."""
    own = set(cls.attrs)
    for base in reversed(cls.bases):
        parent = summary.classes.get(base)
        if parent is not None:
            cls.attrs = {**parent.attrs, **cls.attrs}
            cls.attr_ctors = {**parent.attr_ctors, **cls.attr_ctors}
            cls.attr_ctor_args = {**parent.attr_ctor_args, **cls.attr_ctor_args}
            cls.scalar_attrs |= parent.scalar_attrs - own
            cls.disabled_methods |= parent.disabled_methods
            cls.buffers |= parent.buffers


def _record_attr(cls: ClassInfo, attr: str, value: ast.expr, typer: Typer | None) -> None:
    """Kind of `self.attr = value` in __init__ (or `attr = value` in the class body)."""
    if isinstance(value, ast.Constant):
        if value.value is not None and not isinstance(value.value, (str, bytes)):
            cls.scalar_attrs.add(attr)
        kind = Kind.NONE if value.value is None else Kind.SCALAR
    elif typer is None:
        return
    else:
        kind = typer.kind(value)
        if isinstance(value, ast.Call):
            ctor = typer.qualname(value.func)
            if ctor is not None:
                last = ctor.rpartition(".")[2]
                if ctor in ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer"):
                    kind = Kind.TENSOR
                elif is_library_module_class(ctor) or (
                    last[:1].isupper() and not ctor.startswith(("torch.", "builtins."))
                ):
                    kind = Kind.MODULE  # submodules: in-project or library classes
                if kind is Kind.MODULE:
                    cls.attr_ctors[attr] = ctor
                    cls.attr_ctor_args[attr] = (
                        tuple(_literal(a) for a in value.args),
                        tuple((k.arg, _literal(k.value)) for k in value.keywords if k.arg),
                    )
        if (
            kind is Kind.UNKNOWN
            and isinstance(value, (ast.Subscript, ast.Call, ast.IfExp))
            and ACTIVATION_ATTRIBUTE.fullmatch(attr)
        ):
            kind = Kind.MODULE  # `self.act = ACT2FN[config.hidden_act]`: a module of a class chosen at run time
    previous = cls.attrs.get(attr)
    cls.attrs[attr] = kind if previous is None or previous is kind or previous is Kind.NONE else Kind.UNKNOWN


def _literal(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NON_LITERAL


def _find_compile_calls(tree: ast.Module, names: Names, summary: FileSummary) -> None:
    """`torch.compile(fn)` anywhere in the file makes `fn` a root of compiled code."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and names.resolve(node.func) in _COMPILE_DECORATORS:
            target = names.resolve(node.args[0])
            if target is not None and not target.startswith(("builtins.", "torch.")):
                summary.compile_roots.add(("name", target))
