"""Differential tests of the Triton backend: every op of the table, and fused regions, against eager PyTorch.

Kernels run under Triton's interpreter (`TRITON_INTERPRET=1`) on CPU tensors; the
`gpu` test compiles them for a CUDA device instead. Inputs come from hypothesis:
shapes (0-dim and 0-size included), broadcasting, transposed and sliced inputs,
dtypes from each op's domain, NaN, infinities and halves.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import math
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import INTERPRETER_ON_FIRST

# Triton decorates its own library functions (tl.sigmoid, ...) when it is first imported,
# so the interpreter must be on before that (conftest turns it on first where there is no
# CUDA): CPU runs interpret, the GPU check turns it off.
_IMPORTED_BEFORE = "triton" in sys.modules and not INTERPRETER_ON_FIRST
os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRET = os.environ["TRITON_INTERPRET"] == "1"
if _IMPORTED_BEFORE and INTERPRET:
    pytest.skip("triton was imported before TRITON_INTERPRET=1 was set", allow_module_level=True)
pytest.importorskip("triton")

import black  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import emit.runtime  # noqa: E402
import emit.triton.kernels  # noqa: E402
from emit.runtime import layout, triton_support  # noqa: E402
from emit.triton.kernels import render_constant, render_triton, render_triton_file, triton_helpers_used  # noqa: E402
from tests.cuda import check_compiled  # noqa: E402
from transpiler.compiler.dtypes import value_dtypes  # noqa: E402
from transpiler.compiler.ir import Input, Node, Output, Region  # noqa: E402
from transpiler.compiler.ops import CAST, OPS, Domain, Op  # noqa: E402

# The interpreter computes with numpy, which warns on log(0), 0/0 and the like.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)
DOMAIN_DTYPES = {
    Domain.FLOAT: FLOATS,
    Domain.NUMERIC: FLOATS + INTS,
    Domain.BOOL: (torch.bool,),
    Domain.ANY: FLOATS + INTS + (torch.bool,),
}
# Operands whose dtype the op fixes, whatever its domain.
BOOL_OPERANDS = {("where", 0), ("masked_fill", 1)}
# Cast targets: uint8 from negative floats is undefined behaviour in C, so torch and
# Triton need not agree.
CAST_TARGETS = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "bool")
SPECIALS = (math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0)
FINITE_SPECIALS = tuple(v for v in SPECIALS if math.isfinite(v))
# torch's CPU erf makes gelu(inf) NaN; the kernel gives the formula's inf, as CUDA does.
NO_INFINITIES = {"gelu"}
# float64 results here are casts of the other dtypes: exact.
TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float64: (0.0, 0.0),
}
KERNEL_DIR = Path(tempfile.mkdtemp(prefix="transpile_triton_kernels_"))
EXAMPLES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def compile_region(region: Region):
    """The region's kernel, imported from a rendered kernel file (Triton reads a kernel's source from its file)."""
    text = render_triton_file([region], {}, "emit.runtime.triton_support")
    path = KERNEL_DIR / f"{region.name}_{hashlib.sha1(text.encode()).hexdigest()[:12]}.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, f"{region.name}_kernel")


def eager_dtypes(region: Region, tensors: list[torch.Tensor], scalars: list) -> dict[str, torch.dtype]:
    """Each value's dtype as eager computes it from these inputs, by transpiler/compiler/dtypes.py's promotion rules
    (the runtime takes them from the eager reference: tests/test_triton_dtypes.py covers that path)."""
    given = dict(zip((i.name for i in region.scalar_inputs), scalars, strict=True))
    nodes = []
    for node in region.nodes:  # each scalar input as the constant it is on this call: an int or a float
        at = [n for n, o in enumerate(node.operands) if n not in node.constants and o in given]
        operands = tuple(given[o] if n in at else o for n, o in enumerate(node.operands))
        nodes.append(replace(node, operands=operands, constants=tuple(sorted({*node.constants, *at}))))
    names = {i.name: str(t.dtype).removeprefix("torch.") for i, t in zip(region.tensor_inputs, tensors, strict=True)}
    dtypes = value_dtypes(replace(region, nodes=tuple(nodes)), names)
    return {v: getattr(torch, d) for v, d in dtypes.items() if d is not None}


def run_kernel(region: Region, tensors: list[torch.Tensor], scalars: list, out_dtypes):
    """Launch the region's kernel the way the runtime does: broadcast shape, layout, fresh outputs."""
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    outputs = [torch.empty(shape, dtype=dtype, device=tensors[0].device) for dtype in out_dtypes]
    contiguous, sizes, strides = layout(tensors, shape)
    assert sizes is not None
    kernel = compile_region(region)
    dtypes = eager_dtypes(region, tensors, scalars)
    triton_support.launch(kernel, tensors, scalars, outputs, outputs[0].numel(), sizes, strides, contiguous, dtypes)
    return outputs


