"""The C++ backend: one C++17 source file with a kernel per region and `extern "C"` entry points.

Dtype model: every floating tensor input and floating output of a region has one
storage dtype T (float32, float64, float16 or bfloat16), computed in C (float, or
double for float64); values the IR proves boolean (comparisons, isnan/isinf, logical
ops, `to(bool)`, masks of `where`/`masked_fill`) are stored as `bool`. The kinds are
exported beside each kernel (`{name}_kinds`), so the runtime (`cpp_support.py`) can
convert a tensor whose dtype disagrees with them at the boundary; integer tensors are
outside the model and take the eager fallback.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

from transpiler.ir import Node, Operand, Region
from transpiler.ops import BY_NAME, CAST, Domain

# Storage type T and compute type C of each entry point, by torch dtype name.
ENTRY_TYPES = {
    "float32": ("float", "float"),
    "float64": ("double", "double"),
    "float16": ("transpile::half", "float"),
    "bfloat16": ("transpile::bfloat16", "float"),
}
# C++ types that casts name (`to(dtype)`): values are rounded through them, then computed in C.
CAST_TYPES = {
    "float32": "float",
    "float64": "double",
    "float16": "half",
    "bfloat16": "bfloat16",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "bool": "bool",
}
# Operands read as booleans, beyond those of the logical ops (Domain.BOOL).
BOOL_OPERANDS = {"where": (0,), "masked_fill": (1,)}
# Ops whose result has the kind of their operands (a `where` of two bools is a bool).
KIND_PRESERVING = {"identity": (0,), "pos": (0,), "where": (1, 2)}

_CPP_KEYWORDS = frozenset(
    "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t class compl const "
    "constexpr const_cast continue decltype default delete do double dynamic_cast else enum explicit export extern "
    "false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or "
    "or_eq private protected public register reinterpret_cast return short signed sizeof static static_assert "
    "static_cast struct switch template this thread_local throw true try typedef typeid typename union unsigned using "
    "virtual void volatile wchar_t while xor xor_eq".split()
)
# Names the generated code uses itself, and the runtime helpers that templates call
# unqualified (a local variable `gelu` would hide `gelu(...)`): a value with one of these
# names is renamed.
_GENERATED_NAMES = frozenset(
    "T C n sizes contiguous compute index i d0 d1 d2 d3 size0 size1 size2 size3 row std transpile half bfloat16".split()
) | {name for op in BY_NAME.values() for name in re.findall(r"(?<![\w:])([A-Za-z_]\w*)\(", op.cpp)}


DTYPE_MODEL = """\
// Dtype model: each kernel is a template over T, the storage type of all its floating tensors
// (float, double, half or bfloat16), and C, the type it computes in (double for double, else
// float); boolean values are bool. The extern "C" entry points at the end instantiate it once
// per dtype of T, and `<kernel>_kinds` says which tensors are T and which are bool."""


class Kind(Enum):
    """How a value is stored and computed: in the region's floating type, or as a bool."""

    FLOAT = "T"
    BOOL = "bool"


@dataclass(frozen=True)
class Names:
    """The C++ identifiers of a region's values, and of the pointers and strides derived from them."""

    values: dict[str, str]
    SUFFIXES: ClassVar[tuple[str, ...]] = ("_ptr", "_out", "_strides", "_offset", "_row")

    def value(self, name: str) -> str:
        return self.values[name]

    def pointer(self, name: str) -> str:
        return f"{self.values[name]}_ptr"

    def output(self, name: str) -> str:
        return f"{self.values[name]}_out"

    def strides(self, name: str) -> str:
        return f"{self.values[name]}_strides"

    def offset(self, name: str) -> str:
        return f"{self.values[name]}_offset"

    def row(self, name: str) -> str:
        return f"{self.values[name]}_row"


def render_cpp_file(regions: list[Region], source_lines: dict[int, str], header: str) -> str:
    """One C++ source file with the kernels of all `regions` of a Python file."""
    parts = [
        "\n".join(f"// {line}".rstrip() for line in header.splitlines()),
        '#include "transpile_runtime.h"',
        DTYPE_MODEL,
        "namespace transpile {\n\n"
        + "\n".join(_render_kernel(r, source_lines) for r in regions)
        + "\n}  // namespace transpile",
        'extern "C" {\n\n' + "\n".join(_render_entry_points(r) for r in regions) + '\n}  // extern "C"',
    ]
    return "\n\n".join(parts) + "\n"


