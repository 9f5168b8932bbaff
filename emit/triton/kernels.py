"""The Triton backend: one `@triton.jit` kernel per region, as readable source text.

Kernels are shape- and dtype-generic: the launcher (`triton_support.launch`) passes the
broadcast sizes and each input's strides, and `CONTIGUOUS` selects the fast path where
every input is laid out like the output. Each IR node becomes one line from its op's
template (`emit/triton/ops.py`); helper names in templates come from the runtime's `triton_support`.
A region with reductions becomes a row kernel instead (`_RowKernel`, launched by
`triton_support.launch_rows`): tiles of rows by columns, reduced along the columns.
Rendering needs no triton installed.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import replace

from emit.abi import abi
from emit.layout import import_lines, layout_text
from emit.triton.ops import TRITON_OPS
from transpiler.compiler.dtypes import FLOATING, ValueKind, storage_dtypes, value_dtypes, value_kinds
from transpiler.compiler.ir import Node, Region
from transpiler.compiler.lowering import ROW_REDUCTIONS, Pass, has_reductions, lower, passes
from transpiler.compiler.ops import (
    ACTIVATION,
    ACTIVATION_OPS,
    CAST,
    CAST_LIKE,
    DTYPE_ALIASES,
    ROUND_LIKE,
    OpKind,
)

# The argument order, the launch constants' names and the helpers a kernel may import: emit/runtime/abi.py.
RANK = abi.RANK  # the strided path indexes a RANK-d iteration space, padded on the left with 1s
INDENT = "    "
# torch dtype names whose Triton spelling differs.
TRITON_DTYPES = {"bool": "int1"}
DTYPE_SUFFIX = abi.DTYPE_SUFFIX  # a value's dtype on the call, a kernel parameter: `<value>_dtype`
HELPERS = abi.TRITON_HELPERS
# Names a region value must not take inside a kernel: they would shadow what the kernel uses.
RESERVED = (
    HELPERS
    | {"tl", "triton", "offsets", "mask", *abi.POINTWISE.triton, *abi.POINTWISE.constants}
    | {f"index{d}" for d in range(RANK)}
)
_IDENTIFIER = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")


def render_constant(value: object) -> str:
    """A Python constant as Triton source: float literals type as float32, ints as int32/int64."""
    if isinstance(value, str):  # a dtype name (casts)
        name = DTYPE_ALIASES.get(value, value)
        return TRITON_DTYPES.get(name, name)
    if isinstance(value, float) and not math.isfinite(value):
        # Triton's JIT evaluates float() of a literal; a NaN global would fail its "global changed" check.
        return f'float("{value}")'
    text = repr(value).replace("e+", "e")  # 1e30 as black writes it
    # Parenthesised so that `x - (-1.0)` and `(-2) ** x` keep their meaning in any template.
    return f"({text})" if text.startswith("-") else text


class TritonNames:
    """Kernel identifiers of region values: the user's names, unless they would shadow the kernel's own."""

    def __init__(self, region: Region, reserved: frozenset[str] = RESERVED, typed: Region | None = None) -> None:
        values = [i.name for i in region.inputs] + [n.out for n in region.nodes]
        self.rounding = _rounding(region, typed)
        if typed is not None:  # a lowered region: of its own values, only those it marks (round_like) are rounded
            named = {i.name for i in typed.inputs} | {n.out for n in typed.nodes}
            marked = {n.out for n in region.nodes if n.definition is ROUND_LIKE}
            self.rounding = {v: d for v, d in self.rounding.items() if v in named or v in marked}
        self.scalars = frozenset(item.name for item in region.scalar_inputs)
        # Values that may hold integers or bools (when the tensor inputs do, or from a Python int scalar):
        # a float function converts them first.
        self.integral = _integral(region, typed)
        # Values eager holds as bools when every tensor input is one: an add of them is an `or`.
        as_bools = value_dtypes(typed or region, {i.name: "bool" for i in region.tensor_inputs})
        self.may_be_bool = frozenset(v for v, d in as_bools.items() if d == "bool")
        # Per row reduction, the value of the region whose dtype on the call its accumulator follows (integers
        # accumulate in int64, float64 in float64, other floats in float32): a sum, amax or amin's own, the
        # result's of the float reduction a row primitive was lowered from. A maximum or minimum of the
        # region is rounded to its dtype (that of its operand): integers are compared in int64.
        self.accumulates = _accumulated_values(region, typed)
        plain = _plain_reductions(region, typed)
        for node in region.nodes:
            if node.out in plain and node.op != "row_sum":
                self.rounding.setdefault(node.out, None)
        # The values rounded to a dtype that depends on the call, and those accumulators follow: the kernel
        # takes each one's dtype as a constexpr.
        casts = {n.out for n in region.nodes if n.definition in (CAST, CAST_LIKE)}
        # A lowered intermediate held in the dtype of a value the region names takes that value's parameter.
        like = {n.out: n.operands[1] for n in region.nodes if n.definition is ROUND_LIKE}
        parameters = [v for v, d in self.rounding.items() if d is None and v not in casts and v not in like]
        parameters += [v for v in self.accumulates.values() if v not in self.rounding]
        self.dtype_parameters = {v: f"{v}{DTYPE_SUFFIX}" for v in dict.fromkeys(parameters)}
        for value, source in like.items():
            if self.rounding.get(value, "") is None:
                self.rounding[value] = self.rounding.get(source) or self.dtype_parameters.setdefault(
                    source, f"{source}{DTYPE_SUFFIX}"
                )
        reserved = reserved | frozenset(self.dtype_parameters.values())
        taken = set(values) | reserved
        self._names: dict[str, str] = {}
        for value in values:
            clash = value in reserved or keyword.iskeyword(value)
            self._names[value] = _fresh(f"{value}_value", taken) if clash else value

    def dtype(self, value: str) -> str:
        """The value's dtype in the kernel's source: a fixed `tl.<dtype>`, or its dtype parameter."""
        return self.rounding.get(value) or self.dtype_parameters[value]

    def __getitem__(self, value: str) -> str:
        return self._names[value]


# The reductions whose lowered row sum, maximum or minimum is all they compute: of integers too.
_PLAIN_REDUCTIONS = ("sum", "amax", "amin")


def _integral(region: Region, typed: Region | None) -> frozenset[str]:
    """The values of `region` that may hold integers or bools on some call (every value computed from integer
    inputs, or from a Python int scalar, without a float in between).

    In a lowered region a sum, amax or amin is an integer where its operand is (a sum in int64, as torch
    sums); the row primitives inside lowered float reductions (softmax's, a mean's length) are floats:
    eager raises on integers there, or converts them first (logsumexp).
    """
    plain = _plain_reductions(region, typed)
    known = {i.name: "int64" for i in region.tensor_inputs}
    nodes = []
    for node in region.nodes:
        if node.out in plain:
            nodes.append(Node("identity", (node.operands[0],), node.out, node.line))  # of its operand's kind
        elif node.definition.kind is OpKind.ROW:
            known[node.out] = "float32"
        else:
            nodes.append(node)
    as_ints = value_dtypes(replace(region, nodes=tuple(nodes)), known)
    return frozenset(v for v, d in as_ints.items() if d not in FLOATING)


def _accumulated_values(region: Region, typed: Region | None) -> dict[str, str]:
    """Per row reduction of a lowered `region` (`typed`: before lowering), the reduction of `typed` it computes
    or is part of (lowering emits a reduction's row primitives right before the node that takes its name)."""
    if typed is None:
        return {}
    reductions = {n.out for n in typed.nodes if n.definition.kind is OpKind.REDUCTION}
    owners, pending = {}, []
    for node in region.nodes:
        if node.op in ROW_REDUCTIONS:
            pending.append(node.out)
        if node.out in reductions:
            owners.update(dict.fromkeys(pending, node.out))
            pending = []
    return owners


def _plain_reductions(region: Region, typed: Region | None) -> frozenset[str]:
    """The row reductions of a lowered `region` (`typed`: before lowering) that are a sum, amax or amin of the
    region: all they compute, on integers too. The others are inside lowered float reductions."""
    if typed is None:
        return frozenset()
    plain = {n.out for n in typed.nodes if n.op in _PLAIN_REDUCTIONS}
    return frozenset(n.out for n in region.nodes if n.op in ROW_REDUCTIONS and n.out in plain)


def dtype_parameters(names: TritonNames) -> list[str]:
    """The kernel's last parameters: per value rounded to a dtype that depends on the call, that dtype."""
    parameters = [f"{p}: tl.constexpr," for p in names.dtype_parameters.values()]
    if parameters:
        parameters[0] += "  # each value's dtype in eager on this call: the value is rounded to it"
    return parameters


def _rounding(region: Region, typed: Region | None) -> dict[str, str | None]:
    """The values eager may hold in half or bfloat16: per value, that dtype as Triton spells it (`tl.float16`)
    where the region fixes it, or None where it depends on the call's input dtypes (`x * w` is a half for
    half x and w, float32 beside a float32 w): the launcher then gives it as a constexpr."""
    kinds = value_kinds(region)
    bools = frozenset(i.name for i in region.tensor_inputs if kinds[i.name] is ValueKind.BOOL)
    rounding = {}
    # Its dtypes when every floating input is of one of these dtypes: enough to tell fixed from varying.
    for value, dtypes in storage_dtypes(region, bools, ("float32", "float16", "bfloat16"), typed).items():
        if {"float16", "bfloat16"} & set(dtypes):
            rounding[value] = f"tl.{dtypes[0]}" if len(set(dtypes)) == 1 else None
    return rounding


def _rounded(node: Node, expression: str, names: TritonNames) -> str:
    """`expression`, rounded where eager holds the node's value in a narrower dtype than the kernel computes in
    (a cast rounds itself)."""
    if node.out not in names.rounding or node.definition in (CAST, CAST_LIKE):
        return expression
    return f"rounded({expression}, {names.dtype(node.out)})"


def _fresh(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}{n}"
    taken.add(candidate)
    return candidate


def _expression(node: Node, names: TritonNames) -> str:
    """The node's value as an expression: its op's template (emit/triton/ops.py) over the operands."""
    op = TRITON_OPS[node.op]
    operands = [render_constant(o) if i in node.constants else names[o] for i, o in enumerate(node.operands)]
    if op.bool_template is not None and node.out in names.may_be_bool:
        return op.bool_template.format(*operands)
    if node.definition.int_to_float and set(node.values()) <= names.integral:
        # torch's float functions make float32 of integers; Triton's reject them (one float operand suffices)
        operands = [o if i in node.constants else f"floating({o})" for i, o in enumerate(operands)]
    if (
        node.definition.scalar_in_dtype
        and node.out in names.rounding
        and (1 in node.constants or node.operands[1] in names.scalars)
    ):
        operands[1] = f"scalar_in({operands[1]}, {names.dtype(node.out)})"  # torch converts the divisor first
    special = dict(op.constant_operand)
    constant = node.operands[1] if special and 1 in node.constants and 0 not in node.constants else None
    if type(constant) in (int, float) and constant in special:
        base = operands[0]
        if type(constant) is float and node.operands[0] in names.integral:
            # An integer or bool with a float is a float32 in torch: `x * x` of an int32 would wrap.
            base = f"floating({base})"
        return special[constant].format(base)
    return op.template.format(*operands)


def integer_refusals(region: Region) -> dict[str, str]:
    """The values of the region that its Triton kernel does not compute as eager where they are integers, each
    with why: the launcher gives the call to the original code where one is (`abi.INTEGER_REFUSALS`).

    Integer floor division and remainder by a tensor: eager raises on a zero divisor, a kernel cannot (a constant
    divisor is checked by the eager reference). Integer powers other than `x ** 2` and `x ** 3` (multiplications,
    which wrap as torch's): `power` computes in floats.
    """
    may_be_integers = value_dtypes(region, {i.name: "int64" for i in region.tensor_inputs})
    refusals = {}
    for node in region.nodes:
        if may_be_integers.get(node.out) in FLOATING:
            continue
        if node.op in ("floordiv", "remainder") and 1 not in node.constants:
            refusals[node.out] = (
                f"an integer {'floor division' if node.op == 'floordiv' else 'remainder'} by a tensor (eager raises on a zero divisor)"
            )
        elif node.op == "pow" and not (
            1 in node.constants and type(node.operands[1]) is int and node.operands[1] in (2, 3)
        ):
            refusals[node.out] = "an integer power other than x ** 2 and x ** 3"
    return refusals


def _refusal_lines(region: Region) -> str:
    """The kernel file's lines after the kernel that set its `integer_refusals`, if any."""
    refusals = integer_refusals(region)
    if not refusals:
        return ""
    entries = ", ".join(f'"{value}": "{why}"' for value, why in refusals.items())  # as black quotes them
    return (
        "\n\n# Values eager computes otherwise where they are integers: the launcher refuses such calls\n"
        f"{region.name}{abi.KERNEL_SUFFIX}.{abi.INTEGER_REFUSALS} = {{{entries}}}\n"
    )


def _statements(node: Node, names: TritonNames, expression=None) -> list[str]:
    """The node as kernel lines: `out = <expression>`, or for an activation chosen at run time a
    constexpr switch over the ops of `ACTIVATION_OPS` (Triton compiles only the branch taken)."""
    expression = expression or _expression
    out = names[node.out]
    if node.op != ACTIVATION.name:
        return [f"{out} = {_rounded(node, expression(node, names), names)}"]
    value, module = (names[o] for o in node.operands)
    lines = []
    for code, op in enumerate(ACTIVATION_OPS):
        keyword = "if" if code == 0 else "elif" if code < len(ACTIVATION_OPS) - 1 else "else"
        test = f" {module} == {code}" if keyword != "else" else ""
        lines += [f"{keyword}{test}:  # {op}", f"{INDENT}{out} = {TRITON_OPS[op].template.format(value)}"]
    return lines


def _activation_parameter(item, names: TritonNames) -> str:
    return f"{names[item.name]}: tl.constexpr,  # {item.source}: its op's code in ACTIVATION_OPS (transpiler/compiler/ops.py)"


def _scalar_parameters(region: Region, names: TritonNames) -> list[str]:
    """The kernel's scalar parameters: Python numbers, and the codes of activation modules."""
    modules = {n.operands[1] for n in region.nodes if n.op == ACTIVATION.name}
    return [
        _activation_parameter(i, names) if i.name in modules else f"{names[i.name]},  # scalar input {i.source}"
        for i in region.scalar_inputs
    ]


def triton_helpers_used(region: Region) -> list[str]:
    """The triton_support names the region's kernel uses (for the kernel file's import)."""
    if has_reductions(region):
        return sorted(_RowKernel(region, {}).helpers)
    names = TritonNames(region)
    used = {"widen"} if region.tensor_inputs else set()
    for node in region.nodes:
        used |= HELPERS.intersection(_IDENTIFIER.findall("\n".join(_statements(node, names))))
    return sorted(used)


def render_triton(region: Region, source_lines: dict[int, str]) -> str:
    """The source of the region's `@triton.jit` kernel, named `<region.name>_kernel`, laid out as black would
    (emit/layout.py)."""
    if has_reductions(region):
        return layout_text(_RowKernel(region, source_lines).text + _refusal_lines(region))
    names = TritonNames(region)
    tensors = region.tensor_inputs
    lines = ["@triton.jit", f"def {region.name}{abi.KERNEL_SUFFIX}("]
    lines += [f"{INDENT}{names[i.name]}_ptr,  # input {i.source}" for i in tensors]
    lines += [f"{INDENT}{parameter}" for parameter in _scalar_parameters(region, names)]
    lines += [f"{INDENT}{names[o.value]}_out_ptr,  # output {_output_label(o.target, o.value)}" for o in region.outputs]
    # The layout's parameters, in the order of emit/runtime/abi.py POINTWISE (the launcher passes them so).
    layout = abi.POINTWISE
    strides = [f"{names[i.name]}{suffix}" for i in tensors for suffix in layout.strides]
    lines += [f"{INDENT}{line}" for line in _parameters([*layout.triton, *strides])]
    lines += [f"{INDENT}{line}" for line in _parameters(layout.constants, constexpr=True)]
    lines += [f"{INDENT}{parameter}" for parameter in dtype_parameters(names)] + ["):"]
    lines.append(f'{INDENT}"""{region.function} in {region.path}:{region.lines}."""')
    lines.append(f"{INDENT}# Each program computes BLOCK_SIZE consecutive elements of the outputs")
    lines.append(f"{INDENT}offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)")
    lines.append(f"{INDENT}mask = offsets < n_elements")
    if tensors:
        lines += _input_offsets([names[i.name] for i in tensors])
        lines.append(f"{INDENT}# Load the inputs (half and bfloat16 widened to float32)")
        lines += [
            f"{INDENT}{names[i.name]} = widen(tl.load({names[i.name]}_ptr + {names[i.name]}_offsets, mask=mask))"
            for i in tensors
        ]
    lines.append(f"{INDENT}# Compute")
    previous_line = None
    for node in region.nodes:
        if node.line != previous_line:
            lines.append(INDENT + _source_comment(region, node.line, source_lines))
            previous_line = node.line
        lines += [f"{INDENT}{line}" for line in _statements(node, names)]
    lines.append(f"{INDENT}# Store the outputs, converted to their dtypes")
    for output in region.outputs:
        pointer = f"{names[output.value]}_out_ptr"
        lines.append(
            f"{INDENT}tl.store({pointer} + offsets, {names[output.value]}.to({pointer}.dtype.element_ty), mask=mask)"
        )
    return layout_text("\n".join(lines) + "\n" + _refusal_lines(region))


def _source_comment(region: Region, line: int, source_lines: dict[int, str]) -> str:
    return f"# {region.path}:{line}  {source_lines.get(line, '').strip()}".rstrip()


def _output_label(target: str, value: str) -> str:
    return target if target == value else f"{target} ({value})"


def _input_offsets(inputs: list[str]) -> list[str]:
    """Each input's element offsets: the linear index, or its coordinates dotted with the input's strides.

    The strided path peels coordinates off the linear index from the innermost dim out,
    for the NDIM dims in use only: integer division is what costs here, so a 2-d
    broadcast pays for one division, not three.
    """
    body, inner = 2 * INDENT, 3 * INDENT
    lines = [f"{INDENT}# Locate each input's elements", f"{INDENT}if CONTIGUOUS:"]
    lines += [f"{body}{name}_offsets = offsets" for name in inputs]
    lines += [f"{INDENT}else:", f"{body}# Coordinates in the NDIM innermost of 4 dims (the output is contiguous)"]
    last = RANK - 1
    lines.append(f"{body}index{last} = offsets % size{last} if NDIM > 1 else offsets")
    lines += [f"{body}{name}_offsets = index{last} * {name}_stride{last}" for name in inputs]
    for d in reversed(range(last)):
        lines.append(f"{body}if NDIM > {last - d}:")
        lines.append(f"{inner}rest = {'offsets' if d == last - 1 else 'rest'} // size{d + 1}")
        lines.append(
            f"{inner}index{d} = rest % size{d} if NDIM > {last - d + 1} else rest" if d else f"{inner}index0 = rest"
        )
        lines += [f"{inner}{name}_offsets += index{d} * {name}_stride{d}" for name in inputs]
    return lines


def _parameters(names, comments=(), constexpr: bool = False) -> list[str]:
    """Kernel parameter lines, `name,` (`name: tl.constexpr,`), each with its comment of `comments` if any."""
    annotation = ": tl.constexpr" if constexpr else ""
    lines = [f"{name}{annotation}," for name in names]
    return [
        f"{line}  # {comment}" if comment else line for line, comment in zip(lines, (*comments, *[""] * len(lines)))
    ]


# -- row kernels: regions with reductions -------------------------------------------------------
# Comments on the row layout's parameters (abi.ROWS), in its order.
_ROW_LAYOUT_COMMENTS = (
    "rows: every dim but the reduced one",
    "the row length: the reduced dim's size",
    "row = (index0 * outer_size1 + index1) * outer_size2 + index2 (strided path)",
)
_ROW_CONSTANT_COMMENTS = (
    "every tensor above holds element (row, col) at row * R + col",
    "R > RBLOCK: one loop over the row per pass",
    "rows a program computes",
    "columns a block holds: the whole row unless LOOPED",
)
# Names a row kernel uses besides region values, and the suffixes it derives per tensor
# (a value named like another's derived name is renamed).
_ROW_LOCALS = "tl triton row row_mask cols col mask start rest index0 index1 index2"
ROW_KERNEL_NAMES = HELPERS | set(_ROW_LOCALS.split()) | {*abi.ROWS.triton, *abi.ROWS.constants}
_DERIVED = ("_ptr", "_row", "_stride", "_partial", *abi.ROWS.strides)
# What a ROW op accumulates: the comment's word, the helper that makes the partials (of the reduction's
# identity, in the dtype it accumulates in), the helper that accumulates.
_REDUCTIONS = {
    "row_sum": ("sum", "sum_partial", "accumulate_sum"),
    "row_max": ("maximum", "max_partial", "accumulate_max"),
    "row_min": ("minimum", "min_partial", "accumulate_min"),
}


class _RowKernel:
    """A region with reductions as a row kernel: tiles of ROWS rows by RBLOCK columns.

    Rows up to RBLOCK long take one pass with the row in registers (each input read
    once); longer rows (LOOPED) follow `lowering.passes`: a loop over the row per pass,
    accumulating per-lane float32 partials that are reduced once after the loop.
    Renders on construction: `text` is the kernel, `helpers` the support names it uses.
    """

    def __init__(self, region: Region, source_lines: dict[int, str]) -> None:
        self.source = region
        self.rows = lower(region)
        lowered = self.rows.region
        values = [i.name for i in lowered.inputs] + [n.out for n in lowered.nodes]
        derived = {f"{v}{out}{suffix}" for v in values for out in ("", "_out") for suffix in _DERIVED}
        self.names = TritonNames(lowered, frozenset(ROW_KERNEL_NAMES | derived), region)
        self.source_lines = source_lines
        self.helpers: set[str] = {"widen"} | {_REDUCTIONS[n.op][2] for n in lowered.nodes if n.op in _REDUCTIONS}
        self.lines: list[str] = []
        self._kernel()

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    # -- pieces ------------------------------------------------------------------------
    def emit(self, depth: int, *lines: str) -> None:
        self.lines += [INDENT * depth + line for line in lines]

    def tensors(self) -> list[tuple[str, str]]:
        """(kernel prefix, label) of every tensor indexed per element: inputs, then element outputs."""
        region = self.rows.region
        inputs = [(self.names[i.name], f"input {i.source}") for i in region.tensor_inputs]
        outputs = [
            (f"{self.names[o.value]}_out", f"output {_output_label(o.target, o.value)}")
            for o in self.rows.element_outputs
        ]
        return inputs + outputs

    def expression(self, node: Node, one_pass: bool) -> str:
        if node.op == "row_size":
            return "tl.cast(R, tl.float32)"
        if node.op in _REDUCTIONS:
            # One pass reduces the block itself; a loop reduces its partials once it is done.
            reduced = self.names[node.values()[0]] if one_pass else f"{self.names[node.out]}_partial"
            mask = "mask" if one_pass else "row_mask"
            self.helpers.add(node.op)
            return f"{node.op}({reduced}, {mask})"
        text = _expression(node, self.names)
        self.helpers |= HELPERS.intersection(_IDENTIFIER.findall(text))
        return text

    def compute(self, depth: int, nodes, one_pass: bool) -> None:
        """The nodes as statements, each line of source they come from as a comment above its first."""
        previous_line = None
        for node in nodes:
            if node.line != previous_line:
                self.emit(depth, _source_comment(self.source, node.line, self.source_lines))
                previous_line = node.line
            statements = _statements(node, self.names, lambda node, _: self.expression(node, one_pass))
            self.helpers |= HELPERS.intersection(_IDENTIFIER.findall("\n".join(statements)))
            self.emit(depth, *statements)

    def load(self, depth: int, values) -> None:
        """Load the tensor inputs among `values` (in input order) at columns `col`, widened."""
        wanted = set(values)
        for item in self.rows.region.tensor_inputs:
            if item.name in wanted:
                name = self.names[item.name]
                self.emit(depth, f"{name} = widen(tl.load({name}_ptr + {name}_row + col * {name}_stride, mask=mask))")

    def store_elements(self, depth: int) -> None:
        if not self.rows.element_outputs:
            return
        self.emit(depth, "# Store the element outputs, converted to their dtypes")
        for output in self.rows.element_outputs:
            name = self.names[output.value]
            pointer = f"{name}_out_ptr + {name}_out_row + col * {name}_out_stride"
            self.emit(depth, f"tl.store({pointer}, {name}.to({name}_out_ptr.dtype.element_ty), mask=mask)")

    def store_rows(self, depth: int) -> None:
        if not self.rows.row_outputs:
            return
        self.emit(depth, "# Store the row outputs (one value a row), converted to their dtypes")
        for output in self.rows.row_outputs:
            name = self.names[output.value]
            self.emit(
                depth, f"tl.store({name}_out_ptr + row, {name}.to({name}_out_ptr.dtype.element_ty), mask=row_mask)"
            )

    # -- the kernel ----------------------------------------------------------------------
    def _kernel(self) -> None:
        region, names = self.rows.region, self.names
        self.emit(0, "@triton.jit", f"def {region.name}{abi.KERNEL_SUFFIX}(")
        self.emit(1, *(f"{names[i.name]}_ptr,  # input {i.source}" for i in region.tensor_inputs))
        self.emit(1, *_scalar_parameters(region, names))
        row_values = {o.value for o in self.rows.row_outputs}
        for output in region.outputs:
            per = "one value a row" if output.value in row_values else "one value an element"
            self.emit(
                1, f"{names[output.value]}_out_ptr,  # output {_output_label(output.target, output.value)}: {per}"
            )
        # The layout's parameters, in the order of emit/runtime/abi.py ROWS (the launcher passes them so).
        self.emit(1, *_parameters(abi.ROWS.triton, _ROW_LAYOUT_COMMENTS))
        for prefix, label in self.tensors():
            strides = [f"{prefix}{suffix}" for suffix in abi.ROWS.strides]
            self.emit(1, *_parameters(strides, (f"{label}: strides along the 3 row dims, then along the row",)))
        self.emit(1, *_parameters(abi.ROWS.constants, _ROW_CONSTANT_COMMENTS, constexpr=True))
        self.emit(1, *dtype_parameters(self.names))
        self.emit(0, "):")
        self.emit(1, f'"""{self.source.function} in {self.source.path}:{self.source.lines}."""')
        self.emit(
            1,
            "# Each program computes ROWS rows, held as [ROWS, RBLOCK] tiles of columns",
            "row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]",
            "row_mask = row < n_rows",
            "cols = tl.arange(0, RBLOCK)[None, :]",
        )
        self._locate_rows()
        self.emit(1, "if not LOOPED:")
        self._one_pass()
        self.emit(1, "else:")
        self._looped()

    def _locate_rows(self) -> None:
        """Each tensor's row start and column stride: a division per row (not per element) when strided."""
        tensors = [prefix for prefix, _ in self.tensors()]
        self.emit(1, "# Where each tensor's rows start, and its stride along them", "if CONTIGUOUS:")
        for prefix in tensors:
            self.emit(2, f"{prefix}_row = row * R", f"{prefix}_stride = 1")
        self.emit(1, "else:", "    # The row's coordinates in the 3 row dims")
        self.emit(
            2,
            "index2 = row % outer_size2",
            "rest = row // outer_size2",
            "index1 = rest % outer_size1",
            "index0 = rest // outer_size1",
        )
        for prefix in tensors:
            offset = " + ".join(f"index{d} * {prefix}_stride{d}" for d in range(abi.ROW_DIMS))
            self.emit(2, f"{prefix}_row = {offset}", f"{prefix}_stride = {prefix}_stride_r")

    def _one_pass(self) -> None:
        region = self.rows.region
        self.emit(
            2,
            "# One pass: the whole row in registers; each input is read once",
            "col = cols",
            "mask = row_mask & (col < R)",
        )
        self.load(2, [i.name for i in region.tensor_inputs])
        self.emit(2, "# Compute (reductions over the lanes in `mask`)")
        self.compute(2, region.nodes, one_pass=True)
        self.store_elements(2)
        self.store_rows(2)

    def _looped(self) -> None:
        before, schedule = passes(self.rows)
        self.emit(2, "# Rows longer than a block: one loop over the row per pass")
        self.compute(2, before, one_pass=False)
        for number, step in enumerate(schedule, 1):
            if step.reductions:
                self._pass(number, step)
            elif self.rows.element_outputs:
                self._store_pass(number, step)
        self.store_rows(2)

    def _block(self, step: Pass, results: list[str]) -> None:
        """The start of a loop over the row's blocks: its columns, the inputs it reads, the pass's elements."""
        # A `for` over `tl.range` with stages: Triton software-pipelines a loop's loads (the next blocks'
        # loads in flight while this one computes) only in a `for`, and, for loads that feed no `tl.dot`,
        # only where the loop names its stages; 3 is Triton's default count on NVIDIA GPUs. A `while` or a
        # plain `range` is not pipelined: on an H100 the loops take 0.29-1.03x the `while` loop's time
        # (benchmarks/row_loops.py, benchmarks/RESULTS.md).
        self.emit(2, "for start in tl.range(0, R, RBLOCK, num_stages=3):")
        self.emit(3, "col = start + cols", "mask = row_mask & (col < R)")
        self.load(3, [v for node in step.elements for v in node.values()] + results)
        self.compute(3, step.elements, one_pass=False)

    def _pass(self, number: int, step: Pass) -> None:
        names = self.names
        what = ", ".join(f"the row {_REDUCTIONS[r.op][0]} of {names[r.values()[0]]}" for r in step.reductions)
        self.emit(2, f"# Pass {number}: {what}")
        for reduction in step.reductions:
            partial = _REDUCTIONS[reduction.op][1]
            dtype = names.dtype(names.accumulates[reduction.out])
            self.helpers.add(partial)
            self.emit(2, f"{names[reduction.out]}_partial = {partial}(ROWS, RBLOCK, {dtype})")
        self._block(step, [r.values()[0] for r in step.reductions])
        for reduction in step.reductions:
            partial, accumulate = f"{names[reduction.out]}_partial", _REDUCTIONS[reduction.op][2]
            self.emit(3, f"{partial} = {accumulate}({partial}, {names[reduction.values()[0]]}, mask)")
        self.compute(2, [*step.reductions, *step.then], one_pass=False)

    def _store_pass(self, number: int, step: Pass) -> None:
        self.emit(2, f"# Pass {number}: the element outputs")
        self._block(step, [o.value for o in self.rows.element_outputs])
        self.store_elements(3)


def render_triton_file(
    regions: list[Region], source_lines: dict[int, str], runtime_import: str, header: str = ""
) -> str:
    """A kernel file: `header` (a docstring or comment), imports, then one kernel per region.

    `runtime_import` is the module the helpers come from, e.g. `_transpile_runtime.triton_support`.
    """
    helpers = sorted({name for region in regions for name in triton_helpers_used(region)})
    parts = [header.rstrip() + "\n\n" if header else "", "import triton\nimport triton.language as tl\n"]
    if helpers:
        parts += [f"{line}\n" for line in import_lines(runtime_import, helpers)]
    return "".join(parts) + "".join(f"\n\n{render_triton(region, source_lines)}" for region in regions)
