"""The dataflow IR of a region: inputs, op nodes in order, outputs.

A region is straight-line tensor code lifted out of one function. Every value is
named once (SSA); names come from the user's variables where there is one, so
kernels read like the source. Operands of a node are value names or constants
(Python numbers and bools folded at transpile time, and dtype names for casts).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from transpiler.compiler.ops import BY_NAME, Op

Constant = float | int | bool
Operand = str | Constant  # a value name or a folded constant; see `Node.constants`


@dataclass(frozen=True)
class Input:
    name: str  # the value's name inside the region
    source: str  # the Python expression the caller passes: `x`, `self.weight`, `self.eps * 2`
    is_tensor: bool  # False: a Python scalar, passed by value


@dataclass(frozen=True)
class Node:
    op: str  # a name in the op table
    operands: tuple[Operand, ...]
    out: str
    line: int  # source line the node comes from
    # Which operands are constants: a constant may be a string (a dtype name), so
    # type alone cannot tell a value name from a constant.
    constants: tuple[int, ...] = ()
    # Updates operand 0 in place (`t.add_(b)`, `t += b`): the result keeps its shape and dtype.
    inplace: bool = False

    @property
    def definition(self) -> Op:
        return BY_NAME[self.op]

    def values(self) -> list[str]:
        return [o for i, o in enumerate(self.operands) if i not in self.constants]

    def shaping(self) -> list[str]:
        """The values whose shapes broadcast into the result's (not those read only for their dtype)."""
        dtype_only = self.definition.dtype_operands
        return [o for i, o in enumerate(self.operands) if i not in self.constants and i not in dtype_only]


@dataclass(frozen=True)
class Output:
    value: str  # the region value
    target: str  # the Python name it is assigned to after the region
    aliases: tuple[str, ...] = ()  # other names bound to the same value: assigned `alias = target`


@dataclass(frozen=True)
class Region:
    name: str  # the kernel's name: says what it computes, unique in its file
    path: str
    function: str  # qualified name of the enclosing function
    first_line: int
    last_line: int
    inputs: tuple[Input, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Output, ...]
    # Python conditions the kernel needs besides its inputs' (`not self.drop.training`).
    conditions: tuple[str, ...] = ()

    @property
    def lines(self) -> str:
        """`26` or `26-28`: the source lines the region replaces."""
        return str(self.first_line) if self.first_line == self.last_line else f"{self.first_line}-{self.last_line}"

    @property
    def tensor_inputs(self) -> tuple[Input, ...]:
        return tuple(i for i in self.inputs if i.is_tensor)

    @property
    def scalar_inputs(self) -> tuple[Input, ...]:
        return tuple(i for i in self.inputs if not i.is_tensor)


def format_region(region: Region) -> str:
    """Readable IR, as `transpile explain` prints it."""
    lines = [f"region {region.name} ({region.path}:{region.lines}, in {region.function})"]
    for item in region.inputs:
        kind = "tensor" if item.is_tensor else "scalar"
        lines.append(f"  in  {item.name}: {kind} = {item.source}")
    for node in region.nodes:
        args = ", ".join(repr(o) if i in node.constants else str(o) for i, o in enumerate(node.operands))
        lines.append(f"  {node.out} = {node.op}{'_' * node.inplace}({args})  # line {node.line}")
    for output in region.outputs:
        lines.append(f"  out {' = '.join((output.target, *output.aliases))} = {output.value}")
    for condition in region.conditions:
        lines.append(f"  when {condition}")
    return "\n".join(lines)


RETURN = "return"  # the target of a fusible `return expr`: the region's last statement

# Names the emitted module gives the runtime's linear layer entry points (emit/runtime/linear.py): the compiler
# leaves sites alone where a module already uses them.
GRAPHED = "_transpile_graphed"  # the runtime's `graphed`: a forward replayed as a CUDA graph (compiler/graphing.py)
LINEAR = "_transpile_linear"  # `linear`: pads unaligned layers on CUDA
EPILOGUE = "_transpile_linear_activation"  # the kernel file's `LinearActivation`: layer and activation in one matmul
SIBLINGS = "_transpile_siblings"  # `siblings`: the layers a forward applies to one input, computed at once


@dataclass(frozen=True)
class LinearSite:
    """An unaligned linear layer's call: the callee `self.<attr>`: its line and UTF-8 offsets, as `ast` gives them."""

    line: int
    col: int
    end_col: int


@dataclass(frozen=True)
class SiblingGroup:
    """`nn.Linear` layers of one class applied to one input in one block (`self.q_proj(x)`, `self.k_proj(x)`, ...),
    with no statement rebinding the input between them: their calls (in evaluation order), their attributes, and
    the first call's statement (its line and indentation), before which the emitted module names the group."""

    calls: tuple[LinearSite, ...]
    attrs: tuple[str, ...]
    line: int
    indent: int


@dataclass(frozen=True)
class Epilogue:
    """`target = self.<activation>(value)` right after `value = self.<layer>(argument)`: one matmul whose
    epilogue applies the activation (transpiler/compiler/linears.py), on lines first..last of the source."""

    first: int
    last: int
    target: str
    layer: str
    activation: str
    argument: str  # Python source


# The name the emitted module gives the runtime's folded convolution (emit/runtime/conv.py `conv_bn`).
CONV_BN = "_transpile_conv_bn"


@dataclass(frozen=True)
class ConvSite:
    """`target = self.<norm>(self.<conv>(argument))`, then maybe `self.<activation>(...)` of it, on lines
    first..last of the source, in one statement or a chain of them: an `nn.Conv2d` whose result goes
    straight into an `nn.BatchNorm2d` (transpiler/compiler/convs.py); the runtime folds the norm into
    the convolution in eval."""

    first: int
    last: int
    target: str
    conv: str
    norm: str
    activation: str | None
    argument: str  # a name


@dataclass(frozen=True)
class Origin:
    """Where the lines of a text with split statements come from: lines of the text before."""

    source: str  # the text before the split
    ranges: tuple[tuple[int, int], ...]  # per line of the split text: the first and last line of `source`

    def region(self, region: Region) -> Region:
        """The region with the lines of `source`: what comments and reports show."""
        nodes = tuple(replace(n, line=self.ranges[n.line - 1][0]) for n in region.nodes)
        first, last = self.ranges[region.first_line - 1][0], self.ranges[region.last_line - 1][1]
        return replace(region, first_line=first, last_line=last, nodes=nodes)


@dataclass(frozen=True)
class GraphSite:
    """A class whose forward replays as a CUDA graph (compiler/graphing.py), and the attributes (paths from
    `self`) it and its callees read."""

    cls: str
    reads: tuple[str, ...]


@dataclass(frozen=True)
class NotFused:
    """Tensor code a reader would expect in a kernel that stays eager, and why: `reason` at `line` of `function`."""

    function: str
    line: int
    reason: str


@dataclass(frozen=True)
class NotGraphed:
    """A block whose forward is not replayed, and why: `reason` at `line`."""

    cls: str
    line: int
    reason: str
