"""Render diagnostics as text for people, JSON for scripts, GitHub workflow commands, or SARIF."""

from __future__ import annotations

import importlib.metadata
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from transpiler.source.diagnostics import Diagnostic

FORMATS: tuple[str, ...] = ("text", "json", "github", "sarif")

HOMEPAGE = "https://github.com/transpile-dev/transpile"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"

_BOLD = "1"
_RED = "31"


@dataclass(frozen=True)
class RuleInfo:
    """What a report says about a rule, beyond the findings themselves."""

    code: str
    name: str
    summary: str
    url: str
    dynamo_codes: tuple[str, ...] = ()


def render(
    diagnostics: list[Diagnostic],
    fmt: str,
    *,
    rules: dict[str, RuleInfo] | None = None,
    statistics: bool = False,
    color: bool = False,
    unsafe_fixes: bool = False,
    fixed: int = 0,
) -> str:
    """The whole report in format `fmt` (one of FORMATS); non-empty output ends with a newline.

    `rules` (code -> RuleInfo) only matters to SARIF, which then lists every rule
    given. `statistics` and `color` only apply to text. Diagnostics are sorted by
    path, line, column and code in every format, so output is stable across runs.
    Text marks with `[*]` the findings `--fix` would fix (unsafe fixes only with
    `unsafe_fixes`); `fixed` counts what a `--fix` run fixed before these remained.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if statistics and fmt != "text":
        raise ValueError(f"statistics are only available in the text format, not {fmt!r}")
    ordered = sorted(diagnostics, key=_sort_key)
    if fmt == "text":
        marked = {id(d) for d in ordered if d.fix_applicability == "safe" or (unsafe_fixes and d.fixable)}
        body = _render_statistics(ordered, marked, color) if statistics else _render_text(ordered, marked, color)
        return body + _summary(ordered, marked, fixed)
    if fmt == "json":
        return _render_json(ordered)
    if fmt == "github":
        return _render_github(ordered)
    return _render_sarif(ordered, rules)


def _sort_key(d: Diagnostic) -> tuple[str, int, int, str, int, int, str]:
    # Not the dataclass order: that compares end positions before the code.
    return (d.path, d.line, d.col, d.code, d.end_line, d.end_col, d.message)


def _paint(text: str, style: str, color: bool) -> str:
    return f"\x1b[{style}m{text}\x1b[0m" if color else text


def _summary(diagnostics: list[Diagnostic], marked: set[int], fixed: int) -> str:
    """The closing lines of the text formats, as ruff prints them."""
    if not diagnostics and not fixed:
        return "All checks passed!\n"
    count = len(diagnostics) + fixed
    found = f"Found {count} problem{'' if count == 1 else 's'}"
    lines = [f"{found} ({fixed} fixed, {len(diagnostics)} remaining)." if fixed else f"{found}."]
    hidden = sum(d.fixable for d in diagnostics) - len(marked)
    hint = f" ({hidden} hidden fix{'' if hidden == 1 else 'es'} can be enabled with the `--unsafe-fixes` option)"
    if marked:
        lines.append(f"[*] {len(marked)} fixable with the `--fix` option{hint if hidden else ''}.")
    elif hidden:
        lines.append(f"No fixes available{hint}.")
    return "\n".join(lines) + "\n"


def _render_text(diagnostics: list[Diagnostic], marked: set[int], color: bool) -> str:
    lines = [
        f"{_paint(d.path, _BOLD, color)}:{d.line}:{d.col}: "
        f"{_paint(d.code, _RED, color)} {'[*] ' if id(d) in marked else ''}{d.message}"
        for d in diagnostics
    ]
    return "\n".join(lines) + "\n\n" if lines else ""


def _render_statistics(diagnostics: list[Diagnostic], marked: set[int], color: bool) -> str:
    """One row per code: count, code, [*] when any finding of it is fixable, rule name."""
    counts = Counter(d.code for d in diagnostics)
    names = {d.code: d.name for d in diagnostics}
    fixable = {d.code for d in diagnostics if id(d) in marked}
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    count_width = max((len(str(n)) for n in counts.values()), default=0)
    code_width = max((len(code) for code in counts), default=0)
    lines = [
        # Pad before painting: escape codes would throw the column widths off.
        f"{n:>{count_width}}  {_paint(code.ljust(code_width), _RED, color)}  "
        f"{'[*]' if code in fixable else '   '} {names[code]}"
        for code, n in rows
    ]
    return "\n".join(lines) + "\n\n" if lines else ""


def diagnostic_record(d: Diagnostic) -> dict:
    """A diagnostic as JSON data (the `--format json` record, also used by the build report)."""
    return {
        "path": d.path,
        "line": d.line,
        "col": d.col,
        "end_line": d.end_line,
        "end_col": d.end_col,
        "code": d.code,
        "name": d.name,
        "message": d.message,
        "fix_applicability": d.fix_applicability,
        "fix": d.fix.title if d.fix else None,
        "no_fix": d.no_fix,
        "url": d.url,
        "dynamo_codes": list(d.dynamo_codes),
    }


def _render_json(diagnostics: list[Diagnostic]) -> str:
    return json.dumps([diagnostic_record(d) for d in diagnostics], indent=2) + "\n"


def _github_data(text: str) -> str:
    """Escape the message part of a workflow command (after `::`)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _github_property(text: str) -> str:
    """Escape a property value, where `:` and `,` would end the value early."""
    return _github_data(text).replace(":", "%3A").replace(",", "%2C")


