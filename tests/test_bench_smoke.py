"""The kernel benchmark harness runs end to end on one tiny case (no torch.compile, no fresh processes)."""

import importlib.util
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent.parent / "benchmarks" / "kernels.py"


@pytest.fixture(scope="module")
def kernels():
    spec = importlib.util.spec_from_file_location("bench_kernels", HARNESS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_harness_times_the_kernel_path(kernels, tmp_path, capsys):
    compiled = tmp_path / "compiled"
    kernels.main(["--prepare", str(compiled)])
    report = tmp_path / "report.json"
    arguments = ["--compiled", str(compiled), "--device", "cpu", "--sizes", "17", "--cases", "ResidualScale"]
    status = kernels.main(
        [
            *arguments,
            "--no-compile",
            "--first-call",
            "none",
            "--budget",
            "0.01",
            "--attempts",
            "1",
            "--json",
            str(report),
        ]
    )

    assert status == 0  # every timed call took the C++ kernel and matched the float64 module
    row = kernels.json.loads(report.read_text())["steady_state"][0]
    transpiled = row["variants"]["transpiled"]
    assert set(transpiled["paths"]) == {"cpp"}
    assert transpiled["rel_l2_error"] < 1e-6
    assert row["bytes"] == 3 * 2**17 * 4  # x and y read, the sum written, float32
    assert "| ResidualScale | 2^17 | float32 |" in capsys.readouterr().out
