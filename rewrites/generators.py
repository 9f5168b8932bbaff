"""Seeded `torch.Generator`s that TorchDynamo can trace (TP518's fix, which also removes the uses TP522 reports).

Dynamo cannot create a generator (GB0363), call its methods (GB7650) or pass one to a random function
(GB0055). The fix keeps the generator's state in a tensor instead: `torch.Generator(...)` made in compiled
code becomes `TraceableGenerator(...)`, and each draw given `generator=` calls a dispatcher
(`traceable_randn(...)`) with the same arguments. The dispatcher calls torch's function unless the
generator is a `TraceableGenerator`; then a custom operator restores a real `torch.Generator` from the state,
draws with it and returns the value and the new state. The numbers are torch's own, bit for bit, and Dynamo
traces the custom operators and the state's updates like any other tensor code. The class, the operators
and the dispatchers the file needs are written once per file, after its imports.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from string import Template
from typing import TYPE_CHECKING

from transpiler.lint.rule import FixDeclined

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.lint.rule import Edit

CLASS_NAME = "TraceableGenerator"
# The methods of `torch.Generator` the class keeps: those with a meaning for a stream seeded in the code.
# (`seed()` seeds from the clock, `clone_state()`/`graphsafe_*` serve CUDA graphs: not kept.)
METHODS = frozenset({"manual_seed", "initial_seed", "get_state", "set_state"})
# Reads of a generator besides its methods.
ATTRIBUTES = frozenset({"device"})


@dataclass(frozen=True)
class Draw:
    """A random function of torch that the fix can make draw from a `TraceableGenerator`."""

    name: str  # `torch.<name>`
    parameters: str  # the dispatcher's parameters before `generator`: also what torch takes positionally
    keywords: frozenset[str]  # the keyword arguments the dispatcher takes besides `generator`
    schema: str  # the custom operator's arguments after the state and the generator's device
    draw: str  # the operator's body: the draw with `generator` (None in the fake: shapes only)
    call: str  # the dispatcher's call of the operator, in `generator.draw(operator, <call>)`
    positional: tuple[int, int] = (0, 99)  # how many positional arguments the dispatcher takes
    prologue: str = ""  # the dispatcher's lines before the call (normalising the arguments)
    epilogue: str = ""  # what follows the call on the value (`.requires_grad_(...)`)


_FACTORY = frozenset({"dtype", "device", "requires_grad"})
_FACTORY_PARAMETERS = "generator=None, dtype=None, device=None, requires_grad=False"
_FACTORY_ARGUMENTS = "generator=generator, dtype=dtype, device=device, requires_grad=requires_grad"
_SIZE = """# ${name}(2, 3) or ${name}((2, 3)), as torch takes them
    if len(size) == 1 and not isinstance(size[0], (int, ${torch}.SymInt)):
        size = size[0]
"""

_BERNOULLI = (
    "${torch}.bernoulli(input, generator=generator) if p is None else ${torch}.bernoulli(input, p, generator=generator)"
)

DRAWS = {
    draw.name: draw
    for draw in (
        Draw(
            "randn",
            "*size",
            _FACTORY,
            "SymInt[] size, ScalarType? dtype, Device? device",
            "${torch}.randn(size, generator=generator, dtype=dtype, device=device)",
            "list(size), dtype, device",
            (1, 99),
            _SIZE,
            ".requires_grad_(requires_grad)",
        ),
        Draw(
            "rand",
            "*size",
            _FACTORY,
            "SymInt[] size, ScalarType? dtype, Device? device",
            "${torch}.rand(size, generator=generator, dtype=dtype, device=device)",
            "list(size), dtype, device",
            (1, 99),
            _SIZE,
            ".requires_grad_(requires_grad)",
        ),
        Draw(
            "randint",
            "*args",
            _FACTORY,
            "SymInt low, SymInt high, SymInt[] size, ScalarType? dtype, Device? device",
            "${torch}.randint(low, high, size, generator=generator, dtype=dtype, device=device)",
            "low, high, list(size), dtype, device",
            (2, 3),
            """# randint(high, size) or randint(low, high, size), as torch takes them
    *bounds, size = args
    low, high = bounds if len(bounds) == 2 else (0, *bounds)
