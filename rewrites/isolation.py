"""Isolating a graph break that no rewrite removes, when it sits in a loop (the fix of TP501).

Dynamo cannot resume a graph inside a loop: a break there makes it skip the whole function,
whose statements then run eagerly (only the submodules it calls compile, one small graph
each). The break itself cannot go, but where it happens can move: the loop becomes a helper
function, and its body a second one,

    def _isolated_loop_12(self, x):            # the `for` header and `else:` stay here
        def _isolated_body_12(self, i, layer, x):
            ...the body, unchanged...
            return x
        for i, layer in enumerate(self.layers):
            x = _isolated_body_12(self, i, layer, x)
        return x
    x = _isolated_loop_12(self, x)

so that the function breaks once, at the call, outside any loop (Dynamo compiles its other
statements into graphs around it), the loop helper is the frame Dynamo skips (it holds only
the header and a call), and the body is a frame of its own, compiled into graphs on each side
of the break. Eager runs execute the same statements in the same order on the same objects:
names the loop reads are passed in, names it rebinds that are read elsewhere are returned
and rebound. The plan refuses whatever that cannot promise (see `plan_loop`).
"""

from __future__ import annotations

import ast
import symtable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.lint.rule import Context, Edit, Finding, Rule

_Loop = ast.For | ast.While
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# Calls that read or depend on the frame they run in: moving code into a helper changes them.
_FRAME_NAMES = frozenset({"locals", "vars", "eval", "exec", "super", "__class__", "dir"})
_FRAME_ATTRS = frozenset({"_getframe", "currentframe", "f_back", "f_locals"})
_REFUSED = {
    ast.Return: "a `return`",
    ast.Yield: "a `yield`",
    ast.YieldFrom: "a `yield from`",
    ast.Await: "an `await`",
    ast.Global: "a `global` statement",
    ast.Nonlocal: "a `nonlocal` statement",
    ast.Delete: "a `del`",
    ast.Import: "an import",
    ast.ImportFrom: "an import",
    ast.AsyncFor: "an `async for`",
    ast.AsyncWith: "an `async with`",
    **dict.fromkeys(_SCOPES, "a nested function, lambda or class"),
}
PREFIX = "_isolated_"


@dataclass(frozen=True)
class LoopPlan:
    """The two helpers of one isolated loop: their names, parameters and returned names."""

    line: int
    loop_inputs: tuple[str, ...]
    loop_outputs: tuple[str, ...]
    body_inputs: tuple[str, ...]
    body_outputs: tuple[str, ...]
    tensors: tuple[str, ...]  # parameters annotated `torch.Tensor`, so the linter still types them
    body_length: int  # statements of the body, to match the libcst body against
    # Runs of body statements (first index, end index, names they return, names passed in) that hold the
    # breaks: each runs as a `torch.compiler.disable(recursive=False)` function defined in the loop helper, so
    # Dynamo does not trace the Python state they touch (what they call still compiles, in its own frame).
    disabled: tuple[tuple[int, int, tuple[str, ...], tuple[str, ...]], ...] = ()

    @property
    def loop_name(self) -> str:
        return f"{PREFIX}loop_{self.line}"

    @property
    def body_name(self) -> str:
        return f"{PREFIX}body_{self.line}"


