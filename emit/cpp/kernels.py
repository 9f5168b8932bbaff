"""The C++ backend: one C++17 source file with a kernel per region and `extern "C"` entry points.

Dtype model: each kernel is a template over the dtypes eager gives its values on a call.
Values whose dtype follows the inputs' (`transpiler.compiler.dtypes.type_classes`) are grouped into
classes of equal dtype, one type parameter each (T, T1, ...); values of a fixed dtype
(`x.half()`, a comparison's bool) have it written out. Floating values are computed in C
(float, or double where a value is float64) and rounded to their dtype after every op, as
eager holds them; values the IR proves boolean are `bool`; integer values are computed in
their C++ integer type, wrapping as torch's. Each kernel's entry points, exported as one
array (`{name}_entries`), instantiate it for calls whose floating inputs share one dtype,
one of `abi.ENTRY_DTYPES`; the runtime (`cpp_support.py`) builds an instantiation for any
other call whose dtypes fit the classes (`bind`). The types are exported beside each
kernel (`{name}_kinds`, `{name}_types`). A region with an
integer op whose template is not exact on integers gets no kernel (`integer_support`),
and its kinds string says why.

Regions with reductions get a row kernel instead (`_render_row_kernel`): threads share the
rows, and each row runs the passes of `transpiler.compiler.lowering.passes` as vectorised loops over
its columns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from emit.abi import abi
from emit.cpp.ops import CPP_OPS, INTEGER_OPS
from transpiler.compiler import lowering
from transpiler.compiler.dtypes import TypeClass, ValueKind, operand_kind, read_kind, type_classes, value_kinds
from transpiler.compiler.ir import Node, Operand, Region
from transpiler.compiler.lowering import Level, RowRegion
from transpiler.compiler.ops import ACTIVATION, ACTIVATION_OPS, CAST, CAST_LIKE, ROUND_LIKE, OpKind

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
# Values of an integer dtype are computed in its C++ type, with two's complement wrapping as torch's
# (the kernels build with -fwrapv), by the ops whose template is right on integers of one type (INTEGER_OPS).
INTEGER_TYPES = frozenset(("int8_t", "int16_t", "int32_t", "int64_t", "uint8_t"))

_CPP_KEYWORDS = frozenset(
    "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t class compl const "
    "constexpr const_cast continue decltype default delete do double dynamic_cast else enum explicit export extern "
    "false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or "
    "or_eq private protected public register reinterpret_cast return short signed sizeof static static_assert "
    "static_cast struct switch template this thread_local throw true try typedef typeid typename union unsigned using "
    "virtual void volatile wchar_t while xor xor_eq".split()
)
# Names the generated code uses itself, and the runtime helpers that templates (emit/cpp/ops.py) call
# unqualified (a local variable `gelu` would hide `gelu(...)`, `rotate_half` would hide
# `rotate_half<C>(...)`): a value with one of these names is renamed.
_GENERATED_NAMES = frozenset(
    "T C n sizes contiguous compute index i d0 d1 d2 d3 size0 size1 size2 size3 row std transpile half bfloat16 width "
    "first run n_elements strides parallel_grain store load_bool ACT".split()
) | {
    name
    for op in CPP_OPS.values()
    for template in (op.template, op.scalar_template or "")
    for name in re.findall(r"(?<![\w:])([A-Za-z_]\w*)(?:<\w+>)?\(", template)
}
# What row kernels and their entry points name besides (only their values are renamed for these).
_ROW_KERNEL_NAMES = frozenset(
    "R n_rows row_size outer_sizes compute_row unit unit_columns col start o0 o1 o2 block block_end sum_block scratch".split()
)


DTYPE_MODEL = """\
// Dtype model: each kernel is a template over the dtypes eager gives its values on a call: T, T1, ...
// each stand for a class of values of one dtype (float, double, half, bfloat16 or bool), listed above
// the kernel; C is the type it computes in (double where a value is double, else float). Each value
// is rounded to its dtype after every op, as eager holds it; boolean values are bool, integer values
// their C++ integer type. The entry points at the end instantiate each kernel for calls whose floating
// inputs share one dtype; the runtime builds any other instantiation a call needs."""


@dataclass(frozen=True)
class CppNames:
    """The C++ identifiers of a region's values, and of the pointers and strides derived from them."""

    values: dict[str, str]
    scalars: frozenset[str] = frozenset()  # the values that are scalar inputs
    # The one activation module's code (`self.act`): a template parameter ACT of the kernel, so that
    # each instantiation keeps one op and its loops vectorise; None without exactly one.
    activation: str | None = None
    # The C++ type eager holds each value in (`value_types`): a class's type parameter or a fixed
    # type; the kernel rounds the value to it, as eager does after every op.
    types: dict[str, str] = field(default_factory=dict)
    # The type parameters, each with its class of values.
    classes: tuple[tuple[str, TypeClass], ...] = ()
    # The values of a fixed dtype (torch's name), for the runtime's check of eager's dtypes.
    fixed: dict[str, str] = field(default_factory=dict)
    # The values of a class that an integer input can make integers (`i + 1`): held as `held_t<T, C>`,
    # their own integer type on such a call, so that they are exact and wrap as torch's.
    integral: frozenset[str] = frozenset()
    SUFFIXES: ClassVar[tuple[str, ...]] = tuple(
        "_ptr _out _strides _offset _row _step _nan _block _total _saved".split()
    )

    def value(self, name: str) -> str:
        return self.values[name]

    def integer(self, name: str) -> str | None:
        """The integer C++ type the value is computed in, or None for a floating or bool value."""
        ctype = self.types.get(name)
        return ctype if ctype in INTEGER_TYPES else None

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

    def step(self, name: str) -> str:
        return f"{self.values[name]}_step"

    def nan(self, name: str) -> str:
        return f"{self.values[name]}_nan"

    def block(self, name: str) -> str:
        return f"{self.values[name]}_block"

    def total(self, name: str) -> str:
        return f"{self.values[name]}_total"

    def saved(self, name: str) -> str:
        return f"{self.values[name]}_saved"


