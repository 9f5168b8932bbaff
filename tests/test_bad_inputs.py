"""Bad inputs and bad settings: each gives a clear error or a correct output, the rest of the tree is still
written, and no input is modified (every test compares the source bytes before and after).

Builds run in-process through click's CliRunner; the emitted modules are imported and run in a subprocess
(each output tree has its own `_transpile_runtime`, which must not meet another's in one interpreter), where
the runtime's counters prove that the C++ kernel ran and the result is compared with the original's.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from transpiler.cli.main import main

ROOT = Path(__file__).resolve().parent.parent

# A module with one region whose ops round exactly as eager does (x * 2.0 is exact, so a fused multiply-add
# of `x * 2.0 + 1.0` rounds once, as eager's two ops do), so kernel and original agree bit for bit.
MODEL = '''\
import torch
from torch import nn


class Net(nn.Module):
    """Caf\u00e9: a docstring that is not ASCII."""

    def forward(self, x):
        y = torch.relu(x * 2.0 + 1.0)
        return y * x
'''


def environment() -> dict[str, str]:
    """The environment of a subprocess, importing this checkout's packages whatever the installed `transpile`
    points at (an editable install of another clone would otherwise answer)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRANSPILE_TRACEBACK", raising=False)
    monkeypatch.chdir(tmp_path)

    def invoke(*args: object) -> Run:
        result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False, prog_name="transpile")
        return Run(result.exit_code, result.stdout, result.stderr)

    return invoke


def write(root: Path, files: dict[str, bytes]) -> Path:
    for relative, data in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under `root` and its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


# Loads each (original, transpiled) pair of files by path, runs both `Net`s on the same input and prints whether
# they agree, then the runtime's counters. Modules are loaded under made-up names: a file name with `-` or a
# space is no module name, and the emitted module finds its kernels through the output directory on sys.path.
_RUN = """
import importlib.util, json, sys
import torch

out = sys.argv[1]
sys.path.insert(0, out)
import _transpile_runtime as runtime

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

equal = {}
for n, (original, transpiled) in enumerate(zip(sys.argv[2::2], sys.argv[3::2])):
    x = torch.randn(3, 5)
    expected = load(original, f"original_{n}").Net()(x)
    equal[transpiled] = torch.equal(load(transpiled, f"transpiled_{n}").Net()(x), expected)
print(json.dumps({"equal": equal, "counters": runtime.counters()}))
"""


def run_side_by_side(src: Path, out: Path, names: list[str], tmp_path: Path) -> dict:
    """Runs each named file of `src` and its output in `out` on one input; returns equality and counters."""
    pairs = [str(p) for name in names for p in (src / name, out / name)]
    env = {**environment(), "TRANSPILE_CACHE_DIR": str(tmp_path / "kernels")}
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(out), *pairs],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def kernel_paths(counters: dict) -> dict[str, set[str]]:
    """Per source file named in the counters (by its name), the paths its kernels ran on."""
    paths: dict[str, set[str]] = {}
    for kernel, counts in counters.items():
        source = Path(kernel.split(" (", 1)[1].rsplit(":", 1)[0]).name
        paths.setdefault(source, set()).update(counts)
    return paths


# --- encodings and line endings ------------------------------------------------------


