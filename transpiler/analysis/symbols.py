"""What a file defines and imports: qualified names, classes, functions, calls between them.

This is the per-file part of the analysis. It is plain data (picklable, cached by
file content); `project.py` joins the summaries of all files into the module
hierarchy and the call graph.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, field

from transpiler.analysis.kinds import Kind, Returned

# Attribute names that say "an activation module": `act`, `act_fn`, `activation`, `hidden_act`,
# `intermediate_act_fn`, `act_layer`, `act1`, `activation_function`. Not `act_dropout`, `act_scale`.
ACTIVATION_ATTRIBUTE = re.compile(r"(?:\w+_)?(?:act|activation)\d*(?:_fn|_func|_function|_layer)?")

BUILTINS = frozenset(dir(builtins))
DISABLE_DECORATORS = frozenset({"torch.compiler.disable", "torch._dynamo.disable"})

# Library classes that are nn.Modules, beyond everything under `torch.nn`.
LIBRARY_MODULE_BASES = frozenset(
    {
        "transformers.PreTrainedModel",
        "transformers.modeling_utils.PreTrainedModel",
        "transformers.modeling_layers.GradientCheckpointingLayer",
        "transformers.pytorch_utils.Conv1D",
        "transformers.activations.GELUActivation",
        "lightning.LightningModule",
        "lightning.pytorch.LightningModule",
        "pytorch_lightning.LightningModule",
        "timm.layers.Mlp",
        "torchvision.ops.misc.ConvNormActivation",
    }
)
# Capitalised names under torch.nn that are not modules.
_TORCH_NN_NON_MODULES = frozenset({"Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer"})


def is_library_module_class(qualname: str) -> bool:
    if qualname in LIBRARY_MODULE_BASES:
        return True
    head, _, last = qualname.rpartition(".")
    return (
        (head == "torch.nn" or head.startswith("torch.nn.modules"))
        and last[:1].isupper()
        and last not in _TORCH_NN_NON_MODULES
    )


@dataclass
class FunctionInfo:
    qualname: str
    name: str
    line: int
    class_qualname: str | None = None
    # ("self", method) for self.method(...), ("super", method) for super().method(...),
    # ("name", qualname) for a call of an imported or module-level function.
    calls: set[tuple[str, str]] = field(default_factory=set)
    disabled: bool = False  # decorated with torch.compiler.disable / torch._dynamo.disable
    # Positional parameter names (without `self`), and those whose kind nothing declares:
    # unannotated, without a default. Their kinds can come from the call sites instead.
    params: tuple[str, ...] = ()
    open_params: frozenset[str] = frozenset()
    # Used in its file other than by calls the analysis follows (as a value, through getattr): its
    # call sites do not tell the kinds of its parameters (calls.py).
    unseen_calls: bool = False
    # For each call edge, one entry per call site: the positions and keyword names of
    # the arguments that are tensors there.
    tensor_args: dict[tuple[str, str], list[frozenset[int | str]]] = field(default_factory=dict)


NON_LITERAL = ("<not a literal>",)  # a constructor argument that is an expression


@dataclass
class ClassInfo:
    qualname: str
    name: str
    line: int
    bases: list[str]
    methods: dict[str, FunctionInfo] = field(default_factory=dict)
    # Attribute kinds from __init__ and the class body (`self.linear = nn.Linear(...)`).
    attrs: dict[str, Kind] = field(default_factory=dict)
    # Qualified constructor of submodule attributes, e.g. {"lstm": "torch.nn.LSTM"}.
    attr_ctors: dict[str, str] = field(default_factory=dict)
    # Their constructor arguments: positional and keyword literals (NON_LITERAL otherwise).
    attr_ctor_args: dict[str, tuple[tuple, tuple[tuple[str, object], ...]]] = field(default_factory=dict)
    # Python int/float/bool attributes (the candidates for recompilation by mutation).
    scalar_attrs: set[str] = field(default_factory=set)
    # Methods decorated with torch.compiler.disable.
    disabled_methods: set[str] = field(default_factory=set)
    # Attributes registered with `self.register_buffer(...)`: tensors no autograd writes through.
    buffers: set[str] = field(default_factory=set)


@dataclass
class FileSummary:
    module: str
    classes: dict[str, ClassInfo] = field(default_factory=dict)  # by qualname
    functions: dict[str, FunctionInfo] = field(default_factory=dict)  # module-level, by qualname
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> qualname (imports)
    compile_roots: set[tuple[str, str]] = field(default_factory=set)  # targets of torch.compile


class Names:
    """Resolves names of one module to qualified names (imports, definitions, builtins)."""

    def __init__(self, tree: ast.Module, module: str, is_package: bool) -> None:
        self.module = module
        self.aliases: dict[str, str] = {}
        self.loggers: set[str] = set()
        self.defined: set[str] = set()
        self.disabled: set[str] = set()  # module-level functions decorated with torch.compiler.disable
        # What calls of the file's functions give, by qualified name (`Class.method` for `self.method()`
        # in that class): set by the walker once it has found them (calls.py).
        self.returns: dict[str, Returned] = {}
        # NumPy arrays made from tensors are typed as Dynamo traces them (Kind.ARRAY): set by a walker of
        # lint rules; the compiler's walks, which ask what is a torch.Tensor at run time, leave them unknown.
        self.arrays = False
        package = module if is_package else module.rpartition(".")[0]
        for node in module_level(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.partition(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module, node.level, package)
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defined.add(node.name)
                self.aliases.pop(node.name, None)
                if not isinstance(node, ast.ClassDef) and self.is_disabled(node):
                    self.disabled.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.defined.add(target.id)
                        if node.value is not None and self.is_logger_factory(node.value):
                            self.loggers.add(target.id)
                        if isinstance(node.value, ast.Call) and self.resolve(node.value.func) in DISABLE_DECORATORS:
                            self.disabled.add(target.id)  # `fn = torch.compiler.disable(impl)`

    def resolve(self, node: ast.expr) -> str | None:
        """Qualified name of a dotted name expression, or None."""
        if isinstance(node, ast.Name):
            name = node.id
            if name in self.aliases:
                return self.aliases[name]
            if name in self.defined:
                return f"{self.module}.{name}"
            if name in BUILTINS:
                return f"builtins.{name}"
            return None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def is_disabled(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """Decorated with `torch.compiler.disable` (with or without arguments)."""
        for decorator in node.decorator_list:
            callee = decorator.func if isinstance(decorator, ast.Call) else decorator
            if self.resolve(callee) in DISABLE_DECORATORS:
                return True
        return False

    def is_logger_factory(self, node: ast.expr) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and ((self.resolve(node.func) or "").rpartition(".")[2] in ("getLogger", "get_logger"))
        )


def _absolute(module: str | None, level: int, package: str) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".") if package else []
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if level - 1 <= len(parts) else []
    base = ".".join(parts)
    if module:
        return f"{base}.{module}" if base else module
    return base


def module_level(tree: ast.Module):
    """Module-level statements, including those under `if`/`try` (TYPE_CHECKING, optional imports)."""
    stack = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            children = list(node.body) + list(getattr(node, "orelse", ()))
            children += [s for h in getattr(node, "handlers", ()) for s in h.body]
            children += list(getattr(node, "finalbody", ()))
            stack.extend(reversed(children))
