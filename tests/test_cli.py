"""Black-box tests of the `transpile` command line.

Most tests go through click's CliRunner (in-process, fast); the ones about the
process itself (imports, exit status as the shell sees it, stderr, worker pools)
run a real subprocess. Every run uses a cache directory under tmp_path, and
TRANSPILE_CACHE_DIR points under tmp_path too, so the user's cache is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from rewrites.side_effects import PrintInCompiledCode
from transpiler.lint import engine
from transpiler.pipeline.rules import load_rules
from transpiler.cli.main import main
from transpiler.lint.rule import REGISTRY

load_rules()

ROOT = Path(__file__).resolve().parent.parent
# `python -m transpiler.cli.main` does not run (see test_python_dash_m_runs_the_cli), so
# subprocesses call the entry point the console script calls.
CLI = [sys.executable, "-c", "from transpiler.cli.main import main; main(prog_name='transpile')"]


def msg(code: str, **fields: str) -> str:
    """A rule's message as the CLI prints it (read from the rule, so rewording it does not break these tests)."""
    message = REGISTRY[code].message
    return message.format(**fields) if fields else message


@dataclass
class Run:
    code: int
    out: str
    err: str

    def findings(self) -> list[tuple[str, int, int, str]]:
        """(path, line, col, code) of each text-format finding line."""
        found = []
        for line in self.out.splitlines():
            parts = line.split(":", 3)
            if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit():
                found.append((parts[0], int(parts[1]), int(parts[2]), parts[3].split()[0]))
        return found

    def codes(self) -> set[str]:
        return {f[3] for f in self.findings()}

    def lines_of(self, code: str) -> list[int]:
        return [f[1] for f in self.findings() if f[3] == code]


