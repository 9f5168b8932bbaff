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


BREAKS = Path(__file__).resolve().parent.parent / "benchmarks" / "break_families.py"

# A model package whose Dynamo breaks are known: `.item()` on a statement of three lines, `nonzero` in a helper, a
# tensor `if` inside a loop (Dynamo skips the rest of that frame: the `.tolist()` after it is never traced), and a
# print the eval-mode forward never reaches.
TOY = """import torch


def positions(x):
    return x.nonzero()


class Toy(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        scale = (
            y.sum().item()
        )
        idx = positions(y)
        for _ in range(2):
            if y.sum() > 0:
                y = y + 1
        listed = y.tolist()
        if self.training:
            print("training")
        return y * scale, idx, listed
"""


@pytest.fixture(scope="module")
def breaks():
    spec = importlib.util.spec_from_file_location("bench_break_families", BREAKS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_break_families_finds_dynamos_breaks_and_judges_the_lint(breaks, tmp_path):
    import torch

    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "modeling_toy.py").write_text(TOY)
    sys.path.insert(0, str(tmp_path))
    try:
        model = importlib.import_module("toy.modeling_toy").Toy().eval()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("toy.modeling_toy", None)
        sys.modules.pop("toy", None)
    inputs = {"x": torch.tensor([0.0, 1.0, -2.0, 3.0])}
    executed, _ = breaks._executed_lines(lambda: model(**inputs), folder)
    run = breaks.explain(model, inputs, [folder])

    line = {text.strip(): n for n, text in enumerate(TOY.splitlines(), 1)}
    sites = {(b["category"], b["statement"], b["frame_skipped"]) for b in run["detail"]}
    assert sites == {
        (".item()", line["scale = ("], False),  # Dynamo names the inner line; the statement starts above it
        ("dynamic-shape operators", line["return x.nonzero()"], False),
        ("data-dependent branching", line["if y.sum() > 0:"], True),
    }
    assert all(b["file"] == "modeling_toy.py" for b in run["detail"])
    # every break Dynamo hit is logged; explain counts fewer here (0: it misses those of a frame it then skipped)
    assert run["statements"] == 3 and run["logged"] >= 3 and run["breaks"] < run["logged"]

    lint = breaks.lint_against_dynamo(folder, run, executed)
    assert (lint["break_statements"], lint["true_positives"], lint["finding_statements"]) == (3, 3, 3)
    assert (lint["precision"], lint["recall"]) == (1.0, 1.0)
    assert lint["shadowed"] == 1  # `.tolist()` after the loop: in the frame Dynamo skipped
    assert lint["unexecuted_findings"] == 1  # the print under `if self.training`
