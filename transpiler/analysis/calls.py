"""Kinds that flow between the functions of one file: parameters from their call sites, results from returns.

An unannotated parameter of a module-level function or a method is unknown by itself. When every
call of it in its file passes one tensor kind there, and the file's code refers to it only by calls
the analysis follows (`helper(x)`, `self.helper(x)`; not as a value, through `getattr`, or from a
class body), the parameter has that kind. A call of such a function gives what its annotation
declares (`-> Tensor`, `-> tuple[Tensor, Tensor]`) or else what all its `return` statements agree
on. The facts come from walks of the callers (each visiting only the lines with the calls) and of
the callees, walked again whenever what they read changes; the walker then checks every function
with them. Which functions are used unseen is recorded too (`FunctionInfo.unseen_calls`): the
project-wide propagation of tensor arguments (`Project.tensor_parameters`) leaves them alone.

Calls from other files are not seen (the per-file result is cached by content): a function
exported and called elsewhere with something else is typed from its own file's calls.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from transpiler.analysis.kinds import Kind, Returned, join_tensors
from transpiler.analysis.symbols import ClassInfo, FunctionInfo, Names
from transpiler.analysis.typer import union_members

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_NOT_TENSORS = (ast.Dict, ast.List, ast.Set, ast.ListComp, ast.SetComp, ast.DictComp, ast.JoinedStr, ast.Lambda)
# Decorators that keep a function an ordinary callee with the same parameters.
_TRANSPARENT_DECORATORS = frozenset(
    {"builtins.staticmethod", "torch.no_grad", "torch.inference_mode", "torch.enable_grad"}
)
_ROUNDS = 8  # walks a unit may take on average before a file's facts are given up as unsettled


@dataclass
class Unit:
    """A module-level function or a method, with what is known of it before its body is walked."""

    node: _FunctionNode
    info: FunctionInfo
    cls: ClassInfo | None
    classes: dict[str, ClassInfo]  # the classes defined before it (its typer's view)
    is_forward: bool  # an entry point: `forward` or a torch.compile target
    compiled: bool  # decorated with torch.compile
    kinds: dict[str, Kind]  # its parameters' kinds (annotations, defaults; then call sites, see `infer_calls`)


@dataclass(eq=False)
class Target:
    """A module-level function or a method whose calls the file may give kinds to."""

    unit: Unit
    declared: Returned | None  # from the return annotation
    returns: list[ast.Return] = field(default_factory=list)  # its own, not those of nested functions
    # Unannotated parameters defaulting to None: typed only as generators, when every call passes one.
    none_params: frozenset[str] = frozenset()
    # Parameters may take kinds from call sites / the result from its returns.
    infer_params: bool = False
    infer_result: bool = False

    @property
    def name(self) -> str:
        return self.unit.info.name

    @property
    def params(self) -> tuple[str, ...]:
        return self.unit.info.params

    @property
    def open_params(self) -> frozenset[str]:
        return self.unit.info.open_params


def return_annotation(node: ast.expr | None) -> Returned | None:
    """What a return annotation declares: `Tensor`, `Optional[Tensor]`, `tuple[Tensor, Tensor]`,
    `Tuple[Tensor, ...]` (nothing known for others, such as `int` or `list[Tensor]`); None without one."""
    if node is None:
        return None
    members = union_members(node)
    plain = [m for m in members if not (isinstance(m, ast.Constant) and m.value is None)]
    if len(plain) != 1:
        return Returned(Kind.UNKNOWN)
    (value,) = plain
    if _is_tensor_name(value):
        return Returned(Kind.TENSOR if len(members) == 1 else Kind.MAYBE_TENSOR)
    if len(members) == 1 and isinstance(value, ast.Subscript) and _last_name(value.value) in ("tuple", "Tuple"):
        items = list(value.slice.elts) if isinstance(value.slice, ast.Tuple) else [value.slice]
        element = [Kind.TENSOR if _is_tensor_name(i) else Kind.UNKNOWN for i in items]
        if len(items) == 2 and isinstance(items[1], ast.Constant) and items[1].value is Ellipsis:
            return Returned(Kind.UNKNOWN, each=element[0])
        return Returned(Kind.UNKNOWN, tuple(element))
    return Returned(Kind.UNKNOWN)


def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def _is_tensor_name(node: ast.expr) -> bool:
    """`Tensor`, `torch.Tensor`, `torch.FloatTensor`, ...: a tensor class, not a container of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return False
    return isinstance(node, (ast.Name, ast.Attribute)) and _last_name(node).endswith("Tensor")