""",
            ".requires_grad_(requires_grad)",
        ),
        Draw(
            "randperm",
            "n",
            _FACTORY,
            "SymInt n, ScalarType? dtype, Device? device",
            "${torch}.randperm(n, generator=generator, dtype=dtype, device=device)",
            "n, dtype, device",
            (1, 1),
            "",
            ".requires_grad_(requires_grad)",
        ),
        Draw(
            "multinomial",
            "input, num_samples, replacement=False",
            frozenset({"input", "num_samples", "replacement"}),
            "Tensor input, SymInt num_samples, bool replacement",
            "${torch}.multinomial(input, num_samples, replacement, generator=generator)",
            "input, num_samples, replacement",
            (2, 3),
        ),
        Draw(
            "bernoulli",
            "input, p=None",
            frozenset({"input", "p"}),
            "Tensor input, float? p",
            _BERNOULLI,
            "input, p",
            (1, 2),
        ),
    )
}
# What the generated code defines besides the dispatchers (never rewritten, never shadowed).
_HELPERS = (CLASS_NAME, "_transpile_operator", "_draw_operator", "_generator_state", "_generator_state_fake")


def dispatcher(name: str) -> str:
    return f"traceable_{name}"


def generated_names() -> frozenset[str]:
    """Every name the generated code may define: the fix never rewrites code inside those definitions."""
    return frozenset(_HELPERS) | {dispatcher(n) for n in DRAWS} | {f"_{n}_operator" for n in DRAWS}


_CLASS = Template('''
class TraceableGenerator:
    """`${torch}.Generator` that TorchDynamo can trace, written by `transpile --unsafe-fixes` (TP518).

    Dynamo cannot create a `${torch}.Generator`, call its methods or pass one to a random function: each
    is a graph break. This class keeps the generator's state as the uint8 tensor that
    `${torch}.Generator.get_state()` returns. The `traceable_*` functions below draw from it through custom
    operators that restore a real generator from the state, draw, and return the new state: the numbers
    are those of `${torch}.Generator`, bit for bit, eager or compiled. Kept: `manual_seed()`,
    `initial_seed()`, `get_state()`, `set_state()` and `device`.
    """

    # What a new `${torch}.Generator` is seeded with (its `initial_seed()`).
    DEFAULT_SEED = 67280421310721

    def __init__(self, device="cpu"):
        self.device = ${torch}.device(device)
        self.manual_seed(self.DEFAULT_SEED)

    def manual_seed(self, seed):
        self._initial_seed = seed
        self.state = _generator_state(seed, self.device)
        return self

    def initial_seed(self):
        return self._initial_seed

    def get_state(self):
        return self.state.clone()

    def set_state(self, new_state):
        self.state = new_state.clone()

    def draw(self, operator, *args):
        """The value `operator` (made by `_draw_operator`) draws from this generator, which it advances."""
        value, self.state = operator(self.state, self.device, *args)
        return value
''')

_REGISTER = Template('''
def _transpile_operator(name, schema, fake):
    """Decorator: the function as the custom operator `transpile::<name>`, with `fake` giving the result's
    shape to compilers. Registered once per process: files fixed by transpile share the operators."""

    def register(function):
        if not hasattr(${torch}.ops.transpile, name):
            operator = ${torch}.library.custom_op(f"transpile::{name}", function, mutates_args=(), schema=schema)
            operator.register_fake(fake)
        return getattr(${torch}.ops.transpile, name)

    return register
''')

_STATE_FAKE = Template('''
def _generator_state_fake(seed, device):
    """What compilers see of `_generator_state`: a CPU tensor whose size depends on the device type
    (5056 bytes for a CPU generator, 16 for a CUDA one)."""
    size = ${torch}.Generator(device=device).get_state().numel()
    return ${torch}.empty(size, dtype=${torch}.uint8, device="cpu")
''')

_STATE = Template('''
@_transpile_operator("generator_state_v1", "(int seed, Device device) -> Tensor", _generator_state_fake)
def _generator_state(seed, device):
    """The state of a `${torch}.Generator` on `device` seeded with `seed`."""
    return ${torch}.Generator(device=device).manual_seed(seed).get_state()
''')

_DRAW_OPERATOR = Template('''
def _draw_operator(name, schema):
    """Decorator: `draw(generator, ...)` as the custom operator `transpile::<name>(state, generator_device, ...)`,
    which draws with a `${torch}.Generator` restored from `state` and returns the value and the new state."""

    def wrap(draw):
        def from_state(state, generator_device, *args):
            generator = ${torch}.Generator(device=generator_device)
            generator.set_state(state)
            return draw(generator, *args), generator.get_state()

        def fake(state, generator_device, *args):
            # The same draw from the default generator has the value's shape, dtype and device.
            return draw(None, *args), ${torch}.empty_like(state)

        schema_with_state = f"(Tensor state, Device generator_device, {schema}) -> (Tensor, Tensor)"
        return _transpile_operator(name, schema_with_state, fake)(from_state)

    return wrap
''')

_OPERATOR = Template("""
@_draw_operator("${name}_v1", "${schema}")
def _${name}_operator(generator, ${arguments}):
    return ${draw}
