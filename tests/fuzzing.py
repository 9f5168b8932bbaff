"""Differential fuzzer: random modules built from the op table, transpiled, run against eager PyTorch.

A case is a seed. `generate(seed)` draws an `nn.Module` whose forward chains 2-8 ops in the
spellings users write (operators, `torch.fn`, methods, in-place methods, casts, reductions,
norms, activation modules, views, aliases) over inputs it also draws (shapes with 0- and
1-sized dims, broadcasting, transposed, sliced, expanded and channels_last layouts, 0-dim tensors, every
dtype the kernels claim, NaN, infinities, -0.0, huge and tiny values). Each statement is run
eagerly while drawing, so that operands fit (a statement eager rejects is mostly redrawn).

`run_cases` writes the programs into a source tree (many classes a file: each transpile and
each C++ build is costly), transpiles it with the real CLI, and runs every case in a worker
process per backend (`TRANSPILE_BACKEND=triton` with `TRITON_INTERPRET=1` for Triton; the
runtime reads them at import), comparing the original module with the transpiled one built
from the same `state_dict`: values (NaN placement included), shapes, dtypes, which error is
raised, and the inputs after the call (in-place updates, and whether an output aliases an
input). The runtime's counters say whether the case's kernels ran or fell back, and why.

With `gradients`, a case whose forward passes runs again under autograd (`compare_gradients`): the leaves
`gradient_setup` draws require grad, both modules backpropagate the same cotangents, and the outputs, their
requires_grad and every leaf's .grad are compared; the counters of the `<region>_backward` kernels say
whether a generated backward kernel computed gradients.

`minimise` shrinks a failing case (drops statements and outputs, shrinks inputs) while it
fails the same way, and `Program.reproducer` prints it as a self-contained snippet.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import importlib.util
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from transpiler.pipeline.comparing import (
    Narrowest,
    error_outcome,
    inputs_mismatch,
    outputs_mismatch,
    value_mismatch,
)

ROOT = Path(__file__).resolve().parent.parent
# "cuda": the Triton kernels compiled for a GPU, the programs and their inputs on it (`benchmarks/fuzz.py`
# on a machine with one; the interpreter's "triton" runs everywhere).
BACKENDS = ("cpp", "triton", "cuda")
# What the kernels claim: the four floating dtypes, bool and integers, on both backends. Where a kernel
# cannot compute a call exactly, the runtime must fall back, never compute something else.
FLOATS = dict.fromkeys(BACKENDS, ("float32", "float64", "float16", "bfloat16"))
INTS = ("int32", "int64")
CASES_PER_FILE = 24
OUTCOMES = (
    "ok",
    "wrong value",
    "wrong shape",
    "wrong dtype",
    "missing error",
    "extra error",
    "different error",
    "side effect",
    "wrong gradient",
    "missing gradient",
    "extra gradient",
    "crash",
)
FAILURES = OUTCOMES[1:]


# -- programs -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InputSpec:
    """A forward argument: a tensor of `shape` built from `seed` (storage, then the layout's view)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    layout: str = "contiguous"  # contiguous | transposed | sliced | expanded | channels_last
    values: str = "normal"  # normal | specials | huge | tiny
    seed: int = 0


@dataclass(frozen=True)
class Stmt:
    """One forward statement: `target = template.format(*operands)`, or the bare call when target is None.

    Operands are the names (tensors, a dtype variable) it reads; scalars and attributes are in
    the template, so that dropping a statement can rewire its readers to its first operand.
    """

    target: str | None
    template: str
    operands: tuple[str, ...]
    ops: int = 1  # compute ops, for the tolerance
    reduces: bool = False

    def line(self, names: tuple[str, ...] | None = None) -> str:
        text = self.template.format(*(names or self.operands))
        return text if self.target is None else f"{self.target} = {text}"


@dataclass(frozen=True)
class Program:
    seed: int
    inputs: tuple[InputSpec, ...]
    attrs: tuple[tuple[str, str], ...]  # (attribute, `__init__` line)
    body: tuple[Stmt, ...]
    returns: tuple[str, ...]
    inline_return: bool = False  # the last statement written as `return <expr>`
    variant: int = 0  # minimisation candidates of one seed

    @property
    def name(self) -> str:
        return f"Case{self.seed}" + (f"_{self.variant}" if self.variant else "")

    @property
    def ops(self) -> int:
        return sum(s.ops for s in self.body)

    def source(self) -> str:
        """The class, attributes the forward does not read left out."""
        text = "\n".join(s.line() for s in self.body)
        used = [init for attr, init in self.attrs if f"self.{attr}" in text]
        params = ", ".join(["self", *(i.name for i in self.inputs)])
        out = [f"class {self.name}(nn.Module):"]
        if used:
            out += ["    def __init__(self):", "        super().__init__()", *(f"        {init}" for init in used), ""]
        out.append(f"    def forward({params}):")
        inline = self.inline_return and self.body and self.body[-1].target == self.returns[0] and len(self.returns) == 1
        for stmt in self.body[:-1] if inline else self.body:
            out.append(f"        {stmt.line()}")
        if inline:
            last = self.body[-1]
            out.append(f"        return {last.template.format(*last.operands)}")
        else:
            out.append(f"        return {', '.join(self.returns)}")
        return "\n".join(out) + "\n"

    def reproducer(self, detail: str = "", gradients: GradientSetup | None = None) -> str:
        """A self-contained snippet: imports, the class, the inputs, the eager call and what differed;
        `gradients`: the call under autograd with those leaves requiring grad, and its backward."""
        inputs = "\n".join(f"{i.name} = {input_source(i)}" for i in self.inputs)
        note = "".join(f"\n# {line}" for line in detail.splitlines())
        head = (
            f"import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n{self.source()}\n\n"
            f"torch.manual_seed({self.seed})\nmodel = {self.name}().eval()\n{inputs}\n"
        )
        if gradients is None:
            args = ", ".join(f"{i.name}.clone()" for i in self.inputs)
            return f"{head}with torch.no_grad():\n    print(model({args}))\n{note}\n"
        trained = [i.name for i in self.inputs if i.name in gradients.inputs and i.dtype in FLOATING]
        args = ", ".join(i.name for i in self.inputs)
        if gradients.leaves:
            leaves, setup = trained, "".join(f"{name}.requires_grad_()\n" for name in trained)
        else:  # as `_trained` makes them: the same strides over a copy of the input's storage's tensor
            leaves = [f"{name}_leaf" for name in trained]
            setup = "".join(
                f"{name}_leaf = ({name} if {name}._base is None else {name}._base).detach().requires_grad_()\n"
                f"{name} = torch.as_strided({name}_leaf.clone(), {name}.shape, {name}.stride(), "
                f"{name}.storage_offset())\n"
                for name in trained
            )
        setup += "" if gradients.parameters else "model.requires_grad_(False)\n"
        return (
            f"{head}{setup}outputs = model({args})\noutputs = outputs if isinstance(outputs, tuple) else (outputs,)\n"
            "# the cotangents (tests/fuzzing.py `_cotangent`)\n"
            "cotangents = [\n    torch.randn(o.shape, generator=torch.Generator().manual_seed("
            f"{self.seed} * 16 + k), dtype=torch.float64).to(o.dtype)\n"
            "    for k, o in enumerate(outputs)\n]\n"
            "pairs = [(o, c) for o, c in zip(outputs, cotangents) if o.requires_grad]\n"
            "torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])\n"
            + "".join(f"print('{name}.grad', {name}.grad)\n" for name in leaves)
            + "for name, parameter in model.named_parameters():\n    print(name + '.grad', parameter.grad)\n"
            + f"{note}\n"
        )


FILE_HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"


# -- inputs ---------------------------------------------------------------------------------------
# 3e9, 2**31 and 2**24 + 1: past int32 and past float32's integers, for casts to integers and back.
SPECIALS = (
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    0.0,
    1e30,
    -1e30,
    65504.0,
    -65504.0,
    1e-40,
    6e-8,
    1e-45,
    1e20,
    3e9,
    -(2.0**31),
    2.0**24 + 1,
)


def _storage(spec: InputSpec) -> tuple[list[int], str]:
    """The stored tensor's shape and the view that gives the spec's shape (Python source)."""
    shape = list(spec.shape)
    if spec.layout == "transposed" and len(shape) >= 2:
        order = tuple(reversed(range(len(shape))))
        return shape[::-1], f".permute{order}"
    if spec.layout == "channels_last" and len(shape) in (4, 5):  # the channels dim innermost in memory
        order = (0, len(shape) - 1, *range(1, len(shape) - 1))
        return [shape[0], *shape[2:], shape[1]], f".permute{order}"
    if spec.layout == "sliced" and shape:
        return shape[:-1] + [2 * shape[-1]], "[..., ::2]"
    if spec.layout == "expanded" and any(s > 1 for s in shape):
        d = max(i for i, s in enumerate(shape) if s > 1)
        return shape[:d] + [1] + shape[d + 1 :], f".expand{tuple(spec.shape)}"
    return shape, ""


def _stored_values(spec: InputSpec, shape: list[int]) -> torch.Tensor:
    """The storage's values in float64 (bool; int64 for integers of the whole range), drawn from the spec's seed."""
    g = torch.Generator().manual_seed(spec.seed)
    if spec.dtype == "bool":
        return torch.rand(shape, generator=g) < 0.5
    if spec.dtype in INTS:
        if spec.values == "huge":  # the whole range: integer ops must wrap as torch's, not round as floats
            info = torch.iinfo(getattr(torch, spec.dtype))
            return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64)
        return torch.randint(-4, 5, shape, generator=g).double()
    values = torch.randn(shape, generator=g, dtype=torch.float64)
    if spec.values == "huge":
        values = values * (3e4 if spec.dtype == "float16" else 1e30)
    elif spec.values == "tiny":
        values = values * (1e-6 if spec.dtype == "float16" else 1e-40)
    elif spec.values == "specials" and values.numel():
        flat = values.view(-1)
        picks = torch.randint(0, len(SPECIALS), (flat.numel(),), generator=g)
        chosen = torch.rand(flat.numel(), generator=g) < 0.4
        flat[chosen] = torch.tensor(SPECIALS, dtype=torch.float64)[picks[chosen]]
    return values