def plan(
    rule: "Rule",
    line: int,
    findings: list["Finding"],
    ctx: "Context",
    tensors: frozenset[str],
    untraced: frozenset[int] = frozenset(),
) -> dict:
    """TP501's `fix` (or `no_fix`) for the breaks inside the loop at `line` of the function `ctx` checks.

    `untraced`: lines that are no break of their own but that Dynamo cannot trace inside a graph either (an
    f-string of a tensor used as a key): their statements run with the breaks', outside Dynamo."""
    found = innermost_function(ctx.node, line)
    if found is None:
        return {"no_fix": "the loop was not found"}
    function, loop = found  # never a loop helper's own loop: TP501 does not report those (`reported`)
    inner = sorted({(f.line, f.code) for f in findings if ("loop", line) in f.blocks and f.code != rule.code})
    planned = plan_loop(function, loop, tensors, frozenset(n for n, _ in inner) | untraced)  # type: ignore[arg-type]
    if isinstance(planned, str):
        return {"no_fix": f"not isolated: {planned}"}
    breaks = "the break" + ("s" if len(inner) > 1 else "") + " at " + ", ".join(f"line {n} ({c})" for n, c in inner)
    title = (
        f"isolate the loop at line {line}: it and its body become the helpers `{planned.loop_name}` and"
        f" `{planned.body_name}`, so Dynamo compiles the function's other statements and each iteration around"
        f" {breaks}, which stay{'s' if len(inner) == 1 else ''} (isolated, not removed)"
    )
    node = "For" if isinstance(loop, ast.For) else "While"
    return rule.make_fix(title, node, loop, "safe", (planned, breaks))


def innermost_function(function: ast.FunctionDef | ast.AsyncFunctionDef, line: int) -> tuple[ast.AST, _Loop] | None:
    """The loop statement starting at `line` inside `function`, and the innermost function holding it."""
    found: list[tuple[ast.AST, _Loop]] = []

    def walk(node: ast.AST, owner: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.For, ast.While)) and child.lineno == line:
                found.append((owner, child))
            walk(child, child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner)

    walk(function, function)
    return found[0] if found else None


def plan_loop(
    function: ast.FunctionDef | ast.AsyncFunctionDef, loop: _Loop, tensors: frozenset[str], breaks: frozenset[int]
) -> LoopPlan | str:
    """The helpers that isolate `loop` of `function`, or why the loop cannot move without changing its meaning.

    `tensors`: names known to hold tensors where the loop starts (their parameters get a `Tensor` annotation);
    `breaks`: the lines of the breaks inside it."""
    refused = _refusal(loop)
    if refused:
        return f"the loop holds {refused}"
    if any(isinstance(t, (ast.Try, ast.TryStar)) and t is not loop and _holds(t, loop) for t in ast.walk(function)):
        # An exception out of the helper would leave the names the loop rebinds at their old values in the handler.
        return "it is inside a `try`: a handler would see the names it rebinds as they were before the loop"
    if any(isinstance(n, ast.Delete) for n in ast.walk(function)):
        return "the function deletes names (`del`): which are bound at the loop is not known"
    scope = _locals(function)
    if isinstance(scope, str):
        return scope
    local, captured = scope
    inside = {id(n) for n in ast.walk(loop)}
    stored = _stores([loop]) & local
    captured_here = sorted(stored & captured)
    if captured_here:
        return f"`{captured_here[0]}` is rebound in the loop and read by a nested function or generator"
    read_elsewhere = {
        n.id for n in ast.walk(function) if isinstance(n, ast.Name) and id(n) not in inside and n.id in stored
    }
    before = _bound_before(function, loop) | _params(function)
    unbound = sorted(read_elsewhere - before)
    if unbound:
        return f"`{unbound[0]}` is set in the loop and read elsewhere, but may be unbound before the loop"
    header = [loop.iter] if isinstance(loop, ast.For) else [loop.test]
    header_reads = _loads(header + loop.orelse) & local
    if header_reads - before:
        return f"`{sorted(header_reads - before)[0]}` is read by the loop's header or `else:` but may be unbound there"
    targets = _stores([loop.target]) if isinstance(loop, ast.For) else set()
    body_reads = _loads(loop.body) & local
    fresh = _set_before_read(loop.body)  # bound again by each iteration before any read
    unsure = sorted(body_reads - before - targets - fresh)
    if unsure:
        return f"`{unsure[0]}` is read in the loop but may be unbound there (set by an earlier iteration?)"
    body_stored = _stores(loop.body) & local
    # Returned by the body: what the header, a later iteration or the rest of the function reads. All of these
    # are bound before the loop or are loop targets (checked above), so the body returns them on every path.
    carried = body_stored & (header_reads | (body_reads - fresh) | read_elsewhere)
    body_inputs = _ordered(function, (body_reads | carried) & (before | targets))
    loop_inputs = _ordered(function, ((_loads([loop]) & local) | read_elsewhere) & before)
    needed = header_reads | carried | read_elsewhere
    return LoopPlan(
        loop.lineno,
        loop_inputs,
        _ordered(function, read_elsewhere),
        body_inputs,
        _ordered(function, carried),
        tuple(dict.fromkeys(n for n in (*loop_inputs, *body_inputs) if n in tensors)),
        len(loop.body),
        tuple(
            (first, end, _ordered(function, outputs), _ordered(function, inputs))
            for first, end, outputs, inputs in _disabled_runs(loop.body, breaks, needed, body_inputs)
        ),
    )


