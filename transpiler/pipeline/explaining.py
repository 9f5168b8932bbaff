"""`transpile explain`: the regions a build would compile in each file, or the IR after every pass."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from transpiler.compiler.ir import format_region
from transpiler.compiler.passes import compile_unit, explain, start
from transpiler.compiler.regions import MIN_OPS
from transpiler.lint.engine import project_facts
from transpiler.source.discovery import module_name
from transpiler.pipeline.rules import load_rules
from transpiler.source.reading import read_source


class ExplainError(Exception):
    """A file that cannot be explained (it does not parse): the message names the file and line."""


def explain_files(files: list[Path], passes: bool = False) -> Iterator[str]:
    """Per file, the text `transpile explain` prints: its regions (the IR after every pass with `passes`),
    found as the build finds them, in the file as it is (no fixes applied)."""
    load_rules()  # the project's facts come from the lint's walk
    facts = project_facts(files)
    for path in files:
        text = read_source(path)
        try:
            ast.parse(text)
        except SyntaxError as error:
            raise ExplainError(f"{path}:{error.lineno}: cannot parse: {error.msg}") from None
        shown = path.as_posix()
        unit = start(
            shown,
            module_name(path),
            path.name == "__init__.py",
            text,
            text,
            frozenset(facts.compiled),
            facts.tensor_params,
        )
        if passes:
            yield "\n".join([f"# {shown}", *explain(unit)]) + "\n"
            continue
        unit = compile_unit(unit)
        if not unit.regions:
            yield f"{shown}: no region (fusible runs of at least {MIN_OPS} ops in compiled code)\n"
        for region in unit.regions:
            yield format_region(unit.shown(region)) + "\n"