def make_input(spec: InputSpec, wide: bool = False, device: str = "cpu", exact: bool = False) -> torch.Tensor:
    """The tensor `spec` describes, on `device` (its layout made there); `wide`: float32 stored as float64
    (the same values), for the reference; `exact`: every floating dtype so."""
    shape, view = _storage(spec)
    stored = _stored_values(spec, shape).to(getattr(torch, spec.dtype)).to(device)
    if (wide and stored.dtype == torch.float32) or (exact and stored.is_floating_point()):
        stored = stored.double()
    return eval(f"stored{view}", {"stored": stored}) if view else stored


def _literal(value: float) -> str:
    if math.isnan(value):
        return "float('nan')"
    if math.isinf(value):
        return "float('inf')" if value > 0 else "-float('inf')"
    return repr(value)


def _nested(values) -> str:
    if isinstance(values, list):
        return "[" + ", ".join(_nested(v) for v in values) + "]"
    return repr(values) if isinstance(values, bool) else _literal(values)


def input_source(spec: InputSpec) -> str:
    """Python source building the input, its values written out when there are few."""
    shape, view = _storage(spec)
    values = _stored_values(spec, shape)
    if values.numel() > 64:
        return f"{make_input_source(spec)}  # tests/fuzzing.py"
    if values.numel() == 0:
        return f"torch.empty({tuple(shape)}, dtype=torch.{spec.dtype}){view}"
    stored = values.to(getattr(torch, spec.dtype)).double() if values.is_floating_point() else values
    return f"torch.tensor({_nested(stored.tolist())}, dtype=torch.{spec.dtype}){view}"


def make_input_source(spec: InputSpec) -> str:
    fields = ", ".join(f"{f.name}={getattr(spec, f.name)!r}" for f in dataclasses.fields(spec))
    return f"make_input(InputSpec({fields}))"


# -- drawing programs -----------------------------------------------------------------------------
UNARY = (
    "exp",
    "exp2",
    "expm1",
    "log",
    "log1p",
    "log2",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tanh",
    "erf",
    "sigmoid",
    "reciprocal",
    "abs",
    "neg",
    "sign",
    "floor",
    "ceil",
    "round",
    "trunc",
    "relu",
    "isnan",
    "isinf",
    "logical_not",
)
FUNCTIONAL = (
    "F.gelu({0})",
    "F.gelu({0}, approximate='tanh')",
    "F.silu({0})",
    "F.mish({0})",
    "F.softplus({0})",
    "F.relu({0})",
    "torch.sigmoid({0})",
    "F.tanh({0})",
    "torch.special.expit({0})",
    "-{0}",
    "torch.nan_to_num({0}, nan=0.0, posinf=1e4, neginf=-1e4)",
    "torch.clamp({0}, min=-1.0, max=1.0)",
    "{0}.clamp(min=0.0)",
    "{0}.clamp(max=0.5)",
    "torch.clamp_min({0}, -0.5)",
    "torch.clip({0}, -2.0, 2.0)",
    "{0} ** 2",
    "torch.pow({0}, 0.5)",
    "{0}.pow(3)",
    "2.0 ** {0}",
    "1.0 - {0}",
    "2.0 * {0}",
)
ACT_MODULES = (
    "nn.GELU()",
    "nn.GELU(approximate='tanh')",
    "nn.SiLU()",
    "nn.ReLU()",
    "nn.Tanh()",
    "nn.Sigmoid()",
    "nn.Mish()",
    "nn.Softplus()",
    "nn.Identity()",
    "nn.Dropout(0.1)",
)
BINARY = (
    ("+", "add"),
    ("-", "sub"),
    ("*", "mul"),
    ("/", "div"),
    ("//", "floor_divide"),
    ("%", "remainder"),
    ("**", "pow"),
)
MIN_MAX = ("maximum", "minimum")
COMPARE = (("<", "lt"), ("<=", "le"), (">", "gt"), (">=", "ge"), ("==", "eq"), ("!=", "ne"))
LOGICAL = (("&", "logical_and"), ("|", "logical_or"), ("^", "logical_xor"))
SCALARS = ("0.5", "2.0", "-1.5", "3", "1e-06", "0.0", "10000.0", "-10000.0", "65504.0", "float('inf')", "1e30")
CASTS = (
    ".float()",
    ".half()",
    ".double()",
    ".bfloat16()",
    ".int()",
    ".long()",
    ".bool()",
    ".to(torch.float16)",
    ".to(torch.float32)",
    ".to(torch.bfloat16)",
    ".type(torch.float32)",
)
REDUCTIONS = ("sum", "mean", "amax", "amin", "logsumexp", "var", "std")


