"""Triton kernels on integer and bool values, against eager PyTorch in the same dtypes.

Each test renders a region, launches its kernel under Triton's interpreter as the runtime does
(tests/test_triton_backend.py `run_kernel`) and compares with torch bit for bit: `&`, `|`, `^`, `~`
are bitwise on integers and logical on bools, the logical functions take any dtype, a constant
that torch converts to the op's dtype (masked_fill's fill, addcmul's value) is truncated for
integers, and integers wrap as torch's. What the kernels cannot compute as eager (an integer
division by a tensor, which raises on a zero divisor in eager) the launcher refuses, with why.
"""

from __future__ import annotations

import pytest

# First: it turns Triton's interpreter on before triton is imported (or skips, as this module must).
from tests.test_triton_backend import eager, run_kernel  # noqa: E402  # isort: skip
from tests.test_triton_reductions import run_rows  # noqa: E402  # isort: skip

import torch  # noqa: E402

import emit.triton.kernels  # noqa: E402
from emit.runtime import triton_support  # noqa: E402
from tests.cuda import check_compiled  # noqa: E402
from transpiler.compiler.dtypes import value_dtypes  # noqa: E402
from transpiler.compiler.ir import Input, Node, Output, Region  # noqa: E402
from transpiler.compiler.ops import BY_NAME, spellings_of  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy, inside the interpreter


def full_range(dtype: torch.dtype, n: int = 64, seed: int = 0) -> torch.Tensor:
    """n values of `dtype` over its whole range, its extremes, 0, 1, -1 and 2**24 + 1 (no float32) included."""
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(n, generator=generator) < 0.5
    info = torch.iinfo(dtype)
    values = torch.randint(info.min, info.max, (n,), generator=generator, dtype=dtype)
    values[:6] = torch.tensor([info.min, info.max, 0, 1, -1, 2**24 + 1], dtype=dtype)
    return values


def run_op(name: str, operands: tuple, env: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(the kernel's result, eager's) of one op of the table on `env`'s tensors; constants are the other operands."""
    op = BY_NAME[name]
    constants = {n for n, operand in enumerate(operands) if operand not in env}
    inputs = tuple(Input(v, v, True) for v in dict.fromkeys(o for o in operands if o in env))
    node = Node(name, operands, "result", 1, tuple(sorted(constants)))
    region = Region(f"{name}_region", "test.py", "f", 1, 1, inputs, (node,), (Output("result", "result"),))
    expected = eager(op, list(operands), constants, env)
    (actual,) = run_kernel(region, [env[i.name] for i in inputs], [], [expected.dtype])
    return actual, expected


def assert_equal(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.equal(actual, expected), (actual, expected)


# -- the bitwise operators and the logical functions -----------------------------------------------
PAIRS = [(torch.int32, torch.int32), (torch.int64, torch.int32), (torch.bool, torch.bool), (torch.bool, torch.int64)]


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
@pytest.mark.parametrize("dtypes", PAIRS, ids=lambda d: f"{d[0]}-{d[1]}".replace("torch.", ""))
def test_bitwise_operators_are_bitwise_on_integers_and_logical_on_bools(name, dtypes):
    env = {"a": full_range(dtypes[0], seed=1), "b": full_range(dtypes[1], seed=2)}
    assert_equal(*run_op(name, ("a", "b"), env))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool], ids=str)
def test_invert_is_bitwise_not(dtype):
    assert_equal(*run_op("bitwise_not", ("a",), {"a": full_range(dtype)}))


LOGICAL_DTYPES = [torch.int32, torch.int64, torch.float32, torch.float16, torch.bool]


