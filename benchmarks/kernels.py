"""Fused pointwise kernels against eager PyTorch and torch.compile: steady state, first call, memory, bandwidth.

    python benchmarks/kernels.py --prepare compiled/bench_models          # here: transpile benchmarks/models
    python benchmarks/kernels.py --compiled compiled/bench_models [--device cpu|cuda] [--sizes 20,24]
        [--dtypes float32,bfloat16] [--cases TanhGelu,...] [--first-call CASES|all|none] [--json FILE]

The cases are the modules of `benchmarks/models` (table `CASES`: how to build each
one's inputs for n elements). The transpiled modules are imported from `--compiled`,
the output of `transpile build benchmarks/models`; this script never runs transpile
itself except in `--prepare`, so a GPU machine needs only torch and triton.

Steady state, in this one process, per case, size and dtype, on the same inputs:
eager (the source module), `torch.compile(module, dynamic=False)` and the transpiled
module, all under `torch.no_grad()`. Each is checked against the module run in
float64 first, then timed: warm-up, then enough iterations to fill `--budget`
seconds (at least 10), median. CPU times with `time.perf_counter`; CUDA with events
around each call, after overwriting a 256 MiB buffer so that no input is still in L2
(what `triton.testing.do_bench` does). Bytes moved = every input and parameter read
once + the output written once; achieved bandwidth is set against a `dst.copy_(src)`
moving the same bytes (half read, half written), timed the same way. The transpiled
kernels' counters must show the kernel path for every timed call; otherwise the row
says FALLBACK and the counters go to stderr.

First call and peak memory, in a fresh process per case and variant: the time from
the parent starting the child to the child's first result (interpreter start, imports,
inputs, compilation and the call), and the first call alone. torch.compile and the
transpiled module run twice, each run in its own cache directories
(TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, TRANSPILE_CACHE_DIR): cold (empty) then
warm. After the first result the child measures one more call's peak memory above
what was live before it: CUDA `max_memory_allocated`; CPU the resident set's high
water mark (VmHWM, reset through /proc/self/clear_refs), with glibc's mmap threshold
pinned so that freed tensors leave the resident set (tracemalloc does not see torch).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib, also when this file is loaded by path
from benchlib import (  # noqa: E402
    add_timing_arguments,
    cache_files,
    environment,
    fresh_process,
    ms,
    peak_extra_bytes,
    pick,
    quietest_timing,
    since_parent_start,
    synchronize,
)

HERE = Path(__file__).resolve().parent
SOURCE_MODELS = HERE / "models"
SOURCE_PACKAGE = "bench_models"  # benchmarks/models, imported under this name
COMPILED_PACKAGE = "transpiled_models"  # the --compiled directory, imported under this name

# Shapes of a transformer layer: rows of HIDDEN features; attention scores of HEADS x SEQ x SEQ.
HIDDEN = 4096
HEADS, SEQ = 8, 128
GRAIN = HEADS * SEQ * SEQ  # sizes must be multiples of this (2**17), so every case can be built
# Elementwise tolerance against the float64 module: rounding of the storage dtype, and eager's
# own rounding of every intermediate in low precision.
TOLERANCES = {
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-9),
    torch.bfloat16: (2e-2, 1e-2),
    torch.float16: (4e-3, 1e-3),
}
FLOATING = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


# -- the cases ---------------------------------------------------------------------------
def _rows(n: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(n // HIDDEN, HIDDEN, dtype=dtype, device=device)


def _one_row_input(n, dtype, device):
    return (_rows(n, dtype, device),)


def _two_row_inputs(n, dtype, device):
    return _rows(n, dtype, device), _rows(n, dtype, device)


def _rmsnorm_inputs(n, dtype, device):
    # The mean of squares of unit-variance activations: positive, near 1.
    variance = 0.5 + torch.rand(n // HIDDEN, 1, device=device)
    return _rows(n, dtype, device), variance.to(dtype)


def _mask_inputs(n, dtype, device):
    batch = n // GRAIN
    scores = 4 * torch.randn(batch, HEADS, SEQ, SEQ, dtype=dtype, device=device)
    padding = torch.rand(batch, 1, 1, SEQ, device=device) > 0.1  # one mask row per sequence: broadcast
    return scores, padding


@dataclass(frozen=True)
class Case:
    name: str  # the class in benchmarks/models/<module>.py
    module: str
    inputs: Callable[[int, torch.dtype, str], tuple[torch.Tensor, ...]]
    init: dict = field(default_factory=dict)  # constructor arguments


CASES = (
    Case("TanhGelu", "tanh_gelu", _one_row_input),
    Case("BiasGeluDropout", "bias_gelu_dropout", _one_row_input, {"hidden": HIDDEN}),
    Case("SwiGLUGate", "swiglu_gate", _two_row_inputs),
    Case("RMSNormEpilogue", "rmsnorm_epilogue", _rmsnorm_inputs, {"hidden": HIDDEN}),
    Case("ResidualScale", "residual_scale", _two_row_inputs),
    Case("BroadcastMask", "broadcast_mask", _mask_inputs),
    # Rows of HIDDEN columns reduced along the last dim (one pass in registers on the GPU).
    Case("RowSoftmax", "row_softmax", _one_row_input),
    Case("ResidualLayerNorm", "residual_layer_norm", _two_row_inputs, {"hidden": HIDDEN}),
    Case("RMSNorm", "rms_norm", _one_row_input, {"hidden": HIDDEN}),
)
CASES_BY_NAME = {case.name: case for case in CASES}
VARIANTS = ("eager", "compile", "transpiled")


# -- modules -----------------------------------------------------------------------------
def load_package(name: str, directory: Path) -> None:
    """Import `directory` as package `name`, so that its modules' relative imports work."""
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        name, directory / "__init__.py", submodule_search_locations=[str(directory)]
    )
    if spec is None:
        raise SystemExit(f"{directory} is not a package (no __init__.py)")
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)