class _Drawer:
    """Draws one program, running each statement eagerly to keep operands that fit."""

    def __init__(self, seed: int, backend: str) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.floats = FLOATS[backend]
        self.attrs: list[tuple[str, str]] = []
        self.body: list[Stmt] = []
        self.holder = torch.nn.Module()
        self.env: dict[str, object] = {}
        self.fresh = 0

    # -- inputs
    def inputs(self) -> tuple[InputSpec, ...]:
        rng = self.rng
        rank = rng.choice((0, 1, 2, 2, 3, 3, 4))
        shape = [
            rng.choice((0, 1, 1, 2, 3, 4, 5, 7)) if rng.random() < 0.15 else rng.choice((1, 2, 3, 4, 5, 6))
            for _ in range(rank)
        ]
        main = rng.choice(self.floats) if rng.random() < 0.5 else "float32"
        specs = []
        for k in range(rng.choice((1, 1, 2, 2, 3))):
            own = shape[rng.randint(0, rank) :] if k and rng.random() < 0.3 else list(shape)
            own = [1 if rng.random() < 0.2 else s for s in own]
            if k and rng.random() < 0.1:
                own = []
            roll = rng.random()
            dtype = (
                main
                if roll < 0.75
                else "bool" if roll < 0.87 else rng.choice(INTS) if roll < 0.93 else rng.choice(self.floats)
            )
            layouts = ["contiguous"] * 3 + (["transposed"] if len(own) >= 2 else []) + (["sliced"] if own else [])
            layouts += ["expanded"] if any(s > 1 for s in own) else []
            values = rng.choice(("normal", "normal", "specials", "specials", "huge", "tiny"))
            layout, seed = rng.choice(layouts), rng.randrange(2**31)
            if layout == "contiguous" and len(own) == 4 and seed % 4 == 0:  # from the seed: the draws stay as they were
                layout = "channels_last"
            specs.append(InputSpec("xyz"[k], tuple(own), dtype, layout, values, seed))
        return tuple(specs)

    # -- names and operands
    def tensors(self, pred=lambda t: True) -> list[str]:
        return [n for n, v in self.env.items() if isinstance(v, torch.Tensor) and pred(v)]

    def pick(self, pred=lambda t: True) -> str | None:
        names = self.tensors(pred)
        if not names:
            return None
        last = self.body[-1].target if self.body else None
        if last in names and self.rng.random() < 0.6:
            return last
        return self.rng.choice(names)

    def new_name(self) -> str:
        existing = [n for n in self.tensors() if n not in self.inputs_names]
        if existing and self.rng.random() < 0.2:
            return self.rng.choice(existing)  # rebinding, as `h = h * 2` does
        self.fresh += 1
        return f"t{self.fresh}"

    def attr(self, init: str, stem: str) -> str:
        """An attribute set in `__init__` (`init` formats `{name}`), reused when the same init exists."""
        for name, line in self.attrs:
            if line == init.format(name=name):
                return name
        name = f"{stem}{len(self.attrs)}"
        line = init.format(name=name)
        exec(line, {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "self": self.holder})
        self.attrs.append((name, line))
        return name

    def scalar(self, x: str) -> tuple[str, tuple[str, ...]]:
        """A Python scalar operand: a literal, a module attribute, or a shape expression of `{0}`."""
        roll = self.rng.random()
        if roll < 0.6:
            return self.rng.choice(SCALARS), ()
        if roll < 0.85:
            value = self.rng.choice(("0.5", "2.0", "-3.0", "1e-05", "0.125"))
            return f"self.{self.attr(f'self.{{name}} = {value}', 'scale')}", ()
        return "{0}.shape[-1] ** -0.5", ()

    def tensor_attr(self, shape: list[int]) -> str:
        """A buffer or parameter that broadcasts with `shape` (0-dim sometimes)."""
        rng = self.rng
        own = [] if rng.random() < 0.3 or not shape else shape[rng.randint(0, len(shape) - 1) :]
        own = [1 if rng.random() < 0.3 else s for s in own]
        dtype = "" if rng.random() < 0.7 else f", dtype=torch.{rng.choice(self.floats)}"
        if rng.random() < 0.6:
            return self.attr(f"self.register_buffer('{{name}}', torch.randn({tuple(own)}{dtype}))", "buf")
        return self.attr(f"self.{{name}} = nn.Parameter(torch.randn({tuple(own)}{dtype}))", "w")

    # -- statements
    def statement(self) -> Stmt | None:
        rng = self.rng
        kind = rng.choices(
            (
                "unary",
                "functional",
                "module",
                "binary",
                "minmax",
                "compare",
                "logical",
                "where",
                "masked_fill",
                "ternary",
                "cast",
                "cast_like",
                "reduction",
                "softmax",
                "layer_norm",
                "view",
                "alias",
                "inplace",
            ),
            (8, 8, 5, 14, 3, 5, 2, 3, 3, 3, 6, 5, 8, 4, 3, 3, 2, 6),
        )[0]
        return getattr(self, f"_{kind}")()

    def _unary(self) -> Stmt | None:
        x, op = self.pick(), self.rng.choice(UNARY)
        form = self.rng.choice((f"torch.{op}({{0}})", f"{{0}}.{op}()", f"{{0}}.{op}_()"))
        if form.endswith("_()"):
            return Stmt(None, form, (x,))
        return Stmt(self.new_name(), form, (x,))

    def _functional(self) -> Stmt:
        return Stmt(self.new_name(), self.rng.choice(FUNCTIONAL), (self.pick(),))

    def _module(self) -> Stmt:
        name = self.attr(f"self.{{name}} = {self.rng.choice(ACT_MODULES)}", "act")
        return Stmt(self.new_name(), f"self.{name}({{0}})", (self.pick(),))

    def _other_operand(self, x: str, pred=lambda t: True) -> tuple[str, tuple[str, ...]]:
        """`{1}` (a tensor), a buffer or parameter, or a Python scalar."""
        roll = self.rng.random()
        if roll < 0.55:
            return "{1}", (x, self.pick(pred))
        if roll < 0.7:
            return f"self.{self.tensor_attr(list(self.env[x].shape))}", (x,)
        return self.scalar(x)[0], (x,)

    def _binary(self) -> Stmt:
        x = self.pick()
        symbol, fn = self.rng.choice(BINARY)
        other, operands = self._other_operand(x)
        form = self.rng.random()
        if form < 0.5:
            text = f"{{0}} {symbol} {other}"
        elif form < 0.6 and "{1}" not in other:
            text = f"{other} {symbol} {{0}}"
        elif form < 0.75:
            text = f"torch.{fn}({{0}}, {other})"
        elif form < 0.88:
            text = f"{{0}}.{fn}({other})"
        else:
            return Stmt(None, self.rng.choice((f"{{0}}.{fn}_({other})", f"{{0}} {symbol}= {other}")), operands)
        return Stmt(self.new_name(), text, operands)

    def _minmax(self) -> Stmt:
        x, y = self.pick(), self.pick()
        return Stmt(self.new_name(), f"torch.{self.rng.choice(MIN_MAX)}({{0}}, {{1}})", (x, y))

    def _compare(self) -> Stmt:
        x = self.pick()
        symbol, fn = self.rng.choice(COMPARE)
        other, operands = self._other_operand(x)
        text = f"{{0}} {symbol} {other}" if self.rng.random() < 0.6 else f"torch.{fn}({{0}}, {other})"
        return Stmt(self.new_name(), text, operands)

    def _bool(self) -> str | None:
        return self.pick(lambda t: t.dtype == torch.bool)

    def _logical(self) -> Stmt | None:
        a, b = self._bool(), self._bool()
        if a is None:
            return None
        symbol, fn = self.rng.choice(LOGICAL)
        text = f"{{0}} {symbol} {{1}}" if self.rng.random() < 0.6 else f"torch.{fn}({{0}}, {{1}})"
        if self.rng.random() < 0.2:
            return Stmt(self.new_name(), "~{0}", (a,))
        return Stmt(self.new_name(), text, (a, b))

    def _where(self) -> Stmt | None:
        c = self._bool()
        if c is None:
            return None
        x = self.pick()
        if self.rng.random() < 0.6:
            return Stmt(self.new_name(), "torch.where({0}, {1}, {2})", (c, x, self.pick()))
        return Stmt(self.new_name(), f"torch.where({{0}}, {{1}}, {self.rng.choice(SCALARS)})", (c, x))

    def _masked_fill(self) -> Stmt | None:
        m = self._bool()
        if m is None:
            return None
        value = self.rng.choice(("-10000.0", "0.0", "float('-inf')", "-65504.0"))
        form = self.rng.choice(
            ("{0}.masked_fill({1}, %s)", "torch.masked_fill({0}, {1}, %s)", "{0}.masked_fill_({1}, %s)")
        )
        target = None if "_(" in form else self.new_name()
        return Stmt(target, form % value, (self.pick(), m))

    def _ternary(self) -> Stmt:
        x, y, z = self.pick(), self.pick(), self.pick()
        form = self.rng.choice(
            (
                "torch.lerp({0}, {1}, 0.3)",
                "torch.addcmul({0}, {1}, {2}, value=0.5)",
                "{0}.addcdiv({1}, {2}, value=-2.0)",
                "torch.addcdiv({0}, {1}, {2})",
            )
        )
        return Stmt(self.new_name(), form, (x, y, z)[: form.count("{")], ops=2)

    def _cast(self) -> Stmt:
        return Stmt(self.new_name(), "{0}" + self.rng.choice(CASTS), (self.pick(),), ops=0)

    def _cast_like(self) -> Stmt:
        x, y = self.pick(), self.pick()
        if self.rng.random() < 0.5:
            dtypes = [n for n, v in self.env.items() if isinstance(v, torch.dtype)]
            if not dtypes:
                self.fresh += 1
                return Stmt(f"dtype{self.fresh}", "{0}.dtype", (y,), ops=0)
            return Stmt(self.new_name(), "{0}.to({1})", (x, self.rng.choice(dtypes)), ops=0)
        return Stmt(self.new_name(), "{0}.to({1}.dtype)", (x, y), ops=0)

    def _dim(self, x: str) -> int:
        ndim = max(self.env[x].dim(), 1)
        return self.rng.choice((-1, -1, self.rng.randint(-ndim, ndim - 1)))

    def _reduction(self) -> Stmt:
        x = self.pick()
        fn, dim = self.rng.choice(REDUCTIONS), self._dim(x)
        args = [str(dim)]
        if fn in ("var", "std"):
            args.append(self.rng.choice(("correction=0", "correction=1", "correction=2", "unbiased=False", "")))
        keep = self.rng.random()
        args.append("keepdim=True" if keep < 0.5 else "keepdim=False" if keep < 0.7 else "")
        args = ", ".join(a for a in args if a)
        text = f"torch.{fn}({{0}}, {args})" if self.rng.random() < 0.4 else f"{{0}}.{fn}({args})"
        return Stmt(self.new_name(), text, (x,), ops=2, reduces=True)

    def _softmax(self) -> Stmt:
        x = self.pick()
        fn, dim = self.rng.choice(("softmax", "log_softmax")), self._dim(x)
        roll = self.rng.random()
        if roll < 0.25:
            module = "nn.Softmax" if fn == "softmax" else "nn.LogSoftmax"
            name = self.attr(f"self.{{name}} = {module}(dim={dim})", "norm")
            return Stmt(self.new_name(), f"self.{name}({{0}})", (x,), ops=3, reduces=True)
        text = (f"F.{fn}({{0}}, dim={dim})", f"torch.{fn}({{0}}, {dim})", f"{{0}}.{fn}({dim})")[int(roll * 4) - 1]
        return Stmt(self.new_name(), text, (x,), ops=3, reduces=True)

    def _layer_norm(self) -> Stmt | None:
        x = self.pick(lambda t: t.dim() > 0 and t.shape[-1] > 0)
        if x is None:
            return None
        d = self.env[x].shape[-1]
        if self.rng.random() < 0.5:
            name = self.attr(f"self.{{name}} = nn.LayerNorm({d})", "ln")
            return Stmt(self.new_name(), f"self.{name}({{0}})", (x,), ops=5, reduces=True)
        w = self.attr(f"self.{{name}} = nn.Parameter(torch.randn({d}))", "w")
        b = self.attr(f"self.register_buffer('{{name}}', torch.randn({d}))", "buf")
        return Stmt(
            self.new_name(), f"F.layer_norm({{0}}, ({d},), self.{w}, self.{b}, 1e-05)", (x,), ops=5, reduces=True
        )

    def _view(self) -> Stmt | None:
        x = self.pick(lambda t: t.dim() > 0)
        if x is None:
            return None
        form = self.rng.choice(
            ("{0}[..., :2]", "{0}.transpose(-1, -2)", "{0}.view(-1)", "{0}.unsqueeze(0)", "{0}.reshape(-1)", "{0}[0]")
        )
        return Stmt(self.new_name(), form, (x,), ops=0)

    def _alias(self) -> Stmt:
        return Stmt(self.new_name(), "{0}", (self.pick(),), ops=0)

    def _inplace(self) -> Stmt:
        """An update in place of a value (an input, an alias or a cast that returned its operand)."""
        x = self.pick()
        other, operands = self._other_operand(x)
        form = self.rng.choice(
            (
                "{0}.mul_(%s)",
                "{0}.add_(%s)",
                "{0}.sub_(%s)",
                "{0}.div_(%s)",
                "{0} += %s",
                "{0} *= %s",
                "{0}.clamp_(min=-1.0)",
                "{0}.relu_()",
                "{0}.exp_()",
            )
        )
        return Stmt(None, form % other if "%s" in form else form, operands if "%s" in form else (x,))

    # -- the program
    def run(self, stmt: Stmt) -> bool | None:
        """Run `stmt` on the eager values; False if it raised, None if its result is undefined: an update in
        place of a tensor whose elements share memory (an expanded input: torch lets `masked_fill_` write there,
        and on a GPU which write wins differs from run to run, in eager as in any kernel), or integers cast
        from floats they cannot hold (`_undefined_integers`)."""
        updated = self.env.get(stmt.operands[0]) if stmt.target is None and stmt.operands else None
        if isinstance(updated, torch.Tensor) and any(
            st == 0 and n > 1 for st, n in zip(updated.stride(), updated.shape)
        ):
            return None
        namespace = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "self": self.holder, **self.env}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(stmt.line(), namespace)
        except Exception:
            return False
        if _undefined_integers(self.env.get(stmt.operands[0]) if stmt.operands else None, namespace.get(stmt.target)):
            return None
        self.env.update({k: v for k, v in namespace.items() if k in self.env or k == stmt.target})
        return True

    def program(self) -> Program:
        inputs = self.inputs()
        self.inputs_names = [i.name for i in inputs]
        self.env = {i.name: make_input(i) for i in inputs}
        torch.manual_seed(self.seed)
        length, tries, raising = self.rng.randint(2, 8), 0, False
        while len(self.body) < length and tries < 60 and not raising:
            tries += 1
            stmt = self.statement()
            if stmt is None or None in stmt.operands:
                continue
            ran = self.run(stmt)
            if ran is None:
                continue
            if not ran:
                if self.rng.random() > 0.08 or not self.body:
                    continue
                raising = True  # kept: eager raises, and so must the transpiled module
            self.body.append(stmt)
        last = next((s.target for s in reversed(self.body) if s.target and not s.target.startswith("dtype")), None)
        returns = [last or self.inputs_names[0]]
        extra = [n for n in self.tensors() if n not in returns]
        if extra and self.rng.random() < 0.35:
            returns += self.rng.sample(extra, min(len(extra), self.rng.randint(1, 2)))
        return Program(self.seed, inputs, tuple(self.attrs), tuple(self.body), tuple(returns), self.rng.random() < 0.3)