def _disabled_runs(
    body: list[ast.stmt], breaks: frozenset[int], needed: set[str], inputs: tuple[str, ...]
) -> list[tuple[int, int, set[str], set[str]]]:
    """Runs of consecutive body statements holding a break that can move into a function of their own.

    The function is defined once, in the loop helper (Dynamo skips that frame: applying the decorator in
    the body would be a break of its own each time the body is traced); the body's names it reads or may
    rebind are passed in (all bound there: `plan_loop` checked), and the names it binds that are read after
    it (`needed`, or later statements) are returned: bound on every path through it, or passed in."""
    holds = [any(s.lineno <= line <= s.end_lineno for line in breaks) for s in body]  # type: ignore[operator]
    runs, index = [], 0
    while index < len(body):
        if not holds[index]:
            index += 1
            continue
        end = index
        while end < len(body) and holds[end]:
            end += 1
        run = body[index:end]
        stored = _stores(run)
        later = _loads(body[end:]) | _loads(body[:index]) | needed
        outputs = stored & later
        passed = (_loads(run) | outputs) & (set(inputs) | _stores(body[:index]))
        if outputs <= _definite(run) | passed:
            runs.append((index, end, outputs, passed))
        index = end
    return runs


def _holds(outer: ast.AST, inner: ast.AST) -> bool:
    return any(n is inner for n in ast.walk(outer))


def _refusal(loop: _Loop) -> str | None:
    for node in ast.walk(loop):
        what = _REFUSED.get(type(node))
        if what:
            return what
        if isinstance(node, ast.Name) and node.id in _FRAME_NAMES:
            return f"`{node.id}`, which depends on the frame it runs in"
        if isinstance(node, ast.Attribute) and node.attr in _FRAME_ATTRS:
            return f"`.{node.attr}`, which depends on the frame it runs in"
        if isinstance(node, _COMPREHENSIONS) and any(isinstance(n, ast.NamedExpr) for n in ast.walk(node)):
            return "an assignment expression inside a comprehension"
    if _own_jumps(loop.body):
        return "a `break` or `continue` of its own"
    return None


def _own_jumps(statements: list[ast.stmt]) -> bool:
    """A `break`/`continue` that belongs to the loop whose body is `statements` (not to an inner loop)."""
    for statement in statements:
        if isinstance(statement, (ast.Break, ast.Continue)):
            return True
        if isinstance(statement, (ast.For, ast.While, ast.AsyncFor)):
            if _own_jumps(statement.orelse):  # an inner loop's `else:` jumps in the outer one
                return True
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(statement, field, None)
            if isinstance(block, list) and _own_jumps([s for b in block for s in _statements_of(b)]):
                return True
    return False


def _statements_of(node: ast.AST) -> list[ast.stmt]:
    return node.body if isinstance(node, (ast.ExceptHandler, ast.match_case)) else [node]  # type: ignore[list-item]


