"""The kernel ABI (emit/runtime/abi.py): the generated kernels take their arguments in the order the runtime passes
them, the Triton kernels import only what triton_support defines, and a C++ entry point called with a wrong
argument raises a Python error instead of running C on garbage."""

from __future__ import annotations

import ast
import ctypes
import inspect

import pytest
import torch

from emit.abi import abi
from emit.cpp.kernels import render_cpp_file
from emit.runtime import layout, row_layout
from emit.runtime.cpp_support import CppLibrary, find_compiler
from emit.triton.kernels import render_triton
from transpiler.compiler.ir import Input, Node, Output, Region

triton_support = pytest.importorskip("emit.runtime.triton_support")


def pointwise_region(name: str = "scaled_sum") -> Region:
    """out = x * a + y: two tensor inputs, a scalar, one output."""
    return Region(
        name,
        "model.py",
        "Block.forward",
        1,
        1,
        (Input("x", "x", True), Input("y", "y", True), Input("a", "self.a", False)),
        (Node("mul", ("x", "a"), "t0", 1), Node("add", ("t0", "y"), "out", 1)),
        (Output("out", "out"),),
    )


def row_region() -> Region:
    """centered = x - x.amax(-1, keepdim=True), largest = x.amax(-1): an element output and a row output."""
    return Region(
        "centered",
        "model.py",
        "Block.forward",
        1,
        2,
        (Input("x", "x", True),),
        (
            Node("amax", ("x", -1, True), "largest", 1, (1, 2)),
            Node("sub", ("x", "largest"), "centered", 2),
        ),
        (Output("centered", "centered"), Output("largest", "largest")),
    )


def parameters(source: str) -> list[str]:
    (function,) = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]
    return [argument.arg for argument in function.args.args]


class Recorded:
    """A stand-in for a JIT function: the Launcher reads only its parameters' names."""

    def __init__(self, names: list[str]) -> None:
        self.arg_names = names


def test_the_triton_helpers_are_what_triton_support_defines():
    """abi.TRITON_HELPERS lists exactly the public jit functions and constexpr constants of triton_support."""
    tree = ast.parse(inspect.getsource(triton_support))
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.decorator_list}
    defined |= {node.target.id for node in tree.body if isinstance(node, ast.AnnAssign)}
    assert abi.TRITON_HELPERS == {name for name in defined if not name.startswith("_")}


def test_a_pointwise_triton_kernel_takes_what_its_launcher_passes():
    x, y = torch.randn(3, 1, 5), torch.randn(4, 5)
    shape = torch.broadcast_shapes(x.shape, y.shape)
    contiguous, sizes, strides = layout([x, y], shape)
    names = parameters(render_triton(pointwise_region(), {}))
    data = ["x_ptr", "y_ptr", "a", "out_out_ptr"]
    assert names[: len(data)] == data
    layout_names = abi.POINTWISE.triton_parameters(["x", "y"])
    assert names[len(data) : len(data) + len(layout_names)] == layout_names
    assert names[len(data) + len(layout_names) :] == ["t0_dtype", "out_dtype"]  # values eager may hold in half
    value_dtypes = {"x": torch.float16, "y": torch.float16, "t0": torch.float16, "out": torch.float16}
    launcher = triton_support.pointwise_launcher(
        Recorded(names), shape.numel(), sizes, strides, contiguous, 2, value_dtypes
    )
    # Positional: the data, then the launcher's tail; by name: the launch constants and the dtypes.
    assert len(data) + len(launcher.tail) + len(launcher.constexprs) == len(names)
    assert list(launcher.constexprs) == names[len(data) + len(launcher.tail) :]
    assert launcher.tail[: 1 + abi.RANK] == (shape.numel(), *sizes)


def test_a_row_triton_kernel_takes_what_its_launcher_passes():
    x = torch.randn(6, 4, 7).transpose(0, 1)
    outer_sizes, strides, contiguous = row_layout([x], x.shape, 2)
    names = parameters(render_triton(row_region(), {}))
    data = ["x_ptr", "centered_out_ptr", "largest_out_ptr"]
    assert names[: len(data)] == data
    layout_names = abi.ROWS.triton_parameters(["x", "centered_out"])  # the element tensors: inputs, element outputs
    assert names[len(data) : len(data) + len(layout_names)] == layout_names
    assert all(name.endswith(abi.DTYPE_SUFFIX) for name in names[len(data) + len(layout_names) :])
    value_dtypes = dict.fromkeys(("x", "largest", "centered"), torch.float32)
    launcher = triton_support.rows_launcher(Recorded(names), 24, 7, outer_sizes, strides, contiguous, value_dtypes)
    assert len(data) + len(launcher.tail) + len(launcher.constexprs) == len(names)
    assert list(launcher.constexprs) == names[len(data) + len(launcher.tail) :]


compiled = pytest.mark.skipif(find_compiler() is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> CppLibrary:
    directory = tmp_path_factory.mktemp("abi")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRANSPILE_CACHE_DIR", str(directory / "cache"))
        source = directory / "_abi_kernels.cpp"
        source.write_text(render_cpp_file([pointwise_region()], {}, "ABI test"))
        return CppLibrary.load(source)


def launch(library: CppLibrary, tensors, scalars, outputs) -> None:
    shape = outputs[0].shape
    contiguous, sizes, strides = layout(tensors, shape)
    library.call("scaled_sum", tensors, scalars, outputs, shape.numel(), sizes, strides, contiguous)


@compiled
def test_the_cpp_entry_points_compute_through_their_prototypes(library):
    x, y = torch.randn(3, 5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    for dtype in (getattr(torch, name) for name in abi.ENTRY_DTYPES):
        out = torch.empty(3, 5, dtype=dtype)
        launch(library, [x.to(dtype), y.to(dtype)], [0.5], [out])
        assert torch.equal(out, x.to(dtype) * 0.5 + y.to(dtype))


@compiled
def test_a_wrong_argument_to_a_cpp_entry_point_raises(library):
    x, y, out = torch.randn(3, 5), torch.randn(5), torch.empty(3, 5)
    with pytest.raises((TypeError, ctypes.ArgumentError)):  # a missing tensor: the arguments after it shift
        launch(library, [x], [0.5], [out])
    with pytest.raises((TypeError, ctypes.ArgumentError)):  # a scalar too many
        launch(library, [x, y], [0.5, 2.0], [out])
    with pytest.raises(ctypes.ArgumentError):  # a string where the entry point takes a double
        launch(library, [x, y], ["0.5"], [out])
