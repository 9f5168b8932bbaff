"""The pre-commit hook (.pre-commit-hooks.yaml), run for real through `pre-commit try-repo`.

pre-commit installs the hook repository with `pip install .` into a virtualenv of
its own, so the end-to-end tests are slow. `try-repo` installs into a fresh
temporary store on every call, so it runs once; the other scenarios use
`pre-commit run` with a config naming the same repository and rev, which installs
once into a module-wide PRE_COMMIT_HOME and reuses it.

`try-repo` only sees committed files plus modifications of tracked ones, so running
it on this checkout directly fails while the hook file or the packages are
uncommitted. The tests therefore copy what `pip install .` needs into a throwaway
git repository, commit it there and point `try-repo` at that.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from rewrites.side_effects import PrintInCompiledCode

ROOT = Path(__file__).resolve().parent.parent
HOOKS_FILE = ROOT / ".pre-commit-hooks.yaml"
HOOK_ID = "transpile-lint"

HAVE_GIT = shutil.which("git") is not None
HAVE_PRE_COMMIT = importlib.util.find_spec("pre_commit") is not None
needs_tools = pytest.mark.skipif(
    not (HAVE_GIT and HAVE_PRE_COMMIT),
    reason="needs both `git` on PATH and the `pre-commit` package (pip install pre-commit)",
)

# The example of TP101 and its fix, as the rule documents them.
BAD_MODEL = PrintInCompiledCode.examples("INVALID")[0]

GOOD_MODEL = PrintInCompiledCode.examples("VALID")[0]


# --- the manifest itself (fast) --------------------------------------------------


@pytest.mark.skipif(not HAVE_PRE_COMMIT, reason="needs the `pre-commit` package")
def test_hooks_file_is_a_valid_manifest():
    from pre_commit.clientlib import load_manifest

    (hook,) = load_manifest(str(HOOKS_FILE))
    assert hook["id"] == HOOK_ID
    assert hook["name"] and hook["description"]
    assert hook["language"] == "python"
    assert hook["entry"].split() == ["transpile", "lint", "--force-exclude"]
    assert set(hook["types_or"]) >= {"python"} or set(hook["types"]) >= {"python"}
    # The linter parallelises itself and needs all files in one run for its call graph.
    assert hook["require_serial"] is True
    assert hook["args"] == []  # --fix and friends are opt-in through args
    assert hook["pass_filenames"] is True


def test_hook_entry_is_a_console_script_of_this_project():
    yaml = pytest.importorskip("yaml")
    (hook,) = yaml.safe_load(HOOKS_FILE.read_text(encoding="utf-8"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert hook["entry"].split()[0] in project["project"]["scripts"]


# --- end to end through `pre-commit try-repo` (slow) ------------------------------


def _git_env() -> dict[str, str]:
    """A clean environment: no GIT_* leaking in from a surrounding hook run, fixed identity."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env.update(
        GIT_AUTHOR_NAME="test",
        GIT_AUTHOR_EMAIL="test@example.com",
        GIT_COMMITTER_NAME="test",
        GIT_COMMITTER_EMAIL="test@example.com",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
    )
    return env


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=_git_env(),
        check=True,
        capture_output=True,
    )


def _copy_hook_repo(destination: Path) -> None:
    """What `pip install .` of this project needs: metadata, readme, packages, hook file."""
    destination.mkdir(parents=True)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for name in (
        "pyproject.toml",
        ".pre-commit-hooks.yaml",
        "README.md",
        "LICENSE",
        "setup.py",
        "setup.cfg",
        "MANIFEST.in",
    ):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, destination / name)
    packages = project.get("tool", {}).get("setuptools", {}).get("packages", [])
    if isinstance(packages, dict):  # `packages.find`: the include patterns name the top-level packages
        packages = packages.get("find", {}).get("include", [])
    for package in {p.split(".")[0].rstrip("*") for p in packages}:
        shutil.copytree(
            ROOT / package,
            destination / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
        )


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory) -> Path:
    """A committed copy of this project: a stable rev, so pre-commit installs it only once."""
    repo = tmp_path_factory.mktemp("hook-repo") / "transpile"
    _copy_hook_repo(repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "snapshot for pre-commit try-repo")
    return repo


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory) -> Path:
    """pre-commit's store (cloned repos and hook virtualenvs), shared by this module's tests."""
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture
def user_repo(tmp_path) -> Path:
    """A user's project with a model that prints in forward, tracked by git."""
    repo = tmp_path / "user"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "model.py").write_text(BAD_MODEL, encoding="utf-8")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    return repo


