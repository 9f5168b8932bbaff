"""Where a training step's time goes: eager, torch.compile and transpiled, on the host and on the GPU.

    python benchmarks/models_bench.py --prepare gpu_models --models gpt2,llama
    python benchmarks/train_profile.py llama,gpt2 [--compiled gpu_models] [--kernels 12] [--python 20]
        [--trace DIR] [--no-graph]

Each model as benchmarks/train_bench.py builds it (`--no-dropout`). Per variant, after warm-up steps (the
transpiled runtime's compiles waited for): the step's wall time (median of 10), then one step under
torch.profiler: the GPU's kernel time and launches, the longest kernels, and how much of the host's time the
transpiled autograd nodes took, and each transpiled kernel's host time per call; the wall time of the forward, the backward and the optimiser's step apart,
and of the backward run on the calling thread (`torch.autograd.set_multithreading_enabled(False)`): CUDA
backwards otherwise run on autograd's device thread, which the Python nodes share the GIL from. With
`--trace DIR`, the profiled step's Chrome trace (DIR/<model>_<variant>.json.gz). With `--python N`, the transpiled step's N costliest Python functions
(cProfile, own time). Last, the GPU-bound floor: the whole step (forward, backward, a capturable AdamW step)
captured once in a CUDA graph and replayed, for eager and transpiled (a graph replays the kernels without the
host, so its time is the GPU's own).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_bench import MODELS_BY_NAME, batch, build, make_step, transpiled_runtime  # noqa: E402

CUDA = torch.autograd.DeviceType.CUDA


def wall_ms(step, n: int = 10) -> float:
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def phases_ms(runnable, optimiser, inputs: dict) -> str:
    """Median wall times of the step's phases, each synchronised: forward, backward, backward on the calling
    thread, optimiser step."""
    times: dict[str, list[float]] = {"forward": [], "backward": [], "backward, one thread": [], "optimiser": []}

    def timed(name, call):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = call()
        torch.cuda.synchronize()
        times[name].append(time.perf_counter() - start)
        return result

    for n in range(10):

        def forward():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return runnable(**inputs).loss

        loss = timed("forward", forward)
        if n % 2:
            with torch.autograd.set_multithreading_enabled(False):
                timed("backward, one thread", loss.backward)
        else:
            timed("backward", loss.backward)
        timed("optimiser", optimiser.step)
        optimiser.zero_grad(set_to_none=True)
    return ", ".join(f"{name} {statistics.median(t) * 1e3:.2f}" for name, t in times.items()) + " ms"


def profiled(step, kernels: int, trace: Path | None) -> str:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    events = prof.key_averages()
    gpu = [e for e in events if e.device_type == CUDA and e.device_time_total > 0]
    total = sum(e.device_time_total for e in gpu) / 1e3
    launches = sum(e.count for e in gpu)
    nodes = sum(e.cpu_time_total for e in events if "Differentiated" in e.key) / 1e3
    lines = [f"   GPU kernels {total:.2f} ms in {launches} launches; transpiled autograd nodes {nodes:.2f} ms of host"]
    for e in sorted(gpu, key=lambda e: -e.device_time_total)[:kernels]:
        lines.append(f"     {e.device_time_total / 1e3:7.2f} ms  x{e.count:<4} {e.key[:100]}")
    return "\n".join(lines)


def kernel_host_times(runtime, step) -> str:
    """Per transpiled kernel, over two steps: its calls, the median host time of a call (`Kernel.__call__`, the
    launch included, the autograd node's bookkeeping not), and how its launches ran (Triton's direct launcher
    or its JIT)."""
    times: dict[str, list[float]] = {}
    original = runtime.Kernel.__call__

    def timed(self, *args):
        start = time.perf_counter()
        try:
            return original(self, *args)
        finally:
            times.setdefault(self.name, []).append(time.perf_counter() - start)

    runtime.Kernel.__call__ = timed
    try:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
    finally:
        runtime.Kernel.__call__ = original
    lines = []
    for kernel in runtime.KERNELS:
        if kernel.name not in times:
            continue
        launchers = [p.launch for p in kernel._plans.values() if hasattr(p, "launch") and hasattr(p.launch, "_direct")]
        direct = sum(1 for launch in launchers if launch.compiled is not None)
        median = statistics.median(times[kernel.name]) * 1e6
        lines.append(
            f"     {kernel.name:40s} {len(times[kernel.name]):4d} calls {median:7.1f} us; "
            f"launchers {len(launchers)}, direct {direct}"
        )
    return "\n".join(lines)


def python_costs(step, n: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    step()
    torch.cuda.synchronize()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(n)
    return out.getvalue()


def graphed_ms(model, variant: str, compiled: Path, state: dict) -> str:
    """The replay time of the whole step captured in one CUDA graph, or why it could not be captured."""
    module, runnable, _, vocab = build(model, variant, "cuda", compiled, state, False)
    optimiser = torch.optim.AdamW(module.parameters(), lr=1e-4, capturable=True)
    inputs = batch(model, "cuda", vocab, 1)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            loss = runnable(**inputs).loss
        loss.backward()
        optimiser.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimiser.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    if variant == "transpiled":
        transpiled_runtime(model, compiled).wait_for_kernels()
    optimiser.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            step()
    except Exception as error:  # noqa: BLE001 - reported, not raised: the floor is a measurement
        return f"not captured: {type(error).__name__}: {str(error)[:200]}"
    return f"{wall_ms(graph.replay, 20):.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models")
    parser.add_argument("--compiled", type=Path, default=Path("gpu_models"))
    parser.add_argument("--variants", default="eager,compile,transpiled")
    parser.add_argument("--kernels", type=int, default=12)
    parser.add_argument("--python", type=int, default=0)
    parser.add_argument("--no-graph", dest="graph", action="store_false")
    parser.add_argument("--trace", type=Path, help="a folder for the profiled steps' Chrome traces")
    args = parser.parse_args()
    compiled = args.compiled.resolve()
    for name in args.models.split(","):
        model = MODELS_BY_NAME[name]
        state = None
        for variant in args.variants.split(","):
            module, runnable, opt, vocab = build(model, variant, "cuda", compiled, state, False)
            if state is None:
                state = {k: v.clone() for k, v in module.state_dict().items()}
            inputs = batch(model, "cuda", vocab, 1)
            step = make_step(runnable, opt, inputs, "cuda")
            for _ in range(3):
                step()
            if variant == "transpiled":
                transpiled_runtime(model, compiled).wait_for_kernels()
            for _ in range(2):
                step()
            print(f"== {name} {variant}: step {wall_ms(step):.2f} ms", flush=True)
            print(f"   phases: {phases_ms(runnable, opt, inputs)}", flush=True)
            trace = args.trace / f"{name}_{variant}.json" if args.trace else None
            print(profiled(step, args.kernels, trace), flush=True)
            if variant == "transpiled":
                runtime = transpiled_runtime(model, compiled)
                counts = {k.name: dict(k.counts) for k in runtime.KERNELS if k.counts}
                print(f"   kernel counters: {counts}", flush=True)
                print(kernel_host_times(runtime, step), flush=True)
            if variant == "transpiled" and args.python:
                print(python_costs(step, args.python), flush=True)
            del module, runnable, opt, step
            torch.cuda.empty_cache()
        if args.graph:
            for variant in ("eager", "transpiled"):
                print(
                    f"== {name} {variant}, whole step in one CUDA graph: {graphed_ms(model, variant, compiled, state)}"
                )
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