def eager_literal(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    return value if isinstance(value, str) else repr(value)


def eager(op: Op, operands: list, constants: set[int], env: dict):
    """The op's `eager` template evaluated by torch on the same values."""
    text = op.eager.format(*(eager_literal(o) if i in constants else o for i, o in enumerate(operands)))
    return eval(text, {"torch": torch, **env})


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, computed_in: torch.dtype | None = None) -> None:
    """Exact for ints and bools; floats within the tolerance of `computed_in` (default: the result's dtype)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.dtype.is_floating_point:
        rtol, atol = TOLERANCES[computed_in or expected.dtype]
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        assert torch.equal(actual, expected), (actual, expected)


# -- drawing inputs -------------------------------------------------------------------------------
@st.composite
def tensor_for(
    draw, shape: tuple[int, ...], dtype: torch.dtype, nonzero: bool = False, specials: tuple[float, ...] = SPECIALS
) -> torch.Tensor:
    """A tensor that broadcasts to `shape`: maybe with fewer or size-1 dims, transposed or sliced."""
    dims = list(shape[draw(st.integers(0, len(shape))) :] if draw(st.booleans()) else shape)
    dims = [1 if draw(st.integers(0, 3)) == 0 else size for size in dims]
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    layout_kind = draw(st.sampled_from(["contiguous", "transposed", "sliced"]))
    stored = (
        dims[::-1]
        if layout_kind == "transposed"
        else dims[:-1] + [2 * dims[-1]] if layout_kind == "sliced" and dims else dims
    )
    if dtype == torch.bool:
        values = torch.rand(stored, generator=generator) < 0.5
    elif dtype in INTS:
        values = torch.randint(-50, 50, stored, generator=generator, dtype=dtype)
        if nonzero:  # torch raises on integer division by zero
            values[values == 0] = 7
    else:
        values = torch.randn(stored, generator=generator) * draw(st.sampled_from([1.0, 4.0]))
        if draw(st.booleans()) and values.numel():
            flat = values.view(-1)
            positions = torch.randint(0, flat.numel(), (3,), generator=generator)
            flat[positions] = torch.tensor([draw(st.sampled_from(specials)) for _ in range(3)])
        values = values.to(dtype)
    if layout_kind == "transposed":
        return values.permute(tuple(reversed(range(values.dim()))))
    if layout_kind == "sliced" and dims:
        return values[..., ::2]
    return values


shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


def constant_for(op: Op, position: int, dtype: torch.dtype):
    """A folded constant for one of the op's constant operands."""
    if op is CAST:
        return st.sampled_from(CAST_TARGETS)
    if op.name == "nan_to_num":
        return st.sampled_from([0.0, 1.0, -3.5, 1e4])
    if dtype in INTS or dtype == torch.bool:
        return st.integers(-3, 3)
    return st.sampled_from([2.0, 0.5, -1.5, 1.0, 3.0])


def accepts_python_scalar(op: Op, position: int) -> bool:
    """Whether torch takes a Python number for this operand (torch.minimum does not, `+` does)."""
    names = [f"v{i}" for i in range(op.arity)]
    env = {
        name: torch.ones(2, dtype=torch.bool if (op.name, i) in BOOL_OPERANDS else torch.float32)
        for i, name in enumerate(names)
    }
    names[position] = "2.0"
    try:
        eager(op, names, set(), env)
    except (TypeError, RuntimeError):
        return False
    return True


def operand_dtype(op: Op, position: int):
    if (op.name, position) in BOOL_OPERANDS:
        return st.just(torch.bool)
    return st.sampled_from(DOMAIN_DTYPES[Domain.ANY if op is CAST else op.domain])