def own_returns(body: list[ast.stmt]) -> list[ast.Return]:
    """The `return` statements of a function body, not those of nested functions."""
    found: list[ast.Return] = []
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            found.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in ("body", "orelse", "finalbody"):
            stack.extend(getattr(node, name, ()))
        stack.extend(s for h in getattr(node, "handlers", ()) for s in h.body)
        stack.extend(s for c in getattr(node, "cases", ()) for s in c.body)
    return found


def contradicted(declared: Returned, returns: list[ast.Return]) -> bool:
    """A `return` that cannot give what the annotation says (`-> Tensor` over `return {...}`,
    `-> tuple[Tensor, Tensor]` over a tuple of three): the annotation is wrong, and not used."""
    for statement in returns:
        value = statement.value
        if value is None or isinstance(value, ast.Constant) and value.value is None:
            if declared.kind is not Kind.MAYBE_TENSOR:
                return True
        elif isinstance(value, _NOT_TENSORS) or isinstance(value, ast.Constant):
            return True
        elif isinstance(value, ast.Tuple) and declared.each is None and len(value.elts) != len(declared.elements):
            return True
    return False


def ends_in_return(body: list[ast.stmt]) -> bool:
    """Every path through `body` ends in `return` or `raise` (without it, the function may return None)."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return ends_in_return(last.body) and ends_in_return(last.orelse)
    if isinstance(last, (ast.With, ast.AsyncWith)):
        return ends_in_return(last.body)
    if isinstance(last, ast.Try):
        ends = [last.body + last.orelse] + [h.body for h in last.handlers]
        return ends_in_return(last.finalbody) or all(ends_in_return(b) for b in ends)
    return False


def agreed_result(kinds: list[Kind | tuple[Kind, ...]]) -> Returned | None:
    """What every `return` gives, when they agree: one tensor kind, or tuples of one length whose
    elements agree (an element that does not is unknown). None when they do not agree."""
    if not kinds:
        return None
    if all(isinstance(k, Kind) for k in kinds):
        kind = join_tensors(kinds)
        return Returned(kind) if kind is not Kind.UNKNOWN else None
    if not all(isinstance(k, tuple) for k in kinds) or len({len(k) for k in kinds}) != 1:
        return None
    elements = tuple(join_tensors(column) for column in zip(*kinds))
    return Returned(Kind.UNKNOWN, elements) if any(e is not Kind.UNKNOWN for e in elements) else None


def agreed_parameters(target: Target, sites: list[dict[str, Kind]]) -> dict[str, Kind]:
    """Open parameters whose argument has one tensor kind, or is a generator, at every call site; and
    parameters defaulting to None that every call site passes a generator (an omitted one is None)."""
    if not sites:
        return {}
    found = {}
    for param in target.open_params | target.none_params:
        kind = join_tensors(site.get(param, Kind.NONE) for site in sites)
        if kind is Kind.GENERATOR or kind is not Kind.UNKNOWN and param in target.open_params:
            found[param] = kind
    return found


def site_kinds(target: Target, call: ast.Call, kind) -> dict[str, Kind]:
    """Kinds of the arguments a call passes to the target's parameters that take kinds from their calls
    (unknown for all with `*a`, `**k`)."""
    wanted = target.open_params | target.none_params
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return dict.fromkeys(wanted, Kind.UNKNOWN)
    given: dict[str, ast.expr] = dict(zip(target.params, call.args))
    given.update((k.arg, k.value) for k in call.keywords if k.arg in wanted)
    return {p: kind(given[p]) for p in wanted if p in given}


def is_transparent(decorator: str | None) -> bool:
    return decorator in _TRANSPARENT_DECORATORS


def word_lines(text: str, words: set[str]) -> dict[str, list[int]]:
    """For each word, the lines of its occurrences in `text` as a whole word (code, strings and comments
    alike): where the code may refer to it."""
    hits: list[tuple[int, str]] = []
    for word in words:
        start = text.find(word)
        while start >= 0:
            end = start + len(word)
            if not (start and _is_word_char(text[start - 1]) or end < len(text) and _is_word_char(text[end])):
                hits.append((start, word))
            start = text.find(word, end)
    hits.sort()
    lines: dict[str, list[int]] = {w: [] for w in words}
    line, position = 1, 0
    for offset, word in hits:
        line += text.count("\n", position, offset)
        position = offset
        lines[word].append(line)
    return lines


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


Walk = Callable[[Unit, Names, dict[type, list], float, list[int]], None]


def infer_calls(
    tree: ast.Module, units: list[Unit], names: Names, text: str, classes: dict[str, ClassInfo], walk: Walk
) -> None:
    """Give the units' open parameters the kinds their calls agree on (in `unit.kinds`), `names.returns`
    what calls of them give, and `info.unseen_calls` to those used otherwise than by calls (as values,
    by name through getattr). `info.open_params` stay: the compiler learns them from the project.

    `walk(unit, names, handlers, stop, lines)` walks a unit's body as the checker does, with only
    `handlers`, up to the statements starting on line `stop`, visiting the expressions on `lines`
    (sorted) only: a caller is walked for its calls, a callee to its end for its returns.
    """
    targets = _targets(units, names, text)
    methods = _method_keys(targets, units, classes)
    kept = {id(t) for t in methods.values()}
    targets = [t for t in targets if t.unit.cls is None or id(t) in kept]
    declared = {t: t.declared for t in targets if t.declared is not None}
    names.returns = _keyed(declared, methods)
    inferable = [t for t in targets if t.infer_params or t.infer_result]
    if not inferable:
        return
    if _looked_up_by_name(tree, text):  # getattr(self, name): any method may be called unseen
        for target in inferable:
            if target.infer_params and target.unit.cls is not None:
                target.infer_params = False
                target.unit.info.unseen_calls = True
    occurrences = word_lines(text, {t.name for t in inferable})
    starts = sorted((u.node.lineno, index) for index, u in enumerate(units))
    defs = {(t.unit.node.lineno, t.name) for t in targets}
    inside: dict[int, dict[str, list[int]]] = {}  # unit id -> name -> lines of its occurrences in the unit
    for name, lines in occurrences.items():
        for line in lines:
            unit = _enclosing(units, starts, line)
            if unit is not None and (line, name) not in defs:
                inside.setdefault(id(unit), {}).setdefault(name, []).append(line)
    called = {name for found in inside.values() for name in found}
    yields = word_lines(text, {"yield"})["yield"] if "yield" in text else []
    for target in inferable:
        target.infer_result = target.infer_result and target.name in called and _may_give(target, yields)
    # A name whose targets' parameters may be inferred: every reference to it in the code (not in strings
    # or comments that mention it) must be a call that the walks below resolve.
    followed = {t.name for t in inferable if t.infer_params}
    expected, used = _references(tree, {n: occurrences[n] for n in followed}, units)
    for target in inferable:
        if target.infer_params and used[target.name]:
            target.unit.info.unseen_calls = True  # a value, called where no call site says with what
    # Each walk visits the expressions of the lines with calls to follow; statements bind names all along,
    # typing what they assign, and a `return` types its value (calls.py needs no other expression).
    plans: dict[int, tuple[float, list[int]]] = {}  # unit id -> its walk: (last line, lines visited)
    for unit in units:
        lines = sorted({line for name, at in inside.get(id(unit), {}).items() if name in followed for line in at})
        if lines:
            plans[id(unit)] = (lines[-1], lines)
    for target in inferable:
        if target.infer_result:
            plans[id(target.unit)] = (float("inf"), plans.get(id(target.unit), (0, []))[1])
    if not plans:
        return
    recorder = _Recorder(targets, methods, expected)
    walked = [u for u in units if id(u) in plans]
    facts = _settle(walked, names, recorder, plans, inside, walk, declared, methods)
    if facts is None:
        names.returns = _keyed(declared, methods)
        return
    params, results = facts
    for unit in units:
        unit.kinds.update(params.get(id(unit), {}))
    names.returns = _keyed({**declared, **results}, methods)


def _references(
    tree: ast.Module, lines: dict[str, list[int]], units: list[Unit]
) -> tuple[dict[str, int], dict[str, bool]]:
    """For each name, from the statements on the lines where its text occurs: how many times the code
    refers to it other than by the units' definitions (calls, values, rebindings; not the strings and
    comments that mention it), and whether one is a use as a value (`fn = helper`, `map(helper, xs)`,
    `self.helper` uncalled, `getattr(self, "helper")`)."""
    wanted = set(lines)
    count = dict.fromkeys(wanted, 0)
    used = dict.fromkeys(wanted, False)
    statements: dict[int, ast.AST] = {}
    for line in {line for at in lines.values() for line in at}:
        statements.update((id(part), part) for part in _innermost(tree.body, line))
    called: set[int] = set()
    for part in statements.values():
        for node in _nodes(part):  # breadth first: a call before its callee
            if isinstance(node, ast.Call):
                called.add(id(node.func))
                continue
            name, loaded = _reference(node)
            if name in count:
                count[name] += 1
                used[name] = used[name] or loaded and id(node) not in called
    for unit in units:
        if unit.info.name in count:
            count[unit.info.name] -= 1  # its own definition
    return count, used


def _reference(node: ast.AST) -> tuple[str | None, bool]:
    """The name a node refers to or binds, and whether it reads it."""
    if isinstance(node, ast.Name):
        return node.id, isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.Attribute):
        return node.attr, isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True  # getattr(self, "helper"), hooks registered by name
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name, False
    if isinstance(node, ast.arg):
        return node.arg, False
    if isinstance(node, ast.alias):
        return node.asname or node.name, False
    return None, False


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _innermost(body: list, line: int) -> list[ast.AST]:
    """The statements (or `except`/`case` clauses) of `body`, innermost, whose own lines hold `line`: a
    compound statement counts for its header (test, decorators, ...), its nested blocks for themselves."""
    found = []
    for statement in _holding(body, line):
        inner = [part for block in _BODIES for part in _innermost(getattr(statement, block, ()), line)]
        found += inner if inner else [statement]
    return found


def _holding(body: list, line: int) -> list[ast.AST]:
    """The statements of a block whose lines (decorators included) hold `line`: at most one, but for
    statements sharing lines (`a = 1; b = 2`)."""
    if not body:
        return []
    index = bisect.bisect_right(body, line, key=_first_line)
    found = []
    while index > 0 and _last_line(body[index - 1]) >= line:
        found.append(body[index - 1])
        index -= 1
    return found


def _first_line(statement: ast.AST) -> int:
    if isinstance(statement, ast.match_case):  # no lines of its own: its pattern's
        return statement.pattern.lineno
    return min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])


def _last_line(statement: ast.AST) -> int:
    if isinstance(statement, ast.match_case):
        return statement.body[-1].end_lineno or statement.pattern.lineno
    return statement.end_lineno or statement.lineno


def _nodes(statement: ast.AST):
    """The nodes of a statement's own lines: a simple statement whole; a compound one without its blocks."""
    children = [statement]
    while children:
        node = children.pop(0)
        yield node
        for name, value in ast.iter_fields(node):
            if name in _BODIES and node is statement and isinstance(value, list):
                continue
            if isinstance(value, ast.AST):
                children.append(value)
            elif isinstance(value, list):
                children.extend(v for v in value if isinstance(v, ast.AST))