# -- kinds ------------------------------------------------------------------------------
def value_kinds(region: Region) -> dict[str, Kind]:
    """The kind of every value of the region: inputs first (from how they are used), then node results."""
    kinds = {item.name: _input_kind(region, item.name) for item in region.inputs}
    for node in region.nodes:
        kinds[node.out] = _result_kind(node, kinds)
    return kinds


def _bool_positions(node: Node) -> tuple[int, ...]:
    if node.definition.domain is Domain.BOOL:
        return tuple(range(node.definition.arity))
    return BOOL_OPERANDS.get(node.op, ())


def _input_kind(region: Region, name: str) -> Kind:
    """BOOL when every use reads the input as a boolean; an input read as a number is FLOAT."""
    uses = [
        position in _bool_positions(node)
        for node in region.nodes
        for position, operand in enumerate(node.operands)
        if position not in node.constants and operand == name
    ]
    return Kind.BOOL if uses and all(uses) else Kind.FLOAT


def _result_kind(node: Node, kinds: dict[str, Kind]) -> Kind:
    definition = node.definition
    if definition.returns_bool or definition.domain is Domain.BOOL:
        return Kind.BOOL
    if definition is CAST:
        return Kind.BOOL if node.operands[1] == "bool" else Kind.FLOAT
    if node.op in KIND_PRESERVING:
        operand_kinds = [_operand_kind(node, position, kinds) for position in KIND_PRESERVING[node.op]]
        return Kind.BOOL if all(kind is Kind.BOOL for kind in operand_kinds) else Kind.FLOAT
    return Kind.FLOAT


def _operand_kind(node: Node, position: int, kinds: dict[str, Kind]) -> Kind:
    operand = node.operands[position]
    if position in node.constants:
        return Kind.BOOL if isinstance(operand, bool) else Kind.FLOAT
    return kinds[operand]


def kinds_signature(region: Region) -> str:
    """The storage kind of each tensor input and output, as exported for the runtime: `x:T mask:bool -> y:T`."""
    kinds = value_kinds(region)
    inputs = " ".join(f"{item.name}:{kinds[item.name].value}" for item in region.tensor_inputs)
    outputs = " ".join(f"{output.value}:{kinds[output.value].value}" for output in region.outputs)
    return f"{inputs} -> {outputs}".strip()


# -- names ------------------------------------------------------------------------------
def cpp_names(region: Region) -> Names:
    """C++ identifiers for the region's values: the Python names, renamed where C++ or the kernel claims them."""
    values = [item.name for item in region.inputs] + [node.out for node in region.nodes]
    chosen: dict[str, str] = {}
    for value in values:
        name = re.sub(r"\W", "_", value)
        taken = (*chosen.values(), *values)  # renamed values keep their suffixed names clear of the others
        while name in _CPP_KEYWORDS or name in _GENERATED_NAMES or name in chosen.values() or _is_derived(name, taken):
            name += "_"
        chosen[value] = name
    return Names(chosen)


def _is_derived(name: str, values: Iterable[str]) -> bool:
    """Whether `name` is the pointer, output, strides, offset or row name of another value."""
    return any(name == f"{value}{suffix}" for value in values for suffix in Names.SUFFIXES)


# -- literals and operands ----------------------------------------------------------------
def _literal(constant: Operand) -> str:
    """A Python constant as a C++ expression of the compute type (bools stay bools)."""
    if isinstance(constant, bool):
        return "true" if constant else "false"
    if isinstance(constant, float) and math.isnan(constant):
        return "std::numeric_limits<C>::quiet_NaN()"
    if isinstance(constant, float) and math.isinf(constant):
        return f"{'-' if constant < 0 else ''}std::numeric_limits<C>::infinity()"
    if isinstance(constant, int) and abs(constant) < 2**53:
        return str(constant)
    return repr(float(constant))  # beyond 2**53 an int literal may overflow C++'s integers; C rounds it anyway


def _render_operand(node: Node, position: int, names: Names, kinds: dict[str, Kind]) -> str:
    """Operand `position` of `node`, converted to the kind the op reads there."""
    operand = node.operands[position]
    if node.definition is CAST and position == 1:
        return CAST_TYPES[operand]
    constant = position in node.constants
    text = _literal(operand) if constant else names.value(operand)
    have = _operand_kind(node, position, kinds)
    if _wanted_kind(node, position, kinds) is Kind.BOOL:
        return text if have is Kind.BOOL else f"({text} != C(0))"  # a number read as a bool, as torch's logical ops
    if have is Kind.BOOL or constant:
        return f"C({text})"  # bools read as numbers are 0 and 1, as torch promotes them; literals take type C
    return text


