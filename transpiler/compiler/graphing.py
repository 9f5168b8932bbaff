"""Which forwards replay as CUDA graphs by default, and which attributes their replays depend on.

A CUDA graph replays the kernels one call launched and none of its Python. That is right for a
forward whose Python, for one call signature, always decides the same way and does nothing but
launch work: no host sync, no data-dependent branch, no side effect. The lint finds the first two
(and what Dynamo breaks on generally); this pass adds the side effects it does not report, and
picks the forwards worth a graph.

- **Candidates** are the blocks of a model and the models that hold them. Blocks: classes of this
  file whose instances are put in a layer list (`nn.ModuleList([Block(...) for ...])`,
  `self.layers.append(Block(...))`, `nn.Sequential(*layers)` of a local list of them); a block is
  where a forward's Python costs most (one per layer). Models: classes that build such a list, or
  hold (`self.x = Model(...)` in `__init__`) a class that does. At run time the outermost graphed
  forward called records the whole call, blocks included, so a model whose forward records (no host
  sync, plain outputs) replays as one graph with none of its Python left; where it cannot (it returns
  a cache object, a library helper waits on the device), its blocks replay each.
  Other classes (an attention or an MLP inside a block, a norm) are not candidates: they run inside
  their block's graph, and alone they are too small for a replay's guards to pay.
- **Refused**, with the reason the report shows: a forward that, or whose callees in this file
  (its submodules' forwards, its methods, the file's functions), has a finding the build left
  (`hazards`: what Dynamo would break on), stores into `self` (an attribute, an item, a mutating
  method call such as `self.cache.append`), declares `global`/`nonlocal`, or yields.
- **Reads**: the attributes reached from `self` that the forward and its callees in this file read
  (`self.config.use_cache`, `self.attn.num_heads`), as dotted paths from the block. The runtime
  guards their values: a change records again.

The runtime checks what the source cannot show: host syncs while recording, writes into inputs,
changed argument containers or module attributes, outputs aliasing inputs (emit/runtime/graphs.py).
Code outside this file is trusted not to have Python side effects that matter (a logging call
that runs while recording and not when replaying).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from transpiler.compiler.ir import GraphSite, NotGraphed

_MODULE_LISTS = {"ModuleList", "Sequential"}
# Methods that change the object they are called on: called on something reached from `self`, a side effect.
_MUTATING = {
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem", "add",
    "discard", "sort", "reverse", "__setitem__", "__delitem__", "register_buffer", "register_parameter",
}  # fmt: skip


def enclosing_functions(tree: ast.Module) -> list[tuple[int, int, str]]:
    """Every function of `tree` as (first line, last line, qualified name: `Class.method`), innermost last."""
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


Hazard = tuple[int, str]  # a line and what it does there


def hazards_by_function(tree: ast.Module, findings: list[Hazard]) -> dict[str, Hazard]:
    """Per function of `tree`, the first of `findings` inside it (of the innermost function holding it)."""
    functions = enclosing_functions(tree)
    hazards: dict[str, Hazard] = {}
    for line, description in sorted(findings):
        inside = [f for f in functions if f[0] <= line <= f[1]]
        if inside:
            name = max(inside, key=lambda f: f[0])[2]
            hazards.setdefault(name, (line, description))
    return hazards


def graph_sites(tree: ast.Module, hazards: Mapping[str, Hazard]) -> tuple[list[GraphSite], list[NotGraphed]]:
    """The blocks of `tree` whose forward replays as a graph, and those that do not with the reason.

    `hazards`: per function qualified name (`Class.method`), a finding the build left in it."""
    return _File(tree, hazards).sites()


class _File:
    def __init__(self, tree: ast.Module, hazards: Mapping[str, Hazard]) -> None:
        self.hazards = hazards
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self._why: dict[str, Hazard | None] = {}
        self._held = {name: self._layer_lists(node) for name, node in self.classes.items()}
        self._reads: dict[str, tuple[str, ...]] = {}

    def sites(self) -> tuple[list[GraphSite], list[NotGraphed]]:
        sites, refused = [], []
        for name in sorted(self._candidates(), key=lambda n: self.classes[n].lineno):
            forward = self._method(name, "forward")
            if forward is None:
                continue
            why = self._why_not(f"{name}.forward")
            if why is None:
                sites.append(GraphSite(name, tuple(sorted(set(self._reads_of(f"{name}.forward", set()))))))
            else:
                refused.append(NotGraphed(name, *why))
        return sites, refused

    # -- candidates ------------------------------------------------------------------------------
    def _blocks(self) -> set[str]:
        """Classes of this file put into a layer list."""
        return {block for held in self._held.values() for block in held}

    def _candidates(self) -> set[str]:
        """The blocks, the classes that build their lists, and (transitively) the classes holding those."""
        models = {name for name, held in self._held.items() if held}
        grown = True
        while grown:
            holders = {name for name in self.classes if set(self._submodules(name).values()) & models}
            grown = not holders <= models
            models |= holders
        return self._blocks() | models

    def _layer_lists(self, cls: ast.ClassDef) -> set[str]:
        """The classes of this file `cls` puts into layer lists, in any of its methods."""
        lists = {
            target.attr
            for node in ast.walk(cls)
            if isinstance(node, ast.Assign) and _is_module_list(node.value)
            for target in node.targets
            if _self_attribute(target)
        }
        held: set[str] = set()
        for function in (n for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)):
            gathered = _local_lists(function)
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                if _is_module_list(node) or (
                    isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("append", "extend", "insert")
                    and _self_attribute(node.func.value)
                    and node.func.value.attr in lists
                ):
                    calls = _calls(node.args)
                    for arg in node.args:  # `nn.Sequential(*layers)`: the calls gathered in the local list
                        name = arg.value if isinstance(arg, ast.Starred) else arg
                        if isinstance(name, ast.Name):
                            calls += gathered.get(name.id, [])
                    held |= {c.func.id for c in calls if c.func.id in self.classes}
        return held

    # -- what a function does --------------------------------------------------------------------
    def _method(self, cls: str, name: str) -> ast.FunctionDef | None:
        node = self.classes.get(cls)
        if node is None:
            return None
        found = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == name]
        return found[-1] if found else None

    def _function(self, qualified: str) -> tuple[str | None, ast.FunctionDef | None]:
        """The class (None for a module function) and the definition of `Class.method` or `function`."""
        if "." in qualified:
            cls, name = qualified.split(".", 1)
            return cls, self._method(cls, name)
        found = self.functions.get(qualified)
        return None, found if isinstance(found, ast.FunctionDef) else None

    def _submodules(self, cls: str) -> dict[str, str]:
        """`self.<attr> = SomeClass(...)` in `cls.__init__`, for classes of this file: attr -> class."""
        init = self._method(cls, "__init__")
        found: dict[str, str] = {}
        for node in ast.walk(init) if init is not None else ():
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
            ):
                for target in node.targets:
                    if _self_attribute(target) and node.value.func.id in self.classes:
                        found[target.attr] = node.value.func.id
        return found

    def _callees(self, cls: str | None, function: ast.FunctionDef) -> list[tuple[str | None, str]]:
        """(prefix of the callee's `self` from ours, callee's qualified name) for the calls resolvable in this file.

        The blocks `cls` puts into layer lists count as callees of each of its methods (called from a loop
        over the list, which names no class): their hazards are the model's. Their prefix is None: which
        element of the list is unknown here, and the runtime adds each block's reads under its name."""
        submodules = self._submodules(cls) if cls else {}
        found: list[tuple[str | None, str]] = [(None, f"{block}.forward") for block in sorted(self._held.get(cls, ()))]
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in self.functions:
                found.append(("", func.id))
            elif cls and _self_attribute(func):
                if func.attr in submodules:
                    found.append((f"{func.attr}.", f"{submodules[func.attr]}.forward"))
                elif self._method(cls, func.attr) is not None:
                    found.append(("", f"{cls}.{func.attr}"))
        return found

    def _why_not(self, qualified: str) -> Hazard | None:
        if qualified in self._why:
            return self._why[qualified]
        self._why[qualified] = None  # recursion: a cycle adds nothing new
        cls, function = self._function(qualified)
        why = None
        if qualified in self.hazards:
            why = self.hazards[qualified]
        elif function is not None:
            why = _side_effect(function)
            for _, callee in self._callees(cls, function) if why is None else ():
                inner = self._why_not(callee)
                if inner is not None:
                    why = inner if inner[1].startswith("in ") else (inner[0], f"in {callee}: {inner[1]}")
                    break
        self._why[qualified] = why
        return why

    def _reads_of(self, qualified: str, seen: set[str]) -> list[str]:
        if qualified in seen:
            return []
        seen.add(qualified)
        cls, function = self._function(qualified)
        if function is None:
            return []
        nodes = list(ast.walk(function))
        called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
        # `self.config` in `self.config.x` is not a read of its own: the longer chain is.
        objects = {id(node.value) for node in nodes if isinstance(node, ast.Attribute)}
        objects |= {id(node.args[0]) for node in nodes if isinstance(node, ast.Call) and _literal_getattr(node)}
        reads = []
        for node in nodes:
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and id(node) not in called | objects:
                path = _self_path(node)
                if path:
                    reads.append(path)
            elif isinstance(node, ast.Call) and _literal_getattr(node):
                owner = _self_path(node.args[0])
                reads.append(f"{owner}.{node.args[1].value}" if owner else node.args[1].value)
        for prefix, callee in self._callees(cls, function):
            if prefix is not None:
                reads += [prefix + read for read in self._reads_of(callee, seen)]
        return reads