""")

_DISPATCHER = Template('''
def traceable_${name}(${parameters}, ${keywords}):
    """`${torch}.${name}(...)`, drawing from a `TraceableGenerator` through a custom operator Dynamo traces."""
    if not isinstance(generator, TraceableGenerator):
        ${torch_call}
    ${prologue}return generator.draw(_${name}_operator, ${call})${epilogue}
''')


def definitions(draws: set[str], torch_name: str) -> dict[str, str]:
    """The module-level definitions for a file whose generators draw with `draws`, by the name each defines."""
    found = {
        CLASS_NAME: _CLASS,
        "_transpile_operator": _REGISTER,
        "_generator_state_fake": _STATE_FAKE,
        "_generator_state": _STATE,
        "_draw_operator": _DRAW_OPERATOR,
    }
    sources = {name: template.substitute(torch=torch_name) for name, template in found.items()}
    for name in sorted(draws):
        sources[f"_{name}_operator"] = _operator_source(DRAWS[name], torch_name)
        sources[dispatcher(name)] = _dispatcher_source(DRAWS[name], torch_name)
    return {name: source.strip("\n") + "\n" for name, source in sources.items()}


def _operator_source(draw: Draw, torch_name: str) -> str:
    arguments = ", ".join(part.rpartition(" ")[2] for part in draw.schema.split(", "))
    body = Template(draw.draw).substitute(torch=torch_name)
    return _OPERATOR.substitute(name=draw.name, schema=draw.schema, arguments=arguments, draw=body)


def _dispatcher_source(draw: Draw, torch_name: str) -> str:
    factory = draw.keywords == _FACTORY
    forwarded = ", ".join(p.split("=")[0] for p in draw.parameters.split(", "))
    if draw.name == "bernoulli":  # torch takes no `p=None`
        torch_call = (
            f"if p is None:\n            return {torch_name}.bernoulli(input, generator=generator)\n"
            f"        return {torch_name}.bernoulli(input, p, generator=generator)"
        )
    else:
        keywords = _FACTORY_ARGUMENTS if factory else "generator=generator"
        torch_call = f"return {torch_name}.{draw.name}({forwarded}, {keywords})"
    keyword_only = "" if draw.parameters.startswith("*") else "*, "
    prologue = Template(draw.prologue).substitute(torch=torch_name, name=draw.name)
    return _DISPATCHER.substitute(
        torch=torch_name,
        name=draw.name,
        parameters=draw.parameters,
        keywords=keyword_only + (_FACTORY_PARAMETERS if factory else "generator=None"),
        torch_call=torch_call,
        prologue=prologue.lstrip() + "    " if prologue else "",
        call=draw.call,
        epilogue=draw.epilogue,
    )


def generated(qualname: str) -> bool:
    """Whether the function `qualname` (dotted, with its classes and enclosing functions) is in the
    generated code, which makes and uses real generators in custom operators and dispatchers."""
    return not generated_names().isdisjoint(qualname.split("."))


# -- the analysis: where the created generator goes ------------------------------------------------------


def draw_refusal(call: ast.Call, qualname: str | None) -> str | None:
    """Why a call given `generator=` cannot become its dispatcher, or None."""
    name = (qualname or "").removeprefix("torch.")
    shown = qualname or (f".{call.func.attr}" if isinstance(call.func, ast.Attribute) else ast.unparse(call.func))
    if qualname is None or not qualname.startswith("torch.") or name not in DRAWS:
        return f"`{shown}()` has no traceable version (the fix has custom operators for {_supported()})"
    draw = DRAWS[name]
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return f"`{qualname}()` gets `*args` or `**kwargs`"
    low, high = draw.positional
    if not low <= len(call.args) <= high:
        return f"`{qualname}()` with {len(call.args)} positional arguments is not supported"
    others = sorted(k.arg for k in call.keywords if k.arg != "generator" and k.arg not in draw.keywords)
    if others:
        return f"`{qualname}()` gets `{others[0]}=`, which the traceable version does not take"
    return None


def _supported() -> str:
    return ", ".join(f"`torch.{n}`" for n in DRAWS)


class _Refused(Exception):
    pass


class Flow:
    """Follows a generator made at one call through its file: where it is stored, passed and drawn from."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents = {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
        self.aliases: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.aliases[alias.asname or alias.name.partition(".")[0]] = (
                        alias.name if alias.asname else alias.name.partition(".")[0]
                    )
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.draws: set[str] = set()
        self._followed: set[tuple[int, str]] = set()

    def qualname(self, node: ast.expr) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    def refusal(self, creation: ast.Call) -> str | None:
        """Why the generator `creation` makes may reach something a `TraceableGenerator` cannot stand in for."""
        try:
            self._value(creation)
        except _Refused as refused:
            return str(refused)
        return None

    # Each use of the generator's value: allowed, followed, or refused.
    def _value(self, value: ast.expr) -> None:
        parent = self.parents.get(id(value))
        function = self._function(value)
        if isinstance(parent, ast.Attribute):
            call = self.parents.get(id(parent))
            if parent.attr in ATTRIBUTES:
                return
            if parent.attr in METHODS and isinstance(call, ast.Call) and call.func is parent:
                if parent.attr == "manual_seed":
                    self._value(call)  # it returns the generator
                return
            raise _Refused(f"the generator's `.{parent.attr}` is not kept by `{CLASS_NAME}`")
        if isinstance(parent, ast.keyword):
            call = self.parents[id(parent)]
            if parent.arg == "generator" and self._callee(call.func, function)[0] is None:
                reason = draw_refusal(call, self.qualname(call.func))
                if reason:
                    raise _Refused(f"the generator is passed to {reason}")
                self.draws.add(self.qualname(call.func).removeprefix("torch."))
                return
            self._argument(call, parent.arg, function)
            return
        if isinstance(parent, ast.Call) and value in parent.args:
            self._argument(parent, parent.args.index(value), function)
            return
        if isinstance(parent, ast.Assign) and function is not None:
            if len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
                self._name(function, parent.targets[0].id)
                return
        if isinstance(parent, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in parent.ops):
            return
        if isinstance(parent, ast.Expr):
            return
        if isinstance(parent, ast.Return):
            raise _Refused("the generator is returned (its class changes)")
        raise _Refused(f"the generator is used in `{_short(parent)}`, which the fix does not follow")

    def _argument(self, call: ast.Call, position: int | str | None, function: ast.FunctionDef | None) -> None:
        """The generator passed to `call`: follow the parameter of a function of the file that takes it."""
        target, skip = self._callee(call.func, function)
        if target is None:
            raise _Refused(f"the generator is passed to `{_short(call.func)}()`, which the fix does not follow")
        arguments = target.args
        positional = [a.arg for a in arguments.posonlyargs + arguments.args][skip:]
        if isinstance(position, int):
            if position >= len(positional) or any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
                raise _Refused(f"the generator is passed to `*{arguments.vararg.arg if arguments.vararg else 'args'}`")
            name = positional[position]
        elif position in positional or position in {a.arg for a in arguments.kwonlyargs}:
            name = position
        else:
            raise _Refused(f"the generator is passed to `**{arguments.kwarg.arg if arguments.kwarg else 'kwargs'}`")
        self._name(target, name)

    def _name(self, function: ast.FunctionDef, name: str) -> None:
        """Every read of `name` in `function`: a use of the generator's value."""
        if (id(function), name) in self._followed:
            return
        self._followed.add((id(function), name))
        for node in ast.walk(function):
            if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
                raise _Refused(f"`{name}` is declared `{type(node).__name__.lower()}`")
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                if self._function(node) is not function:
                    raise _Refused(f"`{name}` is used in a nested function or lambda")
                self._value(node)

    def _callee(self, func: ast.expr, function: ast.FunctionDef | None) -> tuple[ast.FunctionDef | None, int]:
        """The function of the file a call runs, and how many leading parameters the call does not give
        (`self`): module functions, classes (their `__init__`), `self.method`, `self.submodule` (its
        `forward`), and methods of a local bound only to an instance of a class of the file."""
        if isinstance(func, ast.Name):
            if func.id in self.functions:
                return self.functions[func.id], 0
            if func.id in self.classes:
                constructor = self._method(func.id, "__init__")
                return (constructor, 1) if constructor else (None, 0)
            return None, 0
        if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name) or function is None:
            return None, 0
        owner = self._class(function)
        if func.value.id == "self" and owner is not None:
            method = self._method(owner.name, func.attr)
            if method is not None:
                return method, 1
            kind = self._instance_class(self._attribute_values(owner, func.attr))
            return (self._method(kind, "forward"), 1) if kind else (None, 0)
        values = [
            n.value
            for n in ast.walk(function)
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == func.value.id for t in n.targets)
        ]
        kind = self._instance_class(values)
        return (self._method(kind, func.attr), 1) if kind else (None, 0)

    def _instance_class(self, values: list[ast.expr]) -> str | None:
        """The class of the file every one of `values` constructs, if they agree."""
        kinds = {v.func.id if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) else None for v in values}
        kind = kinds.pop() if len(kinds) == 1 else None
        return kind if kind in self.classes else None

    def _attribute_values(self, cls: ast.ClassDef, attr: str) -> list[ast.expr]:
        return [
            n.value
            for n in ast.walk(cls)
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Attribute) and t.attr == attr and _is_self(t.value) for t in n.targets)
        ]

    def _method(self, cls: str | None, name: str) -> ast.FunctionDef | None:
        """`cls.name` in the file, looked up through the bases the file defines."""
        seen = set()
        while cls in self.classes and cls not in seen:
            seen.add(cls)
            node = self.classes[cls]
            for statement in node.body:
                if isinstance(statement, ast.FunctionDef) and statement.name == name:
                    return statement
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            cls = bases[0] if bases else None
        return None

    def _function(self, node: ast.AST) -> ast.FunctionDef | None:
        """The innermost function or lambda around `node` (comprehensions belong to their function)."""
        node = self.parents.get(id(node))
        while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            node = self.parents.get(id(node))
        return node

    def _class(self, function: ast.FunctionDef) -> ast.ClassDef | None:
        parent = self.parents.get(id(function))
        return parent if isinstance(parent, ast.ClassDef) else None


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