def _undefined_integers(source, result) -> bool:
    """Whether `result` is integers cast from floats that NaN, an infinity or an out-of-range value makes
    undefined: torch leaves them to the device (NaN is 0 on a GPU, the most negative integer on x86), so
    no kernel can be held to one answer. The drawer takes another statement."""
    if not (isinstance(source, torch.Tensor) and isinstance(result, torch.Tensor)) or not source.is_floating_point():
        return False
    if result.is_floating_point() or result.dtype == torch.bool:
        return False
    info = torch.iinfo(result.dtype)
    wide = source.double()
    return not bool(((wide >= info.min) & (wide < info.max + 1)).all())  # NaN compares false


def generate(seed: int, backend: str = "cpp") -> Program:
    """The program of `seed` (deterministic: the same seed and backend give the same program)."""
    return _Drawer(seed, backend).program()


# -- minimising ------------------------------------------------------------------------------------
def _rewire(body: tuple[Stmt, ...], returns: tuple[str, ...], start: int, old: str, new: str):
    """Reads of `old` from statement `start` on read `new`, up to where `old` is assigned again."""
    out = list(body)
    for i in range(start, len(out)):
        stmt = out[i]
        out[i] = dataclasses.replace(stmt, operands=tuple(new if o == old else o for o in stmt.operands))
        if stmt.target == old:
            return tuple(out), returns
    return tuple(out), tuple(new if r == old else r for r in returns)