# -- every op of the table --------------------------------------------------------------------------
@pytest.mark.parametrize("op", [*OPS, CAST], ids=lambda op: op.name)
@EXAMPLES
@given(data=st.data(), shape=shapes)
def test_op_matches_eager(op: Op, data, shape) -> None:
    divisor = op.name in ("floordiv", "remainder")
    inputs, operands, constants, env = [], [], set(), {}
    for position in range(op.arity):
        dtype = data.draw(operand_dtype(op, position), label=f"dtype {position}")
        if position in op.constant_operands:
            operands.append(data.draw(constant_for(op, position, dtype), label=f"constant {position}"))
            constants.add(position)
            continue
        name = f"v{position}"
        operands.append(name)
        kind = "tensor"
        if position > 0 and accepts_python_scalar(op, position) and (op.name, position) not in BOOL_OPERANDS:
            kind = data.draw(st.sampled_from(["tensor", "tensor", "scalar", "constant"]), label=f"kind {position}")
        if kind == "tensor":
            specials = FINITE_SPECIALS if op.name in NO_INFINITIES else SPECIALS
            value = data.draw(tensor_for(shape, dtype, divisor and position == 1, specials), label=name)
        else:
            value = data.draw(st.sampled_from([2.0, -1.5, 3]) if dtype not in INTS else st.sampled_from([2, -3]))
        if kind == "constant":
            operands[-1] = value
            constants.add(position)
            continue
        env[name] = value
        inputs.append(Input(name, name, kind == "tensor"))
    try:
        expected = eager(op, operands, constants, env)
    except (RuntimeError, TypeError):
        assume(False)  # torch rejects this combination (e.g. a float bound on an int clamp): so does the runtime
    node = Node(op.name, tuple(operands), "result", 1, tuple(sorted(constants)))
    region = Region(f"{op.name}_region", "test.py", "f", 1, 1, tuple(inputs), (node,), (Output("result", "result"),))
    # Inputs ordered as the kernel takes them: tensors first, then scalars.
    tensors = [env[i.name] for i in region.tensor_inputs]
    scalars = [env[i.name] for i in region.scalar_inputs]
    assume(tensors and expected.shape == torch.broadcast_shapes(*(t.shape for t in tensors)))
    assume(not emit.runtime._rounds_zero_dim(tensors))  # the runtime sends these to the original code
    # So do the launchers, for integer values the kernel refuses (integer floor division by a tensor).
    dtypes = eager_dtypes(region, tensors, scalars)
    assume(all(dtypes[value].is_floating_point for value in emit.triton.kernels.integer_refusals(region)))
    (actual,) = run_kernel(region, tensors, scalars, [expected.dtype])
    assert_matches(actual, expected)


# -- fused regions ----------------------------------------------------------------------------------
def gelu_tanh_region() -> Region:
    """0.5 * h * (1 + tanh(sqrt(2 / pi) * (h + 0.044715 * h ** 3))), written out as a model would."""
    nodes = (
        Node("pow", ("h", 3.0), "cube", 30, (1,)),
        Node("mul", (0.044715, "cube"), "scaled", 30, (0,)),
        Node("add", ("h", "scaled"), "inner", 30),
        Node("mul", (0.7978845608028654, "inner"), "inner2", 31, (0,)),
        Node("tanh", ("inner2",), "t", 31),
        Node("add", (1.0, "t"), "t2", 32, (0,)),
        Node("mul", (0.5, "h"), "half", 32, (0,)),
        Node("mul", ("half", "t2"), "h1", 32),
    )
    return Region(
        "fused_gelu_tanh", "models/mlp.py", "MLP.forward", 30, 32, (Input("h", "h", True),), nodes, (Output("h1", "h"),)
    )


@EXAMPLES
@given(data=st.data(), shape=shapes, dtype=st.sampled_from(FLOATS))
def test_fused_gelu_tanh_matches_torch(data, shape, dtype) -> None:
    h = data.draw(tensor_for(shape, dtype))
    (actual,) = run_kernel(gelu_tanh_region(), [h], [], [dtype])
    expected = torch.nn.functional.gelu(h.float(), approximate="tanh").to(dtype).expand(actual.shape)
    assert_matches(actual, expected)