class Project:
    """A tmp_path project; the current directory is its root while a test runs."""

    def __init__(self, root: Path, cache: Path) -> None:
        self.root = root
        self.cache = cache

    def write(self, relative: str, text: str | bytes, dedent: bool = True) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(textwrap.dedent(text) if dedent else text, encoding="utf-8")
        return path

    def lint(self, *args: str, cache: bool = True, cwd: Path | None = None) -> Run:
        """`transpile lint ARGS --cache-dir <tmp cache>` in-process, from `cwd` (default: the root)."""
        extra = ["--cache-dir", str(self.cache)] if cache and "--no-cache" not in args else []
        return self.invoke("lint", *args, *extra, cwd=cwd)

    def invoke(self, *args: str, cwd: Path | None = None) -> Run:
        old = Path.cwd()
        os.chdir(cwd or self.root)
        try:
            result = CliRunner().invoke(main, list(args), catch_exceptions=False)
        finally:
            os.chdir(old)
        return Run(result.exit_code, result.stdout, result.stderr)

    def run(self, *args: str, cwd: Path | None = None, prefix: list[str] | None = None) -> Run:
        """The CLI in a real subprocess."""
        proc = subprocess.run(
            [*(prefix or CLI), *args],
            cwd=cwd or self.root,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Project:
    return make_project(tmp_path, monkeypatch)


def make_project(tmp_path: Path, monkeypatch) -> Project:
    """A project in `tmp_path`, with its own caches, no traceback and no color."""
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "default-cache"))
    monkeypatch.delenv("TRANSPILE_TRACEBACK", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    root = tmp_path / "proj"
    root.mkdir()
    return Project(root, tmp_path / "cache")


# The example of TP101 and its fix, as the rule documents them.
PRINT_MODEL = PrintInCompiledCode.examples("INVALID")[0]

CLEAN_MODEL = PrintInCompiledCode.examples("VALID")[0]

# TP101 on line 7, TP201 on line 8, TP301 on line 10.
MULTI_MODEL = """\
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        print("start")
        if x.sum() > 0:
            x = x * 2
        n = x.max().item()
        return x / n
"""


# --- text output -------------------------------------------------------------------


def test_text_output_is_exact(project):
    project.write("model.py", PRINT_MODEL)
    result = project.lint("model.py")
    assert result.code == 1
    assert result.out == (
        f"model.py:8:9: TP101 [*] {msg('TP101')}\n\nFound 1 problem.\n[*] 1 fixable with the `--fix` option.\n"
    )
    assert result.err == ""


def safe_fix(project: Project, path: str, code: str) -> bool:
    """Whether `code`'s finding in `path` has a safe fix (TP201's `torch.where` is safe where it is proven equal,
    which the where proof decides, not these tests)."""
    records = json.loads(project.lint("--format", "json", path).out)
    return any(r["code"] == code and r["fix_applicability"] == "safe" for r in records)


def test_text_output_plural_and_sorted(project):
    project.write("b.py", MULTI_MODEL)
    project.write("a.py", PRINT_MODEL)
    result = project.lint(".")
    assert result.code == 1
    # TP301's fix is unsafe: not marked.
    where = safe_fix(project, "b.py", "TP201")
    assert result.out.splitlines()[:6] == [
        f"a.py:8:9: TP101 [*] {msg('TP101')}",
        f"b.py:7:9: TP101 [*] {msg('TP101')}",
        f"b.py:8:12: TP201 {'[*] ' if where else ''}{REGISTRY['TP201'].message}",
        f"b.py:10:13: TP301 {REGISTRY['TP301'].message}",
        "",
        "Found 4 problems.",
    ]
    assert result.out.splitlines()[6].startswith(f"[*] {3 if where else 2} fixable with the `--fix` option")


def test_clean_run_says_all_checks_passed(project):
    project.write("model.py", CLEAN_MODEL)
    result = project.lint()
    assert (result.code, result.out) == (0, "All checks passed!\n")


def test_paths_default_to_the_current_directory_and_are_relative(project):
    project.write("pkg/sub/model.py", PRINT_MODEL)
    result = project.lint()
    assert result.findings() == [("pkg/sub/model.py", 8, 9, "TP101")]
    result = project.lint(".", cwd=project.root / "pkg")
    assert result.findings() == [("sub/model.py", 8, 9, "TP101")]


def test_columns_count_characters_not_bytes(project):
    # "é" and "ö" are two bytes in UTF-8 each: byte-based columns would be off by 2.
    line7 = '        s = "héllo wörld"; print(s)'
    line8 = '        y = x + 1; print("é", y)'
    project.write(
        "model.py",
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
        f"    def forward(self, x):\n{line7}\n{line8}\n        return y\n",
        dedent=False,
    )
    result = project.lint("model.py")
    col7 = line7.index("print") + 1
    col8 = line8.index("print") + 1
    assert col7 == 28 and len(line7[: col7 - 1].encode()) + 1 == 30  # the test is meaningful
    assert result.findings() == [("model.py", 7, col7, "TP101"), ("model.py", 8, col8, "TP101")]
    records = json.loads(project.lint("model.py", "--format", "json").out)
    # The end column (exclusive, 1-based) lies after the non-ASCII character.
    assert [(r["line"], r["col"], r["end_line"], r["end_col"]) for r in records] == [
        (7, col7, 7, len(line7) + 1),
        (8, col8, 8, len(line8) + 1),
    ]


def test_tabs_count_as_one_column(project):
    project.write(
        "model.py",
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
        "\tdef forward(self, x):\n\t\tprint(x)\n\t\treturn x\n",
        dedent=False,
    )
    assert project.lint("model.py").findings() == [("model.py", 7, 3, "TP101")]


# --- exit codes ----------------------------------------------------------------------


def test_exit_codes_in_a_real_process(project):
    project.write("bad.py", PRINT_MODEL)
    project.write("good.py", CLEAN_MODEL)
    # No cache: a warm cache crashes a fresh process (test_warm_cache_in_a_new_process).
    cache = ["--no-cache"]
    clean = project.run("lint", "good.py", *cache)
    assert (clean.code, clean.out, clean.err) == (0, "All checks passed!\n", "")
    dirty = project.run("lint", "bad.py", *cache)
    assert dirty.code == 1 and "Found 1 problem.\n" in dirty.out
    assert dirty.err == ""  # no progress output when stderr is not a terminal
    zero = project.run("lint", "--exit-zero", "bad.py", *cache)
    assert (zero.code, zero.out) == (0, dirty.out)


def test_missing_path_exits_2_naming_it(project):
    project.write("model.py", PRINT_MODEL)
    result = project.lint("model.py", "no/such_file.py")
    assert result.code == 2
    assert "no/such_file.py" in result.err and "No such file" in result.err
    assert result.out == ""


@pytest.mark.parametrize(
    ("table", "expect"),
    [
        ('select = "TP1"', "select"),
        ('extend_select = ["TP1"]', "extend-select"),  # suggests the kebab-case key
        ('select = ["T-1"]', "T-1"),
        ("force-exclude = 1", "force-exclude"),
        ("select = [", "invalid TOML"),
    ],
)
def test_bad_config_exits_2_naming_the_file(project, table, expect):
    pyproject = project.write("pyproject.toml", f"[tool.transpile]\n{table}\n")
    project.write("src/model.py", PRINT_MODEL)
    result = project.lint("src")
    assert result.code == 2
    assert str(pyproject) in result.err and expect in result.err
    assert "Traceback" not in result.err and result.out == ""


def test_broken_unrelated_pyproject_above_is_ignored(project):
    project.write("pyproject.toml", "[tool.other\nthis is not toml\n")
    project.write("model.py", PRINT_MODEL)
    assert project.lint("model.py").code == 1


def test_unknown_format_is_a_usage_error(project):
    project.write("model.py", PRINT_MODEL)
    result = project.lint("--format", "xml", "model.py")
    assert result.code == 2
    assert "Usage:" in result.err and "--format" in result.err and "xml" in result.err
    assert result.out == ""


def test_bad_selector_on_the_command_line_exits_2(project):
    project.write("model.py", PRINT_MODEL)
    result = project.lint("--select", "T-1", "model.py")
    assert result.code == 2 and "T-1" in result.err and "command line" in result.err


def test_internal_error_is_short_unless_traceback_asked(project, monkeypatch):
    project.write("model.py", PRINT_MODEL)

    def boom(*args, **kwargs):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(engine, "resolve", boom)
    result = project.lint("model.py")
    assert result.code == 2
    assert "internal error: RuntimeError: kaboom" in result.err
    assert "TRANSPILE_TRACEBACK" in result.err and "Traceback" not in result.err
    monkeypatch.setenv("TRANSPILE_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="kaboom"):
        project.lint("model.py")


def test_statistics_with_json_is_a_usage_error(project):
    project.write("model.py", PRINT_MODEL)
    result = project.lint("--statistics", "--format", "json", "model.py")
    assert result.code == 2
    assert "internal error" not in result.err
    assert "--statistics" in result.err


# --- selection -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), {"TP101", "TP201", "TP301"}),
        (("--select", "TP101"), {"TP101"}),
        (("--select", "TP1"), {"TP101"}),
        (("--select", "tp3"), {"TP301"}),
        (("--select", "TP1,TP3"), {"TP101", "TP301"}),
        (("--select", "TP1", "--select", "TP2"), {"TP101", "TP201"}),
        (("--select", "ALL"), {"TP101", "TP201", "TP301"}),
        (("--ignore", "TP101"), {"TP201", "TP301"}),
        (("--ignore", "TP1,TP2"), {"TP301"}),
        (("--ignore", "TP"), set()),
        (("--select", "TP2", "--extend-select", "TP301"), {"TP201", "TP301"}),
        (("--ignore", "TP1", "--extend-select", "TP101"), {"TP101", "TP201", "TP301"}),
        (("--select", "TP", "--ignore", "TP3"), {"TP101", "TP201"}),
    ],
)
def test_select_ignore_extend_select(project, args, expected):
    project.write("model.py", MULTI_MODEL)
    result = project.lint(*args, "model.py")
    assert result.codes() == expected
    assert result.code == (1 if expected else 0)


