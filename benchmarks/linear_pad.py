"""Unaligned nn.Linear on CUDA: F.linear against the runtime's padded path (emit/runtime/linear.py).

    python benchmarks/linear_pad.py          # needs a CUDA device; torch only

For each shape: device time per call of F.linear and of `padded_linear` (weight rows padded to a
multiple of ALIGN = 8, and of 64), what `linear()` itself chooses (`pad` or `module`), whether
padding paid, the max abs difference from F.linear, and the cuBLAS kernel each runs (align1 or not).
Then rows sweeps for the break-even that MIN_ROWS / MIN_WORK encode. A `!` marks a row where
`linear()`'s choice disagrees with the measurement (off by less than 5% is not flagged).
Last, GPT-2's head (bf16): the peak memory a call adds (`torch.cuda.max_memory_allocated` over what
was allocated before, the returned output included) and the device and host time of F.linear, of
`linear()` (a padded view), of `linear()` made contiguous (the copy an earlier version paid), and of a
variant without the weight's copy (the unpadded weight multiplied into a strided view of a padded
output: which cuBLAS kernel it gets).
Timing: CUDA events around 20 calls, median of 7 such runs, after warm-up; host time: the wall time
of queueing 20 calls, median of 7.
"""

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from emit.runtime import linear as runtime  # noqa: E402

SHAPES = [  # rows, K, N, what
    (4096, 768, 50257, "GPT-2 head, 8x512"),
    (4096, 768, 30522, "BERT vocab"),
    (4096, 768, 32000, "LLaMA vocab (aligned)"),
    (4096, 768, 1000, "ImageNet (aligned)"),
    (4096, 768, 1001, "ImageNet + background"),
    (4096, 4096, 32001, "LLaMA + 1 token"),
]
SWEEPS = [(768, 50257), (4096, 32001), (768, 1001)]  # K, N: rows from decoding to prefill
SWEEP_ROWS = (1, 8, 32, 64, 128, 256, 512, 1024, 4096)


def timed(fn, calls: int = 20, runs: int = 7) -> float:
    """Median device microseconds per call."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


def host_us(fn, calls: int = 20, runs: int = 7) -> float:
    """Median host microseconds per call to queue `fn` (the models are host-bound: launches count)."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(runs):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) * 1e6 / calls)
    torch.cuda.synchronize()
    return statistics.median(samples)


def peak_extra_mib(fn) -> float:
    """The most memory one call of `fn` allocates beyond what was allocated before, its result included."""
    fn()  # warm-up: cuBLAS's workspace and the allocator's pools are not the call's
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20


def gemm_kernels(fn) -> str:
    """The names of the matmul kernels `fn` launches, shortened (align1 shows why it is slow)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    gemms = sorted(n for n in names if any(w in n.lower() for w in ("gemm", "cutlass", "sm90", "xmma", "ampere")))
    short = []
    for name in gemms:
        tags = [t for t in ("align1", "align2", "align4", "align8") if t in name]
        short.append(f"{name[:40]}{'..' if len(name) > 40 else ''}[{','.join(tags) or '?'}]")
    return "; ".join(short) or "-"


def with_align(align: int, fn):
    saved = runtime.ALIGN
    runtime.ALIGN = align
    try:
        return fn()
    finally:
        runtime.ALIGN = saved


def case(rows: int, k: int, n: int, dtype: torch.dtype, bias: bool = False, kernels: bool = False) -> dict:
    torch.manual_seed(0)
    layer = torch.nn.Linear(k, n, bias=bias, device="cuda", dtype=dtype)
    x = torch.randn(rows, k, device="cuda", dtype=dtype)
    w, b = layer.weight, layer.bias
    with torch.no_grad():
        expected = F.linear(x, w, b)
        got = runtime.padded_linear(x, w, b)
        before = runtime.counts["padded"]
        chosen = runtime.linear(layer, x)
        pads = runtime.counts["padded"] > before
        ok = got.shape == expected.shape and got.dtype == dtype and got.stride()[-1] == 1
        tolerance = 2e-2 if dtype != torch.float32 else 1e-3
        ok = ok and torch.allclose(got.float(), expected.float(), rtol=tolerance, atol=tolerance)
        ok = ok and torch.allclose(chosen.float(), expected.float(), rtol=tolerance, atol=tolerance)
        result = {
            "eager": timed(lambda: F.linear(x, w, b)),
            "pad8": with_align(8, lambda: timed(lambda: runtime.padded_linear(x, w, b))),
            "pad64": with_align(64, lambda: timed(lambda: runtime.padded_linear(x, w, b))),
            "linear": timed(lambda: runtime.linear(layer, x)),
            "pads": pads,
            "diff": (got.float() - expected.float()).abs().max().item(),
            "ok": ok,
        }
        if kernels:
            result["kernels"] = (
                f"eager: {gemm_kernels(lambda: F.linear(x, w, b))} | padded: {gemm_kernels(lambda: runtime.padded_linear(x, w, b))}"
            )
    return result


def strided_out(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """The padded path without the weight's copy: the matmul writes into a strided view of a padded output."""
    n = w.shape[0]
    out = x.new_empty((x.shape[0], n + -n % runtime.ALIGN))[:, :n]
    if b is None:
        return torch.mm(x, w.t(), out=out)
    return torch.addmm(b, x, w.t(), out=out)


