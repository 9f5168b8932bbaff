"""The capture fix's cases (tests/test_fix_capture.py) compiled with Inductor, forward and backward, on a device.

    python benchmarks/capture_check.py [--device cuda]

Each case is fixed as `transpile --unsafe-fixes` fixes it, compiled with `torch.compile` (default backend), and compared with
the original's eager output and weight gradient (torch.testing's float32 tolerances); Dynamo's graphs and
breaks of the fixed model are printed beside. The CPU suite checks the same with AOTAutograd.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch._dynamo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.test_fix_capture import CASES, _breaks, _model, fix, module  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    device = parser.parse_args().device
    print(f"torch {torch.__version__}, {device}")
    print("| case | graphs, breaks (fixed) | compiled output | compiled gradient |")
    print("|---|---|---|---|")
    for name in sorted(CASES):
        source = module(CASES[name])
        fixed, _ = fix(source)
        original, rewritten = _model(source).to(device), _model(fixed).to(device)
        g = torch.Generator().manual_seed(0)
        args = (torch.randn(3, 6, 8, generator=g), torch.randint(-1, 5, (3, 6), generator=g))
        args = tuple(a.to(device) for a in (*args, torch.randint(1, 7, (3,), generator=g)))
        counts = _breaks(rewritten, args)
        cells = []
        try:
            compiled = torch.compile(rewritten)
            out = compiled(*args)
            grad = torch.autograd.grad(out, rewritten.lin.weight)[0]
            expected = original(*args)
            expected_grad = torch.autograd.grad(expected, original.lin.weight)[0]
            for actual, reference in ((out, expected), (grad, expected_grad)):
                try:
                    torch.testing.assert_close(actual, reference)
                    cells.append("within tolerance")
                except AssertionError as error:
                    cells.append("different: " + str(error).splitlines()[0])
        except Exception as error:  # a backend that cannot lower a captured shape: reported, not hidden
            cells = [f"error: {type(error).__name__}: {str(error).splitlines()[0][:120]}", ""]
        finally:
            torch._dynamo.reset()
        print(f"| {name} | {counts} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