# --- other formats -------------------------------------------------------------------


JSON_FIELDS = [
    "path",
    "line",
    "col",
    "end_line",
    "end_col",
    "code",
    "name",
    "message",
    "fix_applicability",
    "fix",
    "no_fix",
    "url",
    "dynamo_codes",
]


def test_json_format(project):
    project.write("model.py", PRINT_MODEL)
    result = project.lint("--format", "json", "model.py")
    assert result.code == 1
    (record,) = json.loads(result.out)
    assert list(record) == JSON_FIELDS
    line = PRINT_MODEL.splitlines()[7]
    assert record == {
        "path": "model.py",
        "line": 8,
        "col": 9,
        "end_line": 8,
        "end_col": len(line) + 1,
        "code": "TP101",
        "name": "print-in-compiled-code",
        "message": msg("TP101"),
        "fix_applicability": "safe",
        # ruff's shape: the fix's message and applicability, and its edits as row/column (1-based) ranges.
        "fix": {
            "message": "guard with `if not torch.compiler.is_compiling():`",
            "applicability": "safe",
            "edits": [
                {
                    "content": "if not torch.compiler.is_compiling():\n            ",
                    "location": {"row": 8, "column": 9},
                    "end_location": {"row": 8, "column": 9},
                }
            ],
        },
        "no_fix": None,
        "url": record["url"],
        "dynamo_codes": list(REGISTRY["TP101"].dynamo_codes),
    }
    assert record["url"].startswith("https://") and "tp101" in record["url"]
    # The edits make what `--fix` writes.
    assert project.lint("--fix", "model.py").code == 0
    assert apply_edits(PRINT_MODEL, record["fix"]["edits"]) == (project.root / "model.py").read_text()
    clean = project.lint("--format", "json", "--select", "TP3", "model.py")
    assert (clean.code, clean.out) == (0, "[]\n")