def memory(k: int = 768, n: int = 50257) -> None:
    """GPT-2's head: peak extra memory and time of F.linear, linear() and the alternatives."""
    print(f"\nGPT-2's head {k} -> {n}, bf16, no bias: peak extra memory (output included) and time per call")
    print("| rows | path | peak extra MiB | device us | host us | max abs diff | kernels |")
    print("|---|---|---|---|---|---|---|")
    for rows in (1024, 4096, 16384):
        torch.manual_seed(0)
        layer = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        w = layer.weight
        paths = [
            ("F.linear", lambda: F.linear(x, w)),
            ("linear()", lambda: runtime.linear(layer, x)),
            ("linear().contiguous()", lambda: runtime.linear(layer, x).contiguous()),
            ("no weight copy", lambda: strided_out(x, w, None)),
        ]
        with torch.no_grad():
            expected = F.linear(x, w)
            for name, fn in paths:
                got = fn()
                diff = (got.float() - expected.float()).abs().max().item()
                del got
                kernels = gemm_kernels(fn) if rows == 4096 else ""
                print(
                    f"| {rows} | {name} | {peak_extra_mib(fn):.1f} | {timed(fn):.1f} | {host_us(fn):.1f} | "
                    f"{diff:.1e} | {kernels} |"
                )
            del expected
    print(
        f"(output of 4096 rows: {4096 * n * 2 / 2**20:.1f} MiB; padded weight: {(n + -n % 8) * k * 2 / 2**20:.1f} MiB)"
    )


def verdict(r: dict, n: int) -> str:
    """Whether padding paid; an aligned N is never padded by linear() (its padded 8 is a weight copy only)."""
    if n % 8 == 0:
        return "aligned"
    best = min(r["pad8"], r["pad64"])
    pays = best < r["eager"]
    clear = abs(best - r["eager"]) > 0.05 * r["eager"]
    return ("pays" if pays else "loses") + (" !" if clear and pays != r["pads"] else "")


def main() -> None:
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}; runtime ALIGN={runtime.ALIGN}, "
        f"MIN_ROWS={runtime.MIN_ROWS}, MIN_WORK={runtime.MIN_WORK}, DTYPES={runtime.DTYPES}\n"
    )
    header = "| rows x K -> N | what | dtype | bias | F.linear us | padded 8 us | padded 64 us | linear() us | linear() | padding | speed-up | max abs diff | ok |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    settings = [(torch.bfloat16, False), (torch.float16, False), (torch.float32, False), (torch.float32, True)]
    kernel_lines = []
    for rows, k, n, what in SHAPES:
        for dtype, tf32 in settings:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            for bias in (False, True) if dtype == torch.bfloat16 else (False,):
                r = case(rows, k, n, dtype, bias, kernels=not bias)
                name = str(dtype)[6:] + (" tf32" if tf32 else "")
                speedup = r["eager"] / min(r["pad8"], r["pad64"])
                print(
                    f"| {rows}x{k}->{n} | {what} | {name} | {bias} | {r['eager']:.1f} | {r['pad8']:.1f} | {r['pad64']:.1f} | "
                    f"{r['linear']:.1f} | {'pad' if r['pads'] else 'module'} | {verdict(r, n)} | {speedup:.2f}x | {r['diff']:.1e} | {r['ok']} |"
                )
                if "kernels" in r:
                    kernel_lines.append(f"{rows}x{k}->{n} {name}: {r['kernels']}")
    torch.backends.cuda.matmul.allow_tf32 = False
    print("\nKernels (without bias):")
    print("\n".join(kernel_lines))
    print("\nRows sweeps (bf16, no bias): the break-even MIN_ROWS / MIN_WORK stand for")
    print("| K -> N | rows | F.linear us | padded 8 us | padded 64 us | linear() | padding | ok |")
    print("|---|---|---|---|---|---|---|---|")
    for k, n in SWEEPS:
        for rows in SWEEP_ROWS:
            r = case(rows, k, n, torch.bfloat16)
            print(
                f"| {k}->{n} | {rows} | {r['eager']:.1f} | {r['pad8']:.1f} | {r['pad64']:.1f} | "
                f"{'pad' if r['pads'] else 'module'} | {verdict(r, n)} | {r['ok']} |"
            )
    memory()
    print("\nPer-call Python cost of linear() when it takes the module (aligned layer, 1x768 -> 768, bf16):")
    layer = torch.nn.Linear(768, 768, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 768, device="cuda", dtype=torch.bfloat16)
    import timeit

    with torch.no_grad():
        direct = min(timeit.repeat(lambda: layer(x), number=2000, repeat=7)) / 2000 * 1e6
        routed = min(timeit.repeat(lambda: runtime.linear(layer, x), number=2000, repeat=7)) / 2000 * 1e6
    torch.cuda.synchronize()
    print(
        f"module(x) {direct:.2f} us, linear(module, x) {routed:.2f} us host time per call (+{routed - direct:.2f} us)"
    )


if __name__ == "__main__":
    main()
