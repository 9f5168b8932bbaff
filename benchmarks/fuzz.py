"""The differential fuzzer's long run: random modules transpiled and compared with eager PyTorch.

    python benchmarks/fuzz.py --cases N --backend cpp|triton --seed S --jobs J [--gradients] [--no-minimise]

Seeds S .. S+N-1, each one program (tests/fuzzing.py draws it); batches of cases share a
transpiled tree and a worker process, J batches at a time. Prints the counts issue 15 asks
for (cases, compiled-region cases, the share whose kernel ran, each class of failure), the
fallback reasons, and each failing seed's minimised reproducer. One seed again:

    python benchmarks/fuzz.py --cases 1 --seed 1234 --backend cpp

`--gradients` adds the gradient check to each case whose forward passes (`compare_gradients`: both
modules under autograd, the same cotangents backpropagated, every leaf's .grad compared), off by
default as it about doubles a run. It prints how many checks backpropagated, how many ran a
generated backward kernel, fell back to those kernels' eager references or met a region without a
derivative, and the gradient checks' fallback reasons; a failing gradient's reproducer runs the
backward.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import fuzzing  # noqa: E402

BATCH = 48  # cases per transpiled tree: a tree's transpile and C++ builds are paid once


def run(seeds: list[int], backend: str, jobs: int, work: Path, gradients: bool) -> list[fuzzing.Result]:
    batches = [seeds[k : k + BATCH] for k in range(0, len(seeds), BATCH)]
    results: list[fuzzing.Result] = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:  # threads wait on the worker processes
        futures = [
            pool.submit(
                fuzzing.run_cases, [fuzzing.generate(s, backend) for s in b], backend, work, gradients=gradients
            )
            for b in batches
        ]
        for future in concurrent.futures.as_completed(futures):
            results += future.result()
            failed = sum(r.outcome in fuzzing.FAILURES for r in results)
            print(f"{len(results)}/{len(seeds)} cases run, {failed} failed", file=sys.stderr, flush=True)
    return sorted(results, key=lambda r: r.program.seed)


def minimise(
    failures: list[fuzzing.Result], backend: str, jobs: int, work: Path, gradients: bool
) -> list[fuzzing.Result]:
    groups = [failures[k::jobs] for k in range(jobs) if failures[k::jobs]]
    for r in failures:
        print(f"seed {r.program.seed}: {r.outcome}: {r.detail}", file=sys.stderr, flush=True)
    print(f"minimising {len(failures)} failing cases", file=sys.stderr, flush=True)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        shrunk = pool.map(lambda g: fuzzing.minimise(g, backend, work, gradients=gradients), groups)
        return [r for group in shrunk for r in group]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--backend", choices=fuzzing.BACKENDS, default="cpp")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--jobs", type=int, default=1, help="batches run at once")
    parser.add_argument("--no-minimise", action="store_true", help="print failing programs as drawn")
    parser.add_argument("--gradients", action="store_true", help="check the gradients of each passing case too")
    args = parser.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="transpile_fuzz_") as work:
        seeds = list(range(args.seed, args.seed + args.cases))
        results = run(seeds, args.backend, args.jobs, Path(work), args.gradients)
        failures = [r for r in results if r.outcome in fuzzing.FAILURES]
        if failures and not args.no_minimise:
            failures = minimise(failures, args.backend, args.jobs, Path(work), args.gradients)
    counts = fuzzing.summary(results)
    runnable = counts["compiled-region cases"] - counts["of which eager raises"]
    print(
        f"backend {args.backend}, seeds {args.seed}..{args.seed + args.cases - 1}, {time.perf_counter() - start:.0f} s"
    )
    for name, value in counts.items():
        share = f" ({100 * value / runnable:.1f}% of those eager runs)" if name == "kernel ran" and runnable else ""
        print(f"  {name}: {value}{share}")
    print("fallbacks (kernel calls):")
    for reason, n in fuzzing.fallback_reasons(results).most_common():
        print(f"  {n:5d}  {reason}")
    if args.gradients:
        print("fallbacks under autograd (kernel calls of the gradient checks):")
        for reason, n in fuzzing.fallback_reasons(results, gradients=True).most_common():
            print(f"  {n:5d}  {reason}")
    for result in sorted(failures, key=lambda r: (r.outcome, r.program.seed)):
        print(f"\n### seed {result.program.seed}: {result.outcome} ({args.backend})\n")
        # A failure of the gradient check reproduces with the backward; one of the forward, under no_grad.
        setup = fuzzing.gradient_setup(result.program) if result.backward is not None else None
        print(result.program.reproducer(f"{result.outcome}: {result.detail}", setup))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