def apply_edits(text: str, edits: list[dict]) -> str:
    """`text` with ruff-shaped edits applied (rows and columns 1-based, end exclusive), last first."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(place: dict) -> int:
        return starts[place["row"] - 1] + place["column"] - 1

    for edit in sorted(edits, key=lambda e: offset(e["location"]), reverse=True):
        text = text[: offset(edit["location"])] + edit["content"] + text[offset(edit["end_location"]) :]
    return text


def test_github_format(project):
    project.write("model.py", PRINT_MODEL)
    result = project.lint("--format", "github", "model.py")
    assert result.code == 1
    end = len(PRINT_MODEL.splitlines()[7]) + 1
    message = msg("TP101").replace("%", "%25")
    assert result.out == (
        f"::error title=transpile (TP101),file=model.py,line=8,col=9,endLine=8,endColumn={end}" f"::TP101 {message}\n"
    )
    assert project.lint("--format", "github", "--ignore", "TP1", "model.py").out == ""


def test_sarif_format_validates_and_lists_every_rule(project, sarif_validator):
    project.write("model.py", MULTI_MODEL)
    project.write("sub dir/é.py", PRINT_MODEL)
    result = project.lint("--format", "sarif", ".")
    assert result.code == 1
    log = json.loads(result.out)
    assert [f"{list(e.absolute_path)}: {e.message}" for e in sarif_validator.iter_errors(log)] == []
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(REGISTRY)
    assert run["columnKind"] == "unicodeCodePoints"
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["TP101", "TP201", "TP301", "TP101"]
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
    first = results[0]["locations"][0]["physicalLocation"]
    assert first["artifactLocation"] == {"uri": "model.py", "uriBaseId": "%SRCROOT%"}
    assert first["region"]["startLine"] == 7 and first["region"]["startColumn"] == 9
    last = results[3]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert last == {"uri": "sub%20dir/%C3%A9.py", "uriBaseId": "%SRCROOT%"}
    clean = json.loads(project.lint("--format", "sarif", "--select", "TP4", ".").out)
    assert list(sarif_validator.iter_errors(clean)) == []
    assert clean["runs"][0]["results"] == []


def test_statistics(project):
    project.write("a.py", MULTI_MODEL)
    project.write("b.py", PRINT_MODEL)
    result = project.lint("--statistics", ".")
    assert result.code == 1
    assert result.out.startswith(
        "2  TP101  [*] print-in-compiled-code\n"
        f"1  TP201  {'[*]' if safe_fix(project, 'a.py', 'TP201') else '   '} data-dependent-if\n"
        "1  TP301      tensor-item-call\n"
        "\n"
        "Found 4 problems.\n"
    )
    clean = project.lint("--statistics", "--ignore", "TP", ".")
    assert (clean.code, clean.out) == (0, "All checks passed!\n")


# --- noqa ----------------------------------------------------------------------------


NOQA_MODEL = """\
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        print("a")  # noqa: TP101
        print("b")  # noqa
        print("c")  # noqa: TP201
        print("d")  # noqa: TP999
        print("e")  # noqa: E501
        print("f")  # noqa:TP101,TP102
        print("g")  # NOQA: tp101
        print("h")  # noqa: E501, TP101
        s = "# noqa"; print(s)
        if x.sum() > 0:  # noqa: TP101
            x = x + 1
        n = x.max().item()  # noqa
        return x / n