def test_coding_cookie_and_shebang_stay_first_and_crlf_is_kept(cli, tmp_path):
    """A latin-1 file with a PEP 263 cookie (alone, or after a shebang) gets kernels: the generated header
    goes below the cookie, which means something on lines 1-2 only; a CRLF file comes back CRLF."""
    src = write(
        tmp_path / "src",
        {
            "latin.py": ("# -*- coding: latin-1 -*-\n" + MODEL).encode("latin-1"),
            "script.py": ("#!/usr/bin/env python\n# vim: set fileencoding=latin-1 :\n" + MODEL).encode("latin-1"),
            "windows.py": MODEL.replace("\n", "\r\n").encode(),
        },
    )
    before = snapshot(src)
    result = cli("build", src, "-o", tmp_path / "out")
    assert result.code == 0, result.err + result.out
    out = tmp_path / "out"
    assert snapshot(src) == before
    latin = (out / "latin.py").read_bytes().split(b"\n")
    assert latin[0] == b"# -*- coding: latin-1 -*-" and latin[1].startswith(b"# Generated by transpile")
    assert "Caf\u00e9".encode("latin-1") in (out / "latin.py").read_bytes()  # still latin-1
    script = (out / "script.py").read_bytes().split(b"\n")
    assert script[:2] == [b"#!/usr/bin/env python", b"# vim: set fileencoding=latin-1 :"]
    windows = (out / "windows.py").read_bytes()
    assert b"fused_" in windows and windows.count(b"\n") == windows.count(b"\r\n") > 10
    ran = run_side_by_side(src, out, ["latin.py", "script.py", "windows.py"], tmp_path)
    assert all(ran["equal"].values()), ran
    assert kernel_paths(ran["counters"]) == {n: {"cpp"} for n in ("latin.py", "script.py", "windows.py")}
    # The output used as input again is recognised as generated (after its cookie) and copied as it is.
    again = cli("build", out, "-o", tmp_path / "again")
    assert again.code == 0, again.err + again.out
    assert (tmp_path / "again" / "latin.py").read_bytes() == (out / "latin.py").read_bytes()


# --- file names ----------------------------------------------------------------------


def test_file_names_that_are_no_identifiers_get_kernel_modules_that_are(cli, tmp_path):
    """`my-model.py` and `my model.py` hold regions: their kernel modules are named by identifiers made
    from the stem (`_my_model_kernels`), numbered apart from each other and from a file already called so."""
    model = MODEL.encode()
    src = write(tmp_path / "src", {"my-model.py": model, "my model.py": model, "_my_model_2_kernels.py": b"x = 1\n"})
    before = snapshot(src)
    result = cli("build", src, "-o", tmp_path / "out")
    assert result.code == 0, result.err + result.out
    assert snapshot(src) == before
    out = tmp_path / "out"
    # Sorted by path, "my model.py" comes first; "_2" is taken by the user's own file, copied unchanged.
    assert sorted(p.name for p in out.glob("_*_kernels.py")) == [
        "_my_model_2_kernels.py",
        "_my_model_3_kernels.py",
        "_my_model_kernels.py",
    ]
    assert (out / "_my_model_2_kernels.py").read_bytes() == b"x = 1\n"
    assert "from ._my_model_kernels import" in (out / "my model.py").read_text()
    assert "from ._my_model_3_kernels import" in (out / "my-model.py").read_text()
    ran = run_side_by_side(src, out, ["my-model.py", "my model.py"], tmp_path)
    assert all(ran["equal"].values()), ran
    assert kernel_paths(ran["counters"]) == {n: {"cpp"} for n in ("my-model.py", "my model.py")}


# --- settings ------------------------------------------------------------------------

PRINT_MODEL = b"""\
from torch import nn


class Net(nn.Module):
    def forward(self, x):
        print(x)
        return x
"""


@pytest.mark.parametrize("option", ["--select", "--extend-select", "--ignore"])
@pytest.mark.parametrize("command", ["lint", "build"])
def test_unknown_rule_code_on_the_command_line_is_a_usage_error(cli, tmp_path, option, command):
    """`--select TP999` selected nothing and printed "All checks passed!": a typo in a pre-commit config
    switched the hook off. A code or prefix that no rule has is an error naming it and where it came from;
    the output tree is not written."""
    src = write(tmp_path / "src", {"model.py": PRINT_MODEL})
    target = ["-o", tmp_path / "out"] if command == "build" else []
    result = cli(command, option, "TP1,TP999", src, *target)
    assert result.code == 2, result.out
    assert f"command line: {option}: unknown rule code or prefix 'TP999'" in result.err
    assert result.out == "" and not (tmp_path / "out").exists()
    # A prefix that some rule has is fine: TP101 is found in the model (and rewritten by the build).
    selected = cli(command, option.replace("ignore", "select"), "TP1", src, *target)
    assert selected.code == (1 if command == "lint" else 0) and "TP101" in selected.out