def render_cpp_file(regions: list[Region], source_lines: dict[int, str], header: str) -> str:
    """One C++ source file with the kernels of all `regions` of a Python file."""
    lowered = {r.name: lowering.lower(r) for r in regions if lowering.has_reductions(r)}
    kernels, entry_points = [], []
    for r in regions:
        reason = _unsupported(lowered.get(r.name) or r)
        if reason is not None:
            kernels.append(f"// {r.name}: {r.path}:{r.lines}, in {r.function}: no C++ kernel ({reason}).\n")
            entry_points.append(
                f"// {r.name}: the original code runs ({reason}).\n"
                f'extern const char {r.name}{abi.KINDS_SUFFIX}[] = "{abi.UNSUPPORTED}{reason}";\n'
            )
        elif r.name in lowered:
            entry, externs = _render_row_entry_points(lowered[r.name])
            kernels.append(f"{_render_row_kernel(lowered[r.name], source_lines)}\n{entry}")
            entry_points.append(externs)
        else:
            entry, externs = _render_entry_points(r)
            kernels.append(f"{_render_kernel(r, source_lines)}\n{entry}")
            entry_points.append(externs)
    parts = [
        "\n".join(f"// {line}".rstrip() for line in header.splitlines()),
        '#include "transpile_runtime.h"',
        DTYPE_MODEL,
        "namespace transpile {\n\n" + "\n".join(kernels) + "\n}  // namespace transpile",
        f"// A build of one call's instantiation (cpp_support.py) defines {abi.ONE_SIGNATURE}: it needs none of these.\n"
        f"#ifndef {abi.ONE_SIGNATURE}\n"
        'extern "C" {\n\n' + _exports_comment() + "\n".join(entry_points) + '\n}  // extern "C"\n'
        "#endif",
    ]
    return "\n\n".join(parts) + "\n"


def _unsupported(region: Region | RowRegion) -> str | None:
    """Why the region gets no C++ kernel, or None (see `integer_support`)."""
    if isinstance(region, RowRegion):
        saved = _column_work(region, lowering.passes(region)[1])[1]
        return integer_support(region.region, cpp_names(region.region, _ROW_KERNEL_NAMES, region.original), saved)
    return integer_support(region, cpp_names(region))


def _qualified(ctype: str) -> str:
    """A C++ type as named outside namespace transpile."""
    return f"transpile::{ctype}" if ctype in ("half", "bfloat16") else ctype


def kinds_signature(region: Region, names: CppNames) -> str:
    """The element type of each tensor input and output, as exported for the runtime: `x:T mask:bool -> y:T1`,
    a type parameter, `bool` or the dtype of a value of a fixed dtype (`h:float16`)."""
    kinds = value_kinds(region)

    def kind(value: str) -> str:
        if kinds[value] is ValueKind.BOOL:
            return "bool"
        return names.fixed.get(value) or names.types[value]

    inputs = " ".join(f"{item.name}:{kind(item.name)}" for item in region.tensor_inputs)
    outputs = " ".join(f"{output.value}:{kind(output.value)}" for output in region.outputs)
    return f"{inputs} -> {outputs}".strip()


def types_signature(names: CppNames, refusals: dict[str, str] | None = None) -> str:
    """The values of each type parameter, with its dtype in each entry point, and those of each fixed dtype, as
    exported for the runtime (`cpp_support.Types`): `T:float32,float64,float16,bfloat16=x,t0 bool=t1`. A class
    an integer input can make integers says whether the kernel computes it exactly then: `T:...:int=i,t1`,
    or else the op that stops it (`integer_refusals`): `T:...:floor_divide=i,t1`."""
    refusals = refusals or {}

    def integers(name: str, c: TypeClass) -> str:
        return f":{refusals.get(name, 'int')}" if c.integral else ""

    groups = [f"{name}:{','.join(c.uniform)}{integers(name, c)}={','.join(c.members)}" for name, c in names.classes]
    fixed: dict[str, list[str]] = {}
    for value, dtype in names.fixed.items():
        fixed.setdefault(dtype, []).append(value)
    return " ".join([*groups, *(f"{dtype}={','.join(values)}" for dtype, values in fixed.items())])


# -- names ------------------------------------------------------------------------------
def cpp_names(region: Region, reserved: frozenset[str] = frozenset(), typed: Region | None = None) -> CppNames:
    """C++ identifiers for the region's values: the Python names, renamed where C++ or the kernel claims them.

    `reserved`: names the kernel uses beyond those every kernel uses; `typed`: the region before
    lowering, whose reductions have dtypes (`storage_types`).
    """
    values = [item.name for item in region.inputs] + [node.out for node in region.nodes]
    claimed = _CPP_KEYWORDS | _GENERATED_NAMES | reserved
    chosen: dict[str, str] = {}
    for value in values:
        name = re.sub(r"\W", "_", value)
        taken = (*chosen.values(), *values)  # renamed values keep their suffixed names clear of the others
        while name in claimed or name in chosen.values() or _is_derived(name, taken) or _TYPE_PARAMETER.fullmatch(name):
            name += "_"
        chosen[value] = name
    codes = {node.operands[1] for node in region.nodes if node.op == ACTIVATION.name}
    activation = next(iter(codes)) if len(codes) == 1 else None
    classes, fixed = value_types(region, typed)
    types = {member: name for name, c in classes for member in c.members}
    types |= {value: CAST_TYPES[dtype] for value, dtype in fixed.items()}
    scalars = frozenset(item.name for item in region.scalar_inputs)
    kinds = value_kinds(region)  # a value the kernel computes as a bool stays one (the runtime refuses integers there)
    integral = frozenset(m for _, c in classes if c.integral for m in c.members if kinds.get(m) is ValueKind.FLOAT)
    return CppNames(chosen, scalars, activation, types, classes, fixed, integral)


ENTRY_DTYPES = abi.ENTRY_DTYPES  # the dtype of the floating inputs of each entry point, in order
# A kernel's type parameters: T, T1, T2, ... (a value of such a name is renamed).
_TYPE_PARAMETER = re.compile(r"T\d*")


def value_types(
    region: Region, typed: Region | None = None
) -> tuple[tuple[tuple[str, TypeClass], ...], dict[str, str]]:
    """The kernel's type parameters with their classes of values, and the values of a fixed dtype.

    An output the table cannot type is a class of its own: the runtime reads its dtype on the
    call. Values typed neither way (inside a lowered reduction) are computed in C as they are.
    A lowered region's dtypes are those of `typed`, where a reduction's result has its operand's dtype.
    """
    kinds = value_kinds(region)
    bools = frozenset(item.name for item in region.tensor_inputs if kinds[item.name] is ValueKind.BOOL)
    classes, fixed = type_classes(region, bools, ENTRY_DTYPES, typed)
    typed_values = {member for c in classes for member in c.members} | set(fixed)
    classes += tuple(TypeClass((o.value,), ENTRY_DTYPES) for o in region.outputs if o.value not in typed_values)
    names = ("T", *(f"T{k}" for k in range(1, len(classes))))
    return tuple(zip(names, classes)), fixed


def _is_derived(name: str, values: Iterable[str]) -> bool:
    """Whether `name` is the pointer, output, strides, offset or row name of another value."""
    return any(name == f"{value}{suffix}" for value in values for suffix in CppNames.SUFFIXES)


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