def runtime(compiled: Path) -> ModuleType:
    """The transpiled tree's `_transpile_runtime` (its kernels and counters)."""
    load_package(COMPILED_PACKAGE, compiled)
    return importlib.import_module(f"{COMPILED_PACKAGE}._transpile_runtime")


def build_module(case: Case, variant: str, compiled: Path | None, dtype: torch.dtype, device: str) -> nn.Module:
    """The case's module for one variant, in eval mode, with the same parameters for every variant (seeded)."""
    if variant == "transpiled":
        load_package(COMPILED_PACKAGE, compiled)
        package = COMPILED_PACKAGE
    else:
        load_package(SOURCE_PACKAGE, SOURCE_MODELS)
        package = SOURCE_PACKAGE
    cls = getattr(importlib.import_module(f"{package}.{case.module}"), case.name)
    torch.manual_seed(0)
    module = cls(**case.init).to(device=device, dtype=dtype).eval()
    if variant == "compile":
        return torch.compile(module, dynamic=False)
    return module


def make_inputs(case: Case, n: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return case.inputs(n, dtype, device)


# -- measuring ---------------------------------------------------------------------------
def copy_bandwidth(total_bytes: int, args: argparse.Namespace) -> float:
    """Bytes per second of `dst.copy_(src)` that reads and writes `total_bytes` in all."""
    source = torch.randint(0, 255, (total_bytes // 2,), dtype=torch.uint8, device=args.device)
    destination = torch.empty_like(source)
    return 2 * source.numel() / quietest_timing(lambda: destination.copy_(source), args)["seconds"]


def moved_bytes(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> int:
    """The fewest bytes a call must move: every input and parameter read once, the output written once."""
    parameters = [*module.parameters(), *module.buffers()]
    return sum(t.nbytes for t in (*inputs, *parameters)) + output.nbytes


def accuracy(output: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> dict:
    """Relative L2 error against the float64 module, and whether every element is within tolerance."""
    difference = output.double() - reference
    rtol, atol = TOLERANCES[dtype]
    within = bool((difference.abs() <= atol + rtol * reference.abs()).all()) and not bool(output.isnan().any())
    error = torch.linalg.vector_norm(difference) / torch.linalg.vector_norm(reference)
    return {"rel_l2_error": float(error), "within_tolerance": within}


def float64_reference(case: Case, inputs: tuple[torch.Tensor, ...], device: str) -> torch.Tensor:
    module = build_module(case, "eager", None, torch.float64, device)
    wide = [t.double() if t.dtype in FLOATING else t for t in inputs]
    return module(*wide)


def kernel_paths(rt: ModuleType) -> Counter:
    """Calls per path (`cpp`, `triton`, `fallback: ...`) over all transpiled kernels so far."""
    total: Counter = Counter()
    for kernel in rt.KERNELS:
        total.update(kernel.counts)
    return total


# -- steady state ------------------------------------------------------------------------
def steady_state(case: Case, n: int, dtype: torch.dtype, args: argparse.Namespace, copies: dict[int, float]) -> dict:
    """One row: each variant checked, then timed, on the same inputs."""
    torch._dynamo.reset()  # every row compiles its own graph: no recompile limit, no stale guards
    inputs = make_inputs(case, n, dtype, args.device)
    reference = float64_reference(case, inputs, args.device)
    rt = runtime(args.compiled)
    row: dict = {"case": case.name, "elements": n, "dtype": str(dtype).removeprefix("torch."), "variants": {}}
    for variant in args.variants:
        module = build_module(case, variant, args.compiled, dtype, args.device)
        before = kernel_paths(rt)
        output = module(*inputs)
        result = accuracy(output, reference, dtype)
        result.update(quietest_timing(lambda: module(*inputs), args))
        if variant == "transpiled":
            paths = kernel_paths(rt) - before
            result["paths"] = dict(paths)
            if not paths or any(path.startswith("fallback") for path in paths):
                print(
                    f"{case.name} n={n} {dtype}: the transpiled module did not take the kernel path:\n{rt.report()}",
                    file=sys.stderr,
                )
        row["variants"][variant] = result
        row.setdefault("bytes", moved_bytes(module, inputs, output))
        del output  # one variant's result at a time in memory
    if row["bytes"] not in copies:
        copies[row["bytes"]] = copy_bandwidth(row["bytes"], args)
    row["copy_bytes_per_s"] = copies[row["bytes"]]
    for result in row["variants"].values():
        result["bytes_per_s"] = row["bytes"] / result["seconds"]
    return row


# -- first call and peak memory, in fresh processes ----------------------------------------
def child(spec: dict) -> dict:
    """Run in a fresh process: time to the first result, then one more call's peak memory."""
    case, device, dtype = CASES_BY_NAME[spec["case"]], spec["device"], getattr(torch, spec["dtype"])
    compiled = Path(spec["compiled"]) if spec["compiled"] else None
    files_at_start = cache_files()
    with torch.no_grad():
        module = build_module(case, spec["variant"], compiled, dtype, device)
        inputs = make_inputs(case, spec["elements"], dtype, device)
        synchronize(device)
        start = time.perf_counter()
        output = module(*inputs)
        synchronize(device)
        first_call = time.perf_counter() - start
        to_first_result = since_parent_start()
        result = {"to_first_result_s": to_first_result, "first_call_s": first_call, "output_bytes": output.nbytes}
        result["cache_files_at_start"] = files_at_start  # 0: a cold start indeed
        del output
        result["peak_extra_bytes"] = peak_extra_bytes(lambda: module(*inputs), device)
        if spec["variant"] == "transpiled":
            rt = runtime(compiled)
            result["paths"] = dict(kernel_paths(rt))
            if device == "cpu":  # False: this process compiled the C++ kernels
                result["cpp_cache_hit"] = all(k.cpp_library.cache_hit for k in rt.KERNELS if k.counts)
    return result


def first_calls(case: Case, n: int, dtype: torch.dtype, args: argparse.Namespace) -> list[dict]:
    """Fresh processes for eager, and for torch.compile and transpiled with cold then warm caches."""
    runs = [("eager", "none")] + [(v, cache) for v in args.variants if v != "eager" for cache in ("cold", "warm")]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-caches-") as caches:
        for variant, cache in runs:
            spec = {
                "case": case.name,
                "variant": variant,
                "elements": n,
                "dtype": str(dtype).removeprefix("torch."),
                "device": args.device,
            }
            spec["compiled"] = str(args.compiled) if args.compiled else None
            # cold: an empty directory; warm: what the cold run left
            found = fresh_process(
                Path(__file__).resolve(), spec, Path(caches) / variant, f"{case.name} ({variant}, {cache} cache)"
            )
            results.append({**spec, "cache": cache, **found})
    return results


# -- report --------------------------------------------------------------------------------
def _size(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def _caches(run: dict) -> str:
    if run["cache"] == "none":
        return "-"
    found = f"{run['cache']} ({run['cache_files_at_start']} files)"
    if "cpp_cache_hit" in run:
        found += ", C++ " + ("cached" if run["cpp_cache_hit"] else "built")
    return found


def markdown(report: dict) -> str:
    return "\n\n".join(table for table in (_steady_table(report), _first_call_table(report)) if table)


def _steady_table(report: dict) -> str:
    if not report["steady_state"]:
        return ""
    lines = [
        "| case | elements | dtype | eager ms | torch.compile ms | transpiled ms | transpiled vs eager | transpiled vs compile "
        "| transpiled GB/s (% of copy) | compile GB/s (% of copy) | copy GB/s | transpiled path, error | cores busy elsewhere |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["steady_state"]:
        v = row["variants"]
        cells = [row["case"], _size(row["elements"]), row["dtype"]]
        cells += [ms(v[name]["seconds"]) if name in v else "-" for name in VARIANTS]
        transpiled = v.get("transpiled")
        cells.append(f"{v['eager']['seconds'] / transpiled['seconds']:.2f}x" if transpiled and "eager" in v else "-")
        cells.append(
            f"{v['compile']['seconds'] / transpiled['seconds']:.2f}x" if transpiled and "compile" in v else "-"
        )
        for name in ("transpiled", "compile"):
            rate = v[name]["bytes_per_s"] if name in v else None
            cells.append(f"{rate / 1e9:.1f} ({100 * rate / row['copy_bytes_per_s']:.0f}%)" if rate else "-")
        cells.append(f"{row['copy_bytes_per_s'] / 1e9:.1f}")
        if transpiled:
            paths = ", ".join(f"{p} x{c}" for p, c in sorted(transpiled["paths"].items())) or "no kernel ran"
            verdict = "ok" if transpiled["within_tolerance"] else "WRONG"
            cells.append(f"{paths}; {verdict} ({transpiled['rel_l2_error']:.1e})")
        else:
            cells.append("-")
        busy = [r["other_processes_cores"] for r in v.values() if r["other_processes_cores"] is not None]
        cells.append(f"{max(busy):.2f}" if busy else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _first_call_table(report: dict) -> str:
    if not report["first_call"]:
        return ""
    lines = [
        "| case | variant | caches | process start to first result s | first call alone s | peak extra memory MiB (x output) |",
        "|---|---|---|---|---|---|",
    ]
    for run in report["first_call"]:
        if "error" in run:
            lines.append(
                f"| {run['case']} | {run['variant']} | {run['cache']} | failed: {' '.join(run['error'])} | | |"
            )
            continue
        peak = run["peak_extra_bytes"]
        memory = f"{peak / 2**20:.1f} ({peak / run['output_bytes']:.2f})" if peak is not None else "not measured"
        lines.append(
            f"| {run['case']} | {run['variant']} | {_caches(run)} | {run['to_first_result_s']:.2f} | {run['first_call_s']:.3f} | {memory} |"
        )
    return "\n".join(lines)


# -- command line --------------------------------------------------------------------------
def prepare(directory: Path) -> None:
    """Transpile benchmarks/models into `directory` (needs transpile's own dependencies: libcst, black)."""
    command = [sys.executable, "-m", "transpiler", "build", str(SOURCE_MODELS), "-o", str(directory)]
    done = subprocess.run(command, cwd=HERE.parent)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {done.returncode}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", type=Path, metavar="DIR", help="transpile benchmarks/models into DIR and exit")
    parser.add_argument(
        "--compiled", type=Path, metavar="DIR", help="the transpiled benchmarks/models (from --prepare)"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", help="powers of two, comma-separated (default: cpu 20,24; cuda 24,26,28)")
    parser.add_argument("--dtypes", help="comma-separated (default: cpu float32; cuda float32,bfloat16)")
    parser.add_argument(
        "--cases", default="all", help="steady-state cases: class names of benchmarks/models, all or none"
    )
    parser.add_argument(
        "--first-call", default="all", metavar="CASES", help="cases to measure in fresh processes: names, all or none"
    )
    parser.add_argument(
        "--first-call-size", type=int, metavar="LOG2", help="elements (power of two) there; default the largest size"
    )
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    add_timing_arguments(parser, budget=1.0)
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every raw number here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not (args.prepare or args.compiled or args.child):
        parser.error("give --prepare DIR (transpile the models) or --compiled DIR (run the benchmark)")
    sizes = args.sizes or ("20,24" if args.device == "cpu" else "24,26,28")
    args.sizes = [2 ** int(s) for s in sizes.split(",")]
    if any(n % GRAIN for n in args.sizes):
        parser.error(f"every size must be a multiple of {GRAIN} (2^17)")
    dtypes = args.dtypes or ("float32" if args.device == "cpu" else "float32,bfloat16")
    args.dtypes = [getattr(torch, d) for d in dtypes.split(",")]
    args.cases = pick(parser, args.cases, CASES_BY_NAME, "case")
    args.first_call = pick(parser, args.first_call, CASES_BY_NAME, "case")
    args.first_call_size = 2 ** args.first_call_size if args.first_call_size else max(args.sizes)
    args.variants = [v for v in VARIANTS if not (args.no_compile and v == "compile")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.prepare:
        prepare(args.prepare)
        return 0
    report = {**environment(args.device), "steady_state": [], "first_call": []}
    copies: dict[int, float] = {}
    with torch.no_grad():  # inference: the kernels need no autograd (and would fall back for it)
        for case in args.cases:
            for n in args.sizes:
                for dtype in args.dtypes:
                    report["steady_state"].append(steady_state(case, n, dtype, args, copies))
                    print(f"done {case.name} 2^{n.bit_length() - 1} {dtype}", file=sys.stderr)
    for case in args.first_call:
        report["first_call"] += first_calls(case, args.first_call_size, args.dtypes[0], args)
    report["machine"]["load_average_at_end"] = os.getloadavg()
    print(markdown(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    transpiled = [row["variants"]["transpiled"] for row in report["steady_state"]]
    kernel_path = all(t["paths"] and not any(p.startswith("fallback") for p in t["paths"]) for t in transpiled)
    correct = all(t["within_tolerance"] for t in transpiled)
    children = all("error" not in run for run in report["first_call"])
    return 0 if kernel_path and correct and children else 1


if __name__ == "__main__":
    sys.exit(main())