# `getattr(self, name)` with a computed name.
_BY_NAME = re.compile(r"getattr\(\s*(?:self|cls|type\(self\)|self\.__class__)\s*,\s*(?![\"'])")
_SELVES = ("self", "cls", "type(self)", "self.__class__")


def _looked_up_by_name(tree: ast.Module, text: str) -> bool:
    """Methods may be called by a computed name: `getattr(self, f"do_{kind}")(...)`, `__getattribute__`."""
    if "__getattribute__" in text:
        return True
    if "getattr" not in text:
        return False
    lines = {text.count("\n", 0, match.start()) + 1 for match in _BY_NAME.finditer(text)}
    statements = [part for line in lines for part in _innermost(tree.body, line)]
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and ast.unparse(node.args[0]) in _SELVES
        and not isinstance(node.args[1], ast.Constant)
        for statement in statements
        for node in _nodes(statement)
    )


def _settle(
    walked: list[Unit],
    names: Names,
    recorder: "_Recorder",
    plans: dict[int, tuple[float, list[int]]],
    inside: dict[int, dict[str, list[int]]],
    walk: Walk,
    declared: dict[Target, Returned],
    methods: dict[tuple[str, str], Target],
) -> tuple[dict[int, dict[str, Kind]], dict[Target, Returned]] | None:
    """Walk the units, each with the facts known when it is walked, and again whenever what it reads
    (its parameters' kinds, the results of the functions it calls) changes, until nothing does: the
    parameter kinds (by unit id) and results; None if that takes more than `_ROUNDS` walks a unit."""
    base = {id(u): dict(u.kinds) for u in walked}
    readers: dict[str, list[Unit]] = {}  # name -> the walked units that call it
    for unit in walked:
        for name in inside.get(id(unit), ()):
            readers.setdefault(name, []).append(unit)
    params: dict[int, dict[str, Kind]] = {}
    results: dict[Target, Returned] = {}

    def read(unit: Unit) -> tuple:
        called = inside.get(id(unit), ())
        return params.get(id(unit)), sorted((t.name, repr(r)) for t, r in results.items() if t.name in called)

    pending = list(reversed(walked))  # popped in file order
    queued = {id(u) for u in walked}
    last: dict[int, tuple] = {}
    budget = _ROUNDS * len(walked)
    settled = True
    while pending:
        if budget == 0:
            settled = False
            break
        budget -= 1
        unit = pending.pop()
        queued.discard(id(unit))
        last[id(unit)] = read(unit)
        unit.kinds = {**base[id(unit)], **params.get(id(unit), {})}
        recorder.start(unit)
        walk(unit, names, recorder.handlers, *plans[id(unit)])
        new_params, new_results = recorder.facts()
        changed = {t.name for t in {*results, *new_results} if results.get(t) != new_results.get(t)}
        touched = [u for u in walked if new_params.get(id(u)) != params.get(id(u))]
        touched += [u for name in changed for u in readers.get(name, ())]
        params, results = new_params, new_results
        names.returns = _keyed({**declared, **results}, methods)
        for other in touched:
            if id(other) not in queued and last.get(id(other)) != read(other):
                pending.insert(0, other)
                queued.add(id(other))
    for unit in walked:
        unit.kinds = base[id(unit)]
    return (params, results) if settled else None