def smaller_programs(program: Program) -> list[Program]:
    """Programs one step smaller: a statement dropped (its readers read its first operand), an output dropped."""
    out = []
    for i, stmt in enumerate(program.body):
        body = program.body[:i] + program.body[i + 1 :]
        returns = program.returns
        if stmt.target is not None and stmt.operands:
            defined_before = stmt.target in {s.target for s in program.body[:i]} | {x.name for x in program.inputs}
            if not defined_before:
                body, returns = _rewire(body, returns, i, stmt.target, stmt.operands[0])
        if body or returns:
            out.append(dataclasses.replace(program, body=body, returns=tuple(dict.fromkeys(returns))))
    if len(program.returns) > 1:
        for r in program.returns:
            out.append(dataclasses.replace(program, returns=tuple(x for x in program.returns if x != r)))
    used = " ".join(s.line() for s in program.body) + " " + " ".join(program.returns)
    unused = [i for i in program.inputs if not re.search(rf"\b{i.name}\b", used)]
    if unused:
        out.append(dataclasses.replace(program, inputs=tuple(i for i in program.inputs if i not in unused)))
    return out


def smaller_inputs(program: Program) -> list[Program]:
    """The program on inputs one step simpler: a dim of 1, fewer dims, contiguous, plain values, float32."""
    out = []
    for k, spec in enumerate(program.inputs):
        options = []
        for d, size in enumerate(spec.shape):
            if size > 2:
                options.append(dataclasses.replace(spec, shape=spec.shape[:d] + (2,) + spec.shape[d + 1 :]))
            if size > 1:
                options.append(dataclasses.replace(spec, shape=spec.shape[:d] + (1,) + spec.shape[d + 1 :]))
        if spec.shape:
            options.append(dataclasses.replace(spec, shape=spec.shape[1:]))
        if spec.layout != "contiguous":
            options.append(dataclasses.replace(spec, layout="contiguous"))
        if spec.values != "normal":
            options.append(dataclasses.replace(spec, values="normal"))
        if spec.dtype not in ("float32", "bool"):
            options.append(dataclasses.replace(spec, dtype="float32"))
        for seed in (1, 2):
            if spec.seed > 2:
                options.append(dataclasses.replace(spec, seed=seed))
        out += [
            dataclasses.replace(program, inputs=program.inputs[:k] + (o,) + program.inputs[k + 1 :]) for o in options
        ]
    return out


# -- comparing ---------------------------------------------------------------------------------------
def _reduced_length(program: Program) -> int:
    return max((s for i in program.inputs for s in i.shape), default=1) if any(s.reduces for s in program.body) else 1


