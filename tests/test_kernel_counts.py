"""The runtime's counters say what ran: a call with no element to compute is counted apart from the
calls a kernel computed (emit/runtime `Kernel.__call__`)."""

from __future__ import annotations

import importlib

import torch

from tests.transpiled import importable

MODULE = """\
import torch


class Scale(torch.nn.Module):
    def forward(self, x):
        y = torch.sigmoid(x) * 2.0
        return y + x
"""


def test_an_empty_call_is_not_counted_as_a_kernel_call(tmp_path):
    (tmp_path / "src" / "countpkg").mkdir(parents=True)
    (tmp_path / "src" / "countpkg" / "model.py").write_text(MODULE)
    with importable(tmp_path, {tmp_path / "src" / "countpkg": tmp_path / "countout"}, ("countout",)):
        model = importlib.import_module("countout.model").Scale()
        runtime = importlib.import_module("countout._transpile_runtime")
        x = torch.randn(0, 3)
        torch.testing.assert_close(model(x), torch.sigmoid(x) * 2.0 + x)
        (counts,) = runtime.counters().values()
    assert dict(counts) == {"empty: no element to compute": 1}