"""


def test_noqa(project):
    project.write("model.py", NOQA_MODEL)
    result = project.lint("model.py")
    assert result.code == 1
    assert [(line, code) for _, line, _, code in result.findings()] == [
        (9, "TP101"),  # noqa for another of our codes does not cover TP101 ...
        (9, "TP900"),  # ... and is itself unused
        (10, "TP101"),
        (10, "TP900"),  # unknown code
        (11, "TP101"),  # another linter's code: no TP900
        (12, "TP900"),  # TP101 used, TP102 unused
        (15, "TP101"),  # "# noqa" inside a string is no directive
        (16, "TP201"),  # noqa: TP101 does not cover TP201 on the same line
        (16, "TP900"),
    ]
    out = result.out.splitlines()
    unused_201 = next(line for line in out if line.startswith("model.py:9:") and "TP900" in line)
    assert unused_201 == "model.py:9:21: TP900 unused `noqa` directive (unused: TP201)"
    unknown = next(line for line in out if line.startswith("model.py:10:") and "TP900" in line)
    assert "unknown" in unknown and "TP999" in unknown
    partly = next(line for line in out if line.startswith("model.py:12:"))
    assert "TP102" in partly and "TP101" not in partly
    assert "E501" not in result.out


def test_noqa_for_a_deselected_code_is_not_unused(project):
    project.write("model.py", NOQA_MODEL)
    result = project.lint("--ignore", "TP1", "model.py")
    # Line 12 names only TP1xx codes, which are not selected: nothing to report there.
    assert [(line, code) for _, line, _, code in result.findings()] == [
        (9, "TP900"),  # TP201 is selected and unused
        (10, "TP900"),  # an unknown code stays worth reporting
        (16, "TP201"),  # the noqa names only TP101, which is not selected: no TP900
    ]


def test_unused_noqa_rule_can_be_ignored(project):
    project.write("model.py", NOQA_MODEL)
    assert "TP900" not in project.lint("--ignore", "TP900", "model.py").codes()
    assert project.lint("--select", "TP900", "model.py").codes() == {"TP900"}


def test_noqa_only_findings_still_exit_1(project):
    project.write("model.py", CLEAN_MODEL.replace("return y * 2", "return y * 2  # noqa: TP101"))
    result = project.lint("model.py")
    assert result.code == 1 and result.codes() == {"TP900"}


# --- pyproject.toml ------------------------------------------------------------------


def test_pyproject_select_and_ignore_from_a_nested_directory(project):
    project.write("pyproject.toml", '[project]\nname = "x"\n\n[tool.transpile]\nignore = ["TP101"]\n')
    project.write("src/pkg/deep/model.py", MULTI_MODEL)
    deep = project.root / "src" / "pkg" / "deep"
    assert project.lint(".", cwd=deep).codes() == {"TP201", "TP301"}
    assert project.lint("model.py", cwd=deep).codes() == {"TP201", "TP301"}
    assert project.lint().codes() == {"TP201", "TP301"}
    # The command line overrides the file's list.
    assert project.lint("--ignore", "TP3", cwd=deep).codes() == {"TP101", "TP201"}
    project.write("pyproject.toml", '[tool.transpile]\nselect = ["TP3"]\n')
    assert project.lint(".", cwd=deep).codes() == {"TP301"}
    assert project.lint("--extend-select", "TP101", cwd=deep).codes() == {"TP101", "TP301"}


def test_pyproject_without_our_table_does_not_stop_the_search(project):
    project.write("pyproject.toml", '[tool.transpile]\nselect = ["TP2"]\n')
    project.write("sub/pyproject.toml", '[project]\nname = "sub"\n')
    project.write("sub/model.py", MULTI_MODEL)
    assert project.lint(".", cwd=project.root / "sub").codes() == {"TP201"}


def test_pyproject_exclude_replaces_the_defaults(project):
    project.write("pyproject.toml", '[tool.transpile]\nexclude = ["legacy"]\n')
    project.write("legacy/old.py", PRINT_MODEL)
    project.write("build/gen.py", PRINT_MODEL)  # "build" is a default exclude, now replaced
    assert {f[0] for f in project.lint().findings()} == {"build/gen.py"}


# --- excludes ------------------------------------------------------------------------


@pytest.fixture
def excluded_project(project) -> Project:
    project.write("pyproject.toml", '[tool.transpile]\nextend-exclude = ["generated", "src/skip_*.py"]\n')
    project.write("src/model.py", PRINT_MODEL)
    project.write("src/skip_me.py", PRINT_MODEL)
    project.write("src/generated/model.py", PRINT_MODEL)
    project.write(".venv/lib/site.py", PRINT_MODEL)  # default exclude
    return project


def test_extend_exclude_skips_directories_and_files_when_walking(excluded_project):
    result = excluded_project.lint()
    assert {f[0] for f in result.findings()} == {"src/model.py"}
    result = excluded_project.lint("src")
    assert {f[0] for f in result.findings()} == {"src/model.py"}


def test_explicit_files_are_linted_unless_force_exclude(excluded_project):
    named = excluded_project.lint("src/generated/model.py", "src/skip_me.py", ".venv/lib/site.py")
    assert {f[0] for f in named.findings()} == {
        "src/generated/model.py",
        "src/skip_me.py",
        ".venv/lib/site.py",
    }
    forced = excluded_project.lint(
        "--force-exclude", "src/generated/model.py", "src/skip_me.py", ".venv/lib/site.py", "src/model.py"
    )
    assert {f[0] for f in forced.findings()} == {"src/model.py"}


def test_force_exclude_with_only_excluded_files_is_success(excluded_project):
    for args in (
        ("src/generated/model.py", "src/skip_me.py"),
        ("src/generated",),  # an excluded directory named explicitly
    ):
        result = excluded_project.lint("--force-exclude", *args)
        assert (result.code, result.out) == (0, "All checks passed!\n")
    # From a subdirectory, with paths relative to it, as pre-commit never does but users do.
    result = excluded_project.lint("--force-exclude", "generated/model.py", cwd=excluded_project.root / "src")
    assert (result.code, result.out) == (0, "All checks passed!\n")


def test_command_line_extend_exclude(project):
    project.write("a/model.py", PRINT_MODEL)
    project.write("b/model.py", PRINT_MODEL)
    assert {f[0] for f in project.lint("--extend-exclude", "b").findings()} == {"a/model.py"}
    assert project.lint("--exclude", "a", "--exclude", "b").out == "All checks passed!\n"


def test_nothing_to_lint_is_success(project):
    (project.root / "empty_dir").mkdir()
    project.write("notes.txt", "print('hi')\n")
    for args in (("empty_dir",), ("notes.txt",), ()):
        result = project.lint(*args)
        assert (result.code, result.out) == (0, "All checks passed!\n")


# --- files that cannot be analysed ---------------------------------------------------


def test_unparseable_files_are_reported_and_others_still_linted(project):
    project.write("syntax.py", "import torch\n\ndef f(:\n    pass\n")
    project.write("latin1.py", b'# no coding cookie\nname = "caf\xe9"\n')
    project.write("binary.py", b"import torch\x00\x01\x02\xff")
    project.write("empty.py", "")
    project.write("model.py", PRINT_MODEL)
    project.write("zz_model.py", PRINT_MODEL)
    result = project.lint()
    assert result.code == 1
    assert result.findings() == [
        ("binary.py", 1, 1, "TP902"),
        ("latin1.py", 1, 1, "TP902"),
        ("model.py", 8, 9, "TP101"),
        ("syntax.py", 3, 7, "TP901"),
        ("zz_model.py", 8, 9, "TP101"),
    ]
    out = result.out
    assert "NUL" in next(line for line in out.splitlines() if line.startswith("binary.py"))
    assert "syntax error" in next(line for line in out.splitlines() if line.startswith("syntax.py"))
    assert "Traceback" not in result.err
    # The same through a real process, where a crash would show.
    proc = project.run("lint", "--no-cache")
    assert (proc.code, proc.out) == (1, out)
    # They are rules like any other.
    assert project.lint("--ignore", "TP9").codes() == {"TP101"}


def test_syntax_error_column_counts_characters(project):
    project.write("syntax.py", 's = "ééé"; x = 1 +* 2\n')
    assert project.lint("syntax.py").findings() == [("syntax.py", 1, 19, "TP901")]


def test_coding_cookie_makes_latin1_readable(project):
    project.write(
        "latin1.py", b"# -*- coding: latin-1 -*-\n" + PRINT_MODEL.encode().replace(b"activations", b"caf\xe9")
    )
    assert project.lint("latin1.py").findings() == [("latin1.py", 9, 9, "TP101")]


def test_utf8_bom_is_fine(project):
    project.write("bom.py", b"\xef\xbb\xbf" + PRINT_MODEL.encode())
    assert project.lint("bom.py").findings() == [("bom.py", 8, 9, "TP101")]


# --- what counts as compiled code ----------------------------------------------------


SCOPES = """\
import torch
from torch import nn