def _render_operand(node: Node, position: int, names: CppNames, kinds: dict[str, ValueKind]) -> str:
    """Operand `position` of `node`, converted to the type the op reads there."""
    operand = node.operands[position]
    if node.definition is CAST and position == 1:
        return CAST_TYPES[operand]
    if node.definition is ROUND_LIKE and position == 1:
        return ""  # the value whose dtype it is rounded to, by the value's type: not an operand
    constant = position in node.constants
    text = _literal(operand) if constant else names.value(operand)
    if node.definition.kind is OpKind.SHIFTED and position == 0:
        return text  # the input itself: the op loads it at the other half (its `_ptr`), converting to C
    have = operand_kind(node, position, kinds)
    if read_kind(node, position, kinds) is ValueKind.BOOL:
        return (
            text if have is ValueKind.BOOL else f"({text} != C(0))"
        )  # a number read as a bool, as torch's logical ops
    integer = names.integer(node.out)
    if node.definition is CAST and have is ValueKind.FLOAT:
        return text  # converted by the cast itself
    if integer is not None:  # an integer op: every operand in the result's type, as torch promotes them
        return text if names.integer(operand) == integer and not constant else f"{integer}({text})"
    integral = node.out in names.integral
    if constant and integral and type(operand) is int:
        return f"held_t<{names.types[node.out]}, C>({text})"  # an integer where the class is of integers
    if have is ValueKind.BOOL and integral:
        # A bool beside integers: 0 or 1 in the result's type where the class is of integers on the call. As C
        # (float) it would turn `torch.where(m, m, x)` of int32 x into a float, rounding x past 2**24.
        return f"held_t<{names.types[node.out]}, C>({text})"
    if have is ValueKind.BOOL or constant:
        return f"C({text})"  # bools read as numbers are 0 and 1, as torch promotes them; literals take type C
    if names.integer(operand) is not None and not integral and not _compares_integers(node, names):
        return f"C({text})"  # an integer promoted to floating: converted before the op, as torch does
    if operand in names.integral and not integral and not node.definition.returns_bool:
        return f"C({text})"  # the same where the operand's class may be of integers on the call
    if integral and names.types.get(operand) != names.types[node.out]:
        return f"held_t<{names.types[node.out]}, C>({text})"  # another class or dtype: promoted to the result's
    return text


def _is_scalar(node: Node, position: int, names: CppNames) -> bool:
    """Whether operand `position` is a Python number: a constant or a scalar input."""
    return position in node.constants or node.operands[position] in names.scalars


def _compares_integers(node: Node, names: CppNames) -> bool:
    """A comparison of integer values only: exact in their own types (torch compares them so)."""
    values = [o for p, o in enumerate(node.operands) if p not in node.constants]
    return node.definition.returns_bool and all(names.integer(v) is not None for v in values)


def render_node(node: Node, names: CppNames, kinds: dict[str, ValueKind]) -> str:
    """One statement: `const C out = <the op's template>;` (an integer value: of its integer type)."""
    if node.op == ACTIVATION.name:
        return _render_activation(node, names, kinds)
    op = CPP_OPS[node.op]
    template = op.template
    if op.scalar_template is not None and _is_scalar(node, 1, names):
        template = op.scalar_template.replace("{type}", names.types.get(node.out, "C"))
    for position in node.constants:
        template = template.replace(f"C({{{position}}})", f"{{{position}}}")  # the literal is already a C(...)
    operands = [_render_operand(node, position, names, kinds) for position in range(len(node.operands))]
    if (
        node.definition.scalar_in_dtype
        and _is_scalar(node, 1, names)
        and names.types.get(node.out, "double") != "double"
    ):
        operands[1] = f"rounded<{names.types[node.out]}, C>({operands[1]})"
    integer = names.integer(node.out)
    ctype = "bool" if kinds[node.out] is ValueKind.BOOL else integer or "C"
    value = template.format(*operands)
    if node.out in names.integral:  # its class's type on the call: an integer type, or C rounded to it
        return f"const auto {names.value(node.out)} = held<{names.types[node.out]}, C>({value});"
    if kinds[node.out] is ValueKind.FLOAT and names.types.get(node.out, "double") != "double" and integer is None:
        value = f"rounded<{names.types[node.out]}, C>({value})"
    return f"const {ctype} {names.value(node.out)} = {value};"


def integer_refusals(region: Region, names: CppNames, saved: Iterable[str] = ()) -> dict[str, str]:
    """Per type parameter whose class an integer input can make integers, the first op that would not be exact
    on them, as `integer_support` finds them for values of a fixed integer dtype (`saved`: such a value kept in
    a row of C scratch). The runtime takes the original code where a call binds the class to integers."""
    saved = frozenset(saved)
    parameter = {member: name for name, c in names.classes if c.integral for member in c.members}
    refusals: dict[str, str] = {}
    for node in region.nodes:
        if node.out in parameter and node.op not in INTEGER_OPS and node.definition not in (CAST, CAST_LIKE):
            refusals.setdefault(parameter[node.out], node.op)
        if node.definition.kind is OpKind.ROW:
            for value in node.values():
                if value in parameter:
                    refusals.setdefault(parameter[value], node.op)
        if node.out in saved and node.out in parameter:
            refusals.setdefault(parameter[node.out], "saved")
    return refusals


def integer_support(region: Region, names: CppNames, saved: Iterable[str] = ()) -> str | None:
    """Why the C++ kernel cannot compute the region's integer values, or None.

    Integer values are exact only in integer arithmetic: an op whose template is not right on
    integers (floor division, remainder, powers), a row reduction of integers (accumulated in C)
    and an integer value kept in a row of scratch (of C) would change them.
    """
    saved = frozenset(saved)
    kinds = value_kinds(region)
    for node in region.nodes:
        if node.op == "row_sum" and all(kinds[v] is ValueKind.BOOL for v in node.values()):
            continue  # a count of true values: exact in C's blocks and their double total
        if names.integer(node.out) is not None and node.op not in INTEGER_OPS and node.definition is not CAST:
            return f"{node.op} of integers"
        if node.definition.kind is OpKind.ROW and any(names.integer(v) is not None for v in node.values()):
            return f"{node.op} of integers"
        if node.out in saved and names.integer(node.out) is not None:
            return "an integer value reused across passes"
    return None


def _render_activation(node: Node, names: CppNames, kinds: dict[str, ValueKind]) -> str:
    """An activation module chosen at run time: a conditional over the ops of its possible codes (lines)."""
    value = _render_operand(node, 0, names, kinds)
    code = "ACT" if node.operands[1] == names.activation else names.value(node.operands[1])
    cases = [
        f"    {code} == {n} ? {CPP_OPS[op].template.format(value)} :  // {op}"
        for n, op in enumerate(ACTIVATION_OPS[:-1])
    ]
    last = ACTIVATION_OPS[-1]
    return "\n".join(
        [
            f"const C {names.value(node.out)} =  // the op of {code}'s code in ACTIVATION_OPS (transpiler/compiler/ops.py)"
        ]
        + cases
        + [f"    {CPP_OPS[last].template.format(value)};  // {last}"]
    )


