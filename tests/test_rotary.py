"""Rotary embeddings: transformers' `rotate_half` is the op `rotate_half` (transpiler/compiler/ops.py SHIFTED_OPS), so
`q_embed = (q * cos) + (rotate_half(q) * sin)` is one kernel that reads q at the shifted last-dim coordinate.

Recognition: the function's body as transformers writes it and its harmless variants are the op; near
misses are not. Kernels: the region the compiler finds in that statement, run through the runtime's
`Kernel` on C++ and on interpreted Triton, against the original Python in float32 and bfloat16, for the
layouts LLaMA produces (a transposed q, cos and sin broadcast over the heads) and the runtime's three
index paths. A built tree: the caller's checks (odd last dim, a last dim not at stride 1, a 0-dim input)
take the original code. transformers' LLaMA itself: each rotary line is one region (LLaMA's whole model
runs beside the original in tests/test_hoisting.py and tests/test_real_models.py).
"""

from __future__ import annotations

import ast
import importlib
import textwrap
from pathlib import Path

import pytest

# First: it turns Triton's interpreter on before triton is imported (or skips, as this module must).
from tests.test_triton_backend import INTERPRET  # noqa: F401  # isort: skip

import torch  # noqa: E402

import emit.runtime  # noqa: E402
from emit.cpp.kernels import render_cpp_file  # noqa: E402
from emit.runtime import Kernel  # noqa: E402
from emit.runtime.cpp_support import CppLibrary, find_compiler  # noqa: E402
from emit.triton.kernels import render_triton_file  # noqa: E402
from tests.transpiled import importable, reference_of, shapes_of  # noqa: E402
from transpiler.compiler.ir import Node, Output, Region  # noqa: E402
from transpiler.compiler.lowering import NotLowerable, lower  # noqa: E402
from transpiler.compiler.ops import BY_NAME  # noqa: E402
from transpiler.compiler.regions import find_regions  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy warnings

ROTATE_HALF = '''
def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)
'''
ROTARY = """
class Rotary(nn.Module):
    def forward(self, q, k, cos, sin):
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed
"""


def source(helper: str = ROTATE_HALF, forward: str = ROTARY) -> str:
    return "import torch\nfrom torch import nn\n\n" + textwrap.dedent(helper) + "\n" + textwrap.dedent(forward)


def regions_of(text: str) -> list[Region]:
    return find_regions(ast.parse(text), "m.py", "m", False, text)


def rotations(text: str) -> list[Region]:
    """The regions of `text` that rotate."""
    return [r for r in regions_of(text) if any(n.op == "rotate_half" for n in r.nodes)]


# -- recognition --------------------------------------------------------------------------------------
def test_the_transformers_statement_is_one_region_per_rotation():
    q, k = regions_of(source())
    assert [n.op for n in q.nodes] == ["mul", "rotate_half", "mul", "add"]
    assert [i.source for i in q.tensor_inputs] == ["q", "cos", "sin"]
    assert [(i.name, i.source) for i in q.scalar_inputs] == [("q_half", "q.shape[-1] // 2")]
    assert q.nodes[1].operands == ("q", "q_half") and q.name == "fused_rotary"
    assert q.conditions == ("q.dim() > 0", "q.shape[-1] % 2 == 0", "q.stride(-1) == 1")
    # k's rotation reads nothing q's computed: under grouped-query attention its shape differs.
    assert k.name == "fused_rotary_2" and [i.source for i in k.tensor_inputs] == ["k", "cos", "sin"]


def test_a_statement_reading_the_rotation_joins_its_region():
    forward = """
    class Rotary(nn.Module):
        def forward(self, q, cos, sin):
            q_embed = (q * cos) + (rotate_half(q) * sin)
            scaled = q_embed * 0.125 + 1
            return scaled
    """
    (region,) = regions_of(source(forward=forward))
    assert [n.op for n in region.nodes] == ["mul", "rotate_half", "mul", "add", "mul", "add"]


VARIANTS = {
    "list and torch.concat": ROTATE_HALF.replace("torch.cat((-x2, x1), dim=-1)", "torch.concat([-x2, x1], dim=-1)"),
    "dim from ndim": ROTATE_HALF.replace("dim=-1", "dim=x.ndim - 1"),
    "dim from a half's dim()": ROTATE_HALF.replace("dim=-1", "dim=x1.dim() - 1"),
    "positional dim": ROTATE_HALF.replace(", dim=-1", ", -1"),
    "halves bound in the other order, no docstring": """
        def rotate_half(t):
            b = t[..., t.shape[-1] // 2 :]
            a = t[..., : t.shape[-1] // 2]
            return torch.cat((-b, a), dim=-1)
        """,
    "halves inline": """
        def rotate_half(x):
            return torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)
        """,
}