def _locals(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[set[str], set[str]] | str:
    """The function's local names, and those a nested function, lambda, class or generator expression reads."""
    try:
        table = symtable.symtable(ast.unparse(function), "<isolation>", "exec").get_children()[0]
    except (SyntaxError, IndexError, ValueError):
        return "the function could not be analysed"
    local = {s.get_name() for s in table.get_symbols() if s.is_local() or s.is_parameter()}
    captured: set[str] = set()
    for child in table.get_children():
        if child.get_type() != "function" or child.get_name() not in ("listcomp", "setcomp", "dictcomp"):
            captured |= {s.get_name() for s in child.get_symbols() if s.is_free()}
    return local, captured


def _params(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = function.args
    return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p is not None}


def _loads(nodes: list) -> set[str]:
    """Names read by `nodes`, without those a comprehension binds for itself."""
    out: set[str] = set()

    def walk(node: ast.AST, own: frozenset[str]) -> None:
        if isinstance(node, _COMPREHENSIONS):
            own = own | {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in own:
            out.add(node.id)
        if isinstance(node, (ast.For, ast.With)):  # the body reads the target it was just given
            bound = _stores([node.target] if isinstance(node, ast.For) else [i for i in node.items])
            for child in ast.iter_child_nodes(node):
                walk(child, own | bound if child in node.body else own)
            return
        for child in ast.iter_child_nodes(node):
            walk(child, own)

    for node in nodes:
        walk(node, frozenset())
    return out


def _stores(nodes: list) -> set[str]:
    """Names bound by `nodes` in the enclosing function (a comprehension's targets are its own)."""
    out: set[str] = set()
    for node in nodes:
        for n in _walk_outside_comprehensions(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                out.add(n.id)
            elif isinstance(n, ast.ExceptHandler) and n.name:
                out.add(n.name)
    return out


def _walk_outside_comprehensions(node: ast.AST):
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, _COMPREHENSIONS):
            yield from _walk_outside_comprehensions(child)


def _definite(statements: list[ast.stmt]) -> set[str]:
    """Names every normal run of `statements` binds."""
    out: set[str] = set()
    for s in statements:
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and (
            not isinstance(s, ast.AnnAssign) or s.value is not None
        ):
            out |= _stores(s.targets if isinstance(s, ast.Assign) else [s.target])
        elif isinstance(s, ast.Expr):
            out |= {n.target.id for n in _walk_outside_comprehensions(s) if isinstance(n, ast.NamedExpr)}
        elif isinstance(s, ast.With):
            out |= _stores([i.optional_vars for i in s.items if i.optional_vars is not None]) | _definite(s.body)
        elif isinstance(s, ast.If):
            out |= _definite(s.body) & _definite(s.orelse)
        elif isinstance(s, ast.Try):
            out |= _definite(s.finalbody)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(s.name)
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in s.names}
    return out


def _bound_before(function: ast.AST, target: ast.stmt) -> set[str]:
    """Names surely bound when `target` starts: set by earlier statements of each block on the way to it."""

    def search(block: list[ast.stmt], bound: set[str]) -> set[str] | None:
        for index, statement in enumerate(block):
            if statement is target:
                return bound | _definite(block[:index])
            if not any(n is target for n in ast.walk(statement)):
                continue
            here = bound | _definite(block[:index])
            if isinstance(statement, (ast.For, ast.AsyncFor)):
                here = here | _stores([statement.target])
            if isinstance(statement, (ast.With, ast.AsyncWith)):
                here = here | _stores([i.optional_vars for i in statement.items if i.optional_vars is not None])
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list):
                    found = search(inner, here)
                    if found is not None:
                        return found
            for handler in getattr(statement, "handlers", ()):
                found = search(handler.body, here | ({handler.name} if handler.name else set()))
                if found is not None:
                    return found
            return here
        return None

    return search(function.body, set()) or set()  # type: ignore[attr-defined]


def _set_before_read(body: list[ast.stmt]) -> set[str]:
    """Names each run of `body` binds (on every path of a statement at its top level) before anything reads them."""
    seen: set[str] = set()
    fresh: set[str] = set()
    for statement in body:
        reads = _loads([statement])
        fresh |= _definite([statement]) - seen - reads
        seen |= reads | _stores([statement])
    return fresh