# -- the edits ---------------------------------------------------------------------------------------------


def apply_creation(node: cst.Call, position: tuple[int, int], edit: Edit) -> cst.Call:
    """`TraceableGenerator(...)` for the `torch.Generator(...)` at `position` (line, column of `ast`), the
    definitions the file needs, and every draw of the file given `generator=` rewritten to its dispatcher.
    Raises FixDeclined where the generator may reach what a `TraceableGenerator` cannot stand in for."""
    import libcst as cst

    tree = ast.parse(edit.module.code)
    flow = Flow(tree)
    creation = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.Call) and (n.lineno, n.col_offset) == position), None
    )
    if creation is None:
        raise FixDeclined("the generator's creation was not found in the file")
    refused = flow.refusal(creation)
    if refused:
        raise FixDeclined(refused)
    draws = flow.draws | _rewritable_draws(tree, flow)
    _add_definitions(edit, draws)
    edit.module_edits["generator draws"] = _rewrite_draws
    return node.with_changes(func=cst.Name(CLASS_NAME))


def _add_definitions(edit: Edit, draws: set[str]) -> None:
    edit.torch()  # the definitions spell torch with the module's alias; `import torch` is added where missing
    for name, source in definitions(draws, edit.torch_name).items():
        edit.definitions.setdefault(name, source)