# -- the kernel ---------------------------------------------------------------------------
def _storage(name: str, names: CppNames, kinds: dict[str, ValueKind]) -> str:
    """The C++ type of a tensor input's or output's elements: its value's type, bool for a boolean value."""
    return "bool" if kinds[name] is ValueKind.BOOL else names.types[name]


def _data_parameters(region: Region, names: CppNames, kinds: dict[str, ValueKind], per_row: Iterable[str] = ()) -> list:
    """(declaration, comment) of the kernel's pointers and scalars; `per_row`: outputs with one value per row."""
    per_row = set(per_row)
    parameters = [
        (f"const {_storage(t.name, names, kinds)}* {names.pointer(t.name)}", f"input {t.source}")
        for t in region.tensor_inputs
    ]
    parameters += [
        (f"{_ctype(kinds[s.name])} {names.value(s.name)}", f"scalar {s.source}") for s in region.scalar_inputs
    ]
    parameters += [
        (
            f"{_storage(o.value, names, kinds)}* {names.output(o.value)}",
            f"output {o.target}"
            + ("" if o.target == o.value else f" ({o.value})")
            + (": one value per row" if o.value in per_row else ""),
        )
        for o in region.outputs
    ]
    return parameters


def _signature(name: str, parameters: list[tuple[str, str]], names: CppNames) -> str:
    """`static void name(` and the parameters, one a line, each with its comment."""
    declarations = [f"{d}," for d, _ in parameters[:-1]] + [f"{parameters[-1][0]}) {{"]
    width = max(len(d) for d in declarations)
    lines = "\n".join(f"    {d:<{width}}  // {comment}" for d, (_, comment) in zip(declarations, parameters))
    return f"{_template(names)}\nstatic void {name}(\n{lines}\n"


def _template(names: CppNames) -> str:
    """The kernel's template line, after a comment saying which values each type parameter holds."""
    comments = []
    for name, c in names.classes:
        members = [names.value(m) for m in c.members]
        first, *rest = _wrap([f"{name}: the dtype of {members[0]}", *members[1:]], "", 114).split("\n")
        comments += [f"// {first}", *(f"//   {line}" for line in rest)]
    parameters = [f"typename {name}" for name, _ in names.classes] + ["typename C"]
    if names.activation:
        parameters.append("int ACT")
    return "\n".join([*comments, f"template <{', '.join(parameters)}>"])


def _render_kernel(region: Region, source_lines: dict[int, str]) -> str:
    names, kinds = cpp_names(region), value_kinds(region)
    tensors = region.tensor_inputs
    parameters = _data_parameters(region, names, kinds)
    parameters += [
        ("int64_t n", "number of output elements"),
        ("const int64_t* sizes", "strided path: 4 sizes, padded on the left with 1s"),
    ]
    parameters += [
        (f"const int64_t* {names.strides(t.name)}", f"strided path: 4 element strides of {t.source}") for t in tensors
    ]
    parameters.append(("bool contiguous", "every input is contiguous with the output's shape"))
    half = _rotation_half(region, names, kinds)
    lambda_parameters = ["int64_t index", *(["auto first"] if half else [])]
    lambda_parameters += [f"int64_t {names.offset(t.name)}" for t in tensors]
    offsets = ", ".join(lambda_parameters)
    if len(f"  const auto compute = [=]({offsets}) {{") > 120:
        offsets = f"\n{_wrap(lambda_parameters, ' ' * 6)}"
    body = _render_element(region, names, kinds, source_lines)
    return (
        f"// {region.name}: {region.path}:{region.lines}, in {region.function}\n"
        f"{_signature(region.name, parameters, names)}"
        f"{_rotation_width(half) if half else ''}"
        "  // One element: load the inputs at their offsets, compute, store at the output index.\n"
        f"  const auto compute = [=]({offsets}) {{\n"
        f"{body}"
        "  };\n"
        f"{_render_rotated_loops(tensors, names) if half else _render_loops(tensors, names)}"
        "}\n"
    )


def _rotation_half(region: Region, names: CppNames, kinds: dict[str, ValueKind]) -> str | None:
    """The half width of the region's `rotate_half` ops, as a C++ expression; None without one.

    Each rotated tensor's last dim is the output's (ops.SHIFTED_OPS), so every `rotate_half` of a region rotates
    by the same half: the first one's operand says it.
    """
    rotations = [node for node in region.nodes if node.definition.kind is OpKind.SHIFTED]
    return _render_operand(rotations[0], 1, names, kinds) if rotations else None


def _ctype(kind: ValueKind) -> str:
    return "bool" if kind is ValueKind.BOOL else "C"


def _render_element(region: Region, names: CppNames, kinds: dict[str, ValueKind], source_lines: dict[int, str]) -> str:
    lines = ["// Load the inputs."] if region.tensor_inputs else []
    for item in region.tensor_inputs:
        lines.append(_load(item.name, names, kinds, names.pointer(item.name), names.offset(item.name)))
    lines += _render_nodes(region.nodes, names, kinds, source_lines, render_node)
    lines.append("// Store the outputs.")
    for output in region.outputs:
        lines.append(_store(output.value, names, kinds, names.output(output.value), "index"))
    return "".join(f"    {line}\n" for line in lines)


def _load(name: str, names: CppNames, kinds: dict[str, ValueKind], pointer: str, offset: str) -> str:
    """`const C x = ...;`: a tensor element, widened to C (or read as a bool)."""
    if kinds[name] is ValueKind.BOOL:
        return f"const bool {names.value(name)} = load_bool({pointer}, {offset});"
    if name in names.integral:
        return f"const auto {names.value(name)} = static_cast<held_t<{names.types[name]}, C>>({pointer}[{offset}]);"
    return f"const C {names.value(name)} = static_cast<C>({pointer}[{offset}]);"


def _store(name: str, names: CppNames, kinds: dict[str, ValueKind], pointer: str, index: str) -> str:
    if kinds[name] is ValueKind.BOOL:
        return f"{pointer}[{index}] = {names.value(name)};"
    return f"store({pointer}, {index}, {names.value(name)});"


def _render_nodes(
    nodes: Iterable[Node], names: CppNames, kinds: dict[str, ValueKind], source_lines: dict[int, str], render
) -> list[str]:
    """The statements of `nodes` (`render(node, names, kinds)` each), with a comment per source line."""
    lines, current_line = [], None
    for node in nodes:
        if node.line != current_line:
            current_line = node.line
            source = source_lines.get(node.line, "").strip()
            lines.append(f"// line {node.line}: {source}" if source else f"// line {node.line}")
        lines += render(node, names, kinds).split("\n")
    return lines


