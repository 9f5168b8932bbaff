"""Python cost per call of a transpiled kernel, on inputs so small that the device time does not count.

    python benchmarks/kernels.py --prepare compiled/bench_models         # here: transpile benchmarks/models
    python benchmarks/launch_overhead.py --compiled compiled/bench_models [--device cuda]

Per module of `CASES`, under `torch.no_grad()` on an 8x1024 bfloat16 input (float32 on
CPU): microseconds per call of the eager module, of the transpiled module, and (CUDA) of
the transpiled module with every launch sent through Triton's JIT, as before launches
were planned per call signature (`triton_support.Launcher`). Each number is the best of
5 runs of 2000 calls with one synchronisation at the end: launch-bound forwards pay
this per kernel.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

import torch

from benchlib import synchronize

REPO = Path(__file__).resolve().parent.parent
# module file -> (class, constructor arguments, inputs it takes)
CASES = {
    "rms_norm": ("RMSNorm", (1024,), 1),
    "residual_layer_norm": ("ResidualLayerNorm", (1024,), 2),
    "tanh_gelu": ("TanhGelu", (), 1),
}


def per_call_us(call, device: str, calls: int = 2000, runs: int = 5) -> float:
    for _ in range(50):
        call()
    synchronize(device)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        synchronize(device)
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiled", type=Path, required=True, help="benchmarks/kernels.py --prepare's output")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    sys.path[:0] = [str(REPO / "benchmarks"), str(args.compiled.resolve().parent)]
    package = args.compiled.name
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    columns = ["eager us/call", "transpiled us/call"] + ["transpiled, every launch through the JIT"] * (
        args.device == "cuda"
    )
    print("| module | " + " | ".join(columns) + " | kernel path |")
    print("|---|" + "---|" * (len(columns) + 1))
    for name, (cls, arguments, n_inputs) in CASES.items():
        original = getattr(importlib.import_module(f"models.{name}"), cls)(*arguments)
        compiled = getattr(importlib.import_module(f"{package}.{name}"), cls)(*arguments)
        compiled.load_state_dict(original.state_dict())
        original, compiled = (m.to(args.device, dtype).eval() for m in (original, compiled))
        inputs = [torch.randn(8, 1024, device=args.device, dtype=dtype) for _ in range(n_inputs)]
        runtime = importlib.import_module(f"{package}._transpile_runtime")
        before = runtime.counters()
        with torch.no_grad():
            torch.testing.assert_close(compiled(*inputs), original(*inputs), rtol=2e-2, atol=2e-2)
            row = [
                per_call_us(lambda: original(*inputs), args.device),
                per_call_us(lambda: compiled(*inputs), args.device),
            ]
            if args.device == "cuda":
                support = importlib.import_module(f"{package}._transpile_runtime.triton_support")
                direct, support._hooks_installed = support._hooks_installed, lambda: True
                row.append(per_call_us(lambda: compiled(*inputs), args.device))
                support._hooks_installed = direct
        paths = {p for k, counts in runtime.counters().items() if counts != before.get(k) for p in counts}
        print(f"| {name} | " + " | ".join(f"{us:.1f}" for us in row) + f" | {', '.join(sorted(paths))} |")


if __name__ == "__main__":
    main()
