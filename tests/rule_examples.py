"""Every rule example as a pytest parameter, and the linter run on one snippet."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from transpiler.lint import engine
from transpiler.pipeline.rules import load_rules
from transpiler.source.diagnostics import Diagnostic
from transpiler.lint.rule import REGISTRY

load_rules()
RULES = [rule for _, rule in sorted(REGISTRY.items())]
CHECKED_RULES = [rule for rule in RULES if rule.family != "meta"]


def examples(kind: str) -> list:
    return [
        pytest.param(rule, source, id=f"{rule.code}-{kind.lower()}{index}")
        for rule in CHECKED_RULES
        for index, source in enumerate(rule.examples(kind))
    ]


def fix_snippet(source: str, unsafe: bool = True, module: str = "example"):
    """Run the fixer on `source` as the file `<module>.py`; the FixResult and the fixed text."""
    from transpiler.lint.fixer import fix_project

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{module}.py"
        path.write_text(source, encoding="utf-8")
        files = [path]
        result = fix_project(
            files, lambda overlay: engine.lint(files, lambda code: True, "all", None, 1, None, overlay), unsafe
        )
        return result, result.sources.get(path, source)


def lint_snippet(source: str, module: str = "example") -> list[Diagnostic]:
    """Lint `source` as the file `<module>.py`, the way the command line does (from disk)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{module}.py"
        path.write_text(source, encoding="utf-8")
        results = engine.analyze_files([path], cache=None, jobs=1)
        return [replace(d, path=f"{module}.py") for d in engine.resolve(results, lambda code: True)]