def scaled_residual_region() -> Region:
    """Two outputs, one of them an intermediate, a Python scalar input, and a value named like a kernel local."""
    nodes = (
        Node("gt", ("x", 0.0), "mask", 40, (1,)),
        Node("masked_fill", ("x", "mask", 0.0), "kept", 40, (2,)),
        Node("mul", ("kept", "alpha"), "scaled", 41),
        Node("add", ("scaled", "residual"), "out", 41),
    )
    inputs = (Input("x", "x", True), Input("residual", "residual", True), Input("alpha", "self.alpha", False))
    outputs = (Output("out", "x"), Output("mask", "mask"))
    return Region("fused_masked_fill_mul_add", "models/block.py", "Block.forward", 40, 41, inputs, nodes, outputs)


@EXAMPLES
@given(data=st.data(), shape=shapes, dtype=st.sampled_from(FLOATS), alpha=st.sampled_from([0.5, -2.0, 3]))
def test_fused_region_with_two_outputs_and_a_scalar(data, shape, dtype, alpha) -> None:
    x = data.draw(tensor_for(shape, dtype))
    residual = data.draw(tensor_for(shape, torch.float32))
    mask = x > 0.0
    expected = x.masked_fill(mask, 0.0) * alpha + residual
    out, out_mask = run_kernel(scaled_residual_region(), [x, residual], [alpha], [expected.dtype, torch.bool])
    # torch rounds `x * alpha` to x's dtype before adding residual; the kernel keeps float32.
    assert_matches(out, expected, computed_in=dtype)
    assert_matches(out_mask, mask.expand(out.shape))


# -- the kernel text ------------------------------------------------------------------------------------
def test_kernel_text_is_readable_and_black_formatted() -> None:
    source = render_triton(
        gelu_tanh_region(), {30: "    h = 0.5 * h * (1 + torch.tanh(self.c * (h + 0.044715 * h**3)))"}
    )
    assert source == black.format_str(source, mode=black.Mode(line_length=120))
    function = ast.parse(source).body[0]
    assert function.name == "fused_gelu_tanh_kernel"
    assert [a.arg for a in function.args.args][:3] == ["h_ptr", "h1_out_ptr", "n_elements"]
    assert "    h_ptr,  # input h\n" in source and "    h1_out_ptr,  # output h (h1)\n" in source
    assert "# models/mlp.py:30  h = 0.5 * h * (1 + torch.tanh(" in source
    # Each value rounded as eager holds it: in its dtype on the call (a no-op for float32), a constexpr per value
    # `h ** 3.0` is a float32 of an integer h (floating: a no-op on floats), not an int that wraps
    assert (
        "    cube = rounded(floating(h) * floating(h) * floating(h), cube_dtype)\n" in source
        and "t = rounded(tanh(inner2), t_dtype)" in source
    )
    assert "    cube_dtype: tl.constexpr,  # each value's dtype in eager on this call" in source
    assert [a.arg for a in function.args.args][-3:] == ["t2_dtype", "half_dtype", "h1_dtype"]
    for phase in ("# Load the inputs", "# Compute", "# Store the outputs"):
        assert phase in source


def test_region_values_never_shadow_kernel_names() -> None:
    source = render_triton(scaled_residual_region(), {})
    assert "mask = offsets < n_elements" in source
    assert "mask_value = kept" not in source and "mask_value = x > 0.0" in source
    assert "tl.store(mask_value_out_ptr + offsets, mask_value.to(" in source


def test_kernel_file_imports_exactly_the_helpers_used() -> None:
    regions = [gelu_tanh_region(), scaled_residual_region()]
    text = render_triton_file(regions, {}, "_transpile_runtime.triton_support", '"""Kernels of models/mlp.py."""')
    assert text.startswith('"""Kernels of models/mlp.py."""\n\nimport triton\n')
    assert "from _transpile_runtime.triton_support import floating, rounded, stored, tanh, widen\n" in text
    assert triton_helpers_used(scaled_residual_region()) == ["rounded", "stored", "widen"]
    assert text.count("@triton.jit") == 2


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.5, "0.5"),
        (-1.5, "(-1.5)"),
        (3, "3"),
        (-2, "(-2)"),
        (True, "True"),
        (math.inf, 'float("inf")'),
        (-math.inf, 'float("-inf")'),
    ]
    + [(math.nan, 'float("nan")'), ("bool", "int1"), ("half", "float16"), ("bfloat16", "bfloat16")],
)
def test_constants_render_as_triton_literals(value, text) -> None:
    assert render_constant(value) == text