def _as_tuple(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def _call(module, inputs):
    """(result, None) or (None, the exception's type name); warnings silenced."""
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _as_tuple(module(*inputs)), None
    except Exception as error:  # whatever eager raises, the transpiled module must raise too
        return None, type(error).__name__


def _widened(module: torch.nn.Module, exact: bool = False) -> torch.nn.Module:
    """A copy with float32 parameters and buffers in float64 (`exact`: every floating one)."""
    wide = copy.deepcopy(module)
    for tensor in [*wide.parameters(), *wide.buffers()]:
        if tensor.dtype == torch.float32 or (exact and tensor.is_floating_point()):
            tensor.data = tensor.data.double()
    return wide


def _modules(program: Program, original_cls, transpiled_cls, device: str):
    """The original module, its transpiled twin from the same `state_dict`, and the original widened
    (float32 parameters and buffers in float64) and exact (every floating one), on `device`."""
    torch.manual_seed(program.seed)
    original = original_cls().eval()
    transpiled = transpiled_cls().eval()
    transpiled.load_state_dict(original.state_dict())
    wide, exact = _widened(original).to(device), _widened(original, exact=True).to(device)
    return original.to(device), transpiled.to(device), wide, exact


def _inputs(program: Program, device: str) -> tuple[list, list, list, list]:
    """The inputs of eager, of the transpiled module, of the widened run and of the exact one."""
    return (
        [make_input(i, device=device) for i in program.inputs],
        [make_input(i, device=device) for i in program.inputs],
        [make_input(i, wide=True, device=device) for i in program.inputs],
        [make_input(i, device=device, exact=True) for i in program.inputs],
    )


def _outputs_mismatch(program: Program, *args) -> tuple[str, str] | None:
    return outputs_mismatch([i.name for i in program.inputs], program.ops, _reduced_length(program), *args)


def _inputs_mismatch(program: Program, *args) -> tuple[str, str] | None:
    return inputs_mismatch([i.name for i in program.inputs], program.ops, _reduced_length(program), *args)


def compare(program: Program, original_cls, transpiled_cls, device: str = "cpu") -> tuple[str, str]:
    """(outcome, detail) of one case: the original and the transpiled module on the same inputs, on `device`."""
    original, transpiled, wide_module, exact_module = _modules(program, original_cls, transpiled_cls, device)
    eager_in, ours_in, wide_in, exact_in = _inputs(program, device)
    with Narrowest() as narrowest:
        expected, eager_error = _call(original, eager_in)
    actual, error = _call(transpiled, ours_in)
    raised = error_outcome(eager_error, error)
    if raised:
        return raised
    wide, _ = _call(wide_module, wide_in)
    exact, _ = _call(exact_module, exact_in)
    mismatch = _outputs_mismatch(program, actual, expected, wide, exact, narrowest.dtype, eager_in, ours_in)
    mismatch = mismatch or _inputs_mismatch(
        program, eager_in, ours_in, wide_in if wide else None, exact_in if exact else None
    )
    if mismatch:
        return mismatch
    for (name, e), (_, a) in zip(original.state_dict().items(), transpiled.state_dict().items()):
        if not torch.equal(torch.nan_to_num(e.double()), torch.nan_to_num(a.double())):
            return "side effect", f"state {name} after the call differs"
    return "ok", ""


# -- gradients -----------------------------------------------------------------------------------
FLOATING = frozenset(("float32", "float64", "float16", "bfloat16"))
# What a forward op costs its backward: the value recomputed (the generated backward keeps only the inputs),
# its local derivative and the product with the incoming gradient, each rounded once.
BACKWARD_OPS_PER_OP = 3


@dataclass(frozen=True)
class GradientSetup:
    """Which leaves require grad in a case's gradient check."""

    inputs: frozenset[str]  # the floating inputs that do
    parameters: bool  # whether the floating parameters do (False: frozen)
    # Whether those inputs are the leaves themselves; else each is the same view of a copy of its leaf, as an
    # activation inside a model is: an update in place of it is allowed, and its gradient reaches the leaf.
    leaves: bool = False


def gradient_setup(program: Program) -> GradientSetup:
    """Drawn from the seed alone, and each input's choice from its name, so that the program's own draws
    stay as they were and a minimised case (an input dropped, a shape shrunk) keeps the same setup. A draw
    leaving nothing requiring grad (no parameter to train, no input picked) trains every input instead."""
    rng = random.Random(f"gradients {program.seed}")
    mode, leaves = rng.choice(("all", "all", "some inputs", "frozen", "parameters")), rng.random() < 0.3
    floating = [i.name for i in program.inputs if i.dtype in FLOATING]
    body = " ".join(s.line() for s in program.body)
    trains = mode != "frozen" and any(
        f"self.{attr}" in body and ("Parameter(" in init or "LayerNorm(" in init) for attr, init in program.attrs
    )
    inputs = [] if mode == "parameters" else floating
    if mode == "some inputs":
        inputs = [name for name in floating if random.Random(f"gradients {program.seed} {name}").random() < 0.5]
    return GradientSetup(frozenset(inputs if inputs or trains else floating), mode != "frozen", leaves)


def _cotangent(seed: int, k: int, output: torch.Tensor) -> torch.Tensor:
    """The gradient backpropagated from output `k`: normal values of its dtype, from the seed (the same for
    every run; a widened run gets the same values in its wider dtype)."""
    g = torch.Generator().manual_seed(seed * 16 + k)  # drawn on the CPU: the same values on every device
    return torch.randn(output.shape, generator=g, dtype=torch.float64).to(output.device, output.dtype)


@dataclass
class _Graded:
    """One run of a module under autograd: the inputs it was given, what its forward returned or raised, and
    the leaves' gradients."""

    inputs: list
    outputs: tuple | None = None
    error: str | None = None
    backward_error: str | None = None
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)


def _trained(tensor: torch.Tensor, setup: GradientSetup) -> tuple[torch.Tensor, torch.Tensor]:
    """(the leaf, the input given to the module): the tensor itself, or the same strides over a copy of its
    storage's tensor (the view `make_input` made is of it), whose gradient reaches that tensor."""
    if setup.leaves:
        return tensor.requires_grad_(), tensor
    leaf = (tensor if tensor._base is None else tensor._base).detach().requires_grad_()
    return leaf, torch.as_strided(leaf.clone(), tensor.shape, tensor.stride(), tensor.storage_offset())


def _graded_call(module, inputs, program: Program, setup: GradientSetup, cotangents: list | None) -> _Graded:
    """The forward with the setup's leaves requiring grad, then the backward of `cotangents` (one per output,
    None for outputs none flows from; None: eager's own, built here from the outputs that require grad)."""
    leaves = {}
    for k, (spec, tensor) in enumerate(zip(program.inputs, inputs)):
        if spec.name in setup.inputs and tensor.is_floating_point():
            leaves[spec.name], inputs[k] = _trained(tensor, setup)
    parameters = dict(module.named_parameters())
    for parameter in parameters.values():
        parameter.requires_grad_(setup.parameters and parameter.is_floating_point())
    run = _Graded(inputs)
    try:
        with torch.enable_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run.outputs = _as_tuple(module(*inputs))
    except Exception as error:  # whatever eager raises, the transpiled module must raise too
        run.error = type(error).__name__
        return run
    if cotangents is None:
        cotangents = [_cotangent(program.seed, k, o) if o.requires_grad else None for k, o in enumerate(run.outputs)]
    pairs = [(o, c.to(o.device, o.dtype)) for o, c in zip(run.outputs, cotangents) if c is not None and o.requires_grad]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if pairs:
                torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
    except Exception as error:
        run.backward_error = type(error).__name__
    run.grads = {f"input {name}": leaf.grad for name, leaf in leaves.items()}
    run.grads.update((f"parameter {name}", p.grad) for name, p in parameters.items())
    return run


