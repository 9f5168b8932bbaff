"""The compiler's pass list (transpiler/compiler/passes.py): the IR after each pass, golden per fixture.

`transpile explain --passes FILE` prints what each pass made of the file; the goldens under
tests/golden/passes/ are that output for every fixture, regenerated with TRANSPILE_UPDATE_GOLDEN=1 and
read as a reviewer whenever a pass changes what it does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from transpiler.compiler.passes import PASSES, compile_unit, start

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "passes"
FIXTURES = sorted((ROOT / "fixtures" / "models").glob("*.py"))


def _explain(path: Path, tmp_path: Path, *flags: str) -> str:
    env = {**os.environ, "TRANSPILE_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "transpiler", "explain", *flags, path.relative_to(ROOT).as_posix()]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_ir_after_each_pass_matches_the_golden(path, tmp_path):
    got = _explain(path, tmp_path, "--passes")
    golden = GOLDEN / f"{path.stem}.txt"
    if os.environ.get("TRANSPILE_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(got)
    assert got == golden.read_text()
    # every pass reports, in the order the build runs them
    headers = [line.split(":")[0].removeprefix("== after ") for line in got.splitlines() if line.startswith("== after")]
    assert headers[: len(PASSES)] == [p.name for p in PASSES]


def test_passes_thread_provenance_through_rewritten_text():
    # A statement split into a hoisted temporary, after a fix added two lines above it: the regions name
    # the lines of the file as written.
    disk = "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def forward(self, x, y):\n        z = torch.relu(x * 2 + 1) @ y\n        return z\n"
    text = disk.replace("from torch import nn\n", "from torch import nn\n# added\n# by a fix\n")
    unit = compile_unit(start("m.py", "m", False, disk, text, frozenset({"m.M.forward"})))
    assert unit.splits == 1 and len(unit.regions) == 1
    shown = unit.shown(unit.regions[0])
    assert (shown.first_line, shown.last_line) == (7, 7)
    assert {n.line for n in shown.nodes} == {7}