class _Recorder:
    """The handlers of the fact-finding walks: what each call of a target passes, what each `return` gives."""

    def __init__(self, targets: list[Target], methods: dict[tuple[str, str], Target], expected: dict[str, int]):
        self.functions = {t.unit.info.qualname: t for t in targets if t.unit.cls is None}
        self.methods = methods
        self.by_unit = {id(t.unit): t for t in targets}
        self.expected = expected  # by name: the references to it in the code (`_references`)
        self.handlers = {ast.Call: [self.visit_Call], ast.Return: [self.visit_Return]}
        self.calls: dict[str, int] = {}  # by name: calls resolved to a target, counted once per unit
        self.sites: dict[int, list[tuple[Target, dict[str, Kind]]]] = {}  # by the calling unit's id
        self.returned: dict[Target, list[Kind | tuple[Kind, ...]]] = {}
        self._counted: set[int] = set()
        self._unit_id = 0
        self._count = False
        self._target: Target | None = None
        self._own: set[int] = set()

    def start(self, unit: Unit) -> None:
        self._unit_id = id(unit)
        self.sites[id(unit)] = []
        self._count = id(unit) not in self._counted
        self._counted.add(id(unit))
        target = self.by_unit.get(id(unit))
        self._target = target if target is not None and target.infer_result else None
        self._own = {id(r) for r in target.returns} if self._target is not None else set()
        if self._target is not None:
            self.returned[self._target] = []

    def visible(self, name: str) -> bool:
        """Every reference to the name in the file's code is a call that the walks resolved."""
        return name in self.expected and self.calls.get(name, 0) == self.expected[name]

    def visit_Call(self, node: ast.Call, ctx) -> None:
        func = node.func
        target = None
        if isinstance(func, ast.Name):
            target = self.functions.get(ctx.qualname(func) or "")
        else:
            attr = ctx.self_attr(func)
            if attr is not None and ctx.cls is not None and attr not in ctx.cls.attrs:
                target = self.methods.get((ctx.cls.qualname, attr))
        if target is None:
            return
        if self._count:
            self.calls[target.name] = self.calls.get(target.name, 0) + 1
        if target.infer_params:
            self.sites[self._unit_id].append((target, site_kinds(target, node, ctx.kind)))

    def visit_Return(self, node: ast.Return, ctx) -> None:
        if id(node) not in self._own:
            return
        value = node.value
        if value is None:
            kind: Kind | tuple[Kind, ...] = Kind.NONE
        elif isinstance(value, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in value.elts):
            kind = tuple(ctx.kind(e) for e in value.elts)
        else:
            kind = ctx.kind(value)
        self.returned[self._target].append(kind)

    def facts(self) -> tuple[dict[int, dict[str, Kind]], dict[Target, Returned]]:
        """Parameter kinds (by unit id) of the visible targets, and results, that the recorded walks agree on."""
        by_target: dict[Target, list[dict[str, Kind]]] = {}
        for found in self.sites.values():
            for target, kinds in found:
                by_target.setdefault(target, []).append(kinds)
        params = {}
        for target, sites in by_target.items():
            agreed = agreed_parameters(target, sites) if self.visible(target.name) else {}
            if agreed:
                params[id(target.unit)] = agreed
        results = {}
        for target, kinds in self.returned.items():
            result = agreed_result(kinds)
            if result is not None:
                results[target] = result
        return params, results


