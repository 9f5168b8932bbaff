"""Tests of `transpile SRC... -o OUT`: the mirrored output tree, the policies for an existing
output, the summary, exit codes, and that rewritten models compute what the originals do.

Most runs go through click's CliRunner (in-process); a few run the real command in a
subprocess. Every run caches under tmp_path (TRANSPILE_CACHE_DIR), never in the user's cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import io
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from transpiler.pipeline.rules import load_rules

from transpiler.pipeline import build as transpile

from transpiler.source import writing
from transpiler.cli.main import main
from transpiler.source.diagnostics import Diagnostic, Fix

load_rules()

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from transpiler.cli.main import main; main(prog_name='transpile')"]

# A package whose model uses a helper through a relative import. `forward` prints (TP101,
# which has a safe fix) and, in LEFT_MODEL only, reads a data-dependent shape (TP401,
# which stays).
INIT = "from .model import Net\n"
HELPERS = """\
def scale(x):
    return x * 2
"""
MODEL = """\
import torch
from torch import nn

from .helpers import scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        print("Net input", tuple(x.shape))  # debug output, kept in eager runs
        return scale(self.lin(x))
"""
LEFT_MODEL = MODEL.replace(
    "        return scale(self.lin(x))\n",
    "        nz = torch.nonzero(x)\n        return scale(self.lin(x)) + nz.shape[0]\n",
)


@dataclass
class Run:
    code: int
    out: str
    err: str


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def make_package(root: Path, model: str = MODEL) -> Path:
    """`root/pkg`: a package, a data file, a binary blob, and entries the excludes skip."""
    return write_tree(
        root / "pkg",
        {
            "__init__.py": INIT,
            "helpers.py": HELPERS,
            "model.py": model,
            "config.json": '{"dim": 4}\n',
            "assets/blob.bin": bytes(range(256)),
            "__pycache__/model.cpython-311.pyc": b"stale bytecode",
            ".git/HEAD": "ref: refs/heads/main\n",
        },
    )


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file under `root`: content hash, permission bits and mtime."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            found[path.relative_to(root).as_posix()] = (
                hashlib.sha256(path.read_bytes()).hexdigest(),
                stat.st_mode,
                stat.st_mtime_ns,
            )
    return found


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRANSPILE_TRACEBACK", raising=False)
    monkeypatch.chdir(tmp_path)

    def invoke(*args: str) -> Run:
        result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False, prog_name="transpile")
        return Run(result.exit_code, result.stdout, result.stderr)

    return invoke


def run_subprocess(*args: str, cwd: Path, env: dict | None = None) -> Run:
    proc = subprocess.run(
        [*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


# --- the output tree -----------------------------------------------------------------


def test_mirrors_the_package_and_the_output_package_runs(tmp_path):
    src = make_package(tmp_path)
    out = tmp_path / "out" / "pkg"
    result = run_subprocess(str(src), "-o", str(out), cwd=tmp_path, env={"TRANSPILE_CACHE_DIR": str(tmp_path / "c")})
    assert result.code == 0, result.err
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    # The model's print was rewritten: it has a page; the others' relative imports are named on the index.
    reports = {"transpile-report.html", "transpile-report.json", "transpile-report/pkg/model.py.html"}
    assert files == {
        "__init__.py",
        "helpers.py",
        "model.py",
        "config.json",
        "assets/blob.bin",
        transpile.MANIFEST,
        *reports,
    }
    rewritten = (out / "model.py").read_text()
    assert "if not torch.compiler.is_compiling():\n            print(" in rewritten
    assert "# debug output, kept in eager runs" in rewritten  # comments survive the rewrite
    # The output is a package of its own: its relative imports resolve inside `out`.
    script = textwrap.dedent("""
        import json, sys, torch
        import pkg
        assert pkg.__file__.startswith(sys.argv[1]), pkg.__file__
        torch.manual_seed(0)
        net = pkg.Net().eval()
        print(json.dumps(net(torch.ones(2, 4)).tolist()))
        """)
    outputs = []
    for root in (tmp_path, out.parent):
        proc = subprocess.run(
            [sys.executable, "-c", script, str(root)],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"},
        )
        assert proc.returncode == 0, proc.stderr
        printed, values = proc.stdout.splitlines()
        assert printed == "Net input (2, 4)"  # eager runs still print
        outputs.append(json.loads(values))
    assert outputs[0] == outputs[1]


def test_unchanged_and_non_python_files_are_byte_identical_copies(tmp_path, cli):
    src = make_package(tmp_path)
    os.chmod(src / "helpers.py", 0o755)
    out = tmp_path / "out"
    assert cli(src, "-o", out).code == 0
    for name in ("__init__.py", "helpers.py", "config.json", "assets/blob.bin"):
        original, copy = (src / name).stat(), (out / name).stat()
        assert (out / name).read_bytes() == (src / name).read_bytes()
        # shutil.copy2 semantics: permission bits and modification time travel too.
        assert (copy.st_mode, copy.st_mtime_ns) == (original.st_mode, original.st_mtime_ns)
    assert (out / "model.py").read_bytes() != (src / "model.py").read_bytes()
    assert not (out / "__pycache__").exists() and not (out / ".git").exists()  # the lint excludes


def test_single_file_source_goes_to_out_by_name(tmp_path, cli):
    src = make_package(tmp_path)
    out = tmp_path / "out"
    assert cli(src / "helpers.py", "-o", out).code == 0
    assert (out / "helpers.py").read_bytes() == (src / "helpers.py").read_bytes()


def test_inputs_are_never_modified(tmp_path, cli):
    src = make_package(tmp_path, LEFT_MODEL)
    before = snapshot(src)
    assert cli(src, "-o", tmp_path / "out", "--unsafe-fixes").code == 1
    assert cli(src, "-o", tmp_path / "out", "--side-effects", "remove").code == 1
    assert snapshot(src) == before


def test_side_effects_remove(tmp_path, cli):
    src = make_package(tmp_path)
    assert cli(src, "-o", tmp_path / "out", "--side-effects", "remove").code == 0
    assert "print(" not in (tmp_path / "out" / "model.py").read_text()


def test_no_temporary_files_are_left(tmp_path, cli):
    src = make_package(tmp_path)
    out = tmp_path / "out"
    for _ in range(2):  # a fresh output, then an update in place
        assert cli(src, "-o", out).code == 0
        assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_a_failed_copy_leaves_neither_a_temporary_nor_a_half_file(tmp_path, monkeypatch):
    src = write_tree(tmp_path / "src", {"data.txt": "new\n"})
    dst = write_tree(tmp_path / "out", {"data.txt": "old\n"}) / "data.txt"

    def broken_copy(a, b):
        Path(b).write_text("ne")
        raise OSError("disk full")

    monkeypatch.setattr(writing.shutil, "copy2", broken_copy)
    with pytest.raises(writing.WriteError, match="disk full"):
        transpile._copy_if_changed(src / "data.txt", dst)
    assert dst.read_text() == "old\n"
    assert [p.name for p in dst.parent.iterdir()] == ["data.txt"]


# --- refusals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "out, message",
    [
        ("pkg", "is the source directory"),
        ("pkg/build_out", "is inside the source directory"),
        (".", "is inside the output directory"),
    ],
)
def test_overlapping_source_and_output_are_refused(tmp_path, cli, out, message):
    src = make_package(tmp_path)
    before = snapshot(tmp_path)
    result = cli("pkg", "-o", out)
    assert result.code == 2
    assert message in result.err
    assert "pkg" in result.err and f"{out}" in result.err  # names both paths
    assert snapshot(tmp_path) == before  # nothing written
    assert src.is_dir()


def test_single_file_inside_output_is_refused(tmp_path, cli):
    make_package(tmp_path)
    result = cli("pkg/helpers.py", "-o", "pkg")
    assert result.code == 2 and "inside the output directory" in result.err


def test_two_sources_for_one_output_file_are_refused(tmp_path, cli):
    write_tree(tmp_path, {"a/m.py": "x = 1\n", "b/m.py": "x = 2\n"})
    result = cli("a", "b", "-o", "out")
    assert result.code == 2
    assert "a/m.py" in result.err and "b/m.py" in result.err
    assert not (tmp_path / "out").exists()


def test_output_that_is_a_file_and_missing_sources_are_refused(tmp_path, cli):
    make_package(tmp_path)
    (tmp_path / "taken").write_text("")
    assert "not a directory" in cli("pkg", "-o", "taken").err
    missing = cli("nope", "-o", "out")
    assert missing.code == 2 and "nope: No such file or directory" in missing.err


# --- an existing output -----------------------------------------------------------------


def test_update_in_place_removes_only_stale_files_it_wrote(tmp_path, cli):
    src = make_package(tmp_path)
    write_tree(src, {"old_a.py": "A = 1\n", "old_b.py": "B = 1\n"})
    out = tmp_path / "out"
    assert cli(src, "-o", out).code == 0
    (out / "notes.txt").write_text("mine")  # a file the tool did not write
    (out / "old_b.py").write_text("B = 2  # edited by hand\n")
    (src / "old_a.py").unlink()
    (src / "old_b.py").unlink()
    result = cli(src, "-o", out)
    assert result.code == 0
    assert "Removed 1 stale file" in result.out
    assert not (out / "old_a.py").exists()  # written by the last run, untouched since: removed
    assert (out / "old_b.py").read_text() == "B = 2  # edited by hand\n"  # edited: kept
    assert (out / "notes.txt").read_text() == "mine"
    manifest = json.loads((out / transpile.MANIFEST).read_text())
    assert "old_a.py" not in manifest["files"] and "model.py" in manifest["files"]


def test_unchanged_outputs_are_not_rewritten(tmp_path, cli):
    src = make_package(tmp_path)
    out = tmp_path / "out"
    assert cli(src, "-o", out).code == 0
    first = snapshot(out)
    assert cli(src, "-o", out).code == 0
    assert {k: v for k, v in snapshot(out).items() if k != transpile.MANIFEST} == {
        k: v for k, v in first.items() if k != transpile.MANIFEST
    }
    # A changed source is picked up.
    (src / "helpers.py").write_text("def scale(x):\n    return x * 3\n")
    assert cli(src, "-o", out).code == 0
    assert "x * 3" in (out / "helpers.py").read_text()


def test_idempotent_transpiling_the_output_changes_nothing(tmp_path, cli):
    src = make_package(tmp_path, LEFT_MODEL)
    first, second = tmp_path / "first", tmp_path / "second"
    assert cli(src, "-o", first).code == 1
    result = cli(first, "-o", second, "--format", "json")
    assert result.code == 1  # the findings without a fix are still there
    summary = json.loads(result.out)
    assert summary["files"]["rewritten"] == 0 and summary["fixes"] == []
    # The manifest and the reports describe each run (its own paths); everything else is equal.
    ours = {transpile.MANIFEST, "transpile-report.html", "transpile-report.json"}
    strip = lambda snap: {  # noqa: E731
        k: v[0] for k, v in snap.items() if k not in ours and not k.startswith("transpile-report/")
    }
    assert strip(snapshot(second)) == strip(snapshot(first))
    assert any(k.startswith("transpile-report/") for k in snapshot(first))  # not copied into the second


# --- broken inputs ----------------------------------------------------------------------


def test_syntax_errors_are_copied_unchanged_and_reported(tmp_path, cli):
    src = make_package(tmp_path)
    broken = b"def forward(self:\n    pass\n"
    (src / "broken.py").write_bytes(broken)
    result = cli(src, "-o", tmp_path / "out")
    assert result.code == 1
    assert (tmp_path / "out" / "broken.py").read_bytes() == broken
    assert "TP901" in result.out
    assert f"{tmp_path / 'out' / 'broken.py'}:1:" in result.out and "copied unchanged" in result.out


def test_unreadable_files_are_reported_and_skipped(tmp_path, cli):
    src = make_package(tmp_path)
    # Dangling links cannot be opened, even by root (for whom permission bits do not count).
    (src / "gone.py").symlink_to(tmp_path / "nowhere.py")
    (src / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    result = cli(src, "-o", tmp_path / "out")
    assert result.code == 1
    for name in ("gone.py", "gone.txt"):
        assert not (tmp_path / "out" / name).exists()
        reported = [line for line in result.out.splitlines() if f"{src / name}:1:1: TP902" in line]
        assert len(reported) == 1 and reported[0].endswith("; not copied"), result.out
    assert "2 unreadable (not copied)" in result.out.splitlines()[0]
    assert (tmp_path / "out" / "model.py").exists()  # the rest is written


def test_unreadable_source_is_a_tp902_diagnostic(tmp_path):
    error = transpile._read_error(tmp_path / "missing.bin")
    assert error.code == "TP902" and error.path == str(tmp_path / "missing.bin")
    assert transpile.reason(error, False).endswith("not copied")


# --- summary and exit codes -------------------------------------------------------------


def test_text_summary(tmp_path, cli):
    src = make_package(tmp_path, LEFT_MODEL)
    result = cli(src, "-o", tmp_path / "out", "--verbose")
    assert result.code == 1
    lines = result.out.splitlines()
    assert lines[0] == f"Transpiled 5 files into {tmp_path / 'out'}: 1 rewritten, 4 copied unchanged."
    header = next(line for line in lines if line.startswith("code"))
    assert header.split() == ["code", "rule", "found", "rewritten", "left"]
    rows = {line.split()[0]: line.split() for line in lines if line.startswith("TP") or line.startswith("total")}
    assert rows["TP101"] == ["TP101", "print-in-compiled-code", "1", "1", "0"]
    # What is left is listed with its place in the output and the reason it was left.
    lint = CliRunner().invoke(main, ["lint", "--no-cache", "--format", "json", str(tmp_path / "out")])
    left = json.loads(lint.stdout)
    assert left and "TP101" not in {d["code"] for d in left}
    assert f"Left as they were ({len(left)}):" in lines
    for d in left:
        assert any(line.startswith(f"  {d['path']}:{d['line']}:{d['col']}: {d['code']} ") for line in lines)
    assert rows["total"][1:] == [str(len(left) + 1), "1", str(len(left))]
    assert lines[-1] == f"{len(left)} finding{'s' if len(left) > 1 else ''} left."


def test_json_summary_has_the_same_content(tmp_path, cli):
    src = make_package(tmp_path, LEFT_MODEL)
    result = cli(src, "-o", tmp_path / "out", "--format", "json")
    assert result.code == 1
    summary = json.loads(result.out)
    assert summary["files"] == {
        "total": 5,
        "rewritten": 1,
        "kernels_only": 0,
        "shared": 0,
        "copied": 4,
        "removed": [],
        "unreadable": [],
    }
    rules = {row["code"]: row for row in summary["rules"]}
    assert rules["TP101"] == {"code": "TP101", "name": "print-in-compiled-code", "found": 1, "rewritten": 1, "left": 0}
    assert [d["code"] for d in summary["fixes"]] == ["TP101"]
    assert summary["fixes"][0]["safety"] == "safe"
    assert all(d["reason"] and d["path"] == str(tmp_path / "out" / "model.py") for d in summary["left"])
    assert sum(row["left"] for row in summary["rules"]) == len(summary["left"])


def test_clean_input_summary_and_exit_zero(tmp_path, cli):
    write_tree(tmp_path / "src", {"m.py": "import torch\n\nx = torch.ones(2)\n"})
    result = cli("src", "-o", "out")
    assert result.code == 0
    assert result.out.splitlines()[-1] == "No graph breaks found."
    assert "code" not in result.out  # no table without findings


def test_reasons_for_what_was_left():
    def diagnostic(**kwargs) -> Diagnostic:
        return Diagnostic("m.py", 1, 1, 1, 2, "TP301", "tensor-item-call", "msg", **kwargs)

    unsafe = Fix("unsafe", "keep the value a tensor", "Call", (1, 0, 1, 1))
    assert transpile.reason(diagnostic(no_fix="the type is unknown"), False) == "the type is unknown"
    assert "enable with --unsafe-fixes" in transpile.reason(diagnostic(fix=unsafe), False)
    assert transpile.reason(diagnostic(), False) == "no automatic fix"


def test_selection_options(tmp_path, cli):
    src = make_package(tmp_path, LEFT_MODEL)
    ignored = cli(src, "-o", tmp_path / "a", "--ignore", "TP4", "-j", "1", "--no-cache")
    assert ignored.code == 0 and "TP401" not in ignored.out
    selected = cli(src, "-o", tmp_path / "b", "--select", "TP4")
    assert selected.code == 1 and "TP101" not in selected.out
    assert (
        "print(" in (tmp_path / "b" / "model.py").read_text()
        and "is_compiling" not in (tmp_path / "b" / "model.py").read_text()
    )


def test_command_spellings(tmp_path, cli):
    src = make_package(tmp_path)
    assert cli("build", src, "-o", "a").code == 0
    assert cli("-o", "b", src).code == 0  # options first: still the default command
    assert (tmp_path / "a" / "model.py").read_bytes() == (tmp_path / "b" / "model.py").read_bytes()
    assert cli("lint", "--no-cache", src).code == 1 and not (tmp_path / "lint").exists()
    assert cli("--version").out.startswith("transpile, version")
    assert "build" in cli("--help").out
    missing = cli(src)
    assert missing.code == 2 and "-o" in missing.err


# --- the fixture models -------------------------------------------------------------------

# Inputs for the fixture models that build with no arguments, with the shapes their source implies.
FIXTURE_INPUTS = {
    "PatchEmbed": lambda torch: (torch.randn(2, 3, 8, 8),),
    "GatedMLP": lambda torch: (torch.randn(2, 5, 16),),
    "MaskedMeanPool": lambda torch: (torch.randn(2, 5, 16),),
    "TinyTransformer": lambda torch: (torch.randint(0, 64, (2, 8)),),
    "TinyResNet": lambda torch: (torch.randn(2, 3, 8, 8),),
}


def test_fixture_models_transpile_and_compute_the_same(tmp_path, monkeypatch):
    """The rewrite stage alone (`--no-kernels`) keeps outputs bit for bit; kernels: test_compile_e2e.py."""
    torch = pytest.importorskip("torch")
    out = tmp_path / "compiled_fixture_models"
    result = run_subprocess(
        "fixtures/models",
        "-o",
        str(out),
        "--no-kernels",
        cwd=ROOT,
        env={"TRANSPILE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.code in (0, 1), result.err
    assert "Transpiled 7 files" in result.out
    assert sorted(p.name for p in out.glob("*.py")) == sorted(p.name for p in (ROOT / "fixtures/models").glob("*.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    compared = []
    for path in sorted(out.glob("*.py")):
        original = importlib.import_module(
            f"fixtures.models.{path.stem}" if path.stem != "__init__" else "fixtures.models"
        )
        rewritten = importlib.import_module(f"{out.name}.{path.stem}" if path.stem != "__init__" else out.name)
        for name, cls in inspect.getmembers(rewritten, inspect.isclass):
            if (
                cls.__module__ != rewritten.__name__
                or not issubclass(cls, torch.nn.Module)
                or name not in FIXTURE_INPUTS
            ):
                continue
            with contextlib.redirect_stdout(io.StringIO()):  # TinyTransformer prints its size
                models = [getattr(original, name)().eval(), cls().eval()]
            models[1].load_state_dict(models[0].state_dict())
            torch.manual_seed(0)
            inputs = FIXTURE_INPUTS[name](torch)
            outputs = []
            for model in models:
                printed = io.StringIO()
                with torch.no_grad(), contextlib.redirect_stdout(printed):
                    outputs.append((model(*inputs), printed.getvalue()))
            assert torch.equal(outputs[0][0], outputs[1][0]), name
            assert outputs[0][1] == outputs[1][1], name  # guarded prints still print in eager runs
            compared.append(name)
    assert sorted(compared) == sorted(FIXTURE_INPUTS)
