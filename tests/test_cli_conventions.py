"""The command line against ruff's documented conventions (checked against ruff 0.17 itself where it has the same
option): exit options, `-q`, `--fix-only`, `--config`, per-file ignores, `.gitignore`, standard input, JSON and
SARIF fixes, `rules CODE`, `clean`, the build's compact summary and the editor usage README documents."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rewrites.side_effects import PrintInCompiledCode
from tests.test_cli import CLI, CLEAN_MODEL, MULTI_MODEL, PRINT_MODEL, ROOT, Project, apply_edits, make_project
from transpiler.cli import gitignore
from transpiler.lint.fixer import apply_fixes, text_edits
from transpiler.lint.rule import REGISTRY
from transpiler.pipeline.rules import load_rules

load_rules()

# Processes run this checkout's code, wherever they start and whatever is installed.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}


@pytest.fixture
def project(tmp_path, monkeypatch) -> Project:
    return make_project(tmp_path, monkeypatch)


def codes(run) -> list[tuple[str, int, str]]:
    """(path, line, code) of each finding line of a text report."""
    found = re.findall(r"^(.+?):(\d+):\d+: (TP\d+) ", run.out, re.M)
    return [(path, int(line), code) for path, line, code in found]


# --- exit options, -q, --output-format -------------------------------------------------


def test_exit_options_follow_ruff(project):
    project.write("model.py", MULTI_MODEL)
    assert project.lint("model.py").code == 1
    assert project.lint("-e", "model.py").code == 0
    assert project.lint("--exit-zero", "model.py").code == 0
    # A usage or configuration error stays 2 under --exit-zero (it is not a finding).
    assert project.lint("--exit-zero", "--select", "TP999", "model.py").code == 2
    # Everything fixed: 0, unless asked to fail on fixes (the pre-commit idiom: a hook that changed files fails).
    project.write("fixable.py", PRINT_MODEL)
    assert project.lint("--fix", "fixable.py").code == 0
    project.write("fixable.py", PRINT_MODEL)
    assert project.lint("--fix", "--exit-non-zero-on-fix", "fixable.py").code == 1
    assert project.lint("--fix", "--exit-non-zero-on-fix", "fixable.py").code == 0  # nothing left to fix


def test_output_format_is_an_alias_of_format(project):
    project.write("model.py", MULTI_MODEL)
    for fmt in ("json", "github", "sarif", "text"):
        assert project.lint("--output-format", fmt, "model.py").out == project.lint("--format", fmt, "model.py").out


def test_quiet_prints_the_findings_only(project):
    project.write("model.py", MULTI_MODEL)
    full, quiet = project.lint("model.py"), project.lint("-q", "model.py")
    assert quiet.code == full.code == 1
    lines = [line for line in full.out.splitlines() if re.match(r"model\.py:\d+:\d+: TP", line)]
    assert quiet.out.splitlines() == lines and "Found" not in quiet.out
    project.write("model.py", CLEAN_MODEL)
    assert project.lint("-q", "model.py").out == ""  # no "All checks passed!"


def test_fix_only_fixes_reports_nothing_left_and_exits_0(project):
    project.write("copy.py", MULTI_MODEL)
    fixed = int(re.search(r"\((\d+) fixed, [1-9]\d* remaining\)", project.lint("--fix", "copy.py").out)[1])
    project.write("model.py", MULTI_MODEL)
    result = project.lint("--fix-only", "model.py")
    assert (result.code, result.out) == (0, f"Fixed {fixed} problem{'s' if fixed > 1 else ''}.\n")  # the rest: unsaid
    assert "is_compiling" in (project.root / "model.py").read_text()
    again = project.lint("--fix-only", "model.py")
    assert (again.code, again.out) == (0, "")
    project.write("model.py", MULTI_MODEL)
    assert project.lint("--fix-only", "--exit-non-zero-on-fix", "model.py").code == 1


# --- configuration ---------------------------------------------------------------------


def test_config_file_replaces_the_search(project, tmp_path):
    project.write("pyproject.toml", '[tool.transpile]\nselect = ["TP3"]\n')
    project.write("model.py", MULTI_MODEL)
    assert {c for _, _, c in codes(project.lint("model.py"))} == {"TP301"}
    # A TOML file of the keys themselves (as ruff.toml), anywhere; a pyproject.toml's table.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "transpile.toml").write_text('select = ["TP1"]\n')
    (tmp_path / "elsewhere" / "pyproject.toml").write_text('[tool.transpile]\nselect = ["TP2"]\n')
    assert {c for _, _, c in codes(project.lint("--config", str(tmp_path / "elsewhere/transpile.toml"), "."))} == {
        "TP101"
    }
    assert {c for _, _, c in codes(project.lint("--config", str(tmp_path / "elsewhere/pyproject.toml"), "."))} == {
        "TP201"
    }
    # Its globs are relative to the current directory (ruff: `--config` settings are not tied to the file's place).
    (tmp_path / "elsewhere" / "ignore.toml").write_text('[per-file-ignores]\n"model.py" = ["TP2"]\n')
    result = project.lint("--config", str(tmp_path / "elsewhere/ignore.toml"), "model.py")
    assert {c for _, _, c in codes(result)} == {"TP101", "TP301"}


@pytest.mark.parametrize(
    "table, message",
    [
        ("select = [", "invalid TOML"),
        ('select = ["TP999"]', "unknown rule code or prefix 'TP999'"),
        ('[per-file-ignores]\n"*.py" = ["TP999"]', "per-file-ignores.'*.py'"),
        ('per-file-ignores = ["a"]', "expected a table"),
    ],
)
def test_bad_config_file_exits_2_naming_it(project, table, message):
    config = project.write("conf.toml", table + "\n")
    project.write("model.py", MULTI_MODEL)
    result = project.lint("--config", str(config), "model.py")
    assert result.code == 2 and str(config) in result.err and message in result.err, result.err
    missing_table = project.write("sub/pyproject.toml", "[project]\nname = 'x'\n")
    result = project.lint("--config", str(missing_table), "model.py")
    assert result.code == 2 and "has no [tool.transpile] table" in result.err


# The files, and which of them each per-file-ignores glob matches, as ruff 0.17 answers for `F401` on the same
# tree (a glob matches the root-relative path, `*` crossing `/`, or the file's name; `!` negates).
TREE = ("pkg/a.py", "pkg/sub/b.py", "tests/t.py", "top.py", "pkg/__init__.py")
RUFF_MATCHES = {
    "*.py": set(TREE),
    "pkg/*.py": {"pkg/a.py", "pkg/sub/b.py", "pkg/__init__.py"},
    "pkg/**": {"pkg/a.py", "pkg/sub/b.py", "pkg/__init__.py"},
    "__init__.py": {"pkg/__init__.py"},
    "sub/b.py": set(),
    "!pkg/*": {"tests/t.py", "top.py"},
    "tests/": set(),
    "t.py": {"tests/t.py"},
    "**/b.py": {"pkg/sub/b.py"},
}


@pytest.mark.parametrize("glob", list(RUFF_MATCHES))
def test_per_file_ignores_match_as_ruffs(project, glob):
    for name in TREE:
        project.write(name, PRINT_MODEL)
    project.write("pyproject.toml", f'[tool.transpile.per-file-ignores]\n"{glob}" = ["TP1"]\n')
    reported = {path for path, _, _ in codes(project.lint("."))}
    assert reported == set(TREE) - RUFF_MATCHES[glob]


def test_per_file_ignores_take_prefixes_and_are_not_fixed(project):
    project.write("pyproject.toml", '[tool.transpile.per-file-ignores]\n"legacy/*" = ["TP1", "TP30"]\n')
    project.write("legacy/model.py", MULTI_MODEL)
    project.write("new/model.py", MULTI_MODEL)
    assert sorted(codes(project.lint("."))) == [
        ("legacy/model.py", 8, "TP201"),
        ("new/model.py", 7, "TP101"),
        ("new/model.py", 8, "TP201"),
        ("new/model.py", 10, "TP301"),
    ]
    project.lint("--fix", ".")
    legacy, new = (project.root / "legacy/model.py").read_text(), (project.root / "new/model.py").read_text()
    assert "is_compiling" not in legacy and '        print("start")\n' in legacy  # an ignored finding is not fixed
    assert "is_compiling" in new


# --- .gitignore --------------------------------------------------------------------------


def gitignored_project(project) -> None:
    for name in TREE:
        project.write(name, PRINT_MODEL)
    project.write(".gitignore", "pkg/sub/\ntop.py\n")
    project.write("pkg/.gitignore", "a.py\n")


def test_gitignore_is_respected_inside_a_repository_only(project):
    gitignored_project(project)
    assert {p for p, _, _ in codes(project.lint("."))} == set(TREE)  # no repository: as ruff, nothing ignored
    subprocess.run(["git", "init", "-q", str(project.root)], check=True)
    assert {p for p, _, _ in codes(project.lint("."))} == {"pkg/__init__.py", "tests/t.py"}
    assert {p for p, _, _ in codes(project.lint("--no-respect-gitignore", "."))} == set(TREE)
    # Named explicitly, a file is linted whatever .gitignore says (ruff: even with --force-exclude).
    assert {p for p, _, _ in codes(project.lint("--force-exclude", "top.py", "pkg/a.py"))} == {"top.py", "pkg/a.py"}
    # Negation in a deeper file, and .git/info/exclude.
    project.write("tests/.gitignore", "*.py\n!t.py\n")
    project.write("tests/u.py", PRINT_MODEL)
    project.write(".git/info/exclude", "pkg/__init__.py\n")
    assert {p for p, _, _ in codes(project.lint("."))} == {"tests/t.py"}
    project.write("pyproject.toml", "[tool.transpile]\nrespect-gitignore = false\n")
    assert len({p for p, _, _ in codes(project.lint("."))}) == len(TREE) + 1


def test_a_tree_inside_an_ignored_directory_is_linted(project):
    """pyenv's checkout ignores `/versions`, where every installed package lives: as ruff, a walk that starts
    inside an ignored directory lints what it finds (from above, the directory is skipped)."""
    subprocess.run(["git", "init", "-q", str(project.root)], check=True)
    project.write(".gitignore", "/versions\n*.log\n")
    project.write("versions/pkg/a.py", PRINT_MODEL)
    project.write("versions/pkg/sub/b.py", PRINT_MODEL)
    project.write("versions/pkg/sub/c.log.py", PRINT_MODEL)
    assert codes(project.lint(".")) == []
    inside = {p for p, _, _ in codes(project.lint("versions/pkg"))}
    assert inside == {"versions/pkg/a.py", "versions/pkg/sub/b.py", "versions/pkg/sub/c.log.py"}
    assert {p for p, _, _ in codes(project.lint(".", cwd=project.root / "versions"))} == {
        "pkg/a.py",
        "pkg/sub/b.py",
        "pkg/sub/c.log.py",
    }
    project.write("versions/pkg/sub/d.log", "")  # a pattern of its own still applies to an entry in the walk
    project.write("versions/pkg/.gitignore", "c.log.py\n")
    assert {p for p, _, _ in codes(project.lint("versions/pkg"))} == {"versions/pkg/a.py", "versions/pkg/sub/b.py"}


def test_without_pathspec_gitignore_is_not_read_and_the_run_says_so(project, monkeypatch):
    gitignored_project(project)
    subprocess.run(["git", "init", "-q", str(project.root)], check=True)
    monkeypatch.setattr(gitignore, "GitIgnoreSpec", None)
    result = project.lint(".")
    assert {p for p, _, _ in codes(result)} == set(TREE) and "pathspec is not installed" in result.err


# --- standard input --------------------------------------------------------------------


def stdin(project, text: str, *args: str):
    """`transpile lint ARGS` in a real process, `text` on its standard input."""
    proc = subprocess.run(
        [*CLI, "lint", "--cache-dir", str(project.cache), *args],
        cwd=project.root,
        input=text.encode(),
        capture_output=True,
        env=ENV,
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def test_stdin_is_linted_under_its_filename(project):
    on_disk = project.write("model.py", CLEAN_MODEL)  # the buffer differs from the file: the buffer counts
    code, out, err = stdin(project, PRINT_MODEL, "--stdin-filename", "model.py", "-")
    assert code == 1 and out.startswith("model.py:8:9: TP101 [*] ") and err == ""
    assert on_disk.read_text() == CLEAN_MODEL
    code, out, _ = stdin(project, PRINT_MODEL, "-")
    assert code == 1 and out.startswith("-:8:9: TP101 ")  # unnamed: `-`, as ruff
    code, out, _ = stdin(project, CLEAN_MODEL, "--stdin-filename", "new/unsaved.py", "-")  # need not exist
    assert (code, out) == (0, "All checks passed!\n")


def test_stdin_fix_prints_the_fixed_text_and_reports_on_stderr(project):
    project.write("model.py", PRINT_MODEL)
    code, out, err = stdin(project, MULTI_MODEL, "--fix", "--stdin-filename", "model.py", "-")
    assert (project.root / "model.py").read_text() == PRINT_MODEL  # nothing written
    # The text and the findings are those of `--fix` on a file holding the same text.
    project.write("same.py", MULTI_MODEL)
    on_file = project.lint("--fix", "same.py")
    assert code == on_file.code == 1 and out == (project.root / "same.py").read_text() != MULTI_MODEL
    assert err == on_file.out.replace("same.py", "model.py")
    fixed = int(re.search(r"\((\d+) fixed, [1-9]\d* remaining\)", err)[1])
    # Nothing to fix: the text comes back unchanged (an editor replaces its buffer with what it gets).
    code, out, err = stdin(project, CLEAN_MODEL, "--fix", "--stdin-filename", "model.py", "-")
    assert (code, out, err) == (0, CLEAN_MODEL, "All checks passed!\n")
    code, out, err = stdin(project, MULTI_MODEL, "--fix-only", "--stdin-filename", "model.py", "-")
    assert code == 0 and "is_compiling" in out and err == f"Fixed {fixed} problem{'s' if fixed > 1 else ''}.\n"


def test_stdin_keeps_its_encoding_and_line_endings(project):
    text = "# -*- coding: latin-1 -*-\r\n" + PRINT_MODEL.replace("\n", "\r\n").replace("activations", "activ\xe9es")
    proc = subprocess.run(
        [*CLI, "lint", "--no-cache", "--fix", "--stdin-filename", "model.py", "-"],
        cwd=project.root,
        input=text.encode("latin-1"),
        capture_output=True,
        env=ENV,
    )
    fixed = proc.stdout.decode("latin-1")
    assert "is_compiling" in fixed and "\r\n" in fixed and "\n" not in fixed.replace("\r\n", "")


def test_stdin_diff_and_force_exclude(project):
    code, out, _ = stdin(project, PRINT_MODEL, "--diff", "--stdin-filename", "model.py", "-")
    assert code == 1 and out.startswith("--- a/model.py\n+++ b/model.py\n") and "+        if not torch" in out
    project.write("pyproject.toml", '[tool.transpile]\nextend-exclude = ["generated"]\n')
    code, out, _ = stdin(project, PRINT_MODEL, "--force-exclude", "--stdin-filename", "generated/m.py", "-")
    assert (code, out) == (0, "All checks passed!\n")
    code, out, _ = stdin(project, PRINT_MODEL, "--force-exclude", "--fix", "--stdin-filename", "generated/m.py", "-")
    assert (code, out) == (0, PRINT_MODEL)
    code, _, err = stdin(project, PRINT_MODEL, "model.py", "-")
    assert code == 2 and "cannot be linted with other paths" in err


def test_readme_editor_task_matches_the_output(project):
    """README's VS Code task: its command run through a shell, its problem matcher over what it prints."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"In VS Code.*?```json\n(.*?)```", readme, re.S)[1]
    (task,) = json.loads(block)["tasks"]
    pattern = task["problemMatcher"]["pattern"]
    model = project.write("my model.py", MULTI_MODEL)  # a space: the task quotes the path
    command = task["command"].replace("${file}", str(model)).replace("transpile ", f"{' '.join(map(repr, CLI))} ", 1)
    proc = subprocess.run(command, shell=True, cwd=project.root, capture_output=True, text=True, env=ENV)
    assert proc.returncode == 1
    matches = [re.match(pattern["regexp"], line) for line in proc.stdout.splitlines()]
    assert all(matches) and len(matches) == 3
    assert [(int(m[pattern["line"]]), m[pattern["code"]]) for m in matches] == [
        (7, "TP101"),
        (8, "TP201"),
        (10, "TP301"),
    ]
    assert {m[pattern["file"]] for m in matches} == {str(model)}