def logical_operand(dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Zeros and nonzeros of `dtype`; floats with NaN, -0.0 and infinities."""
    if dtype.is_floating_point:
        specials = torch.tensor([float("nan"), -0.0, 0.0, float("inf"), -float("inf"), 0.5, -1e-30, 3.0])
        return specials[torch.randperm(8, generator=torch.Generator().manual_seed(seed))].to(dtype)
    values = full_range(dtype, 8, seed)
    return values if dtype == torch.bool else values * (torch.arange(8) % 3 != 0)


@pytest.mark.parametrize("name", ["and", "or", "xor"])
@pytest.mark.parametrize("first", LOGICAL_DTYPES, ids=str)
@pytest.mark.parametrize("second", [torch.int32, torch.float32, torch.bool], ids=str)
def test_logical_functions_take_any_dtype_and_give_bools(name, first, second):
    env = {"a": logical_operand(first, 3), "b": logical_operand(second, 4)}
    actual, expected = run_op(name, ("a", "b"), env)
    assert expected.dtype == torch.bool
    assert_equal(actual, expected)


@pytest.mark.parametrize("dtype", LOGICAL_DTYPES, ids=str)
def test_logical_not_takes_any_dtype(dtype):
    assert_equal(*run_op("not", ("a",), {"a": logical_operand(dtype, 5)}))


def test_operators_and_logical_functions_are_different_ops():
    assert [s.op.name for s in spellings_of("a&b")] == ["bitwise_and"]
    assert [s.op.name for s in spellings_of("~a")] == ["bitwise_not"]
    assert [s.op.name for s in spellings_of("Tensor.__or__")] == ["bitwise_or"]
    assert [s.op.name for s in spellings_of("torch.logical_xor")] == ["xor"]
    # Typed as torch types them: logical functions give bools, the operators the integers' promotion.
    nodes = (Node("and", ("i", "j"), "both", 1), Node("bitwise_and", ("i", "j"), "bits", 1))
    region = Region("r", "m.py", "f", 1, 1, (Input("i", "i", True), Input("j", "j", True)), nodes, ())
    assert value_dtypes(region, {"i": "int32", "j": "int64"}) == {
        "i": "int32",
        "j": "int64",
        "both": "bool",
        "bits": "int64",
    }


# -- constants torch converts to the op's dtype ----------------------------------------------------
@pytest.mark.parametrize("fill", [0.5, -2.7, 123456789.0, -10000.0, 3])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32], ids=str)
def test_masked_fill_converts_its_fill_to_the_input_dtype(fill, dtype):
    x = full_range(dtype) if not dtype.is_floating_point else torch.randn(64)
    env = {"x": x, "m": torch.arange(64) % 3 == 0}
    assert_equal(*run_op("masked_fill", ("x", "m", fill), env))


@pytest.mark.parametrize("value", [0.5, 2.7, -1.5, 3])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_addcmul_truncates_its_value_for_integers_and_wraps_as_torch(value, dtype):
    env = {"t": full_range(dtype, seed=6), "a": full_range(dtype, seed=7), "b": full_range(torch.int32, seed=8)}
    actual, expected = run_op("addcmul", ("t", "a", "b", value), env)
    assert expected.dtype == dtype
    assert_equal(actual, expected)


def test_addcmul_of_integers_beside_a_float_multiplies_floats():
    """torch converts every operand to float32 first: the int32 product 3 * 100000 * 100000 does not wrap."""
    env = {
        "t": torch.zeros(4),
        "a": torch.full((4,), 100000, dtype=torch.int32),
        "b": torch.full((4,), 100000, dtype=torch.int32),
    }
    actual, expected = run_op("addcmul", ("t", "a", "b", 3), env)
    assert expected[0] == 3e10
    assert_equal(actual, expected)


# -- integer arithmetic ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["floordiv", "remainder"])
@pytest.mark.parametrize("divisor", [3, -3, 7])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_division_of_integers_by_a_constant_floors_as_torch(name, divisor, dtype):
    assert_equal(*run_op(name, ("x", divisor), {"x": full_range(dtype, seed=9)}))


@pytest.mark.parametrize("exponent", [2, 3])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_small_integer_powers_wrap_as_torch(exponent, dtype):
    assert_equal(*run_op("pow", ("x", exponent), {"x": full_range(dtype, seed=10)}))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "neg", "abs", "nan_to_num", "clamp_min", "sign", "relu"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_integer_arithmetic_wraps_as_torch(name, dtype):
    operands = {1: ("x",), 2: ("x", "y"), 4: ("x", 0.0, None, None)}[BY_NAME[name].arity]
    if name == "clamp_min":
        operands = ("x", -5)
    env = {"x": full_range(dtype, seed=11), "y": full_range(torch.int32, seed=12)}
    assert_equal(*run_op(name, operands, {k: v for k, v in env.items() if k in operands}))


# -- what the kernels refuse ---------------------------------------------------------------------
def division_region() -> Region:
    nodes = (
        Node("floordiv", ("x", "y"), "q", 1),
        Node("pow", ("q", 4), "p", 2, (1,)),
        Node("pow", ("x", 2), "s", 2, (1,)),
    )
    inputs = (Input("x", "x", True), Input("y", "y", True))
    return Region("division", "test.py", "f", 1, 2, inputs, nodes, (Output("p", "p"), Output("s", "s")))


def test_integer_division_by_a_tensor_and_general_powers_are_refused_with_why():
    refusals = emit.triton.kernels.integer_refusals(division_region())
    assert refusals == {
        "q": "an integer floor division by a tensor (eager raises on a zero divisor)",
        "p": "an integer power other than x ** 2 and x ** 3",
    }
    x, y = torch.tensor([7, -7], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        x // y  # what a kernel could not raise
    with pytest.raises(ValueError, match="an integer floor division by a tensor"):
        run_kernel(division_region(), [x, y], [], [torch.int32, torch.int32])


def test_floating_calls_of_a_kernel_with_refusals_run():
    x, y = torch.tensor([7.5, -7.0]), torch.tensor([2.0, 0.0])
    p, s = run_kernel(division_region(), [x, y], [], [torch.float32, torch.float32])
    assert torch.equal(p, (x // y) ** 4) and torch.equal(s, x**2)


def test_kernel_files_name_the_refusals():
    text = emit.triton.kernels.render_triton(division_region(), {})
    assert '\ndivision_kernel.integer_refusals = {\n    "q": "an integer floor division' in text
    # A region whose values are floats whatever its inputs refuses nothing.
    floats = Region(
        "f",
        "t.py",
        "f",
        1,
        1,
        (Input("x", "x", True),),
        (Node("to", ("x", "float32"), "h", 1, (1,)), Node("floordiv", ("h", "h"), "q", 1)),
        (Output("q", "q"),),
    )
    assert emit.triton.kernels.integer_refusals(floats) == {}


# -- reductions of integers and bools ---------------------------------------------------------------
INTEGRAL = [torch.int32, torch.int64, torch.bool]


def reduction_region(op: str, *then: Node) -> Region:
    """`y = x.<op>(-1, keepdim=True)`, then `then` (reading y), the last value the output."""
    nodes = (Node(op, ("x", -1, True), "y", 1, (1, 2)), *then)
    return Region(f"{op}_rows", "test.py", "f", 1, 2, (Input("x", "x", True),), nodes, (Output(nodes[-1].out, "out"),))


def integer_rows(dtype: torch.dtype, row_size: int, seed: int = 0) -> torch.Tensor:
    """4 rows over the dtype's range: int32 rows whose sums overflow int32 and pass 2**24 (no float32 holds them)."""
    return full_range(dtype, 4 * row_size, seed).reshape(4, row_size)


@pytest.fixture(params=[False, True], ids=["one pass", "looped"])
def looped(request, monkeypatch) -> bool:
    """Both row kernel paths: rows longer than 16 columns loop over blocks of 16 where looped."""
    if request.param:
        monkeypatch.setattr(triton_support, "MAX_ONE_PASS", 16)
        monkeypatch.setattr(triton_support, "LOOP_BLOCK", 16)
    return request.param


@pytest.mark.parametrize("op", ["sum", "amax", "amin"])
@pytest.mark.parametrize("dtype", INTEGRAL, ids=str)
def test_integer_reductions_are_exact_in_torch_dtypes(op, dtype, looped):
    """A sum of integers or bools is an int64, summed in int64; amax and amin keep their operand's dtype."""
    x = integer_rows(dtype, 37)
    expected = getattr(torch, op)(x, -1, keepdim=True)
    (actual,) = run_rows(reduction_region(op), [x], [], [expected.dtype])
    assert_equal(actual, expected)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_a_row_maximum_of_integers_wraps_in_its_dtype(dtype, looped):
    """The kernel reduces in int64; eager's amax is of x's dtype, so `* 3` of it wraps in int32."""
    x = integer_rows(dtype, 37, seed=1)
    region = reduction_region("amax", Node("mul", ("y", 3), "z", 2, (1,)))
    (actual,) = run_rows(region, [x], [], [dtype])
    assert_equal(actual, x.amax(-1, keepdim=True) * 3)


def test_a_row_maximum_of_bools_is_a_bool(looped):
    """`~m.amax(-1)` is a logical not: the kernel's int64 maximum is a bool again before it."""
    m = integer_rows(torch.bool, 37, seed=2)
    m[0] = False
    (actual,) = run_rows(reduction_region("amax", Node("bitwise_not", ("y",), "z", 2)), [m], [], [torch.bool])
    assert_equal(actual, ~m.amax(-1, keepdim=True))


@pytest.mark.parametrize("dtype", INTEGRAL, ids=str)
def test_a_float_function_of_an_integer_sum_converts_it(dtype, looped):
    """`x.sum(-1).sqrt()`: the int64 sum becomes float32 first, as torch converts it (Triton's sqrt takes floats).

    The square root itself may differ in the last place: the interpreter's is correctly rounded, torch's vector
    loop on some CPUs is not (sqrt(37) in float32: 6.0827627 correctly rounded, torch 6.0827622 on an AVX-512
    machine). So the sum's conversion is checked exactly (the kernel against the correctly rounded root of the
    float32 sum) and torch's root within one unit in the last place."""
    x = torch.randint(0, 2**31 - 1, (4, 37), generator=torch.Generator().manual_seed(3)).to(dtype)
    (actual,) = run_rows(reduction_region("sum", Node("sqrt", ("y",), "z", 2)), [x], [], [torch.float32])
    converted = x.sum(-1, keepdim=True).to(torch.float32)
    assert_equal(actual, converted.double().sqrt().to(torch.float32))
    expected = converted.sqrt()
    assert (actual.view(torch.int32) - expected.view(torch.int32)).abs().max() <= 1


@pytest.mark.parametrize("dtype", INTEGRAL, ids=str)
def test_logsumexp_of_integers_is_computed_in_float32(dtype, looped):
    x = torch.randint(-20, 20, (4, 37), generator=torch.Generator().manual_seed(4)).to(dtype)
    expected = torch.logsumexp(x, -1, keepdim=True)
    (actual,) = run_rows(reduction_region("logsumexp"), [x], [], [expected.dtype])
    assert actual.dtype == expected.dtype == torch.float32
    # Both compute log(sum(exp(x - max))) + max in float32: within a few units in the last place.
    torch.testing.assert_close(actual, expected, rtol=8 * torch.finfo(torch.float32).eps, atol=0)


# -- bools eager keeps as bools --------------------------------------------------------------------
def bool_add_region() -> Region:
    """`s = m + k; return s, ~s`: on two bools eager's add is an `or` (a bool), on numbers a sum."""
    nodes = (Node("add", ("m", "k"), "s", 1), Node("bitwise_not", ("s",), "n", 2))
    inputs = (Input("m", "m", True), Input("k", "k", True))
    return Region("bool_add", "test.py", "f", 1, 2, inputs, nodes, (Output("s", "s"), Output("n", "n")))


@pytest.mark.parametrize("name", ["add", "mul", "minimum", "maximum", "sign"])
def test_ops_eager_keeps_bools_in_give_bools(name):
    operands = ("m",) if BY_NAME[name].arity == 1 else ("m", "k")
    env = {"m": full_range(torch.bool, seed=15), "k": full_range(torch.bool, seed=16)}
    actual, expected = run_op(name, operands, {k: v for k, v in env.items() if k in operands})
    assert expected.dtype == torch.bool
    assert_equal(actual, expected)


@pytest.mark.parametrize(
    "dtypes", [(torch.bool, torch.bool), (torch.bool, torch.int32), (torch.int32, torch.int32)], ids=str
)
def test_an_add_of_bools_is_their_or(dtypes):
    m, k = full_range(dtypes[0], seed=13), full_range(dtypes[1], seed=14)
    expected = (m + k, ~(m + k))
    actual = run_kernel(bool_add_region(), [m, k], [], [e.dtype for e in expected])
    for a, e in zip(actual, expected, strict=True):
        assert_equal(a, e)
    # Triton's int1 add wraps where numpy's (the interpreter's) is an `or`: the kernel says `or` itself.
    assert "add(m, k)" in emit.triton.kernels.render_triton(bool_add_region(), {})


# -- on a GPU: the same kernels compiled ---------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_integer_kernels_match_torch_on_cuda() -> None:
    check_compiled("tests.test_triton_integers")


def check_on_cuda() -> None:
    """Integer and bool reductions in one pass and looped (rows of 20000), an add of bools, compiled."""
    assert not triton_support.INTERPRETED
    for row_size in (37, 20000):
        for dtype in INTEGRAL:
            x = integer_rows(dtype, row_size).cuda()
            for op in ("sum", "amax", "amin"):
                expected = getattr(torch, op)(x, -1, keepdim=True)
                (actual,) = run_rows(reduction_region(op), [x], [], [expected.dtype])
                assert_equal(actual, expected)
            if dtype != torch.bool:
                (actual,) = run_rows(reduction_region("amax", Node("mul", ("y", 3), "z", 2, (1,))), [x], [], [dtype])
                assert_equal(actual, x.amax(-1, keepdim=True) * 3)
    m, k = full_range(torch.bool, 4096, seed=13).cuda(), full_range(torch.bool, 4096, seed=14).cuda()
    s, n = run_kernel(bool_add_region(), [m, k], [], [torch.bool, torch.bool])
    assert_equal(s, m + k)
    assert_equal(n, ~(m + k))
