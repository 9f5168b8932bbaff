"""Precision and recall of `transpile lint` against Dynamo on whole programs written for it.

    python benchmarks/lint_recall.py [--repo PATH] [--json out.json]

The programs are this checkout's `tests/lint_corpus/*.py` and the `PROGRAMS` of
`tests/test_rules_recall.py` (read from this checkout, so that `--repo` can lint the same
programs with the rules of another checkout, e.g. a clean one of an older commit).

For each program, the lines where the linter reports a finding of a `break` rule are compared
with the lines where Dynamo breaks (`tests/dynamo_harness.py` of `--repo`): the break lines of
`torch._dynamo.explain` and the line of the `fullgraph=True` error. When Dynamo skipped the
frame (a break under a loop) it names no line; the lines marked `# break` stand for it then.
precision = |reported ∩ Dynamo| / |reported|, recall = |reported ∩ Dynamo| / |Dynamo|, summed
over the programs. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def programs() -> dict[str, str]:
    """This checkout's programs, by name."""
    found = {path.stem: path.read_text(encoding="utf-8") for path in sorted((HERE / "tests/lint_corpus").glob("*.py"))}
    tree = ast.parse((HERE / "tests/test_rules_recall.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PROGRAMS" for t in node.targets):
            found.update({name: text.lstrip("\n") for name, text in ast.literal_eval(node.value).items()})
    return found


def measure(name: str, source: str) -> dict:
    from tests.dynamo_harness import run_example
    from tests.rule_examples import lint_snippet
    from transpiler.lint.rule import REGISTRY

    reported = {d.line for d in lint_snippet(source) if REGISTRY[d.code].family == "break"}
    report = run_example(source, name=name)
    breaks = set(report.break_lines)
    if report.fullgraph_error_line is not None:
        breaks.add(report.fullgraph_error_line)
    if report.frame_skipped and not breaks:
        breaks = {n for n, line in enumerate(source.splitlines(), 1) if line.endswith("# break")}
    return {"name": name, "reported": sorted(reported), "dynamo": sorted(breaks), "hits": len(reported & breaks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=HERE, help="the checkout whose linter is measured")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(args.repo.resolve()))
    warnings.filterwarnings("ignore")
    rows = [measure(name, source) for name, source in programs().items()]
    hits = sum(r["hits"] for r in rows)
    reported = sum(len(r["reported"]) for r in rows)
    breaks = sum(len(r["dynamo"]) for r in rows)
    print("| program | lint lines | Dynamo break lines | both |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['reported'] or '–'} | {r['dynamo'] or '–'} | {r['hits']} |")
    precision = hits / reported if reported else float("nan")
    recall = hits / breaks if breaks else float("nan")
    print(
        f"\n{len(rows)} programs: precision {precision:.3f} ({hits}/{reported}), recall {recall:.3f} ({hits}/{breaks})"
    )
    if args.json:
        summary = {"precision": precision, "recall": recall, "hits": hits, "reported": reported, "breaks": breaks}
        args.json.write_text(json.dumps({"repo": str(args.repo), "summary": summary, "programs": rows}, indent=1))


if __name__ == "__main__":
    main()