# --- JSON and SARIF ----------------------------------------------------------------------

PROGRAMS = {
    "print and logging": """\
import logging

import torch
from torch import nn

log = logging.getLogger(__name__)


class Model(nn.Module):
    def forward(self, x):
        print("x", x.shape)
        log.info("forward")
        y = x * 2
        print(y.sum())
        return y
""",
    "unicode and crlf": "import torch\r\nfrom torch import nn\r\n\r\n\r\nclass M(nn.Module):\r\n"
    '    def forward(self, x):\r\n        print("données ✓", x)  # commentaire\r\n        return x\r\n',
    "no torch import": """\
from torch import nn


class M(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            x = x * 2
        n = x.max().item()
        return x / n
""",
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_json_edits_are_each_fix_alone(project, name):
    """Each finding's edits turn the file into what the fixer makes of that finding alone (unsafe ones too)."""
    text = PROGRAMS[name]
    project.write("model.py", text.encode(), dedent=False)
    records = json.loads(project.lint("--format", "json", "model.py").out)
    fixes = [r for r in records if r["fix"]]
    assert fixes, records
    from transpiler.lint import engine

    diagnostics = engine.lint([project.root / "model.py"], lambda code: True, "all", None)
    by_place = {(d.line, d.col, d.code): d for d in diagnostics}
    for record in fixes:
        d = by_place[record["line"], record["col"], record["code"]]
        alone, applied = apply_fixes(text, [d], "guard")
        assert applied and record["fix"]["edits"]
        assert apply_edits(text, record["fix"]["edits"]) == alone
        assert record["fix"]["applicability"] == d.fix.safety and record["fix"]["message"] == d.fix.title


@pytest.mark.parametrize(
    "before, after",
    [
        ("a\nb\nc\n", "a\nB\nc\n"),
        ("a\nb\n", "a\nb\nc\n"),
        ("a\nb\nc", "a\nc"),
        ("x = 1\r\ny = 2\r\n", "x = 1\r\nif t:\r\n    y = 2\r\n"),
        ("é = 'ü'\n", "é = 'ü' + 'ö'\n"),
        ("", "import torch\n"),
        ("same\n", "same\n"),
    ],
)
def test_text_edits_reproduce_the_text(before, after):
    edits = [
        {
            "content": e.content,
            "location": dict(zip(("row", "column"), e.start)),
            "end_location": dict(zip(("row", "column"), e.end)),
        }
        for e in text_edits(before, after)
    ]
    assert apply_edits(before, edits) == after
    assert (edits == []) == (before == after)


def test_sarif_rules_link_to_their_documentation_and_describe_themselves(project, sarif_validator):
    project.write("model.py", MULTI_MODEL)
    log = json.loads(project.lint("--format", "sarif", "model.py").out)
    assert list(sarif_validator.iter_errors(log)) == []
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} == set(REGISTRY)
    # helpUri: the rule's heading in docs/rules.md, under the repository URL pyproject.toml names.
    pyproject = (ROOT / "pyproject.toml").read_text()
    repository = re.search(r'^Repository = "(.+)"$', pyproject, re.M)[1]
    headings = re.findall(r"^## (TP\d+) (\S+)$", (ROOT / "docs" / "rules.md").read_text(), re.M)
    anchors = {f"{code.lower()}-{name}" for code, name in headings}
    for rule in rules:
        base, _, anchor = rule["helpUri"].partition("#")
        assert base == f"{repository}/blob/main/docs/rules.md" and anchor in anchors, rule["helpUri"]
        assert rule["fullDescription"]["text"] != rule["shortDescription"]["text"]
    item = next(r for r in rules if r["id"] == "TP101")
    assert item["fullDescription"]["text"].startswith("Checks for `print()` calls")
    results = {r["ruleId"]: r for r in run["results"]}
    assert results["TP101"]["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"].startswith(
        "if not torch.compiler.is_compiling():"
    )
    assert all(len(r["partialFingerprints"]) == 1 for r in run["results"])
    assert run["tool"]["driver"]["informationUri"] == repository