@pytest.mark.parametrize("helper", list(VARIANTS.values()), ids=list(VARIANTS))
def test_variants_of_the_function_are_the_op(helper):
    assert len(rotations(source(helper))) == 2


def test_the_cat_written_inline_is_the_op():
    forward = """
    class Rotary(nn.Module):
        def forward(self, q, cos, sin):
            return q * cos + torch.cat((-q[..., q.shape[-1] // 2 :], q[..., : q.shape[-1] // 2]), dim=-1) * sin
    """
    (region,) = rotations(source("", forward))
    assert [n.op for n in region.nodes] == ["mul", "rotate_half", "mul", "add"]


NEAR_MISSES = {
    "the other sign (transformers' one variant)": ROTATE_HALF.replace("(-x2, x1)", "(x2, -x1)"),
    "halves not swapped": ROTATE_HALF.replace("(-x2, x1)", "(x1, -x2)"),
    "the first half negated": ROTATE_HALF.replace("(-x2, x1)", "(-x1, x2)"),
    "split at a third": ROTATE_HALF.replace("x.shape[-1] // 2", "x.shape[-1] // 3"),
    "split along another dim": ROTATE_HALF.replace("x2 = x[..., x.shape[-1]", "x2 = x[..., x.shape[-2]"),
    "the same half twice": ROTATE_HALF.replace("x1 = x[..., : x.shape[-1] // 2]", "x1 = x[..., x.shape[-1] // 2 :]"),
    "dim=0": ROTATE_HALF.replace("dim=-1", "dim=0"),
    "no dim": ROTATE_HALF.replace(", dim=-1", ""),
    "dim -1.0": ROTATE_HALF.replace("dim=-1", "dim=-1.0"),
    "something else too": ROTATE_HALF.replace("    x1 = x[", "    x = x * 2\n    x1 = x["),
    "a half scaled": ROTATE_HALF.replace("x1 = x[..., : x.shape[-1] // 2]", "x1 = x[..., : x.shape[-1] // 2] * 2"),
    "decorated": "\nimport functools\n\n@functools.lru_cache\n" + ROTATE_HALF.lstrip(),
    "a second parameter": ROTATE_HALF.replace("def rotate_half(x)", "def rotate_half(x, scale=1)"),
    "interleaved": """
        def rotate_half(x):
            x1 = x[..., ::2]
            x2 = x[..., 1::2]
            return torch.stack((-x2, x1), dim=-1).flatten(-2)
        """,
    "redefined before the caller": ROTATE_HALF + "\n\ndef rotate_half(x):\n    return x\n",
}


@pytest.mark.parametrize("helper", list(NEAR_MISSES.values()), ids=list(NEAR_MISSES))
def test_near_misses_are_not_the_op(helper):
    assert rotations(source(helper)) == []


def test_the_rotated_tensor_is_an_input_of_the_region():
    """The kernels load it at other elements: a computed operand bounds the region (the statement
    stays as it is), and a rebound name starts a region in which it is an input."""
    computed = """
    class Rotary(nn.Module):
        def forward(self, q, cos, sin):
            out = (q * cos) + (rotate_half(q * 2) * sin)
            return out
    """
    assert rotations(source(forward=computed)) == []
    rebound = """
    class Rotary(nn.Module):
        def forward(self, q, cos, sin):
            q = q * 2 + 1
            out = (q * cos) + (rotate_half(q) * sin)
            return out
    """
    first, second = regions_of(source(forward=rebound))
    assert [n.op for n in first.nodes] == ["mul", "add"]
    assert [i.source for i in second.tensor_inputs] == ["q", "cos", "sin"] and second.first_line == first.last_line + 1


def test_a_reduction_does_not_join_a_rotation():
    """Row kernels have no neighbour along the last dim: the rotation and the softmax are two kernels."""
    forward = """
    class Rotary(nn.Module):
        def forward(self, q, sin, mask):
            rotated = rotate_half(q) * sin + 1
            probs = (rotated + mask).softmax(-1)
            return probs
    """
    rotation, softmax = regions_of(source(forward=forward))
    assert [n.op for n in rotation.nodes] == ["rotate_half", "mul", "add"]
    assert [n.op for n in softmax.nodes] == ["add", "softmax"] and softmax.tensor_inputs[0].source == "rotated"
    both = (*rotation.nodes, Node("softmax", ("rotated", -1), "probs", 3, (1,)))
    with pytest.raises(NotLowerable):
        lower(Region("both", "m.py", "f", 1, 2, rotation.inputs, both, (Output("probs", "probs"),)))


