"""Norms (any row reduction) of tensors that share nothing are not joined in one region: a kernel's rows are
those of every tensor it reduces, and unrelated tensors' widths need not agree (jamba normalises `time_step`,
`B` and `C`, three widths, one after the other), so such a region could never run (transpiler/compiler/regions.py)."""

from __future__ import annotations

from tests.test_regions import regions_of

NORM = """\
variance = {x}.pow(2).mean(-1, keepdim=True)
{x} = {x} * torch.rsqrt(variance + 1e-6)
"""


def test_norms_of_unrelated_tensors_are_separate_regions():
    body = NORM.format(x="x") + NORM.format(x="y") + "return x, y"
    regions = regions_of(body, signature="self, x, y")
    assert [sorted(i.source for i in r.inputs if i.is_tensor) for r in regions] == [["x"], ["y"]]


def test_a_norm_and_what_reads_its_tensors_stay_one_region():
    # `y` is read beside the norm's input: related by the caller's broadcasting, as before.
    (region,) = regions_of(NORM.format(x="x") + "z = x * y + 1.0\nreturn z", signature="self, x, y")
    assert sorted(i.source for i in region.inputs if i.is_tensor) == ["x", "y"]
    # Two reductions of one tensor: the same rows.
    (region,) = regions_of("a = x.amax(-1, keepdim=True) * 2.0\nb = x.mean(-1, keepdim=True) * 3.0\nreturn a + b")
    assert [i.source for i in region.inputs if i.is_tensor] == ["x"]
