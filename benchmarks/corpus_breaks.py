"""Dynamo's graph breaks in a corpus of model files, before and after `transpile`, and the lint against them.

    nice python benchmarks/corpus_breaks.py [--corpus benchmarks/corpus] [--only seq_ctc,vis_nms] [--timeout 300]
                                            [--json out.json] [--markdown out.md]

The corpus (benchmarks/corpus, see its README) is model files written by people who did not read the rewrites
or the rules, in the styles of research code; each defines `build() -> (model, args)`. The whole folder is
transpiled twice, as a user would (`transpile build DIR -o OUT --no-kernels`, then with `--unsafe-fixes`), and
then each file is measured in its own interpreter the way `break_families.py` measures a transformers family:
the original's forward (twice: a file whose two runs differ is marked nondeterministic), Dynamo's break
statements (`explain` of the model itself, the frame `torch.compile(model)` starts from, with the graph_breaks
log), `transpile lint` against them (precision and recall over the statements the forward executed), and for
each transpiled version its output against the original's (`equal` bit for bit, `within tolerance` of
torch.testing's float32 defaults, or `different`), the same for the transpiled model compiled with AOTAutograd
(or `error` where it does not compile), and its breaks. The
transpiled model gets the original's `state_dict`, so only the code differs.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import copy
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import break_families as bf

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).resolve().parent / "corpus"


def load(path: Path, name: str) -> Any:
    """The module at `path`, imported under `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def forward(model: Any, args: tuple) -> Any:
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        return model(*copy.deepcopy(args))


def compare(expected: Any, actual: Any) -> tuple[str, str]:
    """equal (bit for bit, NaN where NaN was) / within tolerance / different, with the detail."""
    import torch

    try:
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
        return "equal", ""
    except AssertionError:
        pass
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True)
        return "within tolerance", ""
    except AssertionError as error:
        return "different", bf._short(error)


def measure_file(stem: str, outs: dict[str, Path]) -> dict:
    """One corpus file, in this process: the original and each transpiled version (`outs`: version -> folder)."""
    import torch

    torch.set_num_threads(1)
    row: dict = {"family": stem}
    try:
        module = load(CORPUS / f"{stem}.py", f"corpus_original_{stem}")
        model, args = module.build()
        with bf._graph_break_log():
            executed, first = bf._executed_lines(functools.partial(forward, model, args), CORPUS)
            expected = forward(model, args)
    except Exception as error:
        return {**row, "status": "error", "stage": "original", "error": bf._short(error)}
    row["model_class"] = type(model).__name__
    row["nondeterministic"] = compare(first, expected)[0] != "equal"
    state = {name: value.clone() for name, value in model.state_dict().items()}
    row["before"] = explain(model, args, [CORPUS])
    row["lint"] = bf.lint_against_dynamo(CORPUS, row["before"], executed)
    for version, out in outs.items():
        row[version] = transpiled(stem, version, out, expected, state)
    done = all(row[v].get("error") is None for v in ("before", *outs))
    row["status"] = ("ok" if outs else "screened") if done else "error"
    if not done:
        row["stage"], row["error"] = next((v, row[v]["error"]) for v in ("before", *outs) if row[v].get("error"))
    return row


def explain(model: Any, args: tuple, folders: list[Path]) -> dict:
    """break_families.explain for a model called with positional arguments (the model itself is the frame
    Dynamo compiles, as with `torch.compile(model)`)."""
    return bf.explain(model, {}, folders, args)


def transpiled(stem: str, version: str, out: Path, expected: Any, state: dict) -> dict:
    stage = "import"
    try:
        module = load(out / f"{stem}.py", f"corpus_{version}_{stem}")
        stage = "build"
        model, args = module.build()
        stage = "weights"
        model.load_state_dict(state)
        stage = "forward"
        with bf._graph_break_log():
            actual = forward(model, args)
    except Exception as error:
        return {"error": f"{stage}: {bf._short(error)}"}
    result: dict = {}
    result["output"], result["output_detail"] = compare(expected, actual)
    result["compiled_output"], result["compiled_detail"] = compiled_forward(model, args, expected)
    result.update(explain(model, args, [out, CORPUS]))
    # Breaks at the calls of the helpers TP501 isolates a loop's breaks into (`torch.compiler.disable`d): the
    # break is still there, moved out of the loop (counted as isolated, not removed).
    result["isolated"] = len(
        {(b["file"], b["statement"]) for b in result.get("detail", []) if b["file"] and _isolating(b["text"] or "")}
    )
    return result


def compiled_forward(model: Any, args: tuple, expected: Any) -> tuple[str, str]:
    """The transpiled model under `torch.compile` (AOTAutograd, eager kernels: what Dynamo and the rewrites
    decide, without Inductor's rounding) against the original's eager output; `error` if it does not compile."""
    import torch

    torch._dynamo.reset()
    try:
        with bf._graph_break_log():
            actual = forward(torch.compile(model, backend="aot_eager"), args)
    except Exception as error:
        return "error", bf._short(error)
    finally:
        torch._dynamo.reset()
    return compare(expected, actual)


def _isolating(text: str) -> bool:
    return "_isolated_" in text or text.startswith("@torch.compiler.disable")


def build_versions(work: Path) -> tuple[dict[str, Path], dict]:
    """`transpile build` of the corpus once per version; the output folders and each build's summary."""
    outs, summaries = {}, {}
    for version in bf.VERSIONS:
        out = work / version
        command = [sys.executable, "-m", "transpiler", "build", "--no-cache", "--format", "json", "--no-kernels"]
        command += [*bf.FLAGS[version], str(CORPUS), "-o", str(out)]
        run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if run.returncode not in (0, 1):  # 1: findings left
            raise SystemExit(f"transpile build ({version}) failed: {run.stderr.strip()[-2000:]}")
        summary = json.loads(run.stdout[run.stdout.index("{") :])
        outs[version] = out
        summaries[version] = {
            "fixes": dict(collections.Counter(fix["code"] for fix in summary.get("fixes", []))),
            "left": dict(collections.Counter(left["code"] for left in summary.get("left", []))),
        }
    return outs, summaries


def run_one(stem: str, outs: dict[str, Path], timeout: float, env: dict) -> dict:
    command = [sys.executable, __file__, "--child", stem, "--corpus", str(CORPUS)]
    command += ["--outs", json.dumps({v: str(p) for v, p in outs.items()})]
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="corpus_cwd_") as cwd:  # files a forward writes land here
        try:
            run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
        except subprocess.TimeoutExpired:
            return {"family": stem, "status": "error", "stage": "timeout", "error": f"over {timeout:g} s"}
    lines = [line for line in run.stdout.splitlines() if line.startswith('{"family"')]
    if run.returncode != 0 or not lines:
        tail = run.stderr.strip().splitlines()[-1:] or [f"exit code {run.returncode}"]
        return {"family": stem, "status": "error", "stage": "crash", "error": bf._short(tail[0])}
    row = json.loads(lines[-1])
    row["wall_s"] = round(time.monotonic() - began, 1)
    return row


def main(argv: list[str] | None = None) -> int:
    global CORPUS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="the folder of model files")
    parser.add_argument("--only", help="comma-separated file stems (default: every .py file of the corpus)")
    parser.add_argument("--jobs", type=int, default=1, help="files measured at a time")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    parser.add_argument("--json", type=Path, help="write every file's row and the totals here")
    parser.add_argument("--markdown", type=Path, help="write the report here too")
    parser.add_argument("--before-only", action="store_true", help="the original's breaks and the lint only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--outs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    CORPUS = args.corpus.resolve()
    if args.child:
        outs = {v: Path(p) for v, p in json.loads(args.outs).items()}
        print(json.dumps(measure_file(args.child, outs)))
        return 0
    stems = sorted(p.stem for p in CORPUS.glob("*.py") if not p.name.startswith("_"))
    if args.only:
        stems = [s for s in stems if s in args.only.split(",")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="corpus_breaks_") as work:
        outs, summaries = ({}, {}) if args.before_only else build_versions(Path(work))
        rows = []
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = [pool.submit(run_one, stem, outs, args.timeout, env) for stem in stems]
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                row = future.result()
                rows.append(row)
                brief = {v: row[v].get("statements", "error") for v in ("before", *bf.VERSIONS) if v in row}
                print(
                    f"[{done}/{len(stems)}] {row['family']}: {row['status']} {brief or row.get('error')}",
                    file=sys.stderr,
                    flush=True,
                )
    rows.sort(key=lambda r: r["family"])
    summary = bf.totals(rows)
    command = "python benchmarks/corpus_breaks.py " + " ".join(argv if argv is not None else sys.argv[1:])
    report = bf.render(rows, summary, time.monotonic() - began, command.strip()).replace("| family |", "| file |", 1)
    isolated = {v: sum(r[v].get("isolated", 0) for r in rows if r["status"] == "ok") for v in bf.VERSIONS}
    report += f", transpile at {bf._commit()}\n\nOf the break statements left, at the calls of isolated helpers: "
    report += ", ".join(f"{v} {n}" for v, n in isolated.items())
    report += "\n\nFixes applied: " + json.dumps(summaries)
    print(report)
    if args.markdown:
        args.markdown.write_text(report + "\n")
    if args.json:
        args.json.write_text(json.dumps({"files": rows, "totals": summary, "builds": summaries}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