def _render_loops(tensors: Iterable, names: CppNames) -> str:
    tensors = list(tensors)
    inner = "#pragma omp simd\n        for (int64_t d3 = 0; d3 < size3; ++d3) {\n"
    inner += f"{_strided_call('row + d3', tensors, names, 10)}        }}\n"
    return (
        "  if (contiguous) {\n"
        "    // Contiguous path: element i of every tensor is at offset i.\n"
        "#pragma omp parallel for simd schedule(static) if (parallel: n >= parallel_grain)\n"
        "    for (int64_t i = 0; i < n; ++i) {\n"
        f"      compute({', '.join(['i'] * (len(tensors) + 1))});\n"
        "    }\n"
        "    return;\n"
        "  }\n"
        "  // Strided path: threads share the three outer dimensions, the last one is a vector loop.\n"
        f"{_strided_nest(tensors, names, inner)}"
    )


def _strided_nest(tensors: list, names: CppNames, inner: str) -> str:
    """The strided path's loops over the three outer dimensions, with each tensor's offset of the row, around
    `inner` (the loops over the last one)."""
    row_offsets = "".join(
        f"        const int64_t {names.row(t.name)} = "
        f"d0 * {names.strides(t.name)}[0] + d1 * {names.strides(t.name)}[1] + d2 * {names.strides(t.name)}[2];\n"
        for t in tensors
    )
    return (
        "  const int64_t size0 = sizes[0], size1 = sizes[1], size2 = sizes[2], size3 = sizes[3];\n"
        "#pragma omp parallel for collapse(3) schedule(static) if (n >= parallel_grain)\n"
        "  for (int64_t d0 = 0; d0 < size0; ++d0) {\n"
        "    for (int64_t d1 = 0; d1 < size1; ++d1) {\n"
        "      for (int64_t d2 = 0; d2 < size2; ++d2) {\n"
        "        const int64_t row = ((d0 * size1 + d1) * size2 + d2) * size3;\n"
        f"{row_offsets}"
        f"{inner}"
        "      }\n"
        "    }\n"
        "  }\n"
    )


def _strided_call(first: str, tensors: list, names: CppNames, indent: int) -> str:
    """`compute(first, <each tensor's offset of element d3 of the row>);` at `indent`, wrapped past 120 columns."""
    offsets = [first] + [f"{names.row(t.name)} + d3 * {names.strides(t.name)}[3]" for t in tensors]
    inner = ", ".join(offsets)
    if len(f"{' ' * indent}compute({inner});") > 120:
        inner = f"\n{_wrap(offsets, ' ' * (indent + 4))}"
    return f"{' ' * indent}compute({inner});\n"


def _rotation_width(half: str) -> str:
    # An integer of the kernel's own, not the scalar input: a float captured by the lambda is loaded again
    # after each store (a store of floats may write it), and converted again.
    return (
        "  // The rotated dim: 2 * half elements, each half a vector loop (rotate_half).\n"
        f"  const int64_t half = static_cast<int64_t>({half}), width = 2 * half;\n"
    )


# Each half of a run of the rotated dim: whether it is the first, and its bounds after the run's start.
_HALVES = (("std::true_type()", "", " + half"), ("std::false_type()", " + half", " + width"))


def _render_rotated_loops(tensors: Iterable, names: CppNames) -> str:
    """The loops of a kernel with `rotate_half`: each run of `2 * half` output elements (one row of the rotated
    last dim) in two vector loops, its first half and its second, so that `first` is a constant in each and the
    rotated tensor is read at contiguous addresses: an element index modulo the width decided per element made
    gathers of every load (four times slower on the CPU)."""
    tensors = list(tensors)
    contiguous = "".join(
        "#pragma omp simd\n"
        f"      for (int64_t i = run{start}; i < run{end}; ++i) {{\n"
        f"        compute({', '.join(['i', first] + ['i'] * len(tensors))});\n"
        "      }\n"
        for first, start, end in _HALVES
    )
    halves = "".join(
        "#pragma omp simd\n"
        f"          for (int64_t d3 = run{start}; d3 < run{end}; ++d3) {{\n"
        f"{_strided_call(f'row + d3, {first}', tensors, names, 12)}"
        "          }\n"
        for first, start, end in _HALVES
    )
    runs = f"        for (int64_t run = 0; run < size3; run += width) {{\n{halves}        }}\n"
    return (
        "  if (contiguous) {\n"
        "    // Contiguous path: element i of every tensor is at offset i; n is a multiple of the width.\n"
        "#pragma omp parallel for schedule(static) if (n >= parallel_grain)\n"
        "    for (int64_t run = 0; run < n; run += width) {\n"
        f"{contiguous}"
        "    }\n"
        "    return;\n"
        "  }\n"
        "  // Strided path: threads share the three outer dimensions; the last one, a multiple of the width (it may\n"
        "  // hold the rotated dim merged with dims before it), runs as the contiguous path's runs do.\n"
        f"{_strided_nest(tensors, names, runs)}"
    )


# -- row kernels: regions with reductions --------------------------------------------------
@dataclass(frozen=True)
class RowReduction:
    """How a column loop accumulates a ROW op, as an OpenMP reduction (so that the loop still vectorises)."""

    identity: str  # the accumulator's start: what no column contributes
    clause: str  # the OpenMP reduction operator
    update: str  # the accumulation, over the accumulator `{0}` and the element value `{1}`
    what: str  # for the pass comments: "the row sum of x"
    # max and min: a NaN anywhere in the row gives NaN, as torch.amax does; OpenMP's max may
    # drop it, so a flag records it beside the accumulator.
    propagates_nan: bool = False


ROW_REDUCTIONS = {
    "row_sum": RowReduction("C(0)", "+", "{0} += {1};", "sum"),
    "row_max": RowReduction("-std::numeric_limits<C>::infinity()", "max", "{0} = std::max({0}, {1});", "maximum", True),
    "row_min": RowReduction("std::numeric_limits<C>::infinity()", "min", "{0} = std::min({0}, {1});", "minimum", True),
}


def _render_row_kernel(lowered: RowRegion, source_lines: dict[int, str]) -> str:
    """The kernel of a region with reductions: threads share the rows; each row runs the passes over its columns."""
    return _RowKernel(lowered, source_lines).render()


@dataclass(frozen=True)
class _Strided:
    """An ELEMENT tensor of a row kernel: a tensor input or an element output."""

    value: str  # the region value
    label: str  # for comments: the input's source or the output's target
    pointer_type: str  # `const T*`, `bool*`, ...
    base: str  # the kernel's parameter pointing at element 0


