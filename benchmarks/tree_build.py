"""The main job on a real tree: `transpile TREE -o OUT` with and without kernels, wall time and peak memory.

    nice python benchmarks/tree_build.py [TREE] [--work DIR] [--json FILE]   # default: transformers/models

Runs, each the real command line in a fresh process, each cold run with its own empty lint cache:
  1. `--no-kernels` into OUT_nok (cold);
  2. with kernels into OUT (cold);
  3. with kernels into OUT again (the lint cache warm): must write nothing, every byte the same.
For each: wall time, CPU time of the process tree, and peak resident memory of the whole process
tree (the build's worker processes included: /usr/bin/time reports the largest single process only),
sampled every 0.2 s from /proc. The sources are hashed before and after: they must not change.
Prints a markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

CLI = [sys.executable, "-m", "transpiler"]
_PAGE = os.sysconf("SC_PAGE_SIZE")


def default_tree() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        sys.exit("transformers is not installed; pass a TREE")
    return Path(spec.origin).parent / "models"


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under `root`: its content hash and modification time."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[path.relative_to(root).as_posix()] = (
                hashlib.sha256(path.read_bytes()).hexdigest(),
                path.stat().st_mtime_ns,
            )
    return found


def _tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants, now."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, parent = int(entry), int(fields[1])
        children.setdefault(parent, []).append(pid)
        rss[pid] = int(fields[21]) * _PAGE
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        total += rss.get(pid, 0)
        pending += children.get(pid, [])
    return total


def code_version() -> str:
    """The commit of the transpile checkout that runs (`+changes` where its tracked files differ from it)."""
    root = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(root)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout
    return f"{commit or 'unknown'}{'+changes' if changed.strip() else ''}"


def measure(args: list[str], env: dict[str, str]) -> dict:
    """Run `transpile ARGS`: wall seconds, CPU seconds of the tree, peak tree RSS, exit status, summary."""
    start = time.perf_counter()
    before = os.times()
    # Into files, not pipes: a summary of thousands of lines would fill a pipe nobody reads until the end.
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen([*CLI, *args], env=env, stdout=stdout, stderr=stderr, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.2)
        stdout.seek(0), stderr.seek(0)
        out, err = stdout.read(), stderr.read()
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    summary = [line for line in out.splitlines() if line.startswith(("Transpiled", "Compiled"))]
    return {
        "args": args,
        "exit": proc.returncode,
        "wall_s": round(time.perf_counter() - start, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mb": round(peak / 2**20),
        "summary": [s[:200] for s in summary],
        "stderr_tail": err[-500:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree", nargs="?", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=Path("/tmp/tree_build"), help="outputs and caches go here")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    tree = args.tree or default_tree()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    files = list(tree.rglob("*.py"))
    lines = sum(f.read_bytes().count(b"\n") for f in files)
    sources = snapshot(tree)
    env = {**os.environ, "TRANSPILE_TRACEBACK": ""}
    load = [round(x, 2) for x in os.getloadavg()]
    runs = {}
    for name, out, cache, extra in (
        ("no-kernels", work / "out_nok", work / "cache_nok", ["--no-kernels"]),
        ("kernels", work / "out", work / "cache", []),
    ):
        for stale in (out, cache):
            subprocess.run(["rm", "-rf", str(stale)], check=True)
        runs[name] = measure([str(tree), "-o", str(out), *extra], {**env, "TRANSPILE_CACHE_DIR": str(cache)})
        print(name, runs[name], file=sys.stderr, flush=True)
    first = snapshot(work / "out")
    runs["kernels, second run"] = measure(
        [str(tree), "-o", str(work / "out")], {**env, "TRANSPILE_CACHE_DIR": str(work / "cache")}
    )
    second = snapshot(work / "out")
    report = {
        "tree": str(tree),
        "python_files": len(files),
        "lines": lines,
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "code": code_version(),
        "load_average_before_after": [load, [round(x, 2) for x in os.getloadavg()]],  # other users of the CPUs
        "versions": {p: version(p) for p in ("transpile", "black", "torch", "transformers")},
        "runs": runs,
        "second_run_identical": first == second,  # same bytes and same modification times: nothing written
        "second_run_changed": sorted(k for k in first.keys() | second.keys() if first.get(k) != second.get(k))[:20],
        "sources_unmodified": snapshot(tree) == sources,
        "ratio_wall": round(runs["kernels"]["wall_s"] / runs["no-kernels"]["wall_s"], 2),
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    print("\n| run | wall s | CPU s (tree) | peak RSS, tree (MB) | exit |\n|---|---:|---:|---:|---:|")
    for name, run in runs.items():
        print(f"| {name} | {run['wall_s']} | {run['cpu_s']} | {run['peak_rss_mb']} | {run['exit']} |")


if __name__ == "__main__":
    main()
