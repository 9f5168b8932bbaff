"""Host time of the transpiled models under two versions of the runtime, in one process: forwards, and kernel calls.

    python benchmarks/models_bench.py --prepare /tmp/hf_after                # the runtime as checked out
    cp -r /tmp/hf_after /tmp/hf_before                                       # then, per model M and changed file F:
    git show BASE:emit/runtime/F > /tmp/hf_before/M/_transpile_runtime/F
    python benchmarks/host_overhead.py --compiled /tmp/hf_after --baseline /tmp/hf_before \\
        [--models bert,resnet,vit] [--dtypes float32,bfloat16]

The two trees hold the same transpiled code and kernels; only their `_transpile_runtime`
differs. Per model and dtype (models_bench.py's CPU shapes and weights, `torch.no_grad()`):

- forwards of eager and of both transpiled models, in alternating rounds of `--calls`
  forwards (benchlib.alternating_seconds: the median round);
- the host time of each kernel call inside a forward (a kernel's launch included), per
  kernel and outcome (`kernel` ran, or `fallback` to the original code), timed around
  `Kernel.__call__`, both trees in alternating rounds: the median over the calls.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib and models_bench, also when loaded by path
from benchlib import allocator_for_timing, alternating_seconds, pick  # noqa: E402
from models_bench import MODELS_BY_NAME, Model, build, make_inputs, model_class, transpiled_runtime  # noqa: E402


def forward(model: Model, compiled: Path | None, eager: torch.nn.Module, args: argparse.Namespace) -> Callable:
    """One forward of the model (eager where `compiled` is None), on models_bench's inputs, with eager's weights."""
    if compiled is None:
        module = eager
    else:
        module = build(model_class(model, "transpiled", compiled), model, args)
        module.load_state_dict(eager.state_dict())
    inputs = make_inputs(model, args)
    return lambda: module(**inputs)


def kernel_call_seconds(runtimes: dict[str, ModuleType], forwards: dict[str, Callable], rounds: int) -> dict:
    """Per tree, kernel and outcome: the median host time of one `Kernel.__call__` inside a forward."""
    times: dict[str, dict] = {name: defaultdict(list) for name in runtimes}
    for round_ in range(rounds):
        order = list(runtimes) if round_ % 2 == 0 else list(runtimes)[::-1]
        for name in order:
            kernel_class = runtimes[name].Kernel
            original = kernel_class.__call__
            found = times[name]

            def timed(self, *args, original=original, found=found):
                start = time.perf_counter()
                result = original(self, *args)
                found[self.name, "fallback" if result is None else "kernel"].append(time.perf_counter() - start)
                return result

            kernel_class.__call__ = timed
            try:
                for _ in range(20):
                    forwards[name]()
            finally:
                kernel_class.__call__ = original
    return {name: {key: statistics.median(seconds) for key, seconds in found.items()} for name, found in times.items()}


def compare(model: Model, args: argparse.Namespace) -> list[str]:
    """Table rows for one model and dtype: forwards, then kernel calls."""
    torch.manual_seed(0)
    eager = build(model_class(model, "eager", None), model, args)
    # The baseline imported first: a runtime older than its package-relative imports reaches its own modules
    # through the `_transpile_runtime` alias, which names the first runtime imported.
    trees = {"baseline": args.baseline, "transpiled": args.compiled}
    forwards = {"eager": forward(model, None, eager, args)}
    forwards.update({name: forward(model, tree, eager, args) for name, tree in trees.items()})
    runtimes = {name: transpiled_runtime(model, tree) for name, tree in trees.items()}
    for name, call in forwards.items():
        call()
        if name in runtimes and runtimes[name] is not None:
            runtimes[name].wait_for_kernels()
    seconds = alternating_seconds(forwards, "cpu", rounds=args.rounds, per_round=args.calls)
    dtype = str(args.dtype).removeprefix("torch.")
    ms = {name: f"{s * 1e3:.3f}" for name, s in seconds.items()}
    rows = [
        f"| {model.name} | {dtype} | forward | {ms['eager']} ms | {ms['baseline']} ms | {ms['transpiled']} ms "
        f"| {seconds['baseline'] / seconds['transpiled']:.3f}x | {seconds['eager'] / seconds['baseline']:.3f}x "
        f"/ {seconds['eager'] / seconds['transpiled']:.3f}x |"
    ]
    if any(runtime is None for runtime in runtimes.values()):
        return rows
    calls = kernel_call_seconds(runtimes, {name: forwards[name] for name in runtimes}, args.rounds)
    for kernel, outcome in sorted(calls["transpiled"]):
        before, after = calls["baseline"].get((kernel, outcome)), calls["transpiled"][kernel, outcome]
        if before is None:
            continue
        rows.append(
            f"| {model.name} | {dtype} | `{kernel}` call, {outcome} | | {before * 1e6:.1f} us | {after * 1e6:.1f} us "
            f"| {before / after:.2f}x | |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiled", type=Path, required=True, help="models_bench.py --prepare's output")
    parser.add_argument("--baseline", type=Path, required=True, help="the same tree with another runtime")
    parser.add_argument("--models", default="bert,resnet,vit", help="names, or all")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds (default 9)")
    parser.add_argument("--calls", type=int, default=50, help="forwards per round (default 50)")
    args = parser.parse_args(argv)
    args.models = pick(parser, args.models, MODELS_BY_NAME, "model")
    args.compiled, args.baseline = args.compiled.resolve(), args.baseline.resolve()
    args.device, args.attention = "cpu", "sdpa"
    allocator_for_timing()
    print(
        "| model | dtype | what | eager | baseline runtime | this runtime | baseline / this "
        "| eager / transpiled (baseline / this) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with torch.no_grad():
        for model in args.models:
            for dtype in args.dtypes.split(","):
                args.dtype = getattr(torch, dtype)
                print("\n".join(compare(model, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