TIMINGS: dict[str, float] = {}


def _pre_commit(cwd: Path, home: Path, label: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = _git_env()
    env["PRE_COMMIT_HOME"] = str(home)
    env["NO_COLOR"] = "1"
    env.pop("TRANSPILE_CACHE_DIR", None)
    # The hook's result cache goes under the temporary home, never the user's ~/.cache.
    env["XDG_CACHE_HOME"] = str(home / "xdg-cache")
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    TIMINGS[label] = time.perf_counter() - start
    print(f"pre-commit {args[0]} ({label}): {TIMINGS[label]:.1f}s")
    return proc


def try_repo(cwd: Path, hook_repo: Path, home: Path, label: str) -> subprocess.CompletedProcess[str]:
    """`pre-commit try-repo`: what a hook author runs. It installs into a fresh
    temporary store on every call (PRE_COMMIT_HOME does not help), so it is used once."""
    return _pre_commit(cwd, home, label, "try-repo", "--color", "never", str(hook_repo), HOOK_ID, "--all-files")


def run_configured(cwd: Path, hook_repo: Path, home: Path, label: str) -> subprocess.CompletedProcess[str]:
    """`pre-commit run` with a .pre-commit-config.yaml naming the hook repo and rev, as users
    do; the hook environment is installed once into `home` and reused."""
    rev = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        cwd=hook_repo,
        env=_git_env(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (cwd / ".pre-commit-config.yaml").write_text(
        f"repos:\n"
        f"  - repo: {hook_repo.as_posix()}\n"
        f"    rev: {rev}\n"
        f"    hooks:\n"
        f"      - id: {HOOK_ID}\n",
        encoding="utf-8",
    )
    _git(cwd, "add", "-A")
    return _pre_commit(cwd, home, label, "run", "--color", "never", "--all-files")


def _output(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout + proc.stderr


@pytest.mark.slow
@needs_tools
def test_try_repo_fails_on_print_in_forward(user_repo, hook_repo, pre_commit_home):
    proc = try_repo(user_repo, hook_repo, pre_commit_home, "try-repo, bad file, incl. install")
    out = _output(proc)
    assert proc.returncode == 1, out
    assert "transpile lint" in out and "Failed" in out
    assert "src/model.py:8:9: TP101 " in out
    assert "Found 1 problem." in out


@pytest.mark.slow
@needs_tools
def test_hook_fails_on_print_in_forward(user_repo, hook_repo, pre_commit_home):
    proc = run_configured(user_repo, hook_repo, pre_commit_home, "run, bad file")
    out = _output(proc)
    assert proc.returncode == 1, out
    assert "Failed" in out and "- exit code: 1" in out
    assert "src/model.py:8:9: TP101 " in out


@pytest.mark.slow
@needs_tools
def test_hook_passes_after_fixing_the_file(user_repo, hook_repo, pre_commit_home):
    (user_repo / "src" / "model.py").write_text(GOOD_MODEL, encoding="utf-8")
    # A stub is handed to the hook too (types_or: pyi); it must not upset the linter.
    (user_repo / "src" / "model.pyi").write_text("class Model: ...\n", encoding="utf-8")
    proc = run_configured(user_repo, hook_repo, pre_commit_home, "run, fixed file")
    out = _output(proc)
    assert proc.returncode == 0, out
    assert "Passed" in out and "TP101" not in out


@pytest.mark.slow
@needs_tools
def test_hook_honours_extend_exclude(user_repo, hook_repo, pre_commit_home):
    """pre-commit names every file explicitly; --force-exclude makes the excludes apply anyway."""
    (user_repo / "pyproject.toml").write_text('[tool.transpile]\nextend-exclude = ["src/model.py"]\n', encoding="utf-8")
    proc = run_configured(user_repo, hook_repo, pre_commit_home, "run, excluded file")
    out = _output(proc)
    assert proc.returncode == 0, out
    assert "Passed" in out and "TP101" not in out


@pytest.mark.slow
@needs_tools
def test_hook_skipped_without_python_files(tmp_path, hook_repo, pre_commit_home):
    repo = tmp_path / "docs-only"
    repo.mkdir()
    (repo / "README.md").write_text("# nothing to lint\n", encoding="utf-8")
    _git(repo, "init", "-q")
    proc = run_configured(repo, hook_repo, pre_commit_home, "run, no python files")
    out = _output(proc)
    assert proc.returncode == 0, out
    assert "Skipped" in out