def _ordered(function: ast.AST, names: set[str]) -> tuple[str, ...]:
    """`names` in the order the function first mentions them (parameters first): stable, readable signatures."""
    order: dict[str, int] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.arg):
            order.setdefault(node.arg, -1)
    for node in ast.walk(function):
        if isinstance(node, ast.Name):
            order.setdefault(node.id, (node.lineno << 16) + node.col_offset)
    return tuple(sorted(names, key=lambda n: (order.get(n, 1 << 40), n)))


# --------------------------------------------------------------------------- the rewrite (libcst)


def apply_loop(node: "cst.For | cst.While", plan: LoopPlan, breaks: str, edit: "Edit") -> "cst.FlattenSentinel":
    """The loop statement replaced by its two helpers and the call of the outer one."""
    import libcst as cst

    body = node.body
    statements = list(body.body) if isinstance(body, cst.IndentedBlock) else [cst.SimpleStatementLine(body.body)]
    runs = []
    if len(statements) == plan.body_length:  # else `;`-joined statements: the runs do not line up
        for first, end, outputs, inputs in reversed(plan.disabled):
            name = f"{PREFIX}break_{plan.line}_{first}"
            run = _function(name, inputs, plan, [*statements[first:end], *_return(outputs)], edit)
            # Not recursive: Dynamo skips only the run's own frame and still compiles what it calls (a submodule
            # called in a break statement stays compiled, as in the skipped loop; recursive it ran eagerly).
            decorator = cst.Decorator(edit.torch("compiler.disable(recursive=False)"))
            runs.insert(0, run.with_changes(decorators=[decorator]))
            statements[first:end] = [_call(outputs, name, inputs)]
    body_def = _function(plan.body_name, plan.body_inputs, plan, [*statements, *_return(plan.body_outputs)], edit)
    call_body = _call(plan.body_outputs, plan.body_name, plan.body_inputs)
    loop = node.with_changes(body=cst.IndentedBlock([call_body]), leading_lines=())
    helpers = [*runs, body_def, loop, *_return(plan.loop_outputs)]
    loop_def = _function(plan.loop_name, plan.loop_inputs, plan, helpers, edit)
    comments = [
        f"# transpile (TP501): {breaks} stay{'s' if breaks.startswith('the break ') else ''} a graph break, isolated:",
        "# the loop runs in these helpers, so Dynamo compiles the rest of the function and each iteration.",
    ]
    lines = [cst.EmptyLine(comment=cst.Comment(c)) for c in comments]
    loop_def = loop_def.with_changes(leading_lines=(*node.leading_lines, *lines))
    return cst.FlattenSentinel([loop_def, _call(plan.loop_outputs, plan.loop_name, plan.loop_inputs)])


def _function(name: str, params: tuple[str, ...], plan: LoopPlan, statements: list, edit: "Edit") -> "cst.FunctionDef":
    import libcst as cst

    tensor = cst.Module([]).code_for_node(edit.torch("Tensor")) if set(params) & set(plan.tensors) else ""
    signature = ", ".join(f"{p}: {tensor}" if p in plan.tensors else p for p in params)
    template = cst.parse_statement(f"def {name}({signature}):\n    pass\n")
    assert isinstance(template, cst.FunctionDef)
    return template.with_changes(body=cst.IndentedBlock(statements))


def _call(outputs: tuple[str, ...], name: str, inputs: tuple[str, ...]) -> "cst.SimpleStatementLine":
    import libcst as cst

    call = f"{name}({', '.join(inputs)})"
    line = f"{', '.join(outputs)} = {call}\n" if outputs else f"{call}\n"
    statement = cst.parse_statement(line)
    assert isinstance(statement, cst.SimpleStatementLine)
    return statement


def _return(outputs: tuple[str, ...]) -> list:
    import libcst as cst

    return [cst.parse_statement(f"return {', '.join(outputs)}\n")] if outputs else []
