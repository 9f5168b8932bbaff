"""The rule table and every rule's own examples, as the linter sees them."""

from __future__ import annotations

import re

import pytest

import rewrites
from tests.rule_examples import CHECKED_RULES, RULES, examples, lint_snippet
from transpiler.cli import ruledocs


def test_codes_follow_the_family_table():
    for rule in RULES:
        assert re.fullmatch(r"TP[1-9]\d\d", rule.code), rule.code
        module = rewrites.FAMILIES[rule.code[:3]]
        assert rule.__module__ == module.__name__, f"{rule.code} belongs in {module.__name__}"


def test_names_are_unique_kebab_case_anti_patterns():
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    for name in names:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", name), name


def test_at_least_thirty_rules_make_claims_about_dynamo():
    assert len(CHECKED_RULES) >= 30


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_is_documented(rule):
    docs = rule.docs()
    for section in ("## What it does", "## Why is this bad?", "## Fix safety"):
        assert section in docs, f"{rule.code} lacks {section}"
    assert rule.message and rule.summary
    for code in rule.dynamo_codes:
        assert re.fullmatch(r"GB\d{4}", code)
    if rule.family != "meta":
        assert rule.VALID and rule.INVALID, f"{rule.code} needs VALID and INVALID examples"


@pytest.mark.parametrize(("rule", "source"), examples("INVALID"))
def test_invalid_example_is_reported(rule, source):
    codes = [d.code for d in lint_snippet(source)]
    assert rule.code in codes


@pytest.mark.parametrize(("rule", "source"), examples("VALID"))
def test_valid_example_is_clean(rule, source):
    assert lint_snippet(source) == []


def test_rule_reference_is_up_to_date():
    assert (
        ruledocs.DOC_PATH.read_text(encoding="utf-8") == ruledocs.render()
    ), "docs/rules.md is stale: run `python -m transpiler.cli.ruledocs`"