def _wanted_kind(node: Node, position: int, kinds: dict[str, Kind]) -> Kind:
    if position in _bool_positions(node):
        return Kind.BOOL
    if position in KIND_PRESERVING.get(node.op, ()):
        return _result_kind(node, kinds)
    return Kind.FLOAT


def render_node(node: Node, names: Names, kinds: dict[str, Kind]) -> str:
    """One statement: `const C out = <the op's cpp template>;`."""
    template = node.definition.cpp
    for position in node.constants:
        template = template.replace(f"C({{{position}}})", f"{{{position}}}")  # the literal is already a C(...)
    operands = [_render_operand(node, position, names, kinds) for position in range(len(node.operands))]
    ctype = "bool" if kinds[node.out] is Kind.BOOL else "C"
    return f"const {ctype} {names.value(node.out)} = {template.format(*operands)};"


# -- the kernel ---------------------------------------------------------------------------
def _render_kernel(region: Region, source_lines: dict[int, str]) -> str:
    names, kinds = cpp_names(region), value_kinds(region)
    tensors, outputs = region.tensor_inputs, region.outputs
    storage = {Kind.FLOAT: "T", Kind.BOOL: "bool"}
    parameters = [(f"const {storage[kinds[t.name]]}* {names.pointer(t.name)}", f"input {t.source}") for t in tensors]
    parameters += [
        (f"{_ctype(kinds[s.name])} {names.value(s.name)}", f"scalar {s.source}") for s in region.scalar_inputs
    ]
    parameters += [
        (
            f"{storage[kinds[o.value]]}* {names.output(o.value)}",
            f"output {o.target}" + ("" if o.target == o.value else f" ({o.value})"),
        )
        for o in outputs
    ]
    parameters += [
        ("int64_t n", "number of output elements"),
        ("const int64_t* sizes", "strided path: 4 sizes, padded on the left with 1s"),
    ]
    parameters += [
        (f"const int64_t* {names.strides(t.name)}", f"strided path: 4 element strides of {t.source}") for t in tensors
    ]
    parameters.append(("bool contiguous", "every input is contiguous with the output's shape"))
    declarations = [f"{d}," for d, _ in parameters[:-1]] + [f"{parameters[-1][0]}) {{"]
    width = max(len(d) for d in declarations)
    signature = "\n".join(f"    {d:<{width}}  // {comment}" for d, (_, comment) in zip(declarations, parameters))
    lambda_parameters = ["int64_t index"] + [f"int64_t {names.offset(t.name)}" for t in tensors]
    offsets = ", ".join(lambda_parameters)
    if len(f"  const auto compute = [=]({offsets}) {{") > 120:
        offsets = f"\n{_wrap(lambda_parameters, ' ' * 6)}"
    body = _render_element(region, names, kinds, source_lines)
    return (
        f"// {region.name}: {region.path}:{region.lines}, in {region.function}\n"
        "template <typename T, typename C>\n"
        f"static void {region.name}(\n{signature}\n"
        "  // One element: load the inputs at their offsets, compute, store at the output index.\n"
        f"  const auto compute = [=]({offsets}) {{\n"
        f"{body}"
        "  };\n"
        f"{_render_loops(tensors, names)}"
        "}\n"
    )


def _ctype(kind: Kind) -> str:
    return "bool" if kind is Kind.BOOL else "C"


def _render_element(region: Region, names: Names, kinds: dict[str, Kind], source_lines: dict[int, str]) -> str:
    lines = ["// Load the inputs."] if region.tensor_inputs else []
    for item in region.tensor_inputs:
        pointer, offset = names.pointer(item.name), names.offset(item.name)
        value = (
            f"load_bool({pointer}, {offset})"
            if kinds[item.name] is Kind.BOOL
            else f"static_cast<C>({pointer}[{offset}])"
        )
        lines.append(f"const {_ctype(kinds[item.name])} {names.value(item.name)} = {value};")
    current_line = None
    for node in region.nodes:
        if node.line != current_line:
            current_line = node.line
            source = source_lines.get(node.line, "").strip()
            lines.append(f"// line {node.line}: {source}" if source else f"// line {node.line}")
        lines.append(render_node(node, names, kinds))
    lines.append("// Store the outputs.")
    for output in region.outputs:
        value = names.value(output.value)
        if kinds[output.value] is Kind.BOOL:
            lines.append(f"{names.output(output.value)}[index] = {value};")
        else:
            lines.append(f"store({names.output(output.value)}, index, {value});")
    return "".join(f"    {line}\n" for line in lines)