# --- rules CODE, clean ---------------------------------------------------------------------


@pytest.mark.parametrize("code", ["TP101", "TP201", "TP301"])
def test_rules_code_prints_the_documented_sections(project, code):
    rule = REGISTRY[code]
    result = project.invoke("rules", code.lower())
    assert result.code == 0
    text = result.out
    assert text.startswith(f"# {rule.name} ({code})\n")
    order = [
        text.index(heading) for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead")
    ]
    assert order == sorted(order)
    assert rule.examples("INVALID")[0].rstrip() in text and rule.examples("VALID")[0].rstrip() in text
    assert text.rstrip().endswith(f"#{code.lower()}-{rule.name}")


def test_clean_removes_only_the_tools_caches(project, tmp_path, monkeypatch):
    cache = tmp_path / "shared-cache"
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(cache))  # the lint's and the kernels' caches share it then
    project.write("model.py", PRINT_MODEL)
    assert project.invoke("lint", "model.py").code == 1  # writes this version's lint folder
    from transpiler.lint.engine import code_fingerprint

    old = cache / "0123456789abcdef"
    (old / "ab").mkdir(parents=True)
    (old / "ab" / "entry").write_bytes(b"x" * 5000)
    kernel = cache / f"fused_add-{'a' * 32}.so"
    kernel.write_bytes(b"y" * 3000)
    (cache / f"fused_add-{'a' * 32}.sha256").write_text("z")
    mine = [cache / "notes.txt", cache / "0123456789abcdeg", cache / "fused-add.so"]
    mine[0].write_text("mine")
    mine[1].mkdir()
    mine[2].write_text("not a cache name")
    stale = project.invoke("clean", "--stale")
    assert stale.code == 0 and f"Removed 1 lint cache folder (0.0 MB) from {cache}." in stale.out
    assert not old.exists() and (cache / code_fingerprint()).is_dir() and kernel.exists()
    everything = project.invoke("clean")
    assert everything.code == 0 and "Removed 1 lint cache folder" in everything.out
    assert f"Removed 2 C++ kernel files (0.0 MB) from {cache}." in everything.out
    assert not (cache / code_fingerprint()).exists() and not kernel.exists()
    assert all(p.exists() for p in mine)  # not ours by name: left alone
    assert project.invoke("clean").out == "Nothing to remove.\n"