print("module level")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        print("init")
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        print("forward")
        return self.helper(self.lin(x))

    def helper(self, y):
        print("helper")
        return y

    def unused(self, y):
        print("never called from forward")
        return y


def train(model, batches):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, batch in enumerate(batches):
        loss = model(batch).sum()
        loss.backward()
        opt.step()
        print("step", step, loss.item())


@torch.compile
def decorated(x):
    print("decorated")
    return x + 1


def wrapped(x):
    print("wrapped")
    return x


fast = torch.compile(wrapped)

if __name__ == "__main__":
    print("main")
"""


def test_only_code_that_runs_compiled_is_flagged(project):
    project.write("model.py", SCOPES)
    result = project.lint("model.py")
    lines = SCOPES.splitlines()
    expected = [
        next(i for i, line in enumerate(lines, 1) if f'print("{name}")' in line)
        for name in ("forward", "helper", "decorated", "wrapped")
    ]
    assert result.lines_of("TP101") == sorted(expected)
    assert result.codes() == {"TP101"}  # loss.item() in the training loop is not flagged either


def test_helper_in_another_module_is_flagged(project):
    project.write("pkg/__init__.py", "")
    project.write("pkg/helpers.py", "import torch\n\n\ndef log_shape(t):\n    print(t.shape)\n")
    project.write(
        "pkg/model.py",
        "from torch import nn\n\nfrom .helpers import log_shape\n\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        log_shape(x)\n        return x\n",
    )
    assert project.lint("pkg").findings() == [("pkg/helpers.py", 5, 5, "TP101")]


def test_helper_module_without_torch_import_is_flagged(project):
    project.write("pkg/__init__.py", "")
    project.write("pkg/helpers.py", "def log_shape(t):\n    print(t.shape)\n")
    project.write(
        "pkg/model.py",
        "from torch import nn\n\nfrom .helpers import log_shape\n\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        log_shape(x)\n        return x\n",
    )
    assert project.lint("pkg").findings() == [("pkg/helpers.py", 2, 5, "TP101")]


def test_a_file_named_twice_is_reported_once(project):
    path = project.write("model.py", PRINT_MODEL)
    result = project.lint("model.py", str(path))
    assert "\nFound 1 problem.\n" in result.out


# --- cache ---------------------------------------------------------------------------


def _cache_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def test_cache_gives_identical_output_and_sees_edits(project):
    path = project.write("model.py", MULTI_MODEL)
    project.write("broken.py", b"\x00binary")
    first = project.lint(".")
    assert _cache_files(project.cache)  # something was written
    second = project.lint(".")
    assert (second.code, second.out) == (first.code, first.out)
    path.write_text(MULTI_MODEL.replace('print("start")', "pass"), encoding="utf-8")
    third = project.lint(".")
    assert third.out != first.out
    assert third.codes() == {"TP201", "TP301", "TP902"}
    # The cache holds what a file yields before selection: selection still applies.
    assert project.lint("--select", "TP3", ".").codes() == {"TP301"}


def test_cache_hits_report_the_path_of_this_run(project):
    project.write("a/model.py", PRINT_MODEL)
    project.write("a/blob.py", b"\x00")
    project.lint("a")
    shutil.copytree(project.root / "a", project.root / "b")
    result = project.lint("b")  # same bytes and module names: served from the cache
    assert {f[0] for f in result.findings()} == {"b/model.py", "b/blob.py"}


def test_no_cache_writes_nothing(project):
    project.write("model.py", PRINT_MODEL)
    result = project.lint("--no-cache", "--cache-dir", str(project.cache), "model.py")
    assert result.code == 1
    assert _cache_files(project.cache) == []
    assert _cache_files(Path(os.environ["TRANSPILE_CACHE_DIR"])) == []


def test_default_cache_dir_follows_the_environment(project):
    project.write("model.py", PRINT_MODEL)
    default = Path(os.environ["TRANSPILE_CACHE_DIR"])
    result = project.lint("model.py", cache=False)
    assert result.code == 1
    assert _cache_files(default)


def test_relative_cache_dir_in_pyproject_is_relative_to_the_file(project):
    project.write("pyproject.toml", '[tool.transpile]\ncache-dir = ".tcache"\n')
    project.write("src/model.py", PRINT_MODEL)
    assert project.lint(".", cache=False, cwd=project.root / "src").code == 1
    assert not (project.root / "src" / ".tcache").exists()
    assert _cache_files(project.root / ".tcache")


def test_corrupt_or_unusable_cache_is_ignored(project):
    project.write("model.py", PRINT_MODEL)
    expected = project.lint("model.py").out
    for file in _cache_files(project.cache):
        file.write_bytes(b"not a pickle")
    assert project.lint("model.py").out == expected
    blocker = project.root.parent / "cache-is-a-file"
    blocker.write_text("")
    result = project.lint("--cache-dir", str(blocker), "model.py", cache=False)
    assert (result.code, result.out) == (1, expected)


def test_warm_cache_in_a_new_process(project):
    """In-process runs cannot see this: importing the test module loads the rules."""
    project.write("good.py", CLEAN_MODEL)
    project.write("bad.py", PRINT_MODEL)
    cache = ["--cache-dir", str(project.cache)]
    runs = [project.run("lint", *cache, name) for name in ("good.py", "bad.py", "good.py", "bad.py")]
    assert _cache_files(project.cache)
    assert [(r.code, r.err) for r in runs] == [(0, ""), (1, ""), (0, ""), (1, "")]
    assert runs[2].out == runs[0].out and runs[3].out == runs[1].out


def test_long_operator_chain_is_analysed_not_a_crash(project):
    """A few hundred chained `+` are legal Python and nest that deep in the syntax tree."""
    chain = " + ".join(["x"] * 900)
    source = f"from torch import nn\n\n\nclass M(nn.Module):\n    def forward(self, x):\n        y = {chain}\n        print(y)\n        return y\n"
    project.write("deep.py", source, dedent=False)
    result = project.lint("deep.py")
    assert result.code == 1, result.err
    assert result.findings() == [("deep.py", 7, 9, "TP101")]


def test_dangling_symlink_is_reported_not_a_crash(project):
    project.write("pkg/model.py", PRINT_MODEL)
    (project.root / "pkg" / "dangling.py").symlink_to(project.root / "nowhere.py")
    result = project.run("lint", "--no-cache", "pkg")
    assert result.code == 1, result.err
    assert result.findings()[0][0::3] == ("pkg/dangling.py", "TP902")
    assert ("pkg/model.py", 8, 9, "TP101") in result.findings()


# --- the process ---------------------------------------------------------------------


def test_lint_does_not_import_torch(project):
    project.write("model.py", MULTI_MODEL)
    code = textwrap.dedent(f"""
        import sys
        from transpiler.cli.main import main
        try:
            main(["lint", "--cache-dir", {str(project.cache)!r}, "model.py"], prog_name="transpile")
        except SystemExit as exit:
            status = exit.code
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy", "triton"))
        print("STATUS", status, "HEAVY", heavy, file=sys.stderr)
        """)
    proc = project.run(prefix=[sys.executable, "-c", code])
    assert "STATUS 1 HEAVY []" in proc.err, proc.err
    assert "TP101" in proc.out


def test_lint_process_importtime_has_no_torch(project):
    project.write("model.py", PRINT_MODEL)
    proc = project.run("lint", "--no-cache", "model.py", prefix=[sys.executable, "-X", "importtime", *CLI[1:]])
    assert proc.code == 1
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.err.splitlines() if "|" in line}
    assert "transpiler.cli.main" in imported and "rewrites" in imported  # importtime did report
    assert not {m for m in imported if m.split(".")[0] == "torch"}


def test_console_script(project):
    script = Path(sys.executable).parent / "transpile"
    if not script.exists():
        script = shutil.which("transpile")
    if script is None:
        pytest.skip("the `transpile` console script is not installed")
    project.write("model.py", PRINT_MODEL)
    proc = project.run("lint", "--no-cache", "model.py", prefix=[str(script)])
    assert proc.code == 1 and "model.py:8:9: TP101" in proc.out


def test_python_dash_m_runs_the_cli(project):
    project.write("model.py", PRINT_MODEL)
    proc = project.run("lint", "--no-cache", "model.py", prefix=[sys.executable, "-m", "transpiler.cli.main"])
    assert proc.code == 1 and "TP101" in proc.out


def test_version(project):
    result = project.run("--version")
    assert result.code == 0 and "transpile" in result.out and "version" in result.out


def test_parallel_workers_give_the_same_output(project):
    """Over 1 MiB of input goes through the process pool; results must match a serial run."""
    padding = "".join(f"CONSTANT_{i} = {i}\n" for i in range(7000))
    for i in range(8):
        project.write(
            f"m{i}.py", PRINT_MODEL + padding + MULTI_MODEL.split("\n\n\n", 1)[1].replace("Model", f"Other{i}")
        )
    assert sum(p.stat().st_size for p in project.root.glob("*.py")) > 1 << 20
    serial = project.run("lint", "--no-cache", "-j", "1")
    parallel = project.run("lint", "--no-cache", "-j", "2")
    assert serial.code == parallel.code == 1
    assert parallel.out == serial.out
    assert "\nFound 32 problems.\n" in serial.out


# --- transpile rules -----------------------------------------------------------------


def test_rules_lists_every_code(project):
    result = project.invoke("rules")
    assert result.code == 0
    listed = [line.split()[0] for line in result.out.splitlines() if line.strip()]
    assert listed == sorted(REGISTRY)
    assert {"TP101", "TP900", "TP901", "TP902"} <= set(listed)
    line = next(line for line in result.out.splitlines() if line.startswith("TP101"))
    assert REGISTRY["TP101"].name in line and all(c in line for c in REGISTRY["TP101"].dynamo_codes)


@pytest.mark.parametrize("code", ["TP101", "tp101"])
def test_rules_explains_one(project, code):
    result = project.invoke("rules", code)
    assert result.code == 0
    assert result.out.startswith(f"# {REGISTRY['TP101'].name} (TP101)\n\n")
    assert "## What it does" in result.out and "## Why is this bad?" in result.out


def test_rules_unknown_code_exits_2(project):
    result = project.invoke("rules", "TP999")
    assert result.code == 2 and "TP999" in result.err and result.out == ""


# --- fixes -------------------------------------------------------------------------------


def test_fix_rewrites_in_place_to_the_documented_form(project):
    path = project.write("model.py", PRINT_MODEL)
    path.chmod(0o755)
    result = project.lint("--fix", "model.py")
    assert (result.code, result.out) == (0, "Found 1 problem (1 fixed, 0 remaining).\n")
    assert path.read_text() == CLEAN_MODEL  # the rule's VALID example is its fixed INVALID one
    assert path.stat().st_mode & 0o777 == 0o755
    assert [p.name for p in project.root.iterdir()] == ["model.py"]  # no temporary files left
    again = project.lint("--fix", "model.py")
    assert (again.code, again.out) == (0, "All checks passed!\n")


def test_diff_prints_and_writes_nothing(project):
    path = project.write("model.py", PRINT_MODEL)
    result = project.lint("--diff", "model.py")
    assert result.code == 1
    assert path.read_text() == PRINT_MODEL
    added = [line for line in result.out.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ["+        if not torch.compiler.is_compiling():", '+            print("activations", y.shape)']
    assert result.out.startswith("--- a/model.py\n+++ b/model.py\n")
    path.write_text(CLEAN_MODEL)
    assert project.lint("--diff", "model.py") == Run(0, "", "")


def test_fix_and_diff_together_is_a_usage_error(project):
    project.write("model.py", PRINT_MODEL)
    assert project.lint("--fix", "--diff", "model.py").code == 2


def test_show_fixes_lists_fixed_and_left(project):
    project.write("model.py", MULTI_MODEL)
    where = safe_fix(project, "model.py", "TP201")
    result = project.lint("--fix", "--show-fixes", "model.py")
    assert result.code == 1
    assert (
        f"Fixed {2 if where else 1} problem{'s' if where else ''}:\n"
        "  model.py:7:9: TP101 guard with `if not torch.compiler.is_compiling():` (safe)\n"
        + ("  model.py:8:12: TP201 replace with `torch.where` (proven equal) (safe)\n" if where else "")
        in result.out
    )
    assert "Not fixed:\n" in result.out


def test_side_effects_remove_policy(project):
    path = project.write("model.py", PRINT_MODEL)
    result = project.lint("--fix", "--side-effects", "remove", "model.py")
    assert result.code == 0
    assert path.read_text() == PRINT_MODEL.replace('        print("activations", y.shape)\n', "")


def test_fix_keeps_line_endings_and_encoding(project):
    source = PRINT_MODEL.replace("import torch\n", "# -*- coding: latin-1 -*-\nimport torch  # caf\xe9\n", 1)
    path = project.write("model.py", source.replace("\n", "\r\n").encode("latin-1"))
    assert project.lint("--fix", "model.py").code == 0
    fixed = path.read_bytes()
    assert b"caf\xe9" in fixed and b"is_compiling():\r\n" in fixed
    assert fixed.count(b"\r\n") == fixed.count(b"\n")


def test_fix_adds_import_torch_when_missing(project):
    path = project.write("model.py", PRINT_MODEL.replace("import torch\n", ""))
    assert project.lint("--fix", "model.py").code == 0
    text = path.read_text()
    assert text.startswith("import torch\nfrom torch import nn\n")
    compile(text, "model.py", "exec")