def _strided_tensors(lowered: RowRegion, names: CppNames, kinds: dict[str, ValueKind]) -> list[_Strided]:
    """The ELEMENT tensors in the runtime's stride order: the tensor inputs, then the element outputs."""
    tensors = [
        _Strided(t.name, t.source, f"const {_storage(t.name, names, kinds)}*", names.pointer(t.name))
        for t in lowered.region.tensor_inputs
    ]
    return tensors + [
        _Strided(o.value, o.target, f"{_storage(o.value, names, kinds)}*", names.output(o.value))
        for o in lowered.element_outputs
    ]


@dataclass(frozen=True)
class _ColumnWork:
    """What one pass's column loop does: values an earlier pass computed are restored from scratch, not recomputed."""

    inputs: tuple[str, ...]  # tensor inputs it loads
    restored: tuple[str, ...]  # values it reads back from their scratch rows
    nodes: tuple[Node, ...]  # the element nodes it computes, in order


def _column_work(lowered: RowRegion, schedule: list[lowering.Pass]) -> tuple[list[_ColumnWork], tuple[str, ...]]:
    """Each pass's column work, and the values saved to scratch for later passes (in region order).

    A pass needs its reductions' operands (the store pass: the element outputs); it loads
    inputs, restores what an earlier pass computed, and computes the rest. Restoring from a
    row of scratch (in L1 or L2) replaces recomputing: softmax computes each exponential once.
    """
    region, levels = lowered.region, lowered.levels
    by_out = {node.out: node for node in region.nodes}
    tensors = [t.name for t in region.tensor_inputs]
    computed_before: set[str] = set()
    saved: set[str] = set()
    work = []
    for step in schedule:
        roots = [r.values()[0] for r in step.reductions] or [o.value for o in lowered.element_outputs]
        inputs, restored, computed = set(), set(), set()
        pending = list(roots)
        while pending:
            value = pending.pop()
            if value in tensors:
                inputs.add(value)
            elif levels[value] is Level.ELEMENT and value in computed_before:
                restored.add(value)
                saved.add(value)
            elif levels[value] is Level.ELEMENT and value not in computed:
                computed.add(value)
                pending += by_out[value].values()
        computed_before |= computed
        nodes = tuple(node for node in region.nodes if node.out in computed)
        work.append(_ColumnWork(tuple(t for t in tensors if t in inputs), tuple(sorted(restored)), nodes))
    order = {node.out: n for n, node in enumerate(region.nodes)}
    return work, tuple(sorted(saved, key=order.__getitem__))