def _render_loops(tensors: Iterable, names: Names) -> str:
    tensors = list(tensors)
    same = ", ".join(["i"] * (len(tensors) + 1))
    row_offsets = "".join(
        f"        const int64_t {names.row(t.name)} = "
        f"d0 * {names.strides(t.name)}[0] + d1 * {names.strides(t.name)}[1] + d2 * {names.strides(t.name)}[2];\n"
        for t in tensors
    )
    inner_offsets = ["row + d3"] + [f"{names.row(t.name)} + d3 * {names.strides(t.name)}[3]" for t in tensors]
    inner = ", ".join(inner_offsets)
    if len(f"          compute({inner});") > 120:
        inner = f"\n{_wrap(inner_offsets, ' ' * 14)}"
    return (
        "  if (contiguous) {\n"
        "    // Contiguous path: element i of every tensor is at offset i.\n"
        "#pragma omp parallel for simd schedule(static) if (parallel: n >= parallel_grain)\n"
        "    for (int64_t i = 0; i < n; ++i) {\n"
        f"      compute({same});\n"
        "    }\n"
        "    return;\n"
        "  }\n"
        "  // Strided path: threads share the three outer dimensions, the last one is a vector loop.\n"
        "  const int64_t size0 = sizes[0], size1 = sizes[1], size2 = sizes[2], size3 = sizes[3];\n"
        "#pragma omp parallel for collapse(3) schedule(static) if (n >= parallel_grain)\n"
        "  for (int64_t d0 = 0; d0 < size0; ++d0) {\n"
        "    for (int64_t d1 = 0; d1 < size1; ++d1) {\n"
        "      for (int64_t d2 = 0; d2 < size2; ++d2) {\n"
        "        const int64_t row = ((d0 * size1 + d1) * size2 + d2) * size3;\n"
        f"{row_offsets}"
        "#pragma omp simd\n"
        "        for (int64_t d3 = 0; d3 < size3; ++d3) {\n"
        f"          compute({inner});\n"
        "        }\n"
        "      }\n"
        "    }\n"
        "  }\n"
    )


# -- entry points -------------------------------------------------------------------------
def _render_entry_points(region: Region) -> str:
    """The kinds string, then one `extern "C"` function per storage dtype, arguments in the runtime's order."""
    names, kinds = cpp_names(region), value_kinds(region)
    tensors = region.tensor_inputs
    parameters = [f"const void* {names.value(t.name)}" for t in tensors]
    parameters += [f"double {names.value(s.name)}" for s in region.scalar_inputs]
    parameters += [f"void* {names.value(o.value)}" for o in region.outputs]
    parameters += ["int64_t n_elements", "const int64_t* sizes", "const int64_t* strides", "int contiguous"]
    functions = []
    for dtype, (storage, compute) in ENTRY_TYPES.items():
        cast = {Kind.FLOAT: storage, Kind.BOOL: "bool"}
        arguments = [f"static_cast<const {cast[kinds[t.name]]}*>({names.value(t.name)})" for t in tensors]
        arguments += [names.value(s.name) for s in region.scalar_inputs]
        arguments += [f"static_cast<{cast[kinds[o.value]]}*>({names.value(o.value)})" for o in region.outputs]
        arguments += ["n_elements", "sizes"]
        arguments += [f"transpile::strides_of(strides, {k})" for k in range(len(tensors))]
        arguments.append("contiguous != 0")
        functions.append(
            f"void {region.name}_{dtype}(\n{_wrap(parameters, '    ')}) {{\n"
            f"  transpile::{region.name}<{storage}, {compute}>(\n{_wrap(arguments, '      ')});\n"
            "}\n"
        )
    return (
        f"// {region.name}: storage kinds of the tensor inputs and outputs (T: the entry point's dtype).\n"
        f'extern const char {region.name}_kinds[] = "{kinds_signature(region)}";\n\n' + "\n".join(functions)
    )


def _wrap(items: list[str], indent: str, width: int = 120) -> str:
    """Comma-separated `items`, packed into lines of at most `width` characters."""
    lines = [indent]
    for i, item in enumerate(items):
        text = item + ("," if i < len(items) - 1 else "")
        if lines[-1] != indent and len(lines[-1]) + 1 + len(text) > width:
            lines.append(indent)
        lines[-1] += text if lines[-1] == indent else " " + text
    return "\n".join(lines)
