"""Render diagnostics as text for people, JSON for scripts, GitHub workflow commands, or SARIF."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import linecache
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
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
    description: str = ""  # what the rule finds and why it matters (its documentation's first sections)


class TextEdit(Protocol):
    """One edit of a fix (transpiler/lint/fixer.py's): rows and columns 1-based, columns in characters."""

    content: str
    start: tuple[int, int]
    end: tuple[int, int]


Edits = Mapping[Diagnostic, Sequence[TextEdit]]


def render(
    diagnostics: list[Diagnostic],
    fmt: str,
    *,
    rules: dict[str, RuleInfo] | None = None,
    statistics: bool = False,
    color: bool = False,
    unsafe_fixes: bool = False,
    fixed: int = 0,
    edits: Edits | None = None,
    summary: bool = True,
) -> str:
    """The whole report in format `fmt` (one of FORMATS); non-empty output ends with a newline.

    `rules` (code -> RuleInfo) only matters to SARIF, which then lists every rule
    given. `statistics` and `color` only apply to text. Diagnostics are sorted by
    path, line, column and code in every format, so output is stable across runs.
    Text marks with `[*]` the findings `--fix` would fix (unsafe fixes only with
    `unsafe_fixes`); `fixed` counts what a `--fix` run fixed before these remained, and `summary` False
    leaves out the closing lines (`-q`). `edits` gives the fixes' edits that JSON and SARIF show.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if statistics and fmt != "text":
        raise ValueError(f"statistics are only available in the text format, not {fmt!r}")
    ordered = sorted(diagnostics, key=_sort_key)
    if fmt == "text":
        marked = {id(d) for d in ordered if d.fix_applicability == "safe" or (unsafe_fixes and d.fixable)}
        body = _render_statistics(ordered, marked, color) if statistics else _render_text(ordered, marked, color)
        return body + _summary(ordered, marked, fixed) if summary else body.rstrip("\n") + "\n" if body else ""
    if fmt == "json":
        return _render_json(ordered, edits or {})
    if fmt == "github":
        return _render_github(ordered)
    return _render_sarif(ordered, rules, edits or {})


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


def _location(position: tuple[int, int]) -> dict[str, int]:
    return {"row": position[0], "column": position[1]}


def _fix_record(d: Diagnostic, edits: Edits) -> dict | None:
    """`fix` as ruff's JSON has it: what it does, how safe, and its edits (empty when they cannot be computed)."""
    if d.fix is None:
        return None
    return {
        "message": d.fix.title,
        "applicability": d.fix.safety,
        "edits": [
            {"content": e.content, "location": _location(e.start), "end_location": _location(e.end)}
            for e in edits.get(d, ())
        ],
    }


def _render_json(diagnostics: list[Diagnostic], edits: Edits) -> str:
    records = [{**diagnostic_record(d), "fix": _fix_record(d, edits)} for d in diagnostics]
    return json.dumps(records, indent=2) + "\n"


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
        "fullDescription": {"text": rule.description or rule.summary},
        "helpUri": rule.url,
        "help": {"text": f"{rule.summary}. Documentation: {rule.url}"},
        "properties": {"dynamo_codes": list(rule.dynamo_codes)},
    }


def _sarif_fixes(d: Diagnostic, edits: Edits) -> list[dict]:
    """The fix as SARIF's `fixes`: replacements of regions of the finding's file."""
    if d.fix is None or not edits.get(d):
        return []
    replacements = [
        {
            "deletedRegion": {
                "startLine": e.start[0],
                "startColumn": e.start[1],
                "endLine": e.end[0],
                "endColumn": e.end[1],
            },
            "insertedContent": {"text": e.content},
        }
        for e in edits[d]
    ]
    change = {"artifactLocation": _artifact_location(d.path), "replacements": replacements}
    return [{"description": {"text": f"{d.fix.title} ({d.fix.safety} fix)"}, "artifactChanges": [change]}]


def _fingerprints(diagnostics: list[Diagnostic]) -> list[dict[str, str]]:
    """`partialFingerprints` that survive lines added above a finding (code scanning then keeps one alert,
    not a new one per push): a hash of the rule, the file and the finding's source line without its
    indentation, and which of the findings sharing those it is, counted down the file."""
    linecache.checkcache()  # a file fixed in place since it was last read
    seen: Counter[str] = Counter()
    prints = []
    for d in diagnostics:
        text = linecache.getline(d.path, d.line).strip() or d.message
        digest = hashlib.sha256(f"{d.code}\0{d.path}\0{text}".encode()).hexdigest()[:32]
        seen[digest] += 1
        prints.append({"transpileFindingHash/v1": f"{digest}:{seen[digest]}"})
    return prints


def _render_sarif(diagnostics: list[Diagnostic], rules: dict[str, RuleInfo] | None, edits: Edits) -> str:
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
            "partialFingerprints": fingerprint,
            **({"fixes": fixes} if (fixes := _sarif_fixes(d, edits)) else {}),
        }
        for d, fingerprint in zip(diagnostics, _fingerprints(diagnostics))
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
