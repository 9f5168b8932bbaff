"""The lint rules the pipeline runs: the project's own, in `rewrites/` (importing a rule module registers
its rules in `transpiler.lint.rule.REGISTRY`). The linter itself knows no rule package."""

from __future__ import annotations


def load_rules() -> None:
    import rewrites  # noqa: F401  (importing registers the rules)
