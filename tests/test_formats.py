"""Tests for transpiler.lint.formats: exact text output, JSON fields, GitHub escaping, SARIF validity."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transpiler.source.diagnostics import Diagnostic, Fix
from transpiler.lint.formats import FORMATS, RuleInfo, render

ITEM = Diagnostic("src/model.py", 12, 9, 12, 22, "TP101", "tensor-item-call", "`.item()` in forward", "unsafe")
PRINT = Diagnostic(
    "src/model.py",
    3,
    5,
    3,
    17,
    "TP201",
    "print-in-forward",
    "`print()` in forward",
    "safe",
    ("GB0001",),
)
BRANCH = Diagnostic("src/a.py", 7, 1, 8, 4, "TP301", "data-dependent-branch", "branch on tensor value")


def test_text_lines_are_sorted_and_marked_fixable():
    # Only safe fixes are marked, as `--fix` alone applies only those (ruff's convention).
    assert render([ITEM, PRINT, BRANCH], "text") == (
        "src/a.py:7:1: TP301 branch on tensor value\n"
        "src/model.py:3:5: TP201 [*] `print()` in forward\n"
        "src/model.py:12:9: TP101 `.item()` in forward\n"
        "\n"
        "Found 3 problems.\n"
        "[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"
    )


def test_text_marks_unsafe_fixes_when_enabled():
    text = render([ITEM, PRINT, BRANCH], "text", unsafe_fixes=True)
    assert "TP101 [*] `.item()`" in text
    assert text.endswith("[*] 2 fixable with the `--fix` option.\n")


def test_text_only_unsafe_fixes():
    assert render([ITEM], "text").endswith(
        "Found 1 problem.\nNo fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"
    )


def test_text_summary_after_fixing():
    assert render([BRANCH], "text", fixed=2).endswith("Found 3 problems (2 fixed, 1 remaining).\n")
    assert render([], "text", fixed=2) == "Found 2 problems (2 fixed, 0 remaining).\n"


def test_text_sorts_by_code_on_the_same_position():
    other = Diagnostic("src/a.py", 7, 1, 7, 2, "TP100", "x", "first")
    assert render([BRANCH, other], "text").splitlines()[:2] == [
        "src/a.py:7:1: TP100 first",
        "src/a.py:7:1: TP301 branch on tensor value",
    ]


def test_text_singular_without_fixable_line():
    assert render([BRANCH], "text") == "src/a.py:7:1: TP301 branch on tensor value\n\nFound 1 problem.\n"


def test_text_all_checks_passed():
    assert render([], "text") == "All checks passed!\n"
    assert render([], "text", statistics=True) == "All checks passed!\n"


def test_text_color_only_when_asked():
    assert "\x1b" not in render([ITEM, PRINT], "text", color=False)
    colored = render([BRANCH], "text", color=True)
    assert colored.startswith("\x1b[1msrc/a.py\x1b[0m:7:1: \x1b[31mTP301\x1b[0m branch on tensor value\n")


def test_statistics_table():
    more = [
        Diagnostic("b.py", 1, 1, 1, 2, "TP101", "tensor-item-call", "m"),
        Diagnostic("c.py", 1, 1, 1, 2, "TP101", "tensor-item-call", "m"),
        Diagnostic("d.py", 1, 1, 1, 2, "TP1001", "long-code", "m"),
        Diagnostic("e.py", 1, 1, 1, 2, "TP1001", "long-code", "m"),
    ] + [Diagnostic(f"f{i}.py", 1, 1, 1, 2, "TP201", "print-in-forward", "m") for i in range(10)]
    assert render([ITEM, BRANCH, *more], "text", statistics=True) == (
        "10  TP201       print-in-forward\n"
        " 3  TP101       tensor-item-call\n"
        " 2  TP1001      long-code\n"
        " 1  TP301       data-dependent-branch\n"
        "\n"
        "Found 16 problems.\n"
        "No fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"
    )


def test_json_fields():
    records = json.loads(render([ITEM, PRINT, BRANCH], "json"))
    assert [r["code"] for r in records] == ["TP301", "TP201", "TP101"]
    assert list(records[1]) == [
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
    assert records[1] == {
        "path": "src/model.py",
        "line": 3,
        "col": 5,
        "end_line": 3,
        "end_col": 17,
        "code": "TP201",
        "name": "print-in-forward",
        "message": "`print()` in forward",
        "fix_applicability": "safe",
        "fix": None,
        "no_fix": None,
        "url": PRINT.url,
        "dynamo_codes": ["GB0001"],
    }
    assert records[0]["fix_applicability"] is None
    assert records[2]["fix_applicability"] == "unsafe"


def test_json_is_pretty_and_ends_with_newline():
    out = render([BRANCH], "json")
    assert out.startswith("[\n  {\n") and out.endswith("}\n]\n")
    assert render([], "json") == "[]\n"


def test_github_escapes_message_and_properties():
    tricky = Diagnostic("dir,x/a:b.py", 2, 3, 4, 5, "TP101", "n", "100% sure\r\nnext: a, b")
    assert render([tricky], "github") == (
        "::error title=transpile (TP101),file=dir%2Cx/a%3Ab.py,line=2,col=3,endLine=4,endColumn=5"
        "::TP101 100%25 sure%0D%0Anext: a, b\n"
    )
    assert render([], "github") == ""


def _unescape(text: str) -> str:
    for escaped, raw in (("%0A", "\n"), ("%0D", "\r"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(escaped, raw)
    return text


@given(message=st.text(), path=st.text(min_size=1))
def test_github_escaping_round_trips(message, path):
    out = render([Diagnostic(path, 1, 1, 1, 2, "TP101", "n", message)], "github")
    assert out.count("\n") == 1 and "\r" not in out
    head, data = out[:-1].split("::", 2)[1:]
    props = dict(prop.split("=", 1) for prop in head.removeprefix("error ").split(","))
    assert _unescape(props["file"]) == path
    assert _unescape(data) == f"TP101 {message}"


def test_unknown_format_and_statistics_outside_text():
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        render([], "xml")
    with pytest.raises(ValueError, match="only available in the text format"):
        render([], "json", statistics=True)
    assert FORMATS == ("text", "json", "github", "sarif")


# --- SARIF ---------------------------------------------------------------------


RULES = {
    "TP101": RuleInfo("TP101", "tensor-item-call", "`.item()` forces a graph break", ITEM.url, ("GB0124",)),
    "TP401": RuleInfo("TP401", "unused-rule", "Appears in no result", "https://example.com/tp401"),
}


def test_sarif_validates_against_the_schema(sarif_validator):
    for rules in (None, RULES):
        log = json.loads(
            render(
                [ITEM, PRINT, BRANCH, Diagnostic("/abs/dir x/m.py", 1, 1, 1, 2, "TP101", "n", "m")],
                "sarif",
                rules=rules,
            )
        )
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in sarif_validator.iter_errors(log)]
        assert errors == []
    assert list(sarif_validator.iter_errors({"version": "2.1.0", "runs": [{"results": []}]}))  # the validator bites


def test_sarif_empty_validates(sarif_validator):
    log = json.loads(render([], "sarif"))
    assert list(sarif_validator.iter_errors(log)) == []
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"] == []


def test_sarif_structure():
    log = json.loads(render([ITEM, PRINT, BRANCH], "sarif", rules=RULES))
    assert log["$schema"] == "https://json.schemastore.org/sarif-2.1.0.json"
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "transpile"
    assert driver["informationUri"].startswith("https://")
    assert driver["version"]
    rules = driver["rules"]
    # All rules passed in, plus those only seen in results, sorted by code.
    assert [r["id"] for r in rules] == ["TP101", "TP201", "TP301", "TP401"]
    assert rules[0] == {
        "id": "TP101",
        "name": "tensor-item-call",
        "shortDescription": {"text": "`.item()` forces a graph break"},
        "fullDescription": {"text": "`.item()` forces a graph break"},  # no description given: the summary
        "helpUri": ITEM.url,
        "help": {"text": f"`.item()` forces a graph break. Documentation: {ITEM.url}"},
        "properties": {"dynamo_codes": ["GB0124"]},
    }
    assert rules[1]["properties"] == {"dynamo_codes": ["GB0001"]}
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["TP301", "TP201", "TP101"]
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] == "error"
    location = results[2]["locations"][0]["physicalLocation"]
    assert location == {
        "artifactLocation": {"uri": "src/model.py", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 12, "startColumn": 9, "endLine": 12, "endColumn": 22},
    }
    assert results[2]["message"] == {"text": "`.item()` in forward"}


def test_sarif_lists_only_rules_seen_without_a_catalog():
    log = json.loads(render([BRANCH], "sarif"))
    assert [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]] == ["TP301"]


def test_sarif_uris():
    def uri(path: str) -> dict:
        log = json.loads(render([Diagnostic(path, 1, 1, 1, 2, "TP101", "n", "m")], "sarif"))
        return log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]

    assert uri(str(Path("pkg") / "sub dir" / "m.py")) == {
        "uri": "pkg/sub%20dir/m.py",
        "uriBaseId": "%SRCROOT%",
    }
    assert uri("/abs/m.py") == {"uri": "file:///abs/m.py"}


positions = st.integers(min_value=1, max_value=10_000)
diagnostics = st.builds(
    Diagnostic,
    path=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1),
    line=positions,
    col=positions,
    end_line=positions,
    end_col=positions,
    code=st.from_regex(r"TP[1-9][0-9]{2}", fullmatch=True),
    name=st.from_regex(r"[a-z]+(-[a-z]+)*", fullmatch=True),
    message=st.text(),
    fix_applicability=st.sampled_from([None, "safe", "unsafe"]),
    dynamo_codes=st.lists(st.from_regex(r"GB[0-9]{4}", fullmatch=True), max_size=2).map(tuple),
)


@given(st.lists(diagnostics, max_size=5))
def test_sarif_always_validates(sarif_validator, found):
    log = json.loads(render(found, "sarif"))
    assert [f"{list(e.absolute_path)}: {e.message}" for e in sarif_validator.iter_errors(log)] == []


# A fix of PRINT as fixer.TextEdit gives it: insert a guard before the call.
GUARD = SimpleNamespace(content="if not torch.compiler.is_compiling():\n    ", start=(3, 5), end=(3, 5))
FIXED = replace(PRINT, fix=Fix("safe", "guard with `if not torch.compiler.is_compiling():`", "Expr", (3, 4, 3, 16)))


def test_json_fix_has_ruffs_shape():
    (record,) = json.loads(render([FIXED], "json", edits={FIXED: [GUARD]}))
    assert record["fix"] == {
        "message": "guard with `if not torch.compiler.is_compiling():`",
        "applicability": "safe",
        "edits": [
            {
                "content": "if not torch.compiler.is_compiling():\n    ",
                "location": {"row": 3, "column": 5},
                "end_location": {"row": 3, "column": 5},
            }
        ],
    }
    (unfixable,) = json.loads(render([BRANCH], "json", edits={}))
    assert unfixable["fix"] is None


def test_sarif_fixes_and_fingerprints(sarif_validator, tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import torch\n\n    print(x)\n")
    at = replace(FIXED, path=str(source))
    log = json.loads(render([at, replace(ITEM, path=str(source), line=3)], "sarif", edits={at: [GUARD]}))
    assert [f"{list(e.absolute_path)}: {e.message}" for e in sarif_validator.iter_errors(log)] == []
    fixed, item = log["runs"][0]["results"]  # TP101 sorts before TP201 on one line: ITEM first
    fixed, item = (fixed, item) if fixed["ruleId"] == "TP201" else (item, fixed)
    assert fixed["fixes"] == [
        {
            "description": {"text": "guard with `if not torch.compiler.is_compiling():` (safe fix)"},
            "artifactChanges": [
                {
                    "artifactLocation": {"uri": source.as_uri()},
                    "replacements": [
                        {
                            "deletedRegion": {"startLine": 3, "startColumn": 5, "endLine": 3, "endColumn": 5},
                            "insertedContent": {"text": "if not torch.compiler.is_compiling():\n    "},
                        }
                    ],
                }
            ],
        }
    ]
    assert "fixes" not in item
    # Fingerprints: one key, different per rule on one line, unchanged when lines are added above.
    (key,) = fixed["partialFingerprints"]
    assert fixed["partialFingerprints"][key] != item["partialFingerprints"][key]
    source.write_text("import torch\n# a new comment\n\n    print(x)\n")
    moved = json.loads(render([replace(at, line=4, end_line=4)], "sarif"))["runs"][0]["results"][0]
    assert moved["partialFingerprints"] == fixed["partialFingerprints"]
    # Two findings of one rule on identical lines differ by their rank down the file.
    source.write_text("    print(x)\n    print(x)\n")
    twins = json.loads(render([replace(at, line=1, end_line=1), replace(at, line=2, end_line=2)], "sarif"))
    prints = [r["partialFingerprints"][key] for r in twins["runs"][0]["results"]]
    assert prints[0].split(":")[0] == prints[1].split(":")[0] and [p.split(":")[1] for p in prints] == ["1", "2"]
