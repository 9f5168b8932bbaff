"""First call of transpiled models with Triton kernels compiled synchronously vs in the background (GPU).

    python benchmarks/first_call_bg.py --compiled gpu_models [--models bert,llama] [--dtype bfloat16]
        [--json $OUT/first_call_bg.json]

`--compiled DIR`: transpiled transformers packages (`models_bench.py --prepare DIR`); prepared
here when DIR does not exist. Models and shapes are models_bench's CUDA ones (BERT-base 16x256,
the 8-layer LLaMA at 4x1024). Each row is a fresh process (models_bench's child protocol: its
own Triton cache directory, empty for "cold", left by the cold run for "warm"):

- eager: the transformers model;
- sync: `TRANSPILE_COMPILE=sync` (every kernel compiles on its first launch, one after another);
- bg1, bg2: background compiles on 1 or 2 threads (`TRANSPILE_COMPILE_THREADS`).

Per row: the first call, the second call, how long after the first call started every
compile had finished (`wait_for_kernels()` after the second call), a third call, the kernel
counters of the first and third calls, and the largest difference between the first and third
outputs (the first call ran the original code where a kernel was compiling). Checks printed at
the end: a background first call within eager's first call + 1 s, and the third call launching
as many Triton kernels as the sync run's first call, with no call left compiling or failed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

import benchlib  # noqa: E402
import models_bench as mb  # noqa: E402

VARIANTS = {  # name: (transpiled, environment)
    "eager": (False, {}),
    "sync": (True, {"TRANSPILE_COMPILE": "sync"}),
    "bg1": (True, {"TRANSPILE_COMPILE": "background", "TRANSPILE_COMPILE_THREADS": "1"}),
    "bg2": (True, {"TRANSPILE_COMPILE": "background", "TRANSPILE_COMPILE_THREADS": "2"}),
}
RUNS = (("eager", "none"), ("sync", "cold"), ("sync", "warm"), ("bg1", "cold"), ("bg2", "cold"), ("bg2", "warm"))


def child(spec: dict) -> dict:
    """In a fresh process: build the model, then three calls, timed, with the kernel counters of each."""
    model = mb.MODELS_BY_NAME[spec["model"]]
    transpiled = VARIANTS[spec["variant"]][0]
    args = argparse.Namespace(
        device="cuda", dtype=getattr(torch, spec["dtype"]), attention="sdpa", compiled=Path(spec["compiled"])
    )
    files_at_start = benchlib.cache_files()
    counters = (lambda: mb.kernel_counters(model, args.compiled)) if transpiled else dict
    with torch.no_grad():
        module = mb.build(mb.model_class(model, "transpiled" if transpiled else "eager", args.compiled), model, args)
        inputs = mb.make_inputs(model, args)
        torch.cuda.synchronize()
        result: dict = {"cache_files_at_start": files_at_start}
        outputs = []
        start = time.perf_counter()
        for call in ("first", "second"):
            before, begin = counters(), time.perf_counter()
            outputs.append(mb.primary_output(module(**inputs), model).float())
            torch.cuda.synchronize()
            result[f"{call}_call_s"] = time.perf_counter() - begin
            result[f"{call}_kernels"] = mb.counters_delta(before, counters())
        result["to_first_result_s"] = benchlib.since_parent_start() - result["second_call_s"]
        if transpiled:
            runtime = importlib.import_module(f"{args.compiled.name}.{model.name}._transpile_runtime")
            result["all_compiled"] = runtime.wait_for_kernels(timeout=300)
            result["compiled_after_s"] = time.perf_counter() - start  # since the first call started
        before, begin = counters(), time.perf_counter()
        outputs.append(mb.primary_output(module(**inputs), model).float())
        torch.cuda.synchronize()
        result["third_call_s"] = time.perf_counter() - begin
        result["third_kernels"] = mb.counters_delta(before, counters())
    result["max_diff_first_vs_third"] = float((outputs[0] - outputs[2]).abs().max())
    return result


def paths(kernels: dict) -> dict[str, int]:
    """Calls per path (triton, fallback: ...) summed over the kernels."""
    total: dict[str, int] = {}
    for counts in kernels.values():
        for path, n in counts.items():
            total[path] = total.get(path, 0) + n
    return total


def short(kernels: dict) -> str:
    return ", ".join(f"{path.removeprefix('fallback: ')}: {n}" for path, n in sorted(paths(kernels).items())) or "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--compiled", type=Path, default=Path("gpu_models"))
    parser.add_argument("--models", default="bert,llama")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    models = [mb.MODELS_BY_NAME[name] for name in args.models.split(",")]
    if not args.compiled.exists() and mb.prepare(args.compiled, models):
        return 1
    rows = []
    for model in models:
        with tempfile.TemporaryDirectory(prefix="first-call-bg-") as caches:
            for variant, cache in RUNS:
                spec = {"model": model.name, "variant": variant, "dtype": args.dtype}
                spec["compiled"] = str(args.compiled.resolve())
                saved = {name: os.environ.get(name) for name in ("TRANSPILE_COMPILE", "TRANSPILE_COMPILE_THREADS")}
                os.environ.update(VARIANTS[variant][1])
                try:  # cold: a directory of its own, which the warm run of the variant then reuses
                    found = benchlib.fresh_process(
                        Path(__file__), spec, Path(caches) / variant, f"{model.name} {variant}"
                    )
                finally:
                    for name, value in saved.items():
                        os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
                rows.append({**spec, "cache": cache, **found})
                print(f"done {model.name} {variant} {cache}", file=sys.stderr)
    print(table(rows))
    failures = checks(rows)
    print("\n".join(failures) or "all checks passed")
    if args.json:
        args.json.write_text(json.dumps({"environment": benchlib.environment("cuda"), "runs": rows}, indent=1) + "\n")
    return 1 if failures else 0


def table(rows: list[dict]) -> str:
    lines = [
        "| model | variant | cache | files at start | first call s | second s | all compiled after s | third s "
        "| first call paths | third call paths | max diff 1st vs 3rd |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['model']} | {row['variant']} | {row['cache']} | error: {row['error']} |")
            continue
        compiled = f"{row['compiled_after_s']:.2f}" if "compiled_after_s" in row else "-"
        lines.append(
            f"| {row['model']} | {row['variant']} | {row['cache']} | {row['cache_files_at_start']} "
            f"| {row['first_call_s']:.2f} | {row['second_call_s']:.2f} | {compiled} | {row['third_call_s']:.3f} "
            f"| {short(row['first_kernels'])} | {short(row['third_kernels'])} | {row['max_diff_first_vs_third']:.3g} |"
        )
    return "\n".join(lines)


def checks(rows: list[dict]) -> list[str]:
    """What failed: a background first call slower than eager's + 1 s, a third call short of sync's kernels."""
    failures = []
    for model in dict.fromkeys(row["model"] for row in rows):
        runs = {(row["variant"], row["cache"]): row for row in rows if row["model"] == model and "error" not in row}
        eager, sync = runs.get(("eager", "none")), runs.get(("sync", "cold"))
        if eager is None or sync is None:
            failures.append(f"{model}: the eager or the sync run failed")
            continue
        expected = paths(sync["first_kernels"]).get("triton", 0)
        for (variant, cache), row in runs.items():
            if not variant.startswith("bg"):
                continue
            label = f"{model} {variant} {cache}"
            if row["first_call_s"] > eager["first_call_s"] + 1.0:
                failures.append(
                    f"{label}: first call {row['first_call_s']:.2f} s > eager {eager['first_call_s']:.2f} + 1 s"
                )
            third = paths(row["third_kernels"])
            if third.get("triton", 0) != expected or any("compil" in path for path in third):
                failures.append(f"{label}: third call {third}, the sync first call launched {expected} Triton kernels")
            if not row.get("all_compiled"):
                failures.append(f"{label}: compiles still pending after 300 s")
    return failures


if __name__ == "__main__":
    sys.exit(main())