def _targets(units: list[Unit], names: Names, text: str) -> list[Target]:
    """The units whose calls the file can give kinds to: plain functions and methods, each defined once."""
    count: dict[str, int] = {}
    for unit in units:
        count[unit.info.qualname] = count.get(unit.info.qualname, 0) + 1
    found = []
    for unit in units:
        node, info = unit.node, unit.info
        if unit.is_forward or isinstance(node, ast.AsyncFunctionDef) or count[info.qualname] > 1:
            continue
        if info.name.startswith("__") and info.name.endswith("__"):
            continue  # called by Python itself
        decorators = [names.resolve(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
        if not all(is_transparent(d) for d in decorators):
            continue
        positional = node.args.posonlyargs + node.args.args
        takes_self = bool(positional) and positional[0].arg == "self"
        static = "builtins.staticmethod" in decorators
        if unit.cls is None and static or unit.cls is not None and static == takes_self:
            continue  # the arguments of `self.name(...)` would not line up with `info.params`
        declared = return_annotation(node.returns)
        if declared is not None and contradicted(declared, own_returns(node.body)):
            declared = Returned(Kind.UNKNOWN)
        # Whether its returns agree is asked (`_may_give`) once calls of it are found.
        # Without the word in the file nothing holds a generator: no parameter defaulting to None is asked about.
        none_params = _none_defaulted(node) if "Generator" in text else frozenset()
        infer_params = bool(info.open_params or none_params)
        found.append(
            Target(unit, declared, none_params=none_params, infer_params=infer_params, infer_result=declared is None)
        )
    return found


def _none_defaulted(node: _FunctionNode) -> frozenset[str]:
    """Unannotated parameters whose default is None."""
    args = node.args
    positional = args.posonlyargs + args.args
    pairs = [*zip(positional[len(positional) - len(args.defaults) :], args.defaults)]
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return frozenset(
        a.arg for a, d in pairs if a.annotation is None and isinstance(d, ast.Constant) and d.value is None
    )


def _may_give(target: Target, yields: list[int]) -> bool:
    """Whether a call of the target gives what its returns agree on (it may fall off its end or be a
    generator, and a call then gives None or a generator), and its returns, in `target.returns`."""
    node = target.unit.node
    target.returns = own_returns(node.body)
    if not target.returns or not ends_in_return(node.body):
        return False
    end = node.end_lineno or node.lineno
    return not any(node.lineno <= line <= end for line in yields)  # a `yield` in its lines (comments too)


def _method_keys(
    targets: list[Target], units: list[Unit], classes: dict[str, ClassInfo]
) -> dict[tuple[str, str], Target]:
    """(class, name) -> the target method that `self.name(...)` calls in the methods of that class.

    A method defined again within its in-file class hierarchy (by a base or a subclass) is left
    out: `self.name` may then run either definition.
    """
    defined: dict[str, set[str]] = {}
    for unit in units:
        if unit.cls is not None:
            defined.setdefault(unit.cls.qualname, set()).add(unit.info.name)
    orders = {qualname: _mro(qualname, classes) for qualname in classes}
    keys: dict[tuple[str, str], Target] = {}
    for target in targets:
        cls = target.unit.cls
        if cls is None:
            continue
        owner, name = cls.qualname, target.name
        below = [c for c, order in orders.items() if owner in order]  # the class and its in-file subclasses
        related = {*orders.get(owner, ()), *below} - {owner}
        if not any(name in defined.get(c, ()) for c in related):
            keys.update(((c, name), target) for c in below)
    return keys


def _mro(qualname: str, classes: dict[str, ClassInfo]) -> list[str]:
    """The class and its in-file bases, in lookup order."""
    order: list[str] = []
    stack = [qualname]
    while stack:
        current = stack.pop(0)
        if current in order or current not in classes:
            continue
        order.append(current)
        stack[:0] = classes[current].bases
    return order


def _keyed(results: dict[Target, Returned], methods: dict[tuple[str, str], Target]) -> dict[str, Returned]:
    """`names.returns`: functions by qualified name; methods as `Class.name` for each class whose
    `self.name(...)` calls them. Results that say nothing are left out."""
    useful = {t: r for t, r in results.items() if r.kind is not Kind.UNKNOWN or r.elements or r.each is not None}
    keyed = {t.unit.info.qualname: r for t, r in useful.items() if t.unit.cls is None}
    keyed.update((f"{owner}.{name}", useful[t]) for (owner, name), t in methods.items() if t in useful)
    return keyed


def _enclosing(units: list[Unit], starts: list[tuple[int, int]], line: int) -> Unit | None:
    """The unit whose lines hold `line` (units do not nest: methods are units, nested functions are not)."""
    position = bisect.bisect_right(starts, (line, len(units))) - 1
    if position < 0:
        return None
    unit = units[starts[position][1]]
    return unit if line <= (unit.node.end_lineno or unit.node.lineno) else None