def test_unsupported_names_the_dtype_and_launch_refuses_int32_overflow() -> None:
    helpers = triton_support
    assert helpers.unsupported([torch.float32, torch.int64, torch.bool], [torch.float16]) is None
    assert helpers.unsupported([torch.float64], [torch.float64]) is None
    assert "complex64" in helpers.unsupported([torch.float32], [torch.complex64])
    with pytest.raises(ValueError, match="2\\*\\*31"):
        helpers.launch(None, [], [], [], 2**31, (), [], True, {})


# -- on a GPU: the same kernels compiled, with libdevice in the helpers -----------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_kernels_match_torch_on_cuda() -> None:
    check_compiled("tests.test_triton_backend")


def check_on_cuda() -> None:
    """Fused and single-op kernels compiled for the GPU, on large, strided and half inputs."""
    assert not INTERPRET
    for dtype in FLOATS:
        h = torch.randn(1000, 257, device="cuda").to(dtype)
        (actual,) = run_kernel(gelu_tanh_region(), [h], [], [dtype])
        assert_matches(actual, torch.nn.functional.gelu(h.float(), approximate="tanh").to(dtype))
        x = torch.randn(64, 33, device="cuda").to(dtype).t()
        residual = torch.randn(33, 1, device="cuda")
        out, mask = run_kernel(scaled_residual_region(), [x, residual], [0.5], [torch.float32, torch.bool])
        assert_matches(out, x.masked_fill(x > 0, 0.0) * 0.5 + residual)
        assert_matches(mask, x > 0)
        for op in OPS:
            if dtype not in DOMAIN_DTYPES[op.domain] or op.constant_operands or (op.name, 0) in BOOL_OPERANDS:
                continue
            names = [f"v{i}" for i in range(op.arity)]
            env = {name: torch.randn(300, 7, device="cuda").to(dtype) * 4 for name in names}
            if op.name in ("floordiv", "remainder"):
                env["v1"] = torch.where(env["v1"] == 0, 1.0, env["v1"]).to(dtype)
            inputs = tuple(Input(name, name, True) for name in names)
            node = Node(op.name, tuple(names), "r", 1)
            region = Region(f"{op.name}_cuda", "t.py", "f", 1, 1, inputs, (node,), (Output("r", "r"),))
            expected = eager(op, names, set(), env)
            (actual,) = run_kernel(region, list(env.values()), [], [expected.dtype])
            assert_matches(actual, expected)


def test_a_value_whose_dtype_depends_on_the_call_is_rounded_to_it() -> None:
    """`(x.half() * x) * 3.0`: the product is a half for half x, float32 for float32 or bfloat16 x (half and
    bfloat16 promote to float32): the kernel takes its dtype on the call as a constexpr and rounds it to that,
    as eager holds it. Each op rounded as eager rounds it, the results are eager's to the bit."""
    nodes = (
        Node(CAST.name, ("x", "float16"), "h", 1, (1,)),
        Node("mul", ("h", "x"), "y", 1),
        Node("mul", ("y", 3.0), "z", 1, (1,)),
    )
    region = Region("by_call", "m.py", "f", 1, 1, (Input("x", "x", True),), nodes, (Output("z", "z"),))
    source = render_triton(region, {})
    assert "y = rounded(h * x, y_dtype)" in source and "h = cast(x, tl.float16)\n" in source
    x = torch.linspace(-7.0, 7.0, 101) + 0.013
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        expected = (x.to(dtype).half() * x.to(dtype)) * 3.0
        (actual,) = run_kernel(region, [x.to(dtype)], [], [expected.dtype])
        assert actual.dtype == expected.dtype and torch.equal(actual, expected), dtype


@pytest.mark.parametrize("exponent", [0.5, -0.5])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool], ids=str)
def test_square_roots_of_integers_are_float32(exponent, dtype) -> None:
    """`m ** 0.5` of an integer or bool m is float32 in eager: the kernel converts m first (the square root
    of an integer did not compile)."""
    node = Node("pow", ("m", exponent), "y", 1, (1,))
    region = Region("int_pow", "m.py", "f", 1, 1, (Input("m", "m", True),), (node,), (Output("y", "y"),))
    m = torch.tensor([0, 1, 2, 7, 65536, 2**31 - 1]).to(dtype)
    expected = m**exponent
    (actual,) = run_kernel(region, [m], [], [expected.dtype])
    assert expected.dtype == torch.float32
    assert torch.equal(actual, expected), (actual, expected)
