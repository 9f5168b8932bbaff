"""Every generated comment that points at the source points at the right line of the file on disk.

The build compiles the text the lint's fixes make of a file (lines added or rewritten above a region
shift it), in which statements are split and copied across `if`s; comments must still name and quote
the file as the reviewer has it (transpiler/compiler/passes.py `provenance`). Built with the default
fixes and with `--unsafe-fixes`, which rewrite more lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from transpiler.compiler.passes import provenance

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "models"

# `models/clean.py:12` or `models/clean.py:12-14`, then (in the module's comments) two spaces and the quoted line.
REFERENCE = re.compile(r"models/(\w+)\.py:(\d+)(?:-(\d+))?(?:  (.*))?")
KERNEL_LINE = re.compile(r"// line (\d+): (.*)")  # the C++ kernels quote each statement they compute
COPIED = re.compile(r"# transpile: (?:line (\d+)|lines (\d+)-(\d+)) and (?:line (\d+)|lines (\d+)-(\d+)) copied")


def _build(tmp_path: Path, *flags: str) -> Path:
    out = tmp_path / "out"
    env = {**os.environ, "TRANSPILE_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "transpiler", "fixtures/models", "-o", str(out), *flags]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode in (0, 1), run.stderr
    return out


def _source(stem: str) -> list[str]:
    return (FIXTURES / f"{stem}.py").read_text().splitlines()


@pytest.mark.parametrize("flags", [(), ("--unsafe-fixes",)], ids=["fixes", "unsafe-fixes"])
def test_every_quoted_line_is_the_source_files_line(tmp_path, flags):
    out = _build(tmp_path, *flags)
    checked = 0
    for path in sorted(out.iterdir()):
        if path.suffix not in (".py", ".cpp") or not path.is_file():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.name}:{number}: {line.strip()}"
            for match in REFERENCE.finditer(line):
                lines = _source(match[1])
                first, last = int(match[2]), int(match[3] or match[2])
                assert 1 <= first <= last <= len(lines), where
                assert lines[first - 1].strip(), f"{where}: names a blank line"
                if match[4] is not None:
                    assert match[4].strip() == lines[first - 1].strip(), where
                    checked += 1
            if (quoted := KERNEL_LINE.search(line)) and path.suffix == ".cpp":
                stem = path.name.removeprefix("_").removesuffix("_kernels.cpp").removesuffix("_backward.cpp")
                assert quoted[2].strip() == _source(stem)[int(quoted[1]) - 1].strip(), where
                checked += 1
            if copied := COPIED.search(line):
                lines = _source(path.stem)
                numbers = [int(n) for n in copied.groups() if n is not None]
                assert all(lines[n - 1].strip() for n in numbers), f"{where}: names a blank line"
                checked += 1
    assert checked > 20  # the fixtures' kernels quote dozens of lines


def test_provenance_maps_rewritten_and_inserted_lines_to_the_lines_they_replace():
    disk = "a\nb\nc\nd\n"
    # a fix inserts an import at the top and rewrites `c` into two lines
    text = "import torch\na\nb\nc1\nc2\nd\n"
    assert provenance(disk, text) == ((1, 1), (1, 1), (2, 2), (3, 3), (3, 3), (4, 4))
    assert provenance(disk, disk) == ((1, 1), (2, 2), (3, 3), (4, 4))
