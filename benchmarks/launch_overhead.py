"""Python cost per call of a transpiled kernel, on inputs so small that the device time does not count.

    python benchmarks/kernels.py --prepare compiled/bench_models         # here: transpile benchmarks/models
    python benchmarks/launch_overhead.py --compiled compiled/bench_models [--device cuda]
        [--baseline compiled/bench_before]                              # the same tree, another runtime

Per module of `CASES`, under `torch.no_grad()` on an 8x1024 bfloat16 input (float32 on
CPU): microseconds per call of the eager module, of the transpiled module, and (CUDA) of
the transpiled module with every launch sent through Triton's JIT, as before launches
were planned per call signature (`triton_support.Launcher`). With `--baseline DIR`, also
the transpiled module of DIR: a copy of the `--compiled` tree whose `_transpile_runtime`
is another version of emit/runtime (e.g. `git show <commit>:emit/runtime/...`), so that
the kernels are the same and only the runtime's call path differs. The variants are
timed in alternating rounds of 1000 calls in this one process (`benchlib.alternating_seconds`),
the median round kept: launch-bound forwards pay this per kernel.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import torch

from benchlib import alternating_seconds

REPO = Path(__file__).resolve().parent.parent
# module file -> (class, constructor arguments, inputs it takes)
CASES = {
    "rms_norm": ("RMSNorm", (1024,), 1),
    "residual_layer_norm": ("ResidualLayerNorm", (1024,), 2),
    "tanh_gelu": ("TanhGelu", (), 1),
}


def transpiled(package: str, name: str, cls: str, arguments: tuple, original: torch.nn.Module) -> torch.nn.Module:
    """The transpiled module of `package` with the original's weights."""
    module = getattr(importlib.import_module(f"{package}.{name}"), cls)(*arguments)
    module.load_state_dict(original.state_dict())
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiled", type=Path, required=True, help="benchmarks/kernels.py --prepare's output")
    parser.add_argument("--baseline", type=Path, help="the same tree with another runtime, timed beside --compiled")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds of 1000 calls (default 9)")
    args = parser.parse_args()
    trees = [args.compiled] + ([args.baseline] if args.baseline else [])
    sys.path[:0] = [str(REPO / "benchmarks"), *{str(tree.resolve().parent) for tree in trees}]
    package = args.compiled.name
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    columns = ["eager us/call", "transpiled us/call"]
    columns += ["transpiled, every launch through the JIT"] * (args.device == "cuda")
    columns += [f"transpiled, runtime of {args.baseline.name}, us/call", "baseline / transpiled"] * bool(args.baseline)
    print("| module | " + " | ".join(columns) + " | kernel path |")
    print("|---|" + "---|" * (len(columns) + 1))
    for name, (cls, arguments, n_inputs) in CASES.items():
        original = getattr(importlib.import_module(f"models.{name}"), cls)(*arguments)
        # The baseline first: a runtime older than its package-relative imports reaches its own modules through
        # the `_transpile_runtime` alias, which names the first runtime imported.
        baseline = transpiled(args.baseline.name, name, cls, arguments, original) if args.baseline else None
        compiled = transpiled(package, name, cls, arguments, original)
        original, compiled = (m.to(args.device, dtype).eval() for m in (original, compiled))
        inputs = [torch.randn(8, 1024, device=args.device, dtype=dtype) for _ in range(n_inputs)]
        runtime = importlib.import_module(f"{package}._transpile_runtime")
        before = runtime.counters()
        calls = {"eager": lambda: original(*inputs), "transpiled": lambda: compiled(*inputs)}
        if baseline is not None:
            baseline = baseline.to(args.device, dtype).eval()
            calls["baseline"] = lambda: baseline(*inputs)
        with torch.no_grad():
            for call in calls.values():
                torch.testing.assert_close(call(), original(*inputs), rtol=2e-2, atol=2e-2)
            us = {variant: s * 1e6 for variant, s in alternating_seconds(calls, args.device, args.rounds).items()}
            row = [us["eager"], us["transpiled"]]
            if args.device == "cuda":
                support = importlib.import_module(f"{package}._transpile_runtime.triton_support")
                direct, support._hooks_installed = support._hooks_installed, lambda: True
                row.append(alternating_seconds({"jit": calls["transpiled"]}, args.device, args.rounds)["jit"] * 1e6)
                support._hooks_installed = direct
        cells = [f"{value:.1f}" for value in row]
        if baseline is not None:
            cells += [f"{us['baseline']:.1f}", f"{us['baseline'] / us['transpiled']:.2f}x"]
        paths = {p for k, counts in runtime.counters().items() if counts != before.get(k) for p in counts}
        print(f"| {name} | " + " | ".join(cells) + f" | {', '.join(sorted(paths))} |")


if __name__ == "__main__":
    main()
