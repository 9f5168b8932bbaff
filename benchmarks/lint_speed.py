"""How fast is `transpile lint`? Cold, warm (cached) and one-file wall times.

    python benchmarks/lint_speed.py [TREE]   # default: the installed transformers/models

Each measurement runs the real command line in a fresh process, as a user or
pre-commit would, on a copy of the tree's package (so one file can be edited for
the "one file changed" run). Prints a markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path


def default_tree() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        sys.exit("transformers is not installed; pass a TREE to lint")
    return Path(spec.origin).parent / "models"


def count_lines(tree: Path) -> tuple[int, int]:
    files = list(tree.rglob("*.py")) if tree.is_dir() else [tree]
    return len(files), sum(f.read_bytes().count(b"\n") for f in files)


def run(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "transpiler.cli.main", "lint", *args], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"transpile lint failed ({done.returncode}):\n{done.stderr}")
    return elapsed, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("tree", nargs="?", type=Path)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median reported)")
    options = parser.parse_args()
    tree = options.tree or default_tree()
    files, lines = count_lines(tree)
    one_file = max(tree.rglob("modeling_*.py"), key=lambda p: p.stat().st_size) if tree.is_dir() else tree

    # A copy of the tree's top-level package, so that one file can be edited for the
    # "one file changed" run without touching the installed original.
    package = tree
    while (package.parent / "__init__.py").exists():
        package = package.parent
    scratch = tempfile.TemporaryDirectory()
    copy = Path(scratch.name) / package.name
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    copied_tree = copy / tree.relative_to(package)
    edited = copied_tree / one_file.relative_to(tree)

    cold, warm, changed, single = [], [], [], []
    for repetition in range(options.repeat):
        with tempfile.TemporaryDirectory() as cache:
            seconds, first = run([str(copied_tree), "--cache-dir", cache, "--statistics"])
            cold.append(seconds)
            seconds, again = run([str(copied_tree), "--cache-dir", cache, "--statistics"])
            warm.append(seconds)
            assert again.stdout == first.stdout, "the cached run disagrees with the cold run"
            with edited.open("a") as handle:  # a new line in one file: that file is analysed again
                handle.write(f"# edit {repetition}\n")
            changed.append(run([str(copied_tree), "--cache-dir", cache, "--statistics"])[0])
        single.append(run([str(one_file), "--no-cache"])[0])
    scratch.cleanup()
    findings = first.stdout.strip().splitlines()[-1]

    cold_s, warm_s, changed_s, single_s = (statistics.median(x) for x in (cold, warm, changed, single))
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"transpile {version('transpile')}, {time.strftime('%Y-%m-%d')}"
    )
    print(f"Tree: {tree} ({files} files, {lines:,} lines); {findings}")
    print()
    print("| measurement | wall (median of %d) | lines/s |" % options.repeat)
    print("|---|---|---|")
    print(f"| cold (empty cache, all cores) | {cold_s:.2f} s | {lines / cold_s:,.0f} |")
    print(f"| warm, tree unchanged (whole-run cache entry) | {warm_s:.2f} s | {lines / warm_s:,.0f} |")
    print(f"| warm, one file changed (per-file cache) | {changed_s:.2f} s | {lines / changed_s:,.0f} |")
    one_lines = one_file.read_bytes().count(b"\n")
    print(
        f"| one file, no cache ({one_file.name}, {one_lines:,} lines) | {single_s:.2f} s | {one_lines / single_s:,.0f} |"
    )


if __name__ == "__main__":
    main()
