"""Abstract interpretation of expressions: is this a tensor, a Python scalar, a module?

The facts follow how TorchDynamo sees values: shapes, dtypes, `dim()` and
`self.training` are Python constants that it guards on; anything computed from
tensor *values* is a tensor (or, after `.item()`, a data-dependent scalar).
"""

from __future__ import annotations

import ast
import re

from transpiler.analysis.kinds import Kind, Returned, join
from transpiler.analysis.symbols import ClassInfo, Names, is_library_module_class
from transpiler.analysis.tensor_names import TENSOR_NAMES

# Tensor attributes that are static metadata to Dynamo.
META_ATTRS = frozenset(
    "shape dtype device ndim is_cuda is_cpu is_sparse is_quantized is_meta layout "
    "requires_grad is_leaf names itemsize nbytes".split()
)
TENSOR_ATTRS = frozenset("T mT H mH real imag data grad".split())
# Tensor methods returning Python values that Dynamo knows statically.
META_METHODS = frozenset(
    "size dim ndimension numel nelement stride element_size is_contiguous is_floating_point "
    "is_complex get_device data_ptr storage_offset is_pinned is_shared has_names type".split()
)
DATA_METHODS = frozenset({"item", "tolist"})
BOOL_METHODS = frozenset(
    "any all eq ne lt gt le ge greater less greater_equal less_equal not_equal equal_ "
    "isnan isinf isfinite isneginf isposinf isreal signbit bool logical_and logical_or "
    "logical_not logical_xor isclose".split()
)
# Functions under `torch.` that return Python values rather than tensors.
TORCH_NON_TENSOR = frozenset(
    "is_tensor is_storage is_complex is_floating_point is_nonzero is_grad_enabled "
    "is_inference_mode_enabled get_default_dtype numel typename is_autocast_enabled "
    "compiler.is_compiling compiler.is_dynamo_compiling compiler.is_exporting "
    "jit.is_scripting jit.is_tracing cuda.is_available backends.mps.is_available "
    "get_autocast_gpu_dtype finfo iinfo Size device dtype Generator "
    "_dynamo.is_compiling cuda.device_count set_grad_enabled no_grad enable_grad "
    "inference_mode autocast manual_seed seed".split()
)
TORCH_BOOL = frozenset(
    "isnan isinf isfinite isneginf isposinf eq ne lt gt le ge greater less equal "
    "logical_and logical_or logical_not logical_xor isin any all isclose signbit".split()
)
# NumPy functions whose result is no array (or is the file system's business): given an array
# made from a tensor, everything else under `numpy.` gives one.
NUMPY_NON_ARRAY = frozenset(
    "shape ndim size isscalar iscomplexobj isrealobj result_type can_cast min_scalar_type dtype finfo iinfo "
    "save savez savez_compressed savetxt tofile set_printoptions array2string array_repr array_str".split()
)
# ndarray methods that give an array (`.item()` and `.tolist()` give Python values, as a tensor's do).
GENERATOR_CLASSES = frozenset({"torch.Generator", "torch._C.Generator"})
# Operations that return a named tuple of (values, indices) tensors (with a `dim`, for min and max).
NAMED_RESULTS = frozenset("max min topk sort kthvalue median nanmedian mode cummax cummin".split())
# Tensor methods whose result has the receiver's dtype: they move, copy or select elements.
LAYOUT_METHODS = frozenset(
    "view reshape flatten ravel squeeze unsqueeze transpose permute t contiguous clone detach expand "
    "expand_as view_as reshape_as repeat flip roll narrow select diagonal movedim swapaxes".split()
)
ARRAY_METHODS = frozenset(
    "all any argmax argmin argsort astype clip conj conjugate copy cumprod cumsum diagonal dot flatten max "
    "mean min prod ptp ravel repeat reshape round squeeze std sum swapaxes take trace transpose var".split()
)
TENSOR_NAMESPACES = ("torch.", "torch.nn.functional.", "torch.special.", "torch.linalg.", "torch.fft.")
PY_SCALAR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "complex"})