def _render_github(diagnostics: list[Diagnostic]) -> str:
    lines = []
    for d in diagnostics:
        properties = {
            "title": f"transpile ({d.code})",
            "file": d.path,
            "line": d.line,
            "col": d.col,
            "endLine": d.end_line,
            "endColumn": d.end_col,
        }
        props = ",".join(f"{key}={_github_property(str(value))}" for key, value in properties.items())
        lines.append(f"::error {props}::{_github_data(f'{d.code} {d.message}')}\n")
    return "".join(lines)


def _tool_version() -> str:
    try:
        return importlib.metadata.version("transpile")
    except importlib.metadata.PackageNotFoundError:  # running from a source checkout
        return "0.0.0+unknown"


def _artifact_location(path: str) -> dict[str, str]:
    """A SARIF artifactLocation: relative paths against %SRCROOT%, absolute ones as file: URIs."""
    local = Path(path)
    if local.is_absolute():
        return {"uri": local.as_uri()}
    # quote() keeps "/" but encodes spaces and non-ASCII, which a URI may not hold raw.
    return {"uri": quote(local.as_posix()), "uriBaseId": "%SRCROOT%"}


def _sarif_rule(rule: RuleInfo) -> dict[str, object]:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "helpUri": rule.url,
        "properties": {"dynamo_codes": list(rule.dynamo_codes)},
    }


def _render_sarif(diagnostics: list[Diagnostic], rules: dict[str, RuleInfo] | None) -> str:
    catalog = {rule.code: rule for rule in (rules or {}).values()}
    for d in diagnostics:
        # A finding of a rule the caller did not describe still needs a rule entry.
        catalog.setdefault(d.code, RuleInfo(d.code, d.name, d.name, d.url, d.dynamo_codes))
    codes = sorted(catalog)
    index = {code: i for i, code in enumerate(codes)}
    results = [
        {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": "error",
            "message": {"text": d.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _artifact_location(d.path),
                        "region": {
                            "startLine": d.line,
                            "startColumn": d.col,
                            "endLine": d.end_line,
                            "endColumn": d.end_col,
                        },
                    }
                }
            ],
        }
        for d in diagnostics
    ]
    run = {
        "tool": {
            "driver": {
                "name": "transpile",
                "informationUri": HOMEPAGE,
                "version": _tool_version(),
                "rules": [_sarif_rule(catalog[code]) for code in codes],
            }
        },
        # Diagnostic columns count characters; SARIF's default is UTF-16 code units.
        "columnKind": "unicodeCodePoints",
        "results": results,
    }
    log = {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}
    return json.dumps(log, indent=2) + "\n"