def _gradient_length(program: Program, tensors: Iterable[torch.Tensor], grad: torch.Tensor) -> int:
    """How many terms a gradient element may sum: the elements broadcast onto it (a 0-dim parameter's gradient
    sums over the whole iteration space) times the row a reduction's backward sums over."""
    largest = max((t.numel() for t in tensors), default=1)
    try:
        largest = max(largest, math.prod(torch.broadcast_shapes(*(i.shape for i in program.inputs))))
    except RuntimeError:  # inputs that do not broadcast together (a view made them fit)
        pass
    return _reduced_length(program) * max(1, largest // max(grad.numel(), 1))


def compare_gradients(
    program: Program, original_cls, transpiled_cls, device: str = "cpu", setup: GradientSetup | None = None
) -> tuple[str, str, bool]:
    """(outcome, detail, whether a backward ran) of a case's gradient check: both modules under autograd with
    `gradient_setup`'s leaves requiring grad, the same cotangent backpropagated from each output that requires
    grad; the forward's outputs (values, and whether each requires grad and has a grad_fn) and every leaf's
    .grad (None or not, shape, dtype, values within `value_mismatch`'s bound for the backward's op count).
    An error eager's backward raises (a value it saved was updated in place) is not required of the
    transpiled module: which values a backward saves is the implementation's choice. `setup`: the program's
    `gradient_setup` unless given."""
    setup = setup or gradient_setup(program)
    original, transpiled, wide_module, exact_module = _modules(program, original_cls, transpiled_cls, device)
    eager_in, ours_in, wide_in, exact_in = _inputs(program, device)
    with Narrowest() as narrowest:
        eager = _graded_call(original, eager_in, program, setup, None)
    cotangents = [
        _cotangent(program.seed, k, o) if o.requires_grad else None for k, o in enumerate(eager.outputs or ())
    ]
    ours = _graded_call(transpiled, ours_in, program, setup, cotangents)
    raised = error_outcome(eager.error, ours.error, "under autograd: ")
    if raised:
        return (*raised, False)
    wide = _graded_call(wide_module, wide_in, program, setup, cotangents)
    exact = _graded_call(exact_module, exact_in, program, setup, cotangents)
    mismatch = _outputs_mismatch(
        program, ours.outputs, eager.outputs, wide.outputs, exact.outputs, narrowest.dtype, eager.inputs, ours.inputs
    )
    wide_after, exact_after = (wide.inputs if wide.outputs else None), (exact.inputs if exact.outputs else None)
    mismatch = mismatch or _inputs_mismatch(program, eager.inputs, ours.inputs, wide_after, exact_after)
    if mismatch:
        return mismatch[0], f"under autograd: {mismatch[1]}", False
    for k, (a, e) in enumerate(zip(ours.outputs, eager.outputs)):
        if _autograd_state(a) != _autograd_state(e):
            outcome = "missing gradient" if _autograd_state(e) > _autograd_state(a) else "extra gradient"
            return outcome, f"output {k}: eager {_describe(e)}, transpiled {_describe(a)}", False
    if eager.backward_error:
        return "ok", f"eager's backward raises {eager.backward_error}", False
    if ours.backward_error:
        return "extra error", f"transpiled's backward raises {ours.backward_error}, eager's returns", True
    mismatch = _grads_mismatch(program, eager, ours, wide, exact, [*eager.inputs, *eager.outputs], narrowest.dtype)
    return (*(mismatch or ("ok", "")), any(c is not None for c in cotangents))


def _autograd_state(output: torch.Tensor) -> tuple[bool, bool]:
    return output.requires_grad, output.grad_fn is not None


def _describe(output: torch.Tensor) -> str:
    return f"requires_grad={output.requires_grad}, grad_fn {'set' if output.grad_fn else 'None'}"


def _grads_mismatch(program, eager: _Graded, ours: _Graded, wide: _Graded, exact: _Graded, tensors, computed):
    """The first leaf whose .grad differs: None in one run only, its shape or dtype, or its values beyond the
    backward's rounding (`value_mismatch`, widened by eager's own distance from the float64 runs' gradients)."""
    ops = BACKWARD_OPS_PER_OP * program.ops
    for leaf, e in eager.grads.items():
        a = ours.grads.get(leaf)
        if (e is None) != (a is None):
            state = lambda g: "None" if g is None else "set"  # noqa: E731
            outcome = "extra gradient" if e is None else "missing gradient"
            return outcome, f"{leaf}: .grad {state(e)} in eager, {state(a)} transpiled"
        if e is None:
            continue
        if a.shape != e.shape or a.dtype != e.dtype:
            return (
                "wrong gradient",
                f"{leaf}: .grad {tuple(e.shape)} {e.dtype} in eager, {tuple(a.shape)} {a.dtype} transpiled",
            )
        length = _gradient_length(program, tensors, e)
        mismatch = value_mismatch(a, e, wide.grads.get(leaf), ops, length, computed, exact.grads.get(leaf))
        if mismatch:
            return "wrong gradient", f"{leaf} ({e.dtype}): {mismatch}"
    return None


# -- running cases ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Result:
    program: Program
    outcome: str
    detail: str = ""
    paths: dict[str, int] = field(default_factory=dict)  # kernel calls by path (`cpp`, `triton`, `fallback: ...`)
    # The gradient check: None where none ran (not asked for, or the forward failed or raised), else whether a
    # backward was compared (some output required grad); `grad_paths` its kernel calls, `backward: <path>` for
    # the backward kernels (`<region>_backward`), `forward: <path>` for the regions' kernels under autograd.
    backward: bool | None = None
    grad_paths: dict[str, int] = field(default_factory=dict)

    @property
    def backward_kernel_ran(self) -> bool:
        """A generated backward kernel computed some of the case's gradients."""
        return any(p.startswith("backward: ") and not p.startswith("backward: fallback") for p in self.grad_paths)

    @property
    def backward_fell_back(self) -> bool:
        """Backward kernels were called but each time their eager reference computed the gradients."""
        called = [p for p in self.grad_paths if p.startswith("backward: ")]
        return bool(called) and not self.backward_kernel_ran

    @property
    def compiled(self) -> bool:
        """A kernel of the case was called: its region compiled."""
        return bool(self.paths)

    @property
    def kernel_ran(self) -> bool:
        return self.compiled and all(not p.startswith("fallback") for p in self.paths)

    @property
    def eager_raises(self) -> bool:
        """Eager raised on the case's inputs: no kernel can run it, the original code must raise the same."""
        return self.detail.startswith("eager raises")


def _write_tree(programs: list[Program], root: Path, package: str) -> list[tuple[str, Program]]:
    """The programs as classes of files `root/package/cases_<k>.py`; (module, program) per case.

    Programs of one name (one class run on several inputs) are written once.
    """
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    classes = list({p.name: p for p in programs}.values())
    modules = {}
    for k in range(0, len(classes), CASES_PER_FILE):
        chunk = classes[k : k + CASES_PER_FILE]
        module = f"cases_{k // CASES_PER_FILE}"
        (root / package / f"{module}.py").write_text(FILE_HEADER + "\n\n".join(p.source() for p in chunk))
        modules.update((p.name, module) for p in chunk)
    return [(modules[p.name], p) for p in programs]


def _env(backend: str, cache: Path) -> dict[str, str]:
    env = {**os.environ, "TRANSPILE_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), "TRANSPILE_COMPILE": "sync"}
    env.pop("TRANSPILE_BACKEND", None)
    if backend == "triton":
        env.update(TRANSPILE_BACKEND="triton", TRITON_INTERPRET="1")
    if backend == "cuda":  # CUDA tensors take the Triton kernels, compiled
        env.update(FUZZ_DEVICE="cuda", TRITON_INTERPRET="0")
    return env


def run_cases(
    programs: list[Program], backend: str, work: Path | None = None, timeout: float = 600.0, gradients: bool = False
) -> list[Result]:
    """Transpile `programs` as one tree and run each case in a worker process for `backend`; `gradients`: each
    case whose forward passes has its gradient check too (`compare_gradients`)."""
    if not programs:
        return []
    work = Path(tempfile.mkdtemp(prefix="fuzz_", dir=work))
    try:
        package = "fuzzcases"
        placed = _write_tree(programs, work / "src", package)
        env = _env(backend, work.parent / "cache")
        return _run_workers(placed, work, package, env, timeout, gradients)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_workers(placed, work: Path, package: str, env, timeout: float, gradients: bool) -> list[Result]:
    """Transpile the tree and run the cases in worker processes; a case that crashes or hangs its worker is
    that case's result, and a new worker goes on with the rest."""
    results: list[Result] = []
    while len(results) < len(placed):
        rest = placed[len(results) :]
        jobs = work / "jobs.json"
        jobs.write_text(
            json.dumps([{"module": m, "program": _program_json(p), "gradients": gradients} for m, p in rest])
        )
        lines: list[str] = []
        try:
            run = subprocess.run(
                [sys.executable, "-m", "tests.fuzzing", "worker", str(work), package, str(jobs)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=ROOT,
            )
            lines = [l for l in run.stdout.splitlines() if l.startswith("{")]
            failure = f"worker exited {run.returncode}: {run.stderr[-3000:]}"
            if run.returncode == TRANSPILE_FAILED:
                return results + [Result(p, "crash", f"transpile failed: {run.stderr[-3000:]}") for _, p in rest]
        except subprocess.TimeoutExpired as expired:
            out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout or ""
            lines = [l for l in out.splitlines() if l.startswith("{")]
            failure = f"timed out after {timeout:.0f} s"
        for line, (_, program) in zip(lines, rest):
            record = json.loads(line)
            results.append(
                Result(
                    program,
                    record["outcome"],
                    record["detail"],
                    record["paths"],
                    record["backward"],
                    record["grad_paths"],
                )
            )
        if len(results) < len(placed):
            results.append(Result(placed[len(results)][1], "crash", failure))
    return results


def _program_json(program: Program) -> dict:
    return dataclasses.asdict(program)


def _program_from_json(data: dict) -> Program:
    return Program(
        data["seed"],
        tuple(InputSpec(**{**i, "shape": tuple(i["shape"])}) for i in data["inputs"]),
        tuple(tuple(a) for a in data["attrs"]),
        tuple(Stmt(**{**s, "operands": tuple(s["operands"])}) for s in data["body"]),
        tuple(data["returns"]),
        data["inline_return"],
        data["variant"],
    )


TRANSPILE_FAILED = 3
DEVICE = os.environ.get("FUZZ_DEVICE", "cpu")  # where a worker runs its cases (`_env`)


def worker(work: Path, package: str, jobs: Path) -> None:
    """Transpile `work/src` into `work/out` (once: a restarted worker finds it), then run each job
    (module, program): one JSON line per case on stdout, as each finishes.

    The transpiler runs in this process: a process of its own would import torch once more."""
    os.chdir(work)
    if not (work / "out").exists():
        from transpiler.cli.main import main

        # Relative paths: the generated files then do not name the temporary directory, so a tree of
        # the same classes (a minimisation round on other inputs) finds its C++ build in the cache.
        try:
            main(["build", "--no-cache", "src", "-o", "out"], standalone_mode=False)
        except SystemExit as done:
            if done.code not in (0, 1, None):  # 1: findings left, which the output keeps as they were
                sys.exit(TRANSPILE_FAILED)
    sys.path.insert(0, str(work / "out"))
    originals: dict[str, object] = {}
    for job in json.loads(jobs.read_text()):
        program, module = _program_from_json(job["program"]), job["module"]
        if module not in originals:
            spec = importlib.util.spec_from_file_location(
                f"fuzz_original_{module}", work / "src" / package / f"{module}.py"
            )
            originals[module] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(originals[module])
        transpiled = importlib.import_module(f"{package}.{module}")
        original_cls, transpiled_cls = getattr(originals[module], program.name), getattr(transpiled, program.name)
        before = _kernel_counts()
        try:
            outcome, detail = compare(program, original_cls, transpiled_cls, DEVICE)
        except Exception:  # the harness's own steps (building the modules, loading the state) failed
            outcome, detail = "crash", traceback.format_exc(limit=-3)
        forward = _kernel_counts()
        backward = None
        if job["gradients"] and outcome == "ok" and not detail.startswith("eager raises"):
            try:
                outcome, detail, backward = compare_gradients(program, original_cls, transpiled_cls, DEVICE)
            except Exception:
                outcome, detail = "crash", traceback.format_exc(limit=-3)
        record = {"outcome": outcome, "detail": detail, "paths": _paths(before, forward), "backward": backward}
        print(json.dumps({**record, "grad_paths": _paths(forward, _kernel_counts(), gradients=True)}), flush=True)


def _kernel_counts() -> dict[int, tuple[str, Counter[str]]]:
    """Every kernel's calls by path so far, by the kernel's identity (with its name). A module without kernels
    imports no runtime: until one does, no kernel can have run."""
    kernels = getattr(sys.modules.get("_transpile_runtime"), "KERNELS", [])
    return {id(k): (k.name, Counter(k.counts)) for k in kernels}


def _paths(before: dict, after: dict, gradients: bool = False) -> dict[str, int]:
    """The kernel calls between two `_kernel_counts`, by path; `gradients`: prefixed with `backward: ` for the
    backward kernels (named `<region>_backward`) and `forward: ` for the others."""
    paths: Counter[str] = Counter()
    for key, (name, counts) in after.items():
        new = counts - before.get(key, (name, Counter()))[1]
        if gradients:
            side = "backward: " if name.endswith("_backward") else "forward: "
            new = Counter({side + path: n for path, n in new.items()})
        paths.update(new)
    return dict(paths)


def minimise(
    results: list[Result],
    backend: str,
    work: Path | None = None,
    rounds: int = 40,
    run=None,
    gradients: bool = False,
) -> list[Result]:
    """Each failing result shrunk while it fails with the same outcome (all cases' candidates run together).

    `run(programs, backend, work)` gives their results: `run_cases` (with the gradient check where
    `gradients`) unless given."""
    run = run or functools.partial(run_cases, gradients=gradients)
    current = {r.program.seed: r for r in results if r.outcome in FAILURES}
    variant = 1
    for stage in (smaller_programs, smaller_inputs, smaller_programs):
        active = set(current)
        for _ in range(rounds):
            candidates = []
            for seed in active:
                for program in stage(current[seed].program):
                    if stage is smaller_programs:  # a new class; other inputs reuse the class and its build
                        program = dataclasses.replace(program, variant=variant)
                        variant += 1
                    candidates.append(program)
            if not candidates:
                break
            improved = set()
            for result in run(candidates, backend, work):
                seed = result.program.seed
                if seed not in improved and result.outcome == current[seed].outcome:
                    current[seed] = result
                    improved.add(seed)
            active = improved
            if not active:
                break
    return [current.get(r.program.seed, r) for r in results]


def summary(results: Iterable[Result]) -> dict[str, int]:
    """The counts the issue asks for. The kernel's share is of the compiled-region cases that eager
    runs: where eager raises, the original code must run (and raise the same error)."""
    results = list(results)
    counts = Counter(r.outcome for r in results)
    compiled = [r for r in results if r.compiled]
    return {
        "cases": len(results),
        "compiled-region cases": len(compiled),
        "of which eager raises": sum(r.eager_raises for r in compiled),
        "kernel ran": sum(r.kernel_ran for r in compiled if not r.eager_raises),
        **_gradient_summary(results),
        **{outcome: counts.get(outcome, 0) for outcome in FAILURES},
    }


def _gradient_summary(results: list[Result]) -> dict[str, int]:
    """How many gradient checks ran, how many backpropagated, and what computed their gradients: a generated
    backward kernel, only backward kernels' eager references (the kernel could not run), or the original
    code of a region without a derivative. Empty where no gradient check ran."""
    checked = [r for r in results if r.backward is not None]
    if not checked:
        return {}
    backward = [r for r in checked if r.backward]
    return {
        "gradient checks": len(checked),
        "eager's backward raises": sum(r.detail.startswith("eager's backward raises") for r in checked),
        "with a backward": len(backward),
        "backward kernel ran": sum(r.backward_kernel_ran for r in backward),
        "backward kernels fell back to eager": sum(r.backward_fell_back for r in backward),
        "a region without a derivative": sum(
            any(p == "forward: fallback: autograd needs the original code" for p in r.grad_paths) for r in backward
        ),
    }


def fallback_reasons(results: Iterable[Result], gradients: bool = False) -> Counter[str]:
    """The fallbacks' reasons, each counted per kernel call; `gradients`: those of the gradient checks' calls
    (`backward: ` or `forward: ` before each)."""
    return Counter(
        p
        for r in results
        for p, n in (r.grad_paths if gradients else r.paths).items()
        if "fallback" in p
        for _ in range(n)
    )


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    worker(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))


def seed_cases(seeds: dict[str, list[int]], known: dict[str, dict[int, str]]) -> list:
    """pytest parameters (backend, seed) for the test suites' fixed seeds: a known failure is a strict xfail with
    its reason, so that a fix shows (the xfail fails until the seed is taken off `known`)."""
    import pytest

    return [
        pytest.param(
            backend,
            seed,
            id=f"{backend}-{seed}",
            marks=[pytest.mark.xfail(strict=True, reason=known[backend][seed])] if seed in known[backend] else [],
        )
        for backend, backend_seeds in seeds.items()
        for seed in backend_seeds
    ]