def test_transformers_llama_rotary_lines_rotate_in_their_regions():
    """The installed transformers' LLaMA (its rotate_half undecorated, as in 5.17 and since 4.x)."""
    transformers = pytest.importorskip("transformers")
    text = (Path(transformers.__file__).parent / "models" / "llama" / "modeling_llama.py").read_text()
    params = {"m.apply_rotary_pos_emb": frozenset({"q", "k", "cos", "sin"})}
    found = find_regions(ast.parse(text), "modeling_llama.py", "m", False, text, tensor_params=params)
    rotary = [r for r in found if r.function == "m.apply_rotary_pos_emb"]
    assert [r.name for r in rotary] == ["fused_rotary", "fused_rotary_2"]
    assert [[i.source for i in r.inputs] for r in rotary] == [
        ["q", "cos", "q.shape[-1] // 2", "sin"], ["k", "cos", "k.shape[-1] // 2", "sin"]
    ]  # fmt: skip


# -- the kernels -------------------------------------------------------------------------------------
def original(q, cos, sin):
    """transformers' formula, eager."""
    x1, x2 = q[..., : q.shape[-1] // 2], q[..., q.shape[-1] // 2 :]
    return (q * cos) + (torch.cat((-x2, x1), dim=-1) * sin)


@pytest.mark.parametrize("d", [1, 6, 7, 64])
def test_the_eager_rendering_is_rotate_half(d):
    """The op table's eager template (what kernel files ship as their reference), odd sizes included."""
    x = torch.randn(2, 3, d)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    rendered = eval(BY_NAME["rotate_half"].eager.format("x"), {"torch": torch, "x": x})
    assert torch.equal(rendered, torch.cat((-x2, x1), dim=-1))


ROTARY_REGION = rotations(source())[0]


@pytest.fixture(scope="module")
def kernel_files(tmp_path_factory) -> tuple[Path, Path]:
    """The C++ and Triton kernel files of `q_embed = ...`, the C++ library built into a private cache."""
    directory = tmp_path_factory.mktemp("rotary")
    cpp = directory / "_rotary_kernels.cpp"
    cpp.write_text(render_cpp_file([ROTARY_REGION], {}, "Rotary kernels under test."))
    triton = directory / "_rotary_triton.py"
    triton.write_text(render_triton_file([ROTARY_REGION], {}, "emit.runtime.triton_support"))
    if find_compiler() is not None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TRANSPILE_CACHE_DIR", str(directory / "cache"))
            CppLibrary.for_file(cpp)  # built now: later loads find it
    return cpp, triton


@pytest.fixture(params=["cpp", "triton"])
def kernel(request, kernel_files, monkeypatch) -> Kernel:
    """The region as the runtime runs it, on CPU tensors: in C++, or in Triton under the interpreter."""
    if request.param == "cpp" and find_compiler() is None:
        pytest.skip("no C++ compiler")
    monkeypatch.setattr(emit.runtime, "_FORCED", "triton" if request.param == "triton" else "")
    emit.runtime._backend.cache_clear()
    cpp, triton = kernel_files
    name = ROTARY_REGION.name
    yield Kernel(
        name,
        reference_of(ROTARY_REGION),
        3,
        shapes_of(ROTARY_REGION),
        "m.py:1",
        triton=(triton, f"{name}_kernel"),
        cpp=cpp,
    )
    emit.runtime._backend.cache_clear()


def llama_heads(b, h, t, d, dtype, g):
    """q as LLaMA makes it, `proj(x).view(b, t, h, d).transpose(1, 2)`, and cos, sin unsqueezed at 1."""
    q = torch.randn(b, t, h * d, generator=g).to(dtype).view(b, t, h, d).transpose(1, 2)
    cos, sin = (torch.randn(b, t, d, generator=g).to(dtype).unsqueeze(1) for _ in range(2))
    return q, cos, sin


def same_layout(b, h, t, d, dtype, g):
    """All three transposed alike: the runtime reads them by one index over their shared dense layout."""
    return [torch.randn(b, t, h, d, generator=g).to(dtype).transpose(1, 2) for _ in range(3)]


def contiguous(b, h, t, d, dtype, g):
    return [torch.randn(b, h, t, d, generator=g).to(dtype) for _ in range(3)]


def broadcast_q(b, h, t, d, dtype, g):
    """q broadcast over the batch (stride 0) against per-batch cos and sin."""
    q = torch.randn(1, h, t, d, generator=g).to(dtype).expand(b, h, t, d)
    cos, sin = (torch.randn(b, 1, t, d, generator=g).to(dtype) for _ in range(2))
    return q, cos, sin


LAYOUTS = {"llama": llama_heads, "same layout": same_layout, "contiguous": contiguous, "broadcast q": broadcast_q}
SHAPES = [(2, 4, 5, 64), (1, 3, 7, 6), (3, 2, 1, 2)]
TOLERANCE = {torch.float32: {}, torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_kernel_matches_the_original(kernel, layout, dtype):
    generator = torch.Generator().manual_seed(0)
    for shape in SHAPES:
        q, cos, sin = LAYOUTS[layout](*shape, dtype, generator)
        (out,) = kernel(q, cos, sin, q.shape[-1] // 2)
        expected = original(q, cos, sin)
        assert out.shape == expected.shape and out.dtype == dtype
        torch.testing.assert_close(out, expected, **TOLERANCE[dtype])
        if dtype == torch.float32:  # the rotation itself moves and negates values: exact
            (rotated,) = kernel(q, torch.zeros_like(cos), torch.ones_like(sin), q.shape[-1] // 2)
            assert torch.equal(rotated, original(q, torch.zeros_like(cos), torch.ones_like(sin)))
    assert set(kernel.counts) == {"cpp" if emit.runtime._FORCED == "" else "triton"}


def test_kernels_read_the_input_at_the_shifted_coordinate():
    """Both backends locate q's rotated element from its own offsets, on every index path."""
    triton = render_triton_file([ROTARY_REGION], {}, "emit.runtime.triton_support")
    assert "t1 = rounded(rotate_half(q_ptr, q_offsets, offsets, q_half, mask), t1_dtype)" in triton
    cpp = render_cpp_file([ROTARY_REGION], {}, "")
    assert "const C t1 = rounded<T, C>(rotate_half<C>(q_ptr, q_offset, first, half));" in cpp
    assert "const int64_t half = static_cast<int64_t>(q_half), width = 2 * half;" in cpp
    # The C++ kernel runs each half of the rotated dim in a loop of its own, where `first` is a constant.
    assert cpp.count("compute(i, std::true_type(), i, i, i);") == 1
    assert cpp.count("compute(i, std::false_type(), i, i, i);") == 1
    assert cpp.count("std::true_type(), q_row + d3 * q_strides[3]") == 1


# -- a built tree: the caller's checks -----------------------------------------------------------------
PACKAGE = "rotary_transpiled"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """`source()` transpiled into PACKAGE and imported; the original as `rotary_original`."""
    base = tmp_path_factory.mktemp("rotary_build")
    (base / "src").mkdir()
    (base / "src" / "__init__.py").write_text("")
    (base / "src" / "rotary.py").write_text(source())
    (base / "rotary_original.py").write_text(source())
    with importable(base, {base / "src": base / PACKAGE}, (PACKAGE, "rotary_original")):
        yield (
            importlib.import_module("rotary_original").Rotary(),
            importlib.import_module(f"{PACKAGE}.rotary").Rotary(),
            importlib.import_module(f"{PACKAGE}._rotary_kernels"),
        )


@pytest.mark.skipif(find_compiler() is None, reason="no C++ compiler")
def test_the_caller_checks_the_rotated_tensor_first(built):
    """Grouped-query shapes run both kernels; an odd last dim, one not at stride 1 and 0-dim inputs take the
    original code (the kernels are not called), with the original's results or errors."""
    reference, model, kernels = built
    g = torch.Generator().manual_seed(1)
    counts = lambda: (kernels.fused_rotary.counts["cpp"], kernels.fused_rotary_2.counts["cpp"])  # noqa: E731

    def check(q, k, cos, sin, ran: int) -> None:
        before = counts()
        with torch.no_grad():
            for got, want in zip(model(q, k, cos, sin), reference(q, k, cos, sin), strict=True):
                torch.testing.assert_close(got, want)
        assert counts() == (before[0] + ran, before[1] + ran)

    q, cos, sin = llama_heads(2, 4, 5, 8, torch.float32, g)
    k = llama_heads(2, 2, 5, 8, torch.float32, g)[0]
    check(q, k, cos, sin, ran=1)  # 4 query heads, 2 key heads: two kernels, two shapes
    odd = [torch.randn(2, 3, 5, 7, generator=g) for _ in range(4)]
    check(*odd, ran=0)
    columns = torch.randn(2, 3, 8, 5, generator=g).transpose(-1, -2)  # the last dim at stride 5
    check(columns, columns, cos, sin, ran=0)
    before, scalar = counts(), torch.tensor(1.0)
    with pytest.raises(IndexError):  # `x.shape[-1]` in the original rotate_half
        model(scalar, scalar, scalar, scalar)
    assert counts() == before
