"""Regions of a file that compute the same thing on values of other names share one kernel (emit/host/module.py
`shared_kernels`): the rotary embedding of q and the same of k are written once, as `fused_rotary`, and the
second region's Kernel runs it under its own name, its values renamed to the kernel's."""

from __future__ import annotations

import importlib
import textwrap

import pytest
import torch

from emit.host.module import shared_kernels
from emit.runtime.cpp_support import find_compiler
from tests.transpiled import original_and_transpiled
from transpiler.compiler.ir import Input, Node, Output, Region

SOURCE = textwrap.dedent('''
    import torch
    from torch import nn


    def rotate_half(x):
        """Rotates half the hidden dims of the input."""
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)


    class Rotary(nn.Module):
        def forward(self, q, k, v, cos, sin):
            q_embed = (q * cos) + (rotate_half(q) * sin)
            k_embed = (k * cos) + (rotate_half(k) * sin)
            v_embed = (v * cos) - (rotate_half(v) * sin)
            return q_embed, k_embed, v_embed
    ''')


def scaled(name: str, x: str, factor: float, line: int) -> Region:
    """out = x * factor + 1, on a tensor named `x`."""
    nodes = (Node("mul", (x, factor), f"{x}_t", line, (1,)), Node("add", (f"{x}_t", 1.0), f"{x}_out", line, (1,)))
    return Region(name, "m.py", "f", line, line, (Input(x, x, True),), nodes, (Output(f"{x}_out", f"{x}_out"),))


def test_regions_equal_but_for_names_and_lines_share_the_first_ones_kernel():
    regions = [scaled("a", "x", 2.0, 1), scaled("b", "y", 2.0, 5), scaled("c", "z", 3.0, 9), scaled("d", "x", 2.0, 12)]
    shared = shared_kernels(regions)
    assert set(shared) == {"b", "d"}  # c multiplies by another constant
    assert shared["b"].region == "a" and shared["b"].renamed == {"y": "x", "y_t": "x_t", "y_out": "x_out"}
    assert shared["d"].region == "a" and shared["d"].renamed == {}


@pytest.mark.skipif(find_compiler() is None, reason="no C++ compiler")
def test_the_second_rotation_runs_the_first_ones_kernel(tmp_path):
    with original_and_transpiled(tmp_path, SOURCE, "built", "m", "original_m") as (original, transpiled):
        triton = (tmp_path / "built" / "_m_triton.py").read_text()
        cpp = (tmp_path / "built" / "_m_kernels.cpp").read_text()
        kernels = importlib.import_module("built._m_kernels")
        generator = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, 4, 6, 8, generator=generator) for _ in range(3))
        cos, sin = torch.randn(6, 8, generator=generator), torch.randn(6, 8, generator=generator)
        expected = original.Rotary()(q, k, v, cos, sin)
        actual = transpiled.Rotary()(q, k, v, cos, sin)
        # Two products and a sum, each rounded (or one fused multiply-add): within 2 eps of the terms' magnitudes.
        bounds = [
            2 * torch.finfo(torch.float32).eps * (x.abs() * cos.abs() + original.rotate_half(x).abs() * sin.abs())
            for x in (q, k, v)
        ]
    names = ("fused_rotary", "fused_rotary_2", "fused_rotary_3")
    assert [kernels.__dict__[name].entry for name in names] == ["fused_rotary", "fused_rotary", "fused_rotary_3"]
    assert "def fused_rotary_kernel(" in triton and "def fused_rotary_3_kernel(" in triton
    assert "fused_rotary_2" not in triton and "fused_rotary_2" not in cpp
    for name in names:
        assert kernels.__dict__[name].counts == {"cpp": 1}, name
    for have, want, bound in zip(actual, expected, bounds, strict=True):
        assert ((have - want).abs() <= bound).all()
