"""Is every transformers family a drop-in after `transpile`? Each family folder, transpiled on its own.

    nice python benchmarks/hf_families_check.py [--only bart,align] [--jobs 2] [--timeout 600]
                                                [--json out.json] [--tools ../shared/tools] [--verify CASES]

For each family of the installed `transformers/models` that `hf_families.py` (the shared tool
that builds a tiny random model and its inputs per family; `--tools` says where it is) can
build, a child process

1. builds the tiny model from the original code (config, seed and inputs chosen there),
2. runs `transpile build <transformers>/models/<family> -o <tmp>/pkg/<family>` (kernels on),
3. builds the same class from the transpiled modeling file with the ORIGINAL's config object
   and seed, runs both on the same inputs and compares every output tensor (the transpiled model
   is called CALLS times, each compared: the third call replays the tapes of its graphed forwards),
4. reads the runtime's counters (`_transpile_runtime.counters()`): which path each kernel
   call took (`cpp`, `triton`, or a fallback with its reason);
5. with `--verify CASES`: captures the kernels' calls of those forwards (`TRANSPILE_CAPTURE_CALLS`)
   and runs `transpile verify` on the tree with them and CASES drawn cases per kernel: each kernel
   judged on the family's own inputs too.

Families run in parallel, at most `--jobs` at a time, each under `--timeout` seconds. The C++
builds go to one cache directory shared by all runs (`TRANSPILE_CACHE_DIR`, default
`~/.cache/transpile-hf-families`), so a rerun compiles nothing that did not change. Prints a
table of the families that are not equal-with-a-kernel, then a JSON summary (also written to
`--json` with every family's row).

Statuses: `equal` (outputs within tolerance), `differs`, `transpile` (the build failed),
`import`/`build`/`forward` (the transpiled code failed there), `timeout`, and `skipped` (the
original itself does not build or run at a tiny size: not a transpile result).

Tolerance: the tool's default (`compare_outputs`: rtol 1e-4, atol 1e-5), which covers the
float32 rounding of a reordered sum for the tiny widths here (64: sqrt(64) * 2**-24 * |x| per
reduction, about 5e-7 relative) many times over, except for elements near zero computed from large
terms: those are judged against the original run in float64 (`_as_accurate`: the transpiled output no
further from it than twice the original's own distance), and listed as `equal_by_float64`.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TOOLS = ROOT.parent / "shared" / "tools"
DEFAULT_CACHE = Path.home() / ".cache" / "transpile-hf-families"
KERNEL_PATHS = ("cpp", "triton")  # counter keys of calls a generated kernel computed
# Transpiled forwards per family, each compared with the original's: the third replays the tapes the second
# recorded (emit/runtime/tapes.py); a family that differs says at which call (`call`).
CALLS = 3


def check(family: str, tools: Path, work: Path, verify_cases: int = 0) -> dict:
    """One family, in this process: build, transpile, compare, count; with `verify_cases`, also `transpile verify`
    on the calls the transpiled forwards made (captured) and that many drawn cases per kernel. A JSON-able row."""
    sys.path.insert(0, str(tools))
    import hf_families as hff
    import torch

    torch.set_num_threads(1)  # families run side by side
    row: dict = {"family": family}
    started = time.monotonic()
    try:
        original, inputs = hff.tiny_model(family)
        torch.manual_seed(hff.SEED)  # both forwards draw the same numbers (reformer's hashing is random)
        expected = hff.run_forward(original, inputs)
    except Exception as error:  # the tool cannot build this family at a tiny size
        return {**row, "status": "skipped", "reason": _short(error)}
    row["model_class"] = type(original).__name__
    del original

    from click.testing import CliRunner

    from transpiler.cli.main import main

    package = f"transpiled_{family}"
    out = work / package / family
    begin = time.monotonic()
    build = CliRunner().invoke(main, ["build", "--no-cache", os.path.join(hff.models_root(), family), "-o", str(out)])
    row["transpile_s"] = round(time.monotonic() - begin, 1)
    if build.exit_code not in (0, 1):  # 1: findings left, kept as they were
        return {**row, "status": "transpile", "reason": _short(build.output or build.exception)}
    (work / package / "__init__.py").touch()
    sys.path.insert(0, str(work))
    report = json.loads((out / "transpile-report.json").read_text())
    row["regions"] = sum(len(f["regions"]) for f in report["files"])

    calls = work / "calls"
    if verify_cases:  # read when the tree's runtime is imported, below
        os.environ["TRANSPILE_CAPTURE_CALLS"] = str(calls)
    stage = "import"
    try:
        module = importlib.import_module(f"{package}.{family}.{hff._modeling_files(family)[0][:-3]}")
        stage = "build"
        compiled, inputs = hff.tiny_model(family, module=module)
        stage = "forward"
        begin = time.monotonic()
        torch.manual_seed(hff.SEED)
        actual = hff.run_forward(compiled, inputs)
        row["forward_s"] = round(time.monotonic() - begin, 1)
        # The later calls: a graphed forward's second call records its tape (on the CPU), the third replays it.
        for call in range(2, CALLS + 1):
            torch.manual_seed(hff.SEED)
            again = hff.run_forward(compiled, inputs)
            equal, detail = hff.compare_outputs(expected, again)
            if not equal:
                actual = again
                row["call"] = call
                break
        row["replays"] = _replays(package, family)
    except Exception as error:
        return {**row, "status": stage, "reason": _short(error), "counters": _counters(package, family)}
    equal, detail = hff.compare_outputs(expected, actual)
    row.update(status="equal" if equal else "differs", detail=detail, counters=_counters(package, family))
    if not equal:
        row["max_rel"] = _max_relative(hff, expected, actual)
        rounding = _as_accurate(hff, family, expected, actual)
        if rounding is not None:
            row.update(status="equal", rounding=rounding, detail=f"{detail}; {rounding}")
    if verify_cases and calls.is_dir():
        row["verify"] = _verify(out, calls, verify_cases)
    row["seconds"] = round(time.monotonic() - started, 1)
    return row


def _verify(out: Path, calls: Path, cases: int) -> dict:
    """`transpile verify OUT --calls CALLS` in a process of its own (it imports the tree's runtime afresh): the
    counts of outcomes, the kernels found different, and how many captured calls were checked."""
    command = [sys.executable, "-m", "transpiler", "verify", str(out), "--calls", str(calls), "--cases", str(cases)]
    done = subprocess.run([*command, "--format", "json"], capture_output=True, text=True, cwd=ROOT)
    if done.returncode not in (0, 1):
        return {"error": _short(done.stderr[-600:])}
    report = json.loads(done.stdout)
    different = [
        f"{k['kernel']} ({k['source']}): {k['detail']}; {k['case']}"
        for k in report["kernels"]
        if k["outcome"] == "different"
    ]
    captured = sum(k["captured"] for k in report["kernels"])
    return {"counts": report["counts"], "captured_calls": captured, "different": different}


def _replays(package: str, family: str) -> dict[str, int]:
    """What the calls of the graphed forwards ran (`default_graph_counts()`: tape replays, and why not)."""
    try:
        runtime = importlib.import_module(f"{package}.{family}._transpile_runtime")
    except ImportError:
        return {}
    return dict(runtime.default_graph_counts())


def _counters(package: str, family: str) -> dict[str, dict[str, int]]:
    """Per kernel, how often each path ran (empty when the output has no runtime: no regions)."""
    try:
        runtime = importlib.import_module(f"{package}.{family}._transpile_runtime")
    except ImportError:
        return {}
    return {name.split(" (")[0]: dict(counts) for name, counts in runtime.counters().items()}


def _max_relative(hff, expected, actual) -> float | None:
    """The largest difference of an output tensor over that tensor's largest magnitude."""
    worst = None
    for (_, x), (_, y) in zip(hff.flatten_outputs(expected), hff.flatten_outputs(actual)):
        if x.shape == y.shape and x.is_floating_point() and y.is_floating_point() and x.numel():
            scale = x.abs().max().item() or 1.0
            worst = max(worst or 0.0, (x - y).abs().max().item() / scale)
    return worst


def _as_accurate(hff, family: str, expected, actual) -> str | None:
    """Why outputs that `compare_outputs` finds apart are float32 rounding, or None where they are not.

    An element near zero computed from large terms (a dot product that cancels) carries the rounding of
    those terms, not of itself, so an elementwise relative tolerance cannot judge it. The exact result
    can: the original model run in float64 on the same inputs. The transpiled output is taken as equal
    where, per output tensor, its distance to that result is at most twice the original's own float32
    distance (or 2 ulps of the tensor's largest magnitude): it is as accurate as the original. A model
    that does not run in float64 is left as it was found (differs)."""
    import torch

    try:
        original, inputs = hff.tiny_model(family)
        torch.manual_seed(hff.SEED)
        exact = hff.run_forward(original.double(), _to_double(inputs))
    except Exception:
        return None
    worst = 0.0
    triples = zip(hff.flatten_outputs(expected), hff.flatten_outputs(actual), hff.flatten_outputs(exact))
    for (_, x), (_, y), (_, t) in triples:
        if not (x.is_floating_point() and t.is_floating_point()) or x.shape != t.shape or not x.numel():
            continue
        if x.isnan().any() or y.isnan().any():  # NaN placement is compared exactly by compare_outputs
            return None
        ulp = torch.finfo(x.dtype).eps * t.abs().max().item()
        own, ours = (x.double() - t).abs().max().item(), (y.double() - t).abs().max().item()
        if ours > 2 * max(own, ulp):
            return None
        worst = max(worst, ours / max(own, ulp))
    return f"float32 rounding: at most {worst:.2f}x the original's own distance to its float64 result"


def _to_double(value):
    """Inputs with their floating tensors in float64 (ids, masks and other integers as they are)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.double() if value.is_floating_point() else value
    if isinstance(value, dict):
        return {k: _to_double(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_double(v) for v in value)
    return value


def _short(error: object, n: int = 300) -> str:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return " ".join(str(text).split())[:n]


def summarise(rows: list[dict]) -> dict:
    """The figures: how many build (are not skipped), are equal, run a generated kernel."""
    built = [r for r in rows if r["status"] != "skipped"]
    ran = [r for r in built if r["status"] == "equal" and _ran_a_kernel(r)]
    statuses = collections.Counter(r["status"] for r in rows)
    return {
        "families": len(rows),
        "build": len(built),
        "equal": statuses["equal"],
        "equal_with_a_kernel": len(ran),
        "statuses": dict(sorted(statuses.items())),
        "not_equal": sorted(r["family"] for r in built if r["status"] != "equal"),
        "equal_without_a_kernel": sorted(r["family"] for r in built if r["status"] == "equal" and not _ran_a_kernel(r)),
        "equal_by_float64": sorted(r["family"] for r in built if r.get("rounding")),
        "verified": {
            "families": sum("verify" in r for r in rows),
            "captured_calls": sum(r.get("verify", {}).get("captured_calls", 0) for r in rows),
            "kernels": dict(
                sum((collections.Counter(r.get("verify", {}).get("counts", {})) for r in rows), collections.Counter())
            ),
            "different": sorted(r["family"] for r in rows if r.get("verify", {}).get("different")),
            "errors": sorted(r["family"] for r in rows if "error" in r.get("verify", {})),
        },
    }


def _ran_a_kernel(row: dict) -> bool:
    return any(counts.get(path) for counts in row.get("counters", {}).values() for path in KERNEL_PATHS)


def _why_no_kernel(row: dict) -> str:
    """The fallback reasons of a family whose kernels all fell back, or that it has no regions."""
    reasons = collections.Counter(
        path for counts in row.get("counters", {}).values() for path, n in counts.items() for _ in range(n)
    )
    if not row.get("regions"):
        return "no regions"
    if not reasons:
        return "no kernel called"
    return "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common(3))


def run_one(family: str, args: argparse.Namespace, env: dict) -> dict:
    """`check` in a fresh interpreter (imports, C++ libraries and crashes stay there), under the timeout."""
    with tempfile.TemporaryDirectory(prefix=f"hf15_{family}_") as work:
        command = [sys.executable, __file__, "--child", family, "--tools", str(args.tools), "--work", work]
        command += ["--verify", str(args.verify)] if args.verify else []
        begin = time.monotonic()
        try:
            run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return {"family": family, "status": "timeout", "reason": f"over {args.timeout} s"}
        lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
        if run.returncode != 0 or not lines:
            return {"family": family, "status": "crash", "reason": _short(run.stderr[-600:] or run.returncode)}
        row = json.loads(lines[-1])
        row["wall_s"] = round(time.monotonic() - begin, 1)
        return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated family names")
    parser.add_argument("--first", help="comma-separated families to run before the others")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per family")
    parser.add_argument("--json", type=Path, help="write every family's row and the summary here")
    parser.add_argument("--tools", type=Path, default=DEFAULT_TOOLS, help="the directory of hf_families.py")
    parser.add_argument(
        "--verify",
        type=int,
        default=0,
        metavar="CASES",
        help="also run `transpile verify` on each family's tree: the kernels' calls its forwards made, and CASES drawn",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(check(args.child, args.tools, args.work, args.verify)))
        return 0

    sys.path.insert(0, str(args.tools))
    import hf_families as hff

    families = args.only.split(",") if args.only else hff.families()
    if args.first:  # these first (e.g. the ones a change is about), then the rest in order
        first = [f for f in args.first.split(",") if f in families]
        families = first + [f for f in families if f not in first]
    env = {**os.environ, "TRANSPILE_CACHE_DIR": os.environ.get("TRANSPILE_CACHE_DIR", str(DEFAULT_CACHE))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    rows = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run_one, family, args, env): family for family in families}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            row = future.result()
            rows.append(row)
            print(
                f"[{done}/{len(families)}] {json.dumps(row)}", file=sys.stderr, flush=True
            )  # a long run's rows so far
    rows.sort(key=lambda r: r["family"])
    print("| family | status | why |\n|---|---|---|")
    for row in rows:
        if row["status"] not in ("equal", "skipped"):
            print(f"| {row['family']} | {row['status']} | {row.get('reason') or row.get('detail', '')} |")
        elif row["status"] == "equal" and not _ran_a_kernel(row):
            print(f"| {row['family']} | equal, no kernel ran | {_why_no_kernel(row)} |")
        for different in row.get("verify", {}).get("different", []):
            print(f"| {row['family']} | verify: different | {different} |")
    summary = summarise(rows)
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "families": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