def _rewritable_draws(tree: ast.Module, flow: Flow) -> set[str]:
    """The draws `_rewrite_draws` rewrites in `tree`: by name."""
    return {name for name, _ in _draw_calls(tree, flow)}


def _draw_calls(tree: ast.Module, flow: Flow):
    """(name, call) for each call of a supported draw given a `generator=` other than `None`, outside the
    generated definitions, that its dispatcher takes."""
    skipped = {
        id(n)
        for d in tree.body
        if isinstance(d, (ast.FunctionDef, ast.ClassDef)) and d.name in generated_names()
        for n in ast.walk(d)
    }
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call) or id(call) in skipped:
            continue
        generator = next((k.value for k in call.keywords if k.arg == "generator"), None)
        if generator is None or isinstance(generator, ast.Constant) and generator.value is None:
            continue
        qualname = flow.qualname(call.func)
        if draw_refusal(call, qualname) is None:
            yield qualname.removeprefix("torch."), call


def _rewrite_draws(module: cst.Module) -> cst.Module:
    """`module` with every draw that `_draw_calls` finds calling its dispatcher (the generator may be a
    `TraceableGenerator` there; the dispatcher keeps torch's behaviour for any other value)."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    tree = ast.parse(module.code)
    lines = module.code.splitlines(keepends=True)
    wanted = {}
    for name, call in _draw_calls(tree, Flow(tree)):
        # `ast` counts columns in UTF-8 bytes, libcst in characters.
        column = len(lines[call.lineno - 1].encode()[: call.col_offset].decode())
        end = len(lines[call.end_lineno - 1].encode()[: call.end_col_offset].decode())
        wanted[(call.lineno, column, call.end_lineno, end)] = name
    if not wanted:
        return module
    wrapper = MetadataWrapper(module)
    positions = wrapper.resolve(PositionProvider)

    class Rewrite(cst.CSTTransformer):
        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
            span = positions[original]
            name = wanted.get((span.start.line, span.start.column, span.end.line, span.end.column))
            return updated.with_changes(func=cst.Name(dispatcher(name))) if name else updated

    return wrapper.module.visit(Rewrite())