@pytest.mark.parametrize("key", ["select", "extend-select", "ignore"])
def test_unknown_rule_code_in_pyproject_is_a_configuration_error(cli, tmp_path, key):
    write(tmp_path, {"pyproject.toml": f'[tool.transpile]\n{key} = ["TP1", "TP8"]\n'.encode(), "model.py": PRINT_MODEL})
    result = cli("lint", "model.py")
    assert result.code == 2, result.out
    assert f"{tmp_path / 'pyproject.toml'}: {key}: unknown rule code or prefix 'TP8'" in result.err


# --- what is not a regular file, or cannot be listed ---------------------------------

CLI = [sys.executable, "-m", "transpiler"]


def run(*args: object, cwd: Path, timeout: float = 120) -> Run:
    """The real command in a subprocess: a hang (reading a FIFO blocks forever) fails the test instead of hanging it."""
    env = {**environment(), "TRANSPILE_CACHE_DIR": str(cwd / "cache")}
    proc = subprocess.run([*CLI, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def test_fifos_are_skipped_with_a_diagnostic_by_lint_and_build(tmp_path):
    """A FIFO named `*.py` hung both commands (opening it for reading waits for a writer); so did any FIFO in
    a tree the build copies. They are reported (TP902) and skipped; everything else is linted and written."""
    src = write(tmp_path / "src", {"model.py": PRINT_MODEL, "sub/data.txt": b"data\n"})
    os.mkfifo(src / "pipe.py")
    os.mkfifo(src / "sub" / "stream")
    before = snapshot(src)
    lint = run("lint", "--no-cache", "src", cwd=tmp_path)
    assert lint.code == 1, lint.err
    assert "src/pipe.py:1:1: TP902 not a regular file (a named pipe); skipped" in lint.out
    assert "src/model.py:6:9: TP101" in lint.out
    named = run("lint", "--no-cache", "src/pipe.py", cwd=tmp_path)
    assert (named.code, named.out.splitlines()[0]) == (
        1,
        "src/pipe.py:1:1: TP902 not a regular file (a named pipe); skipped",
    )
    build = run("build", "--no-kernels", "src", "-o", "out", cwd=tmp_path)
    assert build.code == 1, build.err
    assert "src/pipe.py:1:1: TP902 not a regular file (a named pipe); not copied" in build.out
    assert "src/sub/stream:1:1: TP902 not a regular file (a named pipe); not copied" in build.out
    assert "4 files into out: 1 rewritten, 1 copied unchanged, 2 unreadable (not copied)" in build.out
    out = tmp_path / "out"
    assert (out / "sub" / "data.txt").read_bytes() == b"data\n" and b"is_compiling" in (out / "model.py").read_bytes()
    assert not (out / "pipe.py").exists() and not (out / "sub" / "stream").exists()
    assert snapshot(src) == before


def test_a_directory_that_cannot_be_listed_is_reported_and_its_earlier_output_kept(cli, tmp_path, monkeypatch):
    """An unreadable subdirectory was silently missing from OUT. The tests run as root, whom `chmod 000` does
    not stop, so listing that one directory is made to fail in-process (os.scandir raises PermissionError, as
    it does for a user without read permission); the walk must report it, lint and build the rest, and keep
    what an earlier build wrote from it (its files may well still exist)."""
    src = write(tmp_path / "src", {"model.py": PRINT_MODEL, "locked/inner.py": PRINT_MODEL, "open/data.txt": b"x\n"})
    before = snapshot(src)
    assert cli("build", "--no-kernels", "src", "-o", "out").code == 0
    written = (tmp_path / "out" / "locked" / "inner.py").read_bytes()
    scandir = os.scandir

    def refusing(path="."):
        if Path(path) == Path("src/locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    lint = cli("lint", "--no-cache", "src")
    assert lint.code == 1
    assert "src/locked:1:1: TP902 cannot list the directory: Permission denied; skipped" in lint.out
    assert "src/model.py:6:9: TP101" in lint.out
    build = cli("build", "--no-kernels", "src", "-o", "out")
    assert build.code == 1
    assert "src/locked:1:1: TP902 cannot list the directory: Permission denied; not copied" in build.out
    assert (tmp_path / "out" / "locked" / "inner.py").read_bytes() == written
    assert (tmp_path / "out" / "open" / "data.txt").read_bytes() == b"x\n"
    assert snapshot(src) == before


# --- interrupts, kills and temporary files --------------------------------------------


def test_an_interrupt_exits_130_and_leaves_what_it_wrote_listed(cli, tmp_path, monkeypatch):
    """Ctrl-C while the build writes (raised in-process where the build copies a data file): exit 130, not 1
    (the "findings left" status). The runtime is written before the modules that import it, every file written
    is complete and listed in OUT's journal, no temporary file is left, and the next run reads the journal as
    the manifest of the interrupted one: an output of a source deleted since is removed as stale."""
    from transpiler.pipeline import build as transpile

    src = write(
        tmp_path / "src",
        {"keep.py": MODEL.encode(), "model.py": MODEL.encode(), "old.py": b"x = 1\n", "z_data.txt": b"data\n"},
    )
    before = snapshot(src)

    def interrupted(source, target):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(transpile, "_copy_if_changed", interrupted)
        result = cli("build", "src", "-o", "out")
    assert (result.code, result.err) == (130, "transpile: interrupted\n")
    out = tmp_path / "out"
    assert snapshot(src) == before
    assert not (out / transpile.MANIFEST).exists() and not list(out.rglob("*.tmp"))
    listed = {json.loads(line)[0] for line in (out / transpile.JOURNAL).read_text().splitlines()}
    assert {"model.py", "_model_kernels.py", "_transpile_runtime/__init__.py"} <= listed
    assert "fused_" in (out / "model.py").read_text() and (out / "_transpile_runtime" / "__init__.py").is_file()
    assert "old.py" not in listed  # copied unchanged: the step interrupted first, in path order
    (src / "model.py").unlink()
    again = cli("build", "src", "-o", "out")
    assert again.code == 0, again.err
    assert "Removed 5 stale files an earlier run wrote." in again.out  # model.py and its four kernel files
    assert not (out / "model.py").exists() and not (out / transpile.JOURNAL).exists()
    assert (out / transpile.MANIFEST).is_file() and (out / "z_data.txt").read_bytes() == b"data\n"


# The real command, with the lint's per-file progress sending SIGINT to its own process at the 30th file: the
# signal arrives at a known step whatever the machine's speed (a timed signal from outside raced the build).
# Python's own SIGINT handler is put back first: a process started in the background by a non-interactive
# shell (a CI script's `cmd &`) inherits SIGINT ignored, and so would this one.
INTERRUPTED_AT_THE_30TH_FILE = """
import os, signal, sys
from transpiler.lint import engine
from transpiler.cli.main import main

signal.signal(signal.SIGINT, signal.default_int_handler)

tick = engine._tick

def interrupting(results, progress):
    for count, result in enumerate(tick(results, progress)):
        if count == 30:
            os.kill(os.getpid(), signal.SIGINT)
        yield result

engine._tick = interrupting
main(prog_name="transpile")
"""


def test_sigint_in_a_real_process_exits_130_with_nothing_half_written(tmp_path):
    """SIGINT to a real build while the lint of the tree runs: exit 130 with one line on stderr, no
    traceback, no temporary file, and no manifest (nothing was written)."""
    src = write(tmp_path / "src", {f"p{n}/model.py": PRINT_MODEL * 20 for n in range(60)})
    before = snapshot(src)
    env = {**environment(), "TRANSPILE_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_AT_THE_30TH_FILE, "build", "--no-kernels", "--no-cache", "src", "-o", "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "transpile: interrupted\n", "")
    assert not list((tmp_path / "out").rglob("*.tmp")) and not (tmp_path / "out" / ".transpile-manifest.json").exists()
    assert snapshot(src) == before


def test_temporary_files_a_killed_run_left_are_removed_and_nothing_else(cli, tmp_path):
    """SIGKILL between creating a temporary file and renaming it leaves `.<name>.transpile-<pid>-*.tmp`; the
    next build removes those whose process is gone, and keeps a live process's, and every file it did not
    name so (another tool's `.tmp` files, the user's)."""
    src = write(tmp_path / "src", {"model.py": PRINT_MODEL})
    assert cli("build", "--no-kernels", "src", "-o", "out").code == 0
    out = tmp_path / "out"
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, sys; from pathlib import Path; from transpiler.source.writing import _temporary;"
            " _temporary(Path(sys.argv[1])); os.kill(os.getpid(), signal.SIGKILL)",
            str(out / "model.py"),
        ],
        cwd=ROOT,
    )
    assert killed.returncode == -9
    (left,) = out.glob(".model.py.transpile-*.tmp")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = out / f".model.py.transpile-{sleeper.pid}-abcdefgh.tmp"
        others = [out / ".model.py.abcdefgh.tmp", out / "notes.tmp", out / ".x.transpile-12-a.tmp.bak"]
        for path in (alive, *others):
            path.write_bytes(b"not ours to delete")
        before = snapshot(src)
        assert cli("build", "--no-kernels", "src", "-o", "out").code == 0
        assert not left.exists()
        assert all(path.read_bytes() == b"not ours to delete" for path in (alive, *others))
        assert snapshot(src) == before
    finally:
        sleeper.kill()
        sleeper.wait()


# --- an output that cannot be written, a path that loops -----------------------------


def test_an_output_that_cannot_be_written_is_a_usage_error_naming_it(cli, tmp_path, monkeypatch):
    """A read-only OUT was "internal error: PermissionError". The tests run as root, whom read-only modes do
    not stop, so creating files in the read-only directory is made to fail in-process (tempfile.mkstemp raises
    PermissionError there, as it does for a user without write permission). A file where OUT's parent
    directory must be is real, and fails the same way."""
    import tempfile

    src = write(tmp_path / "src", {"model.py": PRINT_MODEL, "sub/data.txt": b"x\n"})
    before = snapshot(src)
    (tmp_path / "file").write_bytes(b"")
    result = cli("build", "src", "-o", "file/out")
    assert (result.code, result.err) == (2, "transpile: error: cannot write into file/out: Not a directory\n")
    mkstemp = tempfile.mkstemp
    read_only = {tmp_path / "out"}

    def refusing(*args, dir=None, **kwargs):
        if Path(os.path.abspath(dir)) in read_only:
            raise PermissionError(13, "Permission denied", str(dir))
        return mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", refusing)
    result = cli("build", "src", "-o", "out")
    assert (result.code, result.err) == (2, "transpile: error: cannot write into out: Permission denied\n")
    # A subdirectory that turns out read-only while writing: the error names the file.
    read_only = {tmp_path / "out" / "sub"}
    result = cli("build", "src", "-o", "out")
    assert (result.code, result.err) == (2, "transpile: error: cannot write out/sub/data.txt: Permission denied\n")
    assert (tmp_path / "out" / "model.py").is_file()  # written before it, complete
    assert snapshot(src) == before


@pytest.mark.parametrize("command", [["lint"], ["build", "-o", "out"]])
def test_a_symlink_loop_named_on_the_command_line_says_so(cli, tmp_path, command):
    (tmp_path / "loop.py").symlink_to("loop.py")
    result = cli(*command, "loop.py")
    assert (result.code, result.err) == (
        2,
        "transpile: error: loop.py: symlink loop (a symbolic link that leads back to itself)\n",
    )
    missing = cli(*command, "missing.py")
    assert (missing.code, missing.err) == (2, "transpile: error: missing.py: No such file or directory\n")


# --- README's samples ----------------------------------------------------------------

README = ROOT / "README.md"
_BLOCK = re.compile(r"(?:<!-- output: (?P<file>\S+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S)


def readme_blocks(lang: str) -> list[re.Match]:
    return [m for m in _BLOCK.finditer(README.read_text(encoding="utf-8")) if m["lang"] == lang]


def console_samples() -> list[tuple[str, list[str]]]:
    """README's console blocks that show output: (command, the lines shown)."""
    samples = []
    for block in readme_blocks("console"):
        command, *shown = block["body"].rstrip("\n").split("\n")
        if shown:
            samples.append((command.removeprefix("$ "), shown))
    return samples


def shown_as(shown: list[str], actual: list[str]) -> bool:
    """Whether README's lines are the real ones: a line `...` stands for any number of lines (none too), a
    line ending in `...` for the rest of that line; everything else is equal."""

    @functools.cache
    def match(i: int, j: int) -> bool:
        if i == len(shown):
            return j == len(actual)
        if shown[i].strip() == "...":
            return match(i + 1, j) or (j < len(actual) and match(i, j + 1))
        line = shown[i]
        same = j < len(actual) and (line == actual[j] or (line.endswith("...") and actual[j].startswith(line[:-3])))
        return same and match(i + 1, j + 1)

    return match(0, 0)


@pytest.fixture(scope="module")
def readme_runs(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Every command README shows output of, run for real (in README's order, in a directory holding a copy
    of fixtures/) and its stdout; and that directory."""
    import shlex
    import shutil

    where = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "fixtures", where / "fixtures")
    env = {**environment(), "TRANSPILE_CACHE_DIR": str(where / "cache"), "NO_COLOR": "1"}
    outputs = {}
    for command, _ in console_samples():
        program, *args = shlex.split(command)
        assert program == "transpile", command
        proc = subprocess.run([*CLI, *args], cwd=where, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode in (0, 1), proc.stderr
        outputs[command] = proc.stdout
    return where, outputs


@pytest.mark.parametrize("command, shown", console_samples(), ids=[c for c, _ in console_samples()])
def test_readme_console_samples_are_what_the_commands_print(readme_runs, command, shown):
    actual = readme_runs[1][command].rstrip("\n").split("\n")
    assert shown_as(shown, actual), (
        "README shows:\n" + "\n".join(shown) + "\n\nthe command prints:\n" + "\n".join(actual)
    )


def test_readme_samples_of_generated_code_are_in_the_output(readme_runs):
    """A code block marked `<!-- output: compiled/layers.py -->` shows lines of that file of the build's output."""
    marked = [b for b in readme_blocks("python") if b["file"]]
    assert marked
    for block in marked:
        text = (readme_runs[0] / block["file"]).read_text(encoding="utf-8")
        assert block["body"] in text, f"{block['file']} has no lines\n{block['body']}"


def test_readme_pre_commit_config_names_no_rev_that_does_not_exist_and_runs(tmp_path, monkeypatch):
    """Every `rev:` README shows must be a commit or tag of this repository (there is no tagged release: a
    `rev: v0.1.0` could not be installed); a `repo: local` hook must be the one .pre-commit-hooks.yaml defines,
    and run: pre-commit with README's config fails on a model that prints in forward."""
    yaml = pytest.importorskip("yaml")
    from tests.test_precommit import BAD_MODEL, HOOKS_FILE, _git, _pre_commit, needs_tools

    configs = [yaml.safe_load(b["body"]) for b in readme_blocks("yaml") if "repos:" in b["body"]]
    assert configs
    defined = {hook["id"]: hook for hook in yaml.safe_load(HOOKS_FILE.read_text(encoding="utf-8"))}
    for config in configs:
        for repo in config["repos"]:
            if "rev" in repo:
                exists = subprocess.run(
                    ["git", "rev-parse", "--verify", "--quiet", f"{repo['rev']}^{{commit}}"],
                    cwd=ROOT,
                    capture_output=True,
                )
                assert exists.returncode == 0, f"README shows rev {repo['rev']!r}, which this repository does not have"
            if repo["repo"] == "local":
                for hook in repo["hooks"]:
                    for key in ("entry", "types_or", "require_serial"):
                        assert hook[key] == defined[hook["id"]][key], key
    if needs_tools.args[0]:  # skipif's condition: no git or no pre-commit
        pytest.skip(needs_tools.kwargs["reason"])
    (local,) = [b["body"] for b in readme_blocks("yaml") if "repo: local" in b["body"]]
    repo = tmp_path / "user"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "model.py").write_text(BAD_MODEL, encoding="utf-8")
    (repo / ".pre-commit-config.yaml").write_text(local, encoding="utf-8")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    monkeypatch.setenv("PYTHONPATH", environment()["PYTHONPATH"])  # `transpile` on PATH runs this checkout's code
    proc = _pre_commit(repo, tmp_path / "home", "README's local hook", "run", "--color", "never", "--all-files")
    assert proc.returncode == 1 and "src/model.py:8:9: TP101 " in proc.stdout, proc.stdout + proc.stderr