def _side_effect(function: ast.FunctionDef) -> Hazard | None:
    """A Python side effect of `function` the lint does not report, in words, or None."""
    for node in ast.walk(function):
        if node is not function and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue  # a nested function's body runs where it is called (walked anyway: conservative)
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return node.lineno, f"`{'global' if isinstance(node, ast.Global) else 'nonlocal'}` state"
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            return node.lineno, "a generator or coroutine"
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in _stores(targets):
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _rooted_at_self(target):
                return node.lineno, f"stores into `{ast.unparse(target)}`"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATING
            and _rooted_at_self(node.func.value)
        ):
            return node.lineno, f"`{ast.unparse(node.func)}(...)` changes module state"
    return None


def _stores(targets: list[ast.expr]) -> list[ast.expr]:
    """The targets of an assignment, tuples and starred targets unpacked."""
    found: list[ast.expr] = []
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            found += _stores(target.elts)
        elif isinstance(target, ast.Starred):
            found += _stores([target.value])
        else:
            found.append(target)
    return found


def _local_lists(function: ast.FunctionDef) -> dict[str, list[ast.Call]]:
    """Per local name of `function`, the calls put into it (`layers = [Block()]`, `layers += [...]`,
    `layers.append(Block())`): the elements of a list later given to a layer list."""
    gathered: dict[str, list[ast.Call]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, values = node.targets[0].id, [node.value]
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            name, values = node.target.id, [node.value]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend", "insert")
            and isinstance(node.func.value, ast.Name)
        ):
            name, values = node.func.value.id, node.args
        else:
            continue
        gathered.setdefault(name, []).extend(_calls(values))
    return gathered


def _is_module_list(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in _MODULE_LISTS


def _calls(args: list[ast.expr]) -> list[ast.Call]:
    """The calls of a plain name among `args` and their list, tuple or comprehension elements."""
    return [n for arg in args for n in ast.walk(arg) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


def _self_attribute(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _rooted_at_self(node: ast.AST) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "self"


def _self_path(node: ast.AST) -> str | None:
    """`config.x` for `self.config.x`; None for anything not a chain of attributes from `self`."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not (isinstance(node, ast.Name) and node.id == "self") or not parts:
        return None
    return ".".join(reversed(parts))


def _literal_getattr(node: ast.Call) -> bool:
    """`getattr(self.<path>, "name"[, default])`."""
    return (
        isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and 2 <= len(node.args) <= 3
        and (node.args[0].id == "self" if isinstance(node.args[0], ast.Name) else _self_path(node.args[0]) is not None)
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    )