# --- the build --------------------------------------------------------------------------

MANY_REGIONS = """\
import torch
from torch import nn


class Block(nn.Module):
    def forward(self, x, y):
        print("block")
        a = torch.sigmoid(x) * y + 1.0
        n = a.max().tolist()  # TP302: no automatic fix, whatever the fix policy (a finding left per file)
        return a / n
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NO_COLOR", "1")
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"m{i}.py").write_text(MANY_REGIONS)
    (src / "broken.py").write_text("def f(:\n")
    return src


def build(*args: str, cwd: Path):
    proc = subprocess.run([*CLI, "build", *args], cwd=cwd, capture_output=True, text=True, env=ENV)
    return proc.returncode, proc.stdout, proc.stderr


def test_build_summary_is_compact_by_default(tree):
    code, out, _ = build("src", "-o", "out", "--no-kernels", cwd=tree.parent)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "Transpiled 4 files into out: 3 rewritten, 1 copied unchanged."
    # Counts, not every finding: only the file that could not be parsed is named.
    assert [line for line in lines if line.startswith("  ")] == [
        "  out/broken.py:1:7: TP901 syntax error: invalid syntax; copied unchanged"
    ]
    assert lines[-1] == "4 findings left (`--verbose` lists them with the reason each was left, as does the report)."
    code, verbose, _ = build("src", "-o", "out", "--no-kernels", "-v", cwd=tree.parent)
    assert code == 1 and "Left as they were (4):" in verbose and verbose.count("TP302") == 4  # 3 lines + the table
    code, quiet, _ = build("src", "-o", "out", "--no-kernels", "-q", cwd=tree.parent)
    listed = [line.strip() for line in verbose.splitlines() if line.startswith("  out/")]
    assert code == 1 and quiet.splitlines() == listed
    code, _, err = build("src", "-o", "out", "-q", "-v", cwd=tree.parent)
    assert code == 2 and "opposite" in err


def test_build_names_regions_only_when_verbose(tree):
    (tree / "broken.py").unlink()
    code, out, _ = build("src", "-o", "out", cwd=tree.parent)
    compiled = next(line for line in out.splitlines() if line.startswith("Compiled "))
    assert compiled.endswith("into fused kernels (Triton on CUDA, C++ on CPU).") and "fused_" not in out
    code, out, _ = build("src", "-o", "out", "--verbose", cwd=tree.parent)
    compiled = next(line for line in out.splitlines() if line.startswith("Compiled "))
    assert compiled.count("fused_") >= 3


def test_build_exit_options(tree):
    assert build("src", "-o", "out", "--no-kernels", cwd=tree.parent)[0] == 1
    assert build("src", "-o", "out", "--no-kernels", "--exit-zero", cwd=tree.parent)[0] == 0
    assert build("src", "-o", "out", "--no-kernels", "-e", "--select", "TP999", cwd=tree.parent)[0] == 2
    shutil.rmtree(tree)
    tree.mkdir()
    (tree / "m.py").write_text(PRINT_MODEL)  # every finding rewritten
    assert build("src", "-o", "out", "--no-kernels", cwd=tree.parent)[0] == 0
    assert build("src", "-o", "out", "--no-kernels", "--exit-non-zero-on-fix", cwd=tree.parent)[0] == 1
    json_run = build("src", "-o", "out", "--no-kernels", "--output-format", "json", cwd=tree.parent)
    assert json.loads(json_run[1])["rules"][0]["code"] == "TP101"


def test_build_applies_per_file_ignores(tree):
    (tree / "pyproject.toml").write_text('[tool.transpile.per-file-ignores]\n"m0.py" = ["TP101"]\n')
    code, out, _ = build("src", "-o", "out", "--no-kernels", "-v", cwd=tree.parent)
    assert 'print("block")' in (tree.parent / "out" / "m0.py").read_text().splitlines()[6]  # not rewritten
    assert "is_compiling" in (tree.parent / "out" / "m1.py").read_text()
    assert PrintInCompiledCode.code not in {line.split()[1] for line in out.splitlines() if line.startswith("  out/")}
