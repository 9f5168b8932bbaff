"""Every rule example as a pytest parameter, and the linter run on one snippet."""

from __future__ import annotations

import pytest

from transpiler import engine
from transpiler.diagnostics import Diagnostic
from transpiler.rule import REGISTRY

engine.load_rules()
RULES = [rule for _, rule in sorted(REGISTRY.items())]
CHECKED_RULES = [rule for rule in RULES if rule.family != "meta"]


def examples(kind: str) -> list:
    return [
        pytest.param(rule, source, id=f"{rule.code}-{kind.lower()}{index}")
        for rule in CHECKED_RULES
        for index, source in enumerate(rule.examples(kind))
    ]


def lint_snippet(source: str, module: str = "example") -> list[Diagnostic]:
    result = engine.analyze_source(f"{module}.py", source.encode(), module, False)
    return engine.resolve([result], lambda code: True)
