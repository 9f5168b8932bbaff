"""The build on big and pathological inputs (issue 15): a file that cannot be compiled costs only its own
kernels, the compile work grows linearly with a chain's length, and the output depends neither on where
the sources are nor on how many workers compiled them.

Work is counted as Python function calls (deterministic on any machine), never timed.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from transpiler.pipeline.rules import load_rules
from transpiler.cli.main import main
from transpiler.pipeline.compiling import Compiled, Job, compile_file
from transpiler.lint.engine import ProjectFacts
from transpiler.source.reading import MAX_SOURCE_BYTES
from transpiler.pipeline.build import JOURNAL, MANIFEST

load_rules()

HEADER = "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def forward(self, x):\n"
FUSIBLE = HEADER + "        y = x * 2.0 + 1.0\n        return torch.relu(y) * 0.5\n"


def chain(terms: int) -> str:
    """One expression of `terms` additions: as deep as it is long."""
    return HEADER + "        return " + " + ".join(["x"] * terms) + "\n"


def statements(count: int) -> str:
    """A forward of `count` fusible statements in a row."""
    return HEADER + "        y = x * 2.0\n" + "        y = y * 2.0 + 1.0\n" * count + "        return y\n"


@pytest.fixture
def build(tmp_path, monkeypatch):
    """`build(*args)`: `transpile build ARGS`, in-process, caching under tmp_path; returns (exit code, stdout)."""
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRANSPILE_TRACEBACK", raising=False)
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, ["build", *map(str, args)], catch_exceptions=False)
        return result.exit_code, result.stdout

    return run


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def contents(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file under `root` by relative path: its content's hash."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in skip
    }


# -- one file's failure never stops the others ----------------------------------------------------
def test_deep_expressions_do_not_abort_the_tree(tmp_path, build):
    src = write(
        tmp_path / "src",
        {
            "model.py": FUSIBLE,
            "chain.py": chain(5000),
            "negated.py": HEADER + "        return " + "-" * 5000 + "x\n",
        },
    )
    before = contents(src)
    code, out = build("src", "-o", "out")
    assert code == 1, out  # the two files are findings left
    assert (tmp_path / "out" / "_model_kernels.py").is_file()  # the other file has its kernels
    for name in ("chain.py", "negated.py"):
        assert (tmp_path / "out" / name).read_bytes() == (src / name).read_bytes()
        assert not (tmp_path / "out" / f"_{Path(name).stem}_kernels.py").exists()
        (line,) = [line for line in out.splitlines() if f"/{name}:" in line and "TP901" in line]
        assert "nested deeper" in line, out  # says why
    assert contents(src) == before


def test_a_failed_compile_is_reported_with_its_file_and_the_file_written_without_kernels(tmp_path):
    path = write(tmp_path, {"deep.py": chain(5000)}) / "deep.py"
    facts = ProjectFacts(frozenset({"deep.M.forward"}), {})
    # The lint analyses this file (its recursion is shallower than the translator's); the compile cannot.
    outcome = compile_file(Job(path, None, "src/deep.py", "deep", 0, "deep"), facts)
    assert outcome.src == path
    assert (outcome.diagnostic.path, outcome.diagnostic.code) == (str(path), "TP901")
    assert outcome.diagnostic.message.endswith("nested deeper than the compiler supports; written without kernels")


def test_a_file_over_the_size_limit_is_reported_and_copied(tmp_path, build):
    big = FUSIBLE + "# padding\n" * (MAX_SOURCE_BYTES // 10 + 1)
    src = write(tmp_path / "src", {"big.py": big, "model.py": FUSIBLE})
    code, out = build("src", "-o", "out")
    assert code == 1
    assert (tmp_path / "out" / "big.py").read_text() == big
    assert not (tmp_path / "out" / "_big_kernels.py").exists()
    assert (tmp_path / "out" / "_model_kernels.py").is_file()
    assert "out/big.py:1:1: TP901 file too large to analyse (1.0 MiB; the limit is 1 MiB); copied unchanged" in out
    assert src.joinpath("big.py").read_text() == big


# -- linear work ----------------------------------------------------------------------------------
def _calls(text: str, tmp_path: Path) -> tuple[int, object]:
    """Python function calls made compiling `text` as module `m` (whose M.forward runs compiled)."""
    path = tmp_path / "m.py"
    path.write_text(text)
    count = 0

    def tick(frame, event, arg) -> None:
        nonlocal count
        count += event == "call"

    sys.setprofile(tick)
    try:
        outcome = compile_file(Job(path, None, "m.py", "m", 0, "m"), ProjectFacts(frozenset({"m.M.forward"}), {}))
    finally:
        sys.setprofile(None)
    return count, outcome


@pytest.mark.parametrize("program", [chain, statements], ids=["one-expression", "statements"])
def test_compile_work_grows_linearly_with_a_chain(program, tmp_path):
    small, _ = _calls(program(100), tmp_path)
    large, outcome = _calls(program(800), tmp_path)
    if program is statements:  # cut into regions of regions.MAX_NODES nodes, all compiled
        assert isinstance(outcome, Compiled) and len(outcome.regions) > 1
    # 8 times the length: linear work is about 8 times as much (plus a constant), quadratic 64 times.
    assert large / small < 12, (small, large)


# -- the output depends on the sources only -------------------------------------------------------
MODELS = {f"pkg/m{n}.py": FUSIBLE.replace("2.0", f"{n + 2}.0") for n in range(8)} | {"pkg/__init__.py": ""}


def test_absolute_and_relative_sources_give_the_same_bytes(tmp_path, build, monkeypatch):
    write(tmp_path / "src", MODELS)
    # OUT spelled the same (the report names it as given), SRC relative, then absolute.
    (tmp_path / "rel").mkdir(), (tmp_path / "abs").mkdir()
    monkeypatch.chdir(tmp_path / "rel")
    assert build("../src/pkg", "-o", "out")[0] == 0
    monkeypatch.chdir(tmp_path / "abs")
    assert build(tmp_path / "src" / "pkg", "-o", "out")[0] == 0
    # The manifest records modification times (its own bookkeeping); everything else is the same.
    generated = contents(tmp_path / "rel/out", skip=(MANIFEST, JOURNAL))
    assert generated == contents(tmp_path / "abs/out", skip=(MANIFEST, JOURNAL))
    assert str(tmp_path) not in "".join(p.read_text() for p in (tmp_path / "abs/out").rglob("*.py"))
    assert str(tmp_path) not in (tmp_path / "abs/out/transpile-report.json").read_text()


def test_workers_and_a_second_run_change_no_byte(tmp_path, build, monkeypatch):
    write(tmp_path / "src", MODELS)
    (tmp_path / "one").mkdir(), (tmp_path / "two").mkdir()
    monkeypatch.chdir(tmp_path / "one")
    assert build("../src/pkg", "-o", "out", "-j", "1")[0] == 0
    monkeypatch.chdir(tmp_path / "two")
    assert build("../src/pkg", "-o", "out", "-j", "2")[0] == 0  # eight files: compiled in the worker pool
    assert contents(tmp_path / "one/out", skip=(MANIFEST,)) == contents(tmp_path / "two/out", skip=(MANIFEST,))
    written = {p: p.stat().st_mtime_ns for p in (tmp_path / "two/out").rglob("*") if p.is_file()}
    assert build("../src/pkg", "-o", "out", "-j", "2")[0] == 0
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "two/out").rglob("*") if p.is_file()} == written


def test_a_worker_that_dies_costs_only_the_files_it_held(tmp_path, monkeypatch):
    import os

    from transpiler.pipeline import compiling
    from transpiler.pipeline.compiling import Failed, compile_files

    files = write(tmp_path, {f"m{n}.py": FUSIBLE for n in range(10)} | {"bad.py": FUSIBLE})
    jobs = [Job(files / name, None, name, name[:-3], 0, name[:-3]) for name in sorted(os.listdir(files))]
    facts = ProjectFacts(frozenset(f"{job.module}.M.forward" for job in jobs), {})
    compile_one = compiling._compile

    def dies_on_bad(job, *args):  # the workers are forked: they run this
        if job.src.name == "bad.py":
            os._exit(1)  # as the kernel's out-of-memory killer would end it
        return compile_one(job, *args)

    monkeypatch.setattr(compiling, "_compile", dies_on_bad)
    outcomes = {job.src.name: outcome for job, outcome in compile_files(jobs, facts, workers=2)}
    assert sorted(outcomes) == sorted(job.src.name for job in jobs)  # every file answered, once
    assert isinstance(outcomes["bad.py"], Failed) and "died" in outcomes["bad.py"].diagnostic.message
    # Those in flight beside it are lost with it; the files after them are compiled by a new pool.
    assert all(isinstance(o, Compiled) or "died" in o.diagnostic.message for o in outcomes.values())
    assert isinstance(outcomes["m9.py"], Compiled)