def annotation_kind(node: ast.expr | None) -> Kind | None:
    """Kind declared by a parameter annotation, or None when it says nothing useful.

    `Tensor` and `Optional[Tensor]` are tensors; a union of a tensor with anything
    else but None (`list[int] | torch.Tensor`) is unknown, since callers may pass either.
    """
    if node is None:
        return None
    alternatives = [ast.unparse(a) for a in union_members(node)]
    alternatives = [a for a in alternatives if a != "None"]
    if len(alternatives) != 1:
        return Kind.UNKNOWN
    (text,) = alternatives
    if "Tensor" in text:
        return Kind.TENSOR
    if text in ("torch.Generator", "Generator") and len(union_members(node)) == 1:
        return Kind.GENERATOR  # not `Optional[...]`: None there uses the global generator, which traces
    return Kind.SCALAR if text in PY_SCALAR_ANNOTATIONS else Kind.UNKNOWN


def union_members(node: ast.expr) -> list[ast.expr]:
    """`A | B`, `Union[A, B]`, `Optional[A]` and their string forms, flattened."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return [node]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return union_members(node.left) + union_members(node.right)
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).rpartition(".")[2]
        if head in ("Optional", "Union"):
            inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            members = [m for element in inner for m in union_members(element)]
            return members + ([ast.Constant(None)] if head == "Optional" else [])
    return [node]


# Unannotated `forward` parameters with these names are flags, sizes or devices, not tensors.
_NON_TENSOR_NAME = re.compile(
    r"^(output_|use_|return_|is_|has_|do_|num_|n_|no_)|(_shape|_size|_dim|_len|_length|device|dtype|_idx|_index)$"
)


def open_parameters(func: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[tuple[str, ...], frozenset[str]]:
    """Positional parameter names without `self`, and those with no annotation and no default."""
    args = func.args
    positional = args.posonlyargs + args.args
    if positional and _is_method_self(func, positional[0].arg):
        positional = positional[1:]
    first_default = len(positional) - len(args.defaults)
    open_names = {a.arg for i, a in enumerate(positional) if a.annotation is None and i < first_default}
    open_names |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if a.annotation is None and d is None}
    return tuple(a.arg for a in positional), frozenset(open_names)


def parameter_kinds(func: ast.FunctionDef | ast.AsyncFunctionDef, is_forward: bool) -> dict[str, Kind]:
    """Kinds of a function's parameters from annotations and defaults.

    Unannotated `forward` parameters without a default are tensors; those
    defaulting to None may be tensors or flags; elsewhere an unannotated
    parameter is unknown, so rules stay quiet rather than guess.
    """
    args = func.args
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
    kinds: dict[str, Kind] = {}
    for arg, default in pairs:
        declared = annotation_kind(arg.annotation)
        if declared is not None:
            kind = declared
        elif isinstance(default, ast.Constant) and default.value is None:
            kind = Kind.MAYBE_TENSOR if is_forward else Kind.UNKNOWN
        elif default is not None:
            kind = Kind.SCALAR if isinstance(default, ast.Constant) else Kind.UNKNOWN
        else:
            kind = Kind.TENSOR if is_forward and not _NON_TENSOR_NAME.search(arg.arg) else Kind.UNKNOWN
        kinds[arg.arg] = kind
    if positional and _is_method_self(func, positional[0].arg):
        kinds[positional[0].arg] = Kind.MODULE
    for extra in (args.vararg, args.kwarg):
        if extra is not None:
            kinds[extra.arg] = Kind.UNKNOWN
    return kinds


def _is_method_self(func: ast.FunctionDef | ast.AsyncFunctionDef, first: str) -> bool:
    return first == "self" and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in func.decorator_list)


class Typer:
    """Kinds of expressions at one program point of one function."""

    def __init__(
        self, names: Names, cls: ClassInfo | None, env: dict[str, Kind], classes: dict[str, ClassInfo] | None = None
    ) -> None:
        self.names = names
        self.cls = cls
        self.env = env
        self.classes = classes or {}  # classes defined earlier in the file, by qualified name
        self._memo: dict[int, Kind] = {}
        self._names: dict[int, str | None] = {}
        # Names last bound to a list comprehension, for the kind of its elements when iterated.
        self._comprehensions: dict[str, ast.ListComp] = {}
        self.saw_arrays = False  # some expression was a NumPy array made from a tensor
        self._typing: set[int] = set()  # comprehensions whose element is being typed (element_of)

    # -- names -------------------------------------------------------------------------
    def qualname(self, node: ast.expr) -> str | None:
        """Qualified name of a callee or reference; local variables shadow imports."""
        key = id(node)
        if key not in self._names:
            self._names[key] = self._qualname(node)
        return self._names[key]

    def _qualname(self, node: ast.expr) -> str | None:
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.env:
            return None
        return self.names.resolve(node)

    def self_attr(self, node: ast.expr) -> str | None:
        """`attr` for an expression `self.attr`."""
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and self.env.get("self") is Kind.MODULE
        ):
            return node.attr
        return None

    # -- kinds -------------------------------------------------------------------------
    def kind(self, node: ast.expr) -> Kind:
        key = id(node)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._kind(node)
            if found is Kind.ARRAY:
                self.saw_arrays = True
        return found

    def _kind(self, node: ast.expr) -> Kind:
        method = getattr(self, f"_kind_{type(node).__name__}", None)
        return method(node) if method else Kind.UNKNOWN

    def _kind_Constant(self, node: ast.Constant) -> Kind:
        return Kind.NONE if node.value is None else Kind.SCALAR

    def _kind_JoinedStr(self, node: ast.JoinedStr) -> Kind:
        return Kind.SCALAR

    def _kind_Name(self, node: ast.Name) -> Kind:
        if node.id in self.env:
            return self.env[node.id]
        if node.id in self.names.loggers:
            return Kind.LOGGER
        return Kind.UNKNOWN

    def _kind_Attribute(self, node: ast.Attribute) -> Kind:
        attr = self.self_attr(node)
        if attr is not None:
            if attr == "training":
                return Kind.SCALAR
            if self.cls is not None and attr in self.cls.attrs:
                return self.cls.attrs[attr]
            if attr in ("logger", "log", "_logger"):
                return Kind.LOGGER
            return Kind.UNKNOWN
        if node.attr in ("values", "indices") and self._named_result(node.value):
            return Kind.TENSOR  # x.max(dim=-1).values, torch.topk(x, k).indices
        base = self.kind(node.value)
        if base is Kind.ARRAY:
            if node.attr in META_ATTRS:
                return Kind.SCALAR
            return Kind.ARRAY if node.attr in ("T", "real", "imag") else Kind.UNKNOWN
        if base.may_be_tensor:
            if node.attr in META_ATTRS:
                return Kind.SCALAR
            if node.attr in TENSOR_ATTRS:
                return Kind.TENSOR
        if base is Kind.SCALAR:
            return Kind.SCALAR
        if base is Kind.MODULE:
            held = self._submodule_class_attr(node)  # self.scheduler.timesteps, set by its class's __init__
            return held if held in (Kind.TENSOR, Kind.BOOL_TENSOR) else Kind.UNKNOWN
        return Kind.UNKNOWN

    def _named_result(self, node: ast.expr) -> bool:
        """A call of a torch operation that returns a (values, indices) named tuple."""
        if not isinstance(node, ast.Call):
            return False
        func = node.func
        qualname = self.qualname(func)
        if qualname is not None:
            return qualname.startswith("torch.") and qualname[6:] in NAMED_RESULTS
        return isinstance(func, ast.Attribute) and func.attr in NAMED_RESULTS and self.kind(func.value).is_tensor

    def _kind_Subscript(self, node: ast.Subscript) -> Kind:
        base = self.kind(node.value)
        if base.may_be_tensor and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            return Kind.UNKNOWN  # outputs["logits"]: a mapping after all (a wrong annotation), not a tensor
        if base.is_tensor:
            return base
        if base is Kind.MAYBE_TENSOR:
            return Kind.TENSOR
        if base in (Kind.SCALAR, Kind.MODULE, Kind.DATA_SCALAR):
            return base
        return Kind.UNKNOWN

    def _kind_BinOp(self, node: ast.BinOp) -> Kind:
        kind = self._binop_kind(node)
        return Kind.ARRAY if kind.is_tensor and Kind.ARRAY in (self.kind(node.left), self.kind(node.right)) else kind

    def _binop_kind(self, node: ast.BinOp) -> Kind:
        left, right = self.kind(node.left), self.kind(node.right)
        if left.may_be_tensor or right.may_be_tensor:
            if isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)) and (
                left is Kind.BOOL_TENSOR
                and right in (Kind.BOOL_TENSOR, Kind.SCALAR)
                or right is Kind.BOOL_TENSOR
                and left is Kind.SCALAR
            ):
                return Kind.BOOL_TENSOR
            if isinstance(node.op, ast.MatMult) or left.may_be_tensor and right.may_be_tensor:
                return Kind.TENSOR
            other = right if left.may_be_tensor else left
            return Kind.TENSOR if other in (Kind.SCALAR, Kind.DATA_SCALAR, Kind.UNKNOWN) else Kind.UNKNOWN
        if Kind.DATA_SCALAR in (left, right) and Kind.UNKNOWN not in (left, right):
            return Kind.DATA_SCALAR
        if left is Kind.SCALAR and right is Kind.SCALAR:
            return Kind.SCALAR
        return Kind.UNKNOWN

    def _kind_UnaryOp(self, node: ast.UnaryOp) -> Kind:
        operand = self.kind(node.operand)
        if isinstance(node.op, ast.Not):
            return Kind.SCALAR if operand in (Kind.SCALAR, Kind.NONE) else Kind.UNKNOWN
        if operand is Kind.MAYBE_TENSOR:
            return Kind.TENSOR
        return operand

    def _kind_Compare(self, node: ast.Compare) -> Kind:
        if all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            return Kind.SCALAR
        kinds = [self.kind(node.left)] + [self.kind(c) for c in node.comparators]
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            return Kind.SCALAR if all(k is Kind.SCALAR for k in kinds) else Kind.UNKNOWN
        if any(k.is_tensor for k in kinds):
            return Kind.ARRAY if Kind.ARRAY in kinds else Kind.BOOL_TENSOR
        if Kind.DATA_SCALAR in kinds:
            return Kind.DATA_SCALAR
        if all(k in (Kind.SCALAR, Kind.NONE) for k in kinds):
            return Kind.SCALAR
        return Kind.UNKNOWN

    def _kind_BoolOp(self, node: ast.BoolOp) -> Kind:
        kinds = [self.kind(v) for v in node.values]
        if all(k is Kind.SCALAR for k in kinds):
            return Kind.SCALAR
        if any(k.is_tensor for k in kinds):
            return Kind.ARRAY if Kind.ARRAY in kinds else Kind.TENSOR
        return Kind.UNKNOWN

    def _kind_IfExp(self, node: ast.IfExp) -> Kind:
        return join(self.kind(node.body), self.kind(node.orelse))

    def _kind_Call(self, node: ast.Call) -> Kind:
        returned = self.returned(node)
        if returned is not None:
            return returned.kind
        func = node.func
        qualname = self.qualname(func)
        if qualname is not None:
            return self._call_kind(qualname, node)
        if isinstance(func, ast.Attribute):
            receiver = self.kind(func.value)
            if receiver is Kind.ARRAY:
                if func.attr in DATA_METHODS:
                    return Kind.DATA_SCALAR
                return Kind.ARRAY if func.attr in ARRAY_METHODS else Kind.UNKNOWN
            if receiver is Kind.GENERATOR and func.attr == "manual_seed":
                return Kind.GENERATOR  # it returns the generator
            if receiver is Kind.BOOL_TENSOR and self.keeps_dtype(node):
                return Kind.BOOL_TENSOR  # is_pos.view(-1)
            if receiver.may_be_tensor:
                return self._method_kind(func.attr)
            if receiver is Kind.MODULE and self.self_attr(func) is None:
                if self._submodule_class_attr(func) is Kind.MODULE:
                    return Kind.TENSOR  # self.router.gate(x): a submodule of a submodule
                return Kind.UNKNOWN  # a method of a submodule, e.g. self.cache.update(...)
        callee = self.kind(func)
        if callee is Kind.MODULE:
            return Kind.TENSOR  # calling a submodule; its outputs are treated as tensors
        return Kind.UNKNOWN

    def keeps_dtype(self, call: ast.Call) -> bool:
        """A tensor method call whose result has its receiver's dtype (`m.view(-1)`, not `m.view(torch.uint8)`)."""
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in LAYOUT_METHODS or self.qualname(func):
            return False
        if func.attr != "view" or len(call.args) > 1 or call.keywords:
            return not call.keywords or func.attr != "view"
        # `view(dtype)` reinterprets the bits: a single argument may be `torch.<dtype>` or a name holding one.
        (arg,) = call.args or [ast.Constant(-1)]
        if isinstance(arg, ast.Attribute):
            return arg.attr == "shape"  # `other.shape`; not `torch.uint8`, `self.dtype`
        return isinstance(arg, (ast.Constant, ast.UnaryOp, ast.BinOp, ast.Tuple, ast.List, ast.Call, ast.Subscript))

    def returned(self, node: ast.expr) -> Returned | None:
        """What a call of one of the file's functions gives (`helper(x)`, `self.method(x)`), when known."""
        if not isinstance(node, ast.Call) or not self.names.returns:
            return None
        func = node.func
        attr = self.self_attr(func)
        if attr is not None:
            if self.cls is None or attr in self.cls.attrs:
                return None
            returned = self.names.returns.get(f"{self.cls.qualname}.{attr}")
        elif isinstance(func, ast.Name):
            qualname = self.qualname(func)
            returned = self.names.returns.get(qualname) if qualname is not None else None
        else:
            return None
        return returned if returned is None or self.names.arrays else returned.without_arrays()

    def _submodule_returned(self, node: ast.expr) -> Returned | None:
        """What `self.sub(x)` gives when `self.sub`'s class is defined in this file: its `forward`'s returns.
        Only for unpacking (`emb, frames, width = self.patch_embed(x)`: a count among tensors); a submodule's
        single result stays a tensor."""
        if not isinstance(node, ast.Call) or self.cls is None or not self.names.returns:
            return None
        attr = self.self_attr(node.func)
        sub = self.classes.get(self.cls.attr_ctors.get(attr, "")) if attr is not None else None
        returned = self.names.returns.get(f"{sub.qualname}.forward") if sub is not None else None
        return returned if returned is None or self.names.arrays else returned.without_arrays()

    def _submodule_class_attr(self, node: ast.Attribute) -> Kind | None:
        """Kind of `attr` in `self.sub.attr`, when `self.sub`'s class is defined in this file."""
        owner = self.self_attr(node.value)
        if owner is None or self.cls is None or owner not in self.cls.attr_ctors:
            return None
        sub = self.classes.get(self.cls.attr_ctors[owner])
        return sub.attrs.get(node.attr) if sub is not None else None

    def _method_kind(self, method: str) -> Kind:
        if method in META_METHODS:
            return Kind.SCALAR
        if method in DATA_METHODS:
            return Kind.DATA_SCALAR
        if method in BOOL_METHODS:
            return Kind.BOOL_TENSOR
        if method == "numpy":
            return Kind.ARRAY if self.names.arrays else Kind.UNKNOWN
        if method in ("__array__", "storage", "untyped_storage", "register_hook") or method not in TENSOR_NAMES:
            return Kind.UNKNOWN  # not a tensor's method: the receiver was guessed wrong (`cache.get_seq_length()`)
        return Kind.TENSOR

    def _call_kind(self, qualname: str, node: ast.Call) -> Kind:
        if qualname.startswith("builtins."):
            return self._builtin_kind(qualname[9:], node)
        if self.names.is_logger_factory(node):  # `self.logger = logging.getLogger(...)` in __init__
            return Kind.LOGGER
        if qualname.startswith("math."):
            args = [self.kind(a) for a in node.args]
            return Kind.DATA_SCALAR if any(a.may_be_tensor or a is Kind.DATA_SCALAR for a in args) else Kind.SCALAR
        if is_library_module_class(qualname):
            return Kind.MODULE
        if qualname.startswith("numpy."):
            return self._numpy_kind(qualname[6:], node)
        if qualname in GENERATOR_CLASSES:
            return Kind.GENERATOR
        if qualname.startswith(TENSOR_NAMESPACES):
            short = qualname[6:]
            last = short.rpartition(".")[2]
            if short in TORCH_NON_TENSOR or last.startswith(("is_", "has_", "are_")):
                return Kind.SCALAR  # predicates and settings: torch.is_autocast_enabled(), ...
            if last.startswith("get_"):
                return Kind.UNKNOWN  # getters of global state: dtypes, devices, generators
            if short in TORCH_BOOL:
                return Kind.BOOL_TENSOR
            head = qualname.rpartition(".")[0]
            if head in ("torch", "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft"):
                return Kind.TENSOR
        return Kind.UNKNOWN

    def _numpy_kind(self, name: str, node: ast.Call) -> Kind:
        """`np.mean(a)`, `np.clip(a, 0, 1)`, `np.nonzero(a)` of an array made from a tensor: an array
        (or arrays, unpacked). Arrays made from anything else are not typed."""
        if name in NUMPY_NON_ARRAY or name.startswith("random."):
            return Kind.UNKNOWN
        values = [*node.args, *(k.value for k in node.keywords)]
        return Kind.ARRAY if any(self.kind(v) is Kind.ARRAY for v in values) else Kind.UNKNOWN

    def _builtin_kind(self, name: str, node: ast.Call) -> Kind:
        args = [self.kind(a) for a in node.args]
        if name in ("float", "int", "bool", "complex"):
            if any(a.may_be_tensor or a is Kind.DATA_SCALAR for a in args):
                return Kind.DATA_SCALAR
            return Kind.SCALAR if all(a is Kind.SCALAR for a in args) else Kind.UNKNOWN
        if name in ("len", "isinstance", "issubclass", "hasattr", "callable", "id", "str", "repr", "type"):
            return Kind.SCALAR
        if name in ("max", "min", "abs", "sum") and any(a.may_be_tensor for a in args):
            return Kind.ARRAY if Kind.ARRAY in args else Kind.TENSOR
        if name in ("max", "min", "abs", "round") and args and all(a is Kind.SCALAR for a in args):
            return Kind.SCALAR
        return Kind.UNKNOWN

    # -- assignments -----------------------------------------------------------------
    def bind(self, target: ast.expr, kind: Kind, value: ast.expr | None = None) -> None:
        """Record the kind of names assigned by `target = <value of kind>`."""
        if isinstance(target, ast.Name):
            if isinstance(value, ast.ListComp):
                self.element_of(value)  # typed before the name is rebound: `xs = [f(x) for x in xs]`
            self.env[target.id] = kind
            if isinstance(value, ast.ListComp):
                self._comprehensions[target.id] = value
            else:
                self._comprehensions.pop(target.id, None)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.GeneratorExp, ast.ListComp)):
                # q, k, v = (t.transpose(1, 2) for t in (q, k, v)): every element has the kind
                # of the comprehension's element.
                kind = self.element_of(value)
            elements = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
            returned = self.returned(value) or self._submodule_returned(value) if value is not None else None
            unpacked = None
            if returned is not None and not any(isinstance(e, ast.Starred) for e in target.elts):
                unpacked = returned.unpacked(len(target.elts))  # a, b = helper(x) -> tuple[Tensor, Tensor]
            for index, element in enumerate(target.elts):
                if elements is not None and len(elements) == len(target.elts):
                    self.bind(element, self.kind(elements[index]), elements[index])
                elif unpacked is not None:
                    self.bind(element, unpacked[index])
                else:
                    inner = element.value if isinstance(element, ast.Starred) else element
                    self.bind(inner, kind if kind in (Kind.TENSOR, Kind.MODULE, Kind.ARRAY) else Kind.UNKNOWN)

    def bind_iteration(self, target: ast.expr, iterable: ast.expr) -> None:
        """Kinds of loop variables: modules from ModuleLists, tensors from tensors, ints from range."""
        if isinstance(iterable, ast.Call) and isinstance(target, ast.Tuple):
            name = self.qualname(iterable.func)
            func = iterable.func
            if isinstance(func, ast.Attribute) and func.attr == "items" and len(target.elts) == 2:
                if self.kind(func.value) is Kind.MODULE:  # nn.ModuleDict.items()
                    self.bind(target.elts[0], Kind.SCALAR)
                    self.bind(target.elts[1], Kind.MODULE)
                    return
            if name == "builtins.enumerate" and iterable.args and len(target.elts) == 2:
                self.bind(target.elts[0], Kind.SCALAR)
                self.bind_iteration(target.elts[1], iterable.args[0])  # for i, (a, b) in enumerate(zip(...))
                return
            if name == "builtins.zip" and len(iterable.args) == len(target.elts):
                for element, arg in zip(target.elts, iterable.args):
                    self.bind(element, self.element_kind(arg))
                return
        self.bind(target, self.element_kind(iterable))

    def element_of(self, comprehension: ast.ListComp | ast.GeneratorExp) -> Kind:
        """Kind of a comprehension's element, typed with its loop variables bound: by the walker when it
        visited the comprehension, else here (a walk that skips expressions, calls.py)."""
        found = self._memo.get(id(comprehension.elt))
        if found is not None:
            return found
        if id(comprehension) in self._typing:
            return Kind.UNKNOWN  # its own loop reads the name it is bound to
        self._typing.add(id(comprehension))
        saved = dict(self.env)
        try:
            for generator in comprehension.generators:
                self.bind_iteration(generator.target, generator.iter)
            return self.kind(comprehension.elt)
        finally:
            self.env.clear()
            self.env.update(saved)
            self._typing.discard(id(comprehension))

    def element_kind(self, iterable: ast.expr) -> Kind:
        if isinstance(iterable, ast.Call):
            name = self.qualname(iterable.func)
            if name == "builtins.range":
                return Kind.SCALAR
            if name == "builtins.reversed" and iterable.args:
                return self.element_kind(iterable.args[0])
            func = iterable.func
            if isinstance(func, ast.Attribute) and func.attr == "values" and self.kind(func.value) is Kind.MODULE:
                return Kind.MODULE  # nn.ModuleDict.values()
        if isinstance(iterable, (ast.Tuple, ast.List)) and iterable.elts:
            kinds = {self.kind(e) for e in iterable.elts}  # for t in (q, k, v)
            kind = kinds.pop() if len(kinds) == 1 else Kind.UNKNOWN
        elif isinstance(iterable, ast.Name) and iterable.id in self._comprehensions:
            # pads = [longest - n for n in sizes]: the element was typed when the walker visited it
            kind = self.element_of(self._comprehensions[iterable.id])
        else:
            kind = self.kind(iterable)
        return kind if kind in (Kind.TENSOR, Kind.MODULE, Kind.SCALAR, Kind.ARRAY) else Kind.UNKNOWN

    def merge(self, *branches: dict[str, Kind]) -> None:
        """Join the environments at the end of branches into this one."""
        names = set().union(*branches)
        merged: dict[str, Kind] = {}
        for name in names:
            # Every branch starts from `before`; a name bound on some paths only keeps
            # their kind, since on the others it is unbound.
            kinds = [b[name] for b in branches if name in b]
            result = kinds[0]
            for other in kinds[1:]:
                result = join(result, other)
            merged[name] = result
        self.env.clear()
        self.env.update(merged)