class _RowKernel:
    """Writes one row kernel: the signature, the per-row passes in a lambda, and the loops over rows."""

    def __init__(self, lowered: RowRegion, source_lines: dict[int, str]) -> None:
        self.lowered = lowered
        self.region = lowered.region
        self.names = cpp_names(self.region, _ROW_KERNEL_NAMES, lowered.original)
        self.kinds = value_kinds(self.region)
        self.source_lines = source_lines
        self.strided = _strided_tensors(lowered, self.names, self.kinds)

    def render(self) -> str:
        region, names = self.region, self.names
        parameters = _data_parameters(region, names, self.kinds, [o.value for o in self.lowered.row_outputs])
        parameters += [
            ("int64_t n_rows", "number of rows"),
            ("int64_t R", "row length: the size of the reduced dim, at least 1"),
            ("const int64_t* outer_sizes", "strided path: the 3 row dims, padded on the left with 1s"),
        ]
        parameters += [
            (
                f"const int64_t* {names.strides(t.value)}",
                f"strided path: element strides of {t.label} (row dims, reduced dim)",
            )
            for t in self.strided
        ]
        parameters.append(("bool contiguous", "element (row, col) of every tensor is at row * R + col"))
        before, schedule = lowering.passes(self.lowered)
        self.work, self.saved = _column_work(self.lowered, schedule)
        row_parameters = ["int64_t row"]
        for t in self.strided:
            row_parameters += [f"{t.pointer_type} {names.row(t.value)}", f"auto {names.step(t.value)}"]
        opening = f"  const auto compute_row = [=]({', '.join(row_parameters)}) {{"
        if len(opening) > 120:
            opening = f"  const auto compute_row = [=](\n{_wrap(row_parameters, ' ' * 6)}) {{"
        shared = self.nodes(before)
        return (
            f"// {region.name}: {region.path}:{region.lines}, in {region.function}\n"
            f"{_signature(region.name, parameters, names)}"
            f"{_indent(['// Values shared by every row.', *shared] if shared else [], 2)}"
            "  // One row: `*_row` points at its first element in each tensor and `*_step` is the tensor's column\n"
            "  // stride (a compile-time 1 on the contiguous path, so that the column loops are unit-stride).\n"
            f"{opening}\n"
            f"{_indent(self.row_body(schedule), 4)}"
            "  };\n"
            f"{self.row_loops()}"
            "}\n"
        )

    def nodes(self, nodes: Iterable[Node]) -> list[str]:
        return _render_nodes(nodes, self.names, self.kinds, self.source_lines, _render_row_node)

    def row_body(self, schedule: list[lowering.Pass]) -> list[str]:
        """The passes over one row's columns, the row values computed after each, and the row outputs."""
        lines: list[str] = []
        if self.saved:
            lines += [
                "// Values that later passes reuse: a row of C each, per thread (kept from call to call).",
                "thread_local std::vector<C> scratch;",
                f"scratch.resize({len(self.saved)} * R);",
            ]
            lines += [f"C* const {self.names.saved(v)} = scratch.data() + {k} * R;" for k, v in enumerate(self.saved)]
        element_outputs = self.lowered.element_outputs
        for number, step in enumerate(schedule, 1):
            if step.reductions:
                what = [
                    f"the row {ROW_REDUCTIONS[r.op].what} of {self.names.value(r.values()[0])}" for r in step.reductions
                ]
                lines.append(f"// Pass {number}: {_enumeration(what)}.")
                lines += self.reduction_pass(number - 1, step)
                lines += self.nodes(step.then)
            elif element_outputs:
                lines.append(f"// Pass {number}: compute and store the element outputs.")
                stores = [
                    _store(
                        o.value, self.names, self.kinds, self.names.row(o.value), f"col * {self.names.step(o.value)}"
                    )
                    for o in element_outputs
                ]
                lines += self.column_loop(number - 1, stores, [], "0", "R")
        if self.lowered.row_outputs:
            lines.append("// The row outputs: one value per row.")
            lines += [
                _store(o.value, self.names, self.kinds, self.names.output(o.value), "row")
                for o in self.lowered.row_outputs
            ]
        return lines

    def reduction_pass(self, number: int, step: lowering.Pass) -> list[str]:
        """Accumulators, the column loop that accumulates them, and NaN restored where max and min propagate it.

        Sums add each block of `sum_block` columns in C, then the blocks' sums in double: a
        lane of one long loop would add R / 16 terms in sequence, and its rounding error grows
        with that count (torch's cascade sum keeps it small as well).
        """
        lines, clauses, updates, restores = [], [], [], []
        partials, totals, results = [], [], []
        for node in step.reductions:
            reduction = ROW_REDUCTIONS[node.op]
            accumulator, operand = self.names.value(node.out), node.values()[0]
            value = self.names.value(operand)
            value = value if self.kinds[operand] is ValueKind.FLOAT else f"C({value})"
            if node.op == "row_sum":
                partial, total = self.names.block(node.out), self.names.total(node.out)
                lines.append(f"double {total} = 0;")
                partials.append(f"C {partial} = {reduction.identity};")
                totals.append(f"{total} += {partial};")
                result = f"C({total})"
                if self.names.types.get(node.out, "double") != "double":  # rounded to its dtype, as render_node does
                    result = f"rounded<{self.names.types[node.out]}, C>({result})"
                results.append(f"const C {accumulator} = {result};")
                accumulator = partial
            else:
                lines.append(f"C {accumulator} = {reduction.identity};")
            clauses.append(f"reduction({reduction.clause}: {accumulator})")
            updates.append(reduction.update.format(accumulator, value))
            if reduction.propagates_nan:
                flag = self.names.nan(node.out)
                # An int, not a bool: GCC vectorises `|` reductions of ints only.
                lines.append(f"int {flag} = 0;  // a NaN in the row makes the {reduction.what} NaN, as in torch")
                clauses.append(f"reduction(|: {flag})")
                updates.append(f"{flag} |= std::isnan({value});")
                restores += [f"if ({flag}) {{", f"  {accumulator} = std::numeric_limits<C>::quiet_NaN();", "}"]
        if not partials:
            return lines + self.column_loop(number, updates, clauses, "0", "R") + restores
        loop = self.column_loop(number, updates, clauses, "block", "block_end")
        return [
            *lines,
            "for (int64_t block = 0; block < R; block += sum_block) {",
            "  const int64_t block_end = std::min(R, block + sum_block);",
            *(line if line.startswith("#") else f"  {line}" for line in [*partials, *loop, *totals]),
            "}",
            *restores,
            *results,
        ]

    def column_loop(self, number: int, tail: list[str], clauses: list[str], start: str, end: str) -> list[str]:
        """An `omp simd` loop over columns `start` to `end`: pass `number`'s loads and nodes, the values later
        passes reuse saved, then the `tail` statements (accumulations or stores)."""
        work, names = self.work[number], self.names
        loads = [_load(t, names, self.kinds, names.row(t), f"col * {names.step(t)}") for t in work.inputs]
        # Scratch holds C values: a bool value is saved as 0 or 1 and restored as a bool.
        loads += [
            (
                f"const bool {names.value(v)} = {names.saved(v)}[col] != C(0);"
                if self.kinds[v] is ValueKind.BOOL
                else f"const C {names.value(v)} = {names.saved(v)}[col];"
            )
            for v in work.restored
        ]
        saves = [f"{names.saved(n.out)}[col] = {names.value(n.out)};" for n in work.nodes if n.out in self.saved]
        pragma = " ".join(["#pragma omp simd", *clauses])
        body = [*loads, *self.nodes(work.nodes), *saves, *tail]
        return [pragma, f"for (int64_t col = {start}; col < {end}; ++col) {{", *(f"  {line}" for line in body), "}"]

    def row_loops(self) -> str:
        """The contiguous path (one loop over the rows) and the strided path (three loops over the row dims)."""
        names = self.names
        contiguous = ["row"] + [a for t in self.strided for a in (f"{t.base} + start", "unit")]
        pointers = "".join(
            _assignment(
                f"{t.pointer_type} {names.row(t.value)}",
                f"{t.base} + o0 * {names.strides(t.value)}[0] + o1 * {names.strides(t.value)}[1] + "
                f"o2 * {names.strides(t.value)}[2]",
                8,
            )
            for t in self.strided
        )
        unit_rows = ["row"] + [a for t in self.strided for a in (names.row(t.value), "unit")]
        strided_rows = ["row"] + [a for t in self.strided for a in (names.row(t.value), f"{names.strides(t.value)}[3]")]
        unit_columns = " && ".join(f"{names.strides(t.value)}[3] == 1" for t in self.strided)
        return (
            "  const std::integral_constant<int64_t, 1> unit;\n"
            "  if (contiguous) {\n"
            "    // Contiguous path: element (row, col) of every tensor is at row * R + col.\n"
            f"#pragma omp parallel for schedule(static) if ({_ENOUGH_ROWS})\n"
            "    for (int64_t row = 0; row < n_rows; ++row) {\n"
            "      const int64_t start = row * R;\n"
            f"{_call('compute_row', contiguous, 6)}"
            "    }\n"
            "    return;\n"
            "  }\n"
            "  // Strided path: threads share the rows, each tensor steps by its own strides. Where every column\n"
            "  // stride is 1 (rows that are not contiguous with each other, a layer norm weight broadcast over\n"
            "  // the rows), the rows take the unit-stride code.\n"
            f"{_assignment('const bool unit_columns', unit_columns, 2)}"
            "  const int64_t size0 = outer_sizes[0], size1 = outer_sizes[1], size2 = outer_sizes[2];\n"
            f"#pragma omp parallel for collapse(3) schedule(static) if ({_ENOUGH_ROWS})\n"
            "  for (int64_t o0 = 0; o0 < size0; ++o0) {\n"
            "    for (int64_t o1 = 0; o1 < size1; ++o1) {\n"
            "      for (int64_t o2 = 0; o2 < size2; ++o2) {\n"
            "        const int64_t row = (o0 * size1 + o1) * size2 + o2;\n"
            f"{pointers}"
            "        if (unit_columns) {\n"
            f"{_call('compute_row', unit_rows, 10)}"
            "        } else {\n"
            f"{_call('compute_row', strided_rows, 10)}"
            "        }\n"
            "      }\n"
            "    }\n"
            "  }\n"
        )


# Rows are shared by threads when there are several and enough elements to pay for starting them.
_ENOUGH_ROWS = "n_rows > 1 && n_rows * R >= parallel_grain"


def _exports_comment() -> str:
    """Above the exports, once: what each kernel's four exports are (each kernel's own comment names it)."""
    return (
        "// Per kernel: the element type of each tensor input and output (T...: see the kernel), the values of\n"
        "// each type parameter and fixed dtype with each parameter's dtype in the entry points, the entry points'\n"
        "// parameters (the runtime declares them to ctypes), and the entry points: the entry template for calls\n"
        f"// whose floating inputs are all {_enumeration(list(ENTRY_DTYPES), 'or')}, in this order.\n\n"
    )


