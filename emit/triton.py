"""The Triton backend: one `@triton.jit` pointwise kernel per region, as readable source text.

Kernels are shape- and dtype-generic: the launcher (`triton_support.launch`) passes the
broadcast sizes and each input's strides, and `CONTIGUOUS` selects the fast path where
every input is laid out like the output. Each IR node becomes one line from its op's
`triton` template; helper names in templates come from the runtime's `triton_support`.
Rendering needs no triton installed.
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from pathlib import Path

import black

from transpiler.ir import Node, Region
from transpiler.ops import DTYPE_ALIASES

# The strided path indexes a 4-d iteration space, padded on the left with 1s: the
# runtime's RANK (not imported: the runtime needs torch, rendering does not).
RANK = 4
SUPPORT_FILE = Path(__file__).parent / "runtime" / "triton_support.py"
INDENT = "    "
# torch dtype names whose Triton spelling differs.
TRITON_DTYPES = {"bool": "int1"}


def _support_names() -> frozenset[str]:
    """Names a kernel may import from triton_support: its jit helpers and constexpr constants."""
    tree = ast.parse(SUPPORT_FILE.read_text(encoding="utf-8"))
    names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.decorator_list}
    names |= {node.target.id for node in tree.body if isinstance(node, ast.AnnAssign)}
    return frozenset(name for name in names if not name.startswith("_"))


HELPERS = _support_names()
# Names a region value must not take inside a kernel: they would shadow what the kernel uses.
RESERVED = (
    HELPERS
    | {"tl", "triton", "offsets", "mask", "n_elements", "CONTIGUOUS", "BLOCK_SIZE"}
    | {f"{prefix}{d}" for prefix in ("size", "index") for d in range(RANK)}
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
    text = repr(value)
    # Parenthesised so that `x - (-1.0)` and `(-2) ** x` keep their meaning in any template.
    return f"({text})" if text.startswith("-") else text


class _Names:
    """Kernel identifiers of region values: the user's names, unless they would shadow the kernel's own."""

    def __init__(self, region: Region) -> None:
        values = [i.name for i in region.inputs] + [n.out for n in region.nodes]
        taken = set(values) | RESERVED
        self._names: dict[str, str] = {}
        for value in values:
            clash = value in RESERVED or keyword.iskeyword(value)
            self._names[value] = _fresh(f"{value}_value", taken) if clash else value

    def __getitem__(self, value: str) -> str:
        return self._names[value]


def _fresh(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}{n}"
    taken.add(candidate)
    return candidate


# `x ** c` for the constant exponents torch's pow kernels special-case, computed as they do
# (libdevice's general pow is far slower and rounds differently).
_POWERS = {2: "{0} * {0}", 3: "{0} * {0} * {0}", 0.5: "tl.sqrt_rn({0})", -0.5: "1.0 / tl.sqrt_rn({0})", -1: "1.0 / {0}", -2: "1.0 / ({0} * {0})"}


def _expression(node: Node, names: _Names) -> str:
    operands = [render_constant(o) if i in node.constants else names[o] for i, o in enumerate(node.operands)]
    exponent = node.operands[1] if node.op == "pow" and 1 in node.constants and 0 not in node.constants else None
    if type(exponent) in (int, float) and exponent in _POWERS:
        return _POWERS[exponent].format(operands[0])
    return node.definition.triton.format(*operands)


def triton_helpers_used(region: Region) -> list[str]:
    """The triton_support names the region's kernel uses (for the kernel file's import)."""
    names = _Names(region)
    used = {"widen"} if region.tensor_inputs else set()
    for node in region.nodes:
        used |= HELPERS.intersection(_IDENTIFIER.findall(_expression(node, names)))
    return sorted(used)


def render_triton(region: Region, source_lines: dict[int, str]) -> str:
    """The source of the region's `@triton.jit` kernel, named `<region.name>_kernel`, black-formatted."""
    names = _Names(region)
    tensors = region.tensor_inputs
    lines = ["@triton.jit", f"def {region.name}_kernel("]
    lines += [f"{INDENT}{names[i.name]}_ptr,  # input {i.source}" for i in tensors]
    lines += [f"{INDENT}{names[i.name]},  # scalar input {i.source}" for i in region.scalar_inputs]
    lines += [f"{INDENT}{names[o.value]}_out_ptr,  # output {_output_label(o.target, o.value)}" for o in region.outputs]
    lines += [f"{INDENT}n_elements,"] + [f"{INDENT}size{d}," for d in range(RANK)]
    lines += [f"{INDENT}{names[i.name]}_stride{d}," for i in tensors for d in range(RANK)]
    lines += [f"{INDENT}CONTIGUOUS: tl.constexpr,", f"{INDENT}NDIM: tl.constexpr,", f"{INDENT}BLOCK_SIZE: tl.constexpr,", "):"]
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
            source = source_lines.get(node.line, "").strip()
            lines.append(f"{INDENT}# {region.path}:{node.line}  {source}".rstrip())
            previous_line = node.line
        lines.append(f"{INDENT}{names[node.out]} = {_expression(node, names)}")
    lines.append(f"{INDENT}# Store the outputs, converted to their dtypes")
    for output in region.outputs:
        pointer = f"{names[output.value]}_out_ptr"
        lines.append(
            f"{INDENT}tl.store({pointer} + offsets, {names[output.value]}.to({pointer}.dtype.element_ty), mask=mask)"
        )
    return _black("\n".join(lines) + "\n")


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
        lines.append(f"{inner}index{d} = rest % size{d} if NDIM > {last - d + 1} else rest" if d else f"{inner}index0 = rest")
        lines += [f"{inner}{name}_offsets += index{d} * {name}_stride{d}" for name in inputs]
    return lines


def render_triton_file(
    regions: list[Region], source_lines: dict[int, str], runtime_import: str, header: str = ""
) -> str:
    """A kernel file: `header` (a docstring or comment), imports, then one kernel per region.

    `runtime_import` is the module the helpers come from, e.g. `_transpile_runtime.triton_support`.
    """
    helpers = sorted({name for region in regions for name in triton_helpers_used(region)})
    parts = [header.rstrip() + "\n\n" if header else "", "import triton\nimport triton.language as tl\n"]
    if helpers:
        parts.append(f"from {runtime_import} import {', '.join(helpers)}\n")
    text = "".join(parts) + "".join(f"\n\n{render_triton(region, source_lines)}" for region in regions)
    return _black(text)


def _black(text: str) -> str:
    return black.format_str(text, mode=black.Mode(line_length=120))