def _enumeration(items: list[str], conjunction: str = "and") -> str:
    """`a`, `a and b`, `a, b and c`."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {conjunction} {items[-1]}"


def _assignment(declaration: str, expression: str, indent: int) -> str:
    """`declaration = expression;`, continued on the next lines where it would pass 120 characters."""
    line = f"{' ' * indent}{declaration} = {expression};"
    if len(line) > 120:
        terms = re.split(r" (?=[+&]{1,2} )", expression)  # break before each `+` or `&&`
        lines = [f"{' ' * indent}{declaration} ="]
        for term in terms:
            if len(lines) > 1 and len(lines[-1]) + 1 + len(term) <= 120:
                lines[-1] += f" {term}"
            else:
                lines.append(f"{' ' * (indent + 4)}{term}")
        line = "\n".join(lines) + ";"
    return line + "\n"


def _call(function: str, arguments: list[str], indent: int) -> str:
    """`function(arguments);` on one line, or with the arguments wrapped below it."""
    line = f"{' ' * indent}{function}({', '.join(arguments)});"
    if len(line) > 120:
        line = f"{' ' * indent}{function}(\n{_wrap(arguments, ' ' * (indent + 4))});"
    return line + "\n"


def _indent(lines: list[str], width: int) -> str:
    """`lines` indented by `width` spaces, one a line; preprocessor lines stay in column 0."""
    return "".join(f"{line}\n" if line.startswith("#") else f"{' ' * width}{line}\n" for line in lines)


def _render_row_node(node: Node, names: CppNames, kinds: dict[str, ValueKind]) -> str:
    if node.op == "row_size":
        return f"const C {names.value(node.out)} = C(R);"
    return render_node(node, names, kinds)


# -- entry points -------------------------------------------------------------------------
# The parameters of every kernel's entry points and their order: emit/runtime/abi.py (the runtime declares them
# to ctypes from the same definition).
def _render_entry_points(region: Region) -> tuple[str, str]:
    """The entry template and the extern "C" part of a pointwise kernel: strides per tensor input."""
    strides = [f"strides_of(strides, {k})" for k in range(len(region.tensor_inputs))]
    names = cpp_names(region)
    arguments = ["n_elements", "sizes", *strides, "contiguous != 0"]
    return _entry_points(region, names, abi.POINTWISE, arguments, integer_refusals(region, names))


def _render_row_entry_points(lowered: RowRegion) -> tuple[str, str]:
    """The entry template and the extern "C" part of a row kernel: strides per ELEMENT tensor."""
    region = lowered.region
    names = cpp_names(region, _ROW_KERNEL_NAMES, lowered.original)
    count = len(region.tensor_inputs) + len(lowered.element_outputs)
    strides = [f"strides_of(strides, {k})" for k in range(count)]
    saved = _column_work(lowered, lowering.passes(lowered)[1])[1]
    arguments = ["n_rows", "row_size", "outer_sizes", *strides, "contiguous != 0"]
    return _entry_points(region, names, abi.ROWS, arguments, integer_refusals(region, names, saved))


def _entry_points(
    region: Region, names: CppNames, layout: abi.Layout, layout_arguments: list[str], refusals: dict[str, str]
) -> tuple[str, str]:
    """A kernel's entry template, `{name}_entry<T..., C>` over untyped pointers (the data, then the `layout`'s
    parameters, which it passes on as `layout_arguments`), and its extern "C" part: the kinds and types strings
    (with `integer_refusals`), and its entry points: the entry template for each dtype of ENTRY_DTYPES."""
    kinds = value_kinds(region)
    tensors = region.tensor_inputs
    parameters = layout.c_parameters(
        [names.value(t.name) for t in tensors],
        [names.value(s.name) for s in region.scalar_inputs],
        [names.value(o.value) for o in region.outputs],
    )
    arguments = [f"static_cast<const {_storage(t.name, names, kinds)}*>({names.value(t.name)})" for t in tensors]
    arguments += [names.value(s.name) for s in region.scalar_inputs]
    arguments += [f"static_cast<{_storage(o.value, names, kinds)}*>({names.value(o.value)})" for o in region.outputs]
    arguments += layout_arguments
    types = [name for name, _ in names.classes] + ["C"]
    call = f"{region.name}<{', '.join(types)}"
    if names.activation is None:
        body = f"  {call}>(\n{_wrap(arguments, '      ')});\n"
    else:  # one instantiation per code of ACTIVATION_OPS: the kernel's op is known when it is compiled
        code = f"static_cast<int>({names.value(names.activation)})"
        body = (
            f"  with_constant<{len(ACTIVATION_OPS)}>({code}, [&](auto ACT) {{\n"
            f"    {call}, decltype(ACT)::value>(\n{_wrap(arguments, ' ' * 8)});\n"
            "  });\n"
        )
    template = f"{region.name}{abi.ENTRY_SUFFIX}"
    entry = (
        f"// {region.name} on untyped pointers: the parameters of its entry points (emit/runtime/abi.py).\n"
        f"template <{', '.join(f'typename {t}' for t in types)}>\n"
        f"static void {template}(\n{_wrap(parameters, '    ')}) {{\n{body}}}\n"
    )
    instances = []
    for k in range(len(ENTRY_DTYPES)):
        bound = [_qualified(CAST_TYPES[c.uniform[k]]) for _, c in names.classes]
        wide = "float64" in (*(c.uniform[k] for _, c in names.classes), *names.fixed.values())
        instances.append(f"transpile::{template}<{', '.join([*bound, 'double' if wide else 'float'])}>")
    externs = (
        f"// {region.name}\n"
        f'extern const char {region.name}{abi.KINDS_SUFFIX}[] = "{kinds_signature(region, names)}";\n'
        f'extern const char {region.name}{abi.TYPES_SUFFIX}[] = "{types_signature(names, refusals)}";\n'
        f'extern const char {region.name}{abi.PARAMETERS_SUFFIX}[] = "{", ".join(parameters)}";\n'
        f"extern decltype(&{instances[0]}) const {region.name}{abi.ENTRIES_SUFFIX}[] = {{\n"
        + "".join(f"    {instance},\n" for instance in instances)
        + "};\n"
    )
    return entry, externs


def _wrap(items: list[str], indent: str, width: int = 120) -> str:
    """Comma-separated `items`, packed into lines of at most `width` characters."""
    lines = [indent]
    for i, item in enumerate(items):
        text = item + ("," if i < len(items) - 1 else "")
        if lines[-1] != indent and len(lines[-1]) + 1 + len(text) > width:
            lines.append(indent)
        lines[-1] += text if lines[-1] == indent else " " + text
    return "\n".join(lines)
