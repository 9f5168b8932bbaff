"""The build report: what `transpile SRC -o OUT` found, rewrote and compiled, file by file, as
`OUT/transpile-report.json` for scripts and `OUT/transpile-report.html` for people.

The HTML page is static and self-contained (inline CSS, no script, no external asset), so it opens
from the output directory with no server. Both files are byte-identical for identical builds: no
timestamps, everything sorted.
"""

from __future__ import annotations

import html
import json
import math
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from transpiler.source.diagnostics import Diagnostic
from transpiler.source.reading import read_source
from transpiler.lint.formats import diagnostic_record
from transpiler.compiler.ir import Constant, Node, Region, format_region
from transpiler.source.writing import write_atomic

if TYPE_CHECKING:  # transpile.py writes the report: importing it here at run time would be circular
    from transpiler.pipeline.build import BuildResult

REPORT_JSON = "transpile-report.json"
REPORT_HTML = "transpile-report.html"
SCHEMA_VERSION = 1


def write_report(
    result: BuildResult,
    out: Path,
    lines: Mapping[Path, Mapping[int, str]] | None = None,
    destinations: Mapping[Path, Path] | None = None,
    shown: Mapping[Path, str] | None = None,
) -> list[Path]:
    """Write the JSON and HTML reports into `out`, each atomically and only when changed; returns their paths.

    `lines`, `destinations` and `shown` are passed to `report_data`.
    """
    data = report_data(result, lines, destinations, shown)
    written = []
    for name, text in (
        (REPORT_JSON, json.dumps(data, indent=1, allow_nan=False) + "\n"),
        (REPORT_HTML, render_html(data)),
    ):
        path, encoded = out / name, text.encode("utf-8")
        # An unchanged report keeps its modification time: the manifest tells our files by it.
        if not path.is_file() or path.read_bytes() != encoded:
            write_atomic(path, encoded)
        written.append(path)
    return written


# -- the data -------------------------------------------------------------------------------------
def report_data(
    result: BuildResult,
    lines: Mapping[Path, Mapping[int, str]] | None = None,
    destinations: Mapping[Path, Path] | None = None,
    shown: Mapping[Path, str] | None = None,
) -> dict:
    """The report as JSON-able data: a summary, then one entry per source file with findings,
    rewrites or regions. Paths are strings, as the BuildResult spells them.

    `lines` (source -> line number -> text) gives the lines of the text each file's regions were
    found in, which the region line numbers refer to (the rewritten text where fixes applied); a file
    not in it is read from disk. `destinations` (source -> output module, as the build's plan has
    them) tells which output file is whose; without it, an output is matched to its source by name
    and directories. `shown` (source -> name) names the sources, so that the report does not depend
    on where they are (transpile.shown_path); a source not in it keeps its path.
    """
    lines, shown = lines or {}, shown or {}
    sources = {Path(d.path) for d in (*result.found, *result.applied)} | set(result.regions) | set(result.unreadable)
    outputs = {src: _destination(src, result, destinations) for src in sources}
    source_of = {dst: src for src, dst in outputs.items() if dst is not None}
    # Findings left name the output files; those of files with no known output keep their own path.
    remaining: dict[Path, list[Diagnostic]] = {}
    for d in result.remaining:
        remaining.setdefault(source_of.get(Path(d.path), Path(d.path)), []).append(d)
    claimed: set[Path] = set()
    files = []
    for src in sorted(sources | remaining.keys(), key=Path.as_posix):
        kernel_files = sorted(result.kernels.get(src, ()), key=Path.as_posix)  # as the build named them
        claimed.update(kernel_files)
        files.append(
            {
                "path": shown.get(src, src.as_posix()),
                "output": outputs[src].as_posix() if outputs.get(src) else None,
                "diagnostics": _diagnostics((d for d in result.found if Path(d.path) == src), shown),
                "applied": _diagnostics((d for d in result.applied if Path(d.path) == src), shown),
                "remaining": _diagnostics(remaining.get(src, ())),
                "regions": _regions(result.regions.get(src, []), src, lines, kernel_files),
                "cuda_graphs": {
                    "replayed": list(result.graphed.get(src, ())),
                    "not_replayed": [
                        {"class": cls, "line": line, "reason": why}
                        for cls, line, why in result.not_graphed.get(src, ())
                    ],
                },
                "kernel_files": [k.as_posix() for k in kernel_files],
            }
        )
    regions = sum(len(f["regions"]) for f in files)
    return {
        "version": SCHEMA_VERSION,
        "tool": "transpile",
        "output": result.out.as_posix(),
        "summary": {
            "files": result.files,
            "findings": len(result.found),
            "rewrites": len(result.applied),
            "remaining": len(result.remaining),
            "regions": regions,
            "cuda_graph_forwards": sum(len(f["cuda_graphs"]["replayed"]) for f in files),
            "kernel_files": len(result.kernel_files),
        },
        "files": files,
        # The runtime support package, written once into the output root.
        "runtime_files": sorted(k.as_posix() for k in result.kernel_files if k not in claimed),
        "unreadable": sorted(shown.get(p, p.as_posix()) for p in result.unreadable),
    }


def _destination(src: Path, result: BuildResult, destinations: Mapping[Path, Path] | None) -> Path | None:
    """The output module of `src`, when known. Without the plan, the candidates are the output files
    the build names (with findings left, rewritten, or beside kernel files) with the source's name;
    the true one sits at the path of `src` relative to its source root, so its directories under the
    output are a suffix of those of `src`: the longest such suffix wins."""
    if destinations is not None:
        return destinations.get(src)
    named = (
        [Path(d.path) for d in result.remaining]
        + result.rewritten
        + [k.with_name(src.name) for k in result.kernel_files]
    )
    best, best_depth = None, -1
    for candidate in named:
        if candidate.name != src.name or not candidate.is_relative_to(result.out):
            continue
        parts = candidate.parent.relative_to(result.out).parts
        depth = len(parts)
        if depth > best_depth and src.parent.parts[len(src.parent.parts) - depth :] == parts:
            best, best_depth = candidate, depth
    return best


def _diagnostics(diagnostics: Iterable[Diagnostic], shown: Mapping[Path, str] | None = None) -> list[dict]:
    """Records of `diagnostics`, sorted; those on sources in `shown` name them as it does."""
    ordered = sorted(diagnostics, key=lambda d: (d.path, d.line, d.col, d.code, d.end_line, d.end_col, d.message))
    shown = shown or {}
    return [diagnostic_record(replace(d, path=shown.get(Path(d.path), d.path))) for d in ordered]


def _regions(
    regions: list[Region], src: Path, lines: Mapping[Path, Mapping[int, str]], kernel_files: list[Path]
) -> list[dict]:
    if not regions:
        return []
    numbered = _source_lines(src, lines)
    return [
        {
            "name": r.name,
            "function": r.function,
            "path": r.path,
            "first_line": r.first_line,
            "last_line": r.last_line,
            "location": f"{r.path}:{r.lines}",
            "lines": r.lines,
            "inputs": [asdict(i) for i in r.inputs],
            "nodes": [_node(n) for n in r.nodes],
            "outputs": [{**asdict(o), "aliases": list(o.aliases)} for o in r.outputs],  # JSON has no tuples
            "conditions": list(r.conditions),
            "ir": format_region(r),
            "source_lines": [
                {"line": n, "text": numbered[n]} for n in range(r.first_line, r.last_line + 1) if n in numbered
            ],
            "kernel_files": [k.as_posix() for k in kernel_files],
        }
        for r in sorted(regions, key=lambda r: (r.first_line, r.name))
    ]


def _source_lines(src: Path, lines: Mapping[Path, Mapping[int, str]]) -> Mapping[int, str]:
    """The lines of the text the regions were found in, by number; none when the source cannot be read again."""
    if src in lines:
        return lines[src]
    try:
        return dict(enumerate(read_source(src).splitlines(), 1))
    except (OSError, UnicodeDecodeError, SyntaxError):  # SyntaxError: a bad encoding cookie
        return {}


def _node(node: Node) -> dict:
    operands = [_json_constant(o) if i in node.constants else o for i, o in enumerate(node.operands)]
    return {"out": node.out, "op": node.op, "operands": operands, "constants": list(node.constants), "line": node.line}


def _json_constant(value: Constant | str) -> Constant | str:
    """JSON has no inf or nan: those constants become the strings Python's float() reads back."""
    return str(value) if isinstance(value, float) and not math.isfinite(value) else value


# -- the page -------------------------------------------------------------------------------------
_CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #1b1b1b; background: #fff; }
main { max-width: 72rem; margin: 0 auto; padding: 1rem 1.5rem 3rem; }
h1 { font-size: 1.6rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ccc; } h4 { margin-bottom: .3rem; }
table { border-collapse: collapse; margin: .4rem 0 1rem; }
th, td { border: 1px solid #ccc; padding: .25rem .55rem; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em; }
caption { text-align: left; color: #555; padding-bottom: .2rem; }
pre { background: #f6f8fa; border: 1px solid #ddd; padding: .5rem .75rem; overflow-x: auto; }
.region { border-left: 4px solid #4a7fb5; padding-left: 1rem; margin: 1.2rem 0; }
.none { color: #555; font-style: italic; }
a { color: #0b57a4; }
""".strip()


def render_html(data: dict) -> str:
    """The report as one static HTML page; every text from the data is escaped."""
    title = f"transpile report: {data['output']}"
    body = [
        f"<h1>{_e(title)}</h1>",
        _summary(data),
        *(_file_section(entry, index, data["output"]) for index, entry in enumerate(data["files"], 1)),
        _runtime_section(data),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>\n{_CSS}\n</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(part for part in body if part)
        + "\n</main>\n</body>\n</html>\n"
    )


def _summary(data: dict) -> str:
    summary = data["summary"]
    rows = [
        ("Files", summary["files"]),
        ("Findings in the input", summary["findings"]),
        ("Rewrites applied", summary["rewrites"]),
        ("Findings left in the output", summary["remaining"]),
        ("Regions compiled into kernels", summary["regions"]),
        ("Forwards replayed as CUDA graphs", summary["cuda_graph_forwards"]),
        ("Kernel and runtime files written", summary["kernel_files"]),
    ]
    table = "".join(
        f'<tr><th scope="row">{_e(label)}</th><td class="number">{value}</td></tr>' for label, value in rows
    )
    links = "".join(
        f'<li><a href="#file-{index}"><code>{_e(entry["path"])}</code></a>: {_counts(entry)}</li>'
        for index, entry in enumerate(data["files"], 1)
    )
    contents = f"<ul>{links}</ul>" if links else '<p class="none">No file has findings or regions.</p>'
    return (
        '<section aria-labelledby="summary">\n<h2 id="summary">Summary</h2>\n'
        f"<table>{table}</table>\n{contents}\n</section>"
    )


def _counts(entry: dict) -> str:
    counts = [
        (len(entry["diagnostics"]), "finding"),
        (len(entry["applied"]), "rewrite"),
        (len(entry["regions"]), "region"),
    ]
    return ", ".join(_plural(n, word) for n, word in counts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _file_section(entry: dict, index: int, out: str) -> str:
    parts = [
        f'<section aria-labelledby="file-{index}">',
        f'<h2 id="file-{index}"><code>{_e(entry["path"])}</code></h2>',
    ]
    if entry["output"]:
        parts.append(f'<p>Output: <a href="{_href(entry["output"], out)}"><code>{_e(entry["output"])}</code></a></p>')
    parts += [
        "<h3>Findings in the input</h3>",
        _diagnostic_table(entry["diagnostics"], "No findings."),
        "<h3>Rewrites applied</h3>",
        _diagnostic_table(entry["applied"], "No rewrites."),
        "<h3>Findings left in the output</h3>",
        _diagnostic_table(entry["remaining"], "None left."),
        "<h3>Regions compiled into kernels</h3>",
        *(_region(region, out) for region in entry["regions"]),
    ]
    if not entry["regions"]:
        parts.append('<p class="none">No regions.</p>')
    parts += ["<h3>Forwards replayed as CUDA graphs</h3>", _graphs(entry["cuda_graphs"])]
    parts.append("</section>")
    return "\n".join(parts)


def _graphs(graphs: dict) -> str:
    """Which models and blocks replay as CUDA graphs by default (eval, no autograd, CUDA), and why the others do
    not."""
    items = [f"<li><code>{_e(cls)}.forward</code>: replayed</li>" for cls in graphs["replayed"]]
    items += [
        f'<li><code>{_e(n["class"])}.forward</code>: not replayed (line {n["line"]}): {_e(n["reason"])}</li>'
        for n in graphs["not_replayed"]
    ]
    return f"<ul>{''.join(items)}</ul>" if items else '<p class="none">No model or block forwards.</p>'


def _diagnostic_table(diagnostics: list[dict], empty: str) -> str:
    if not diagnostics:
        return f'<p class="none">{_e(empty)}</p>'
    paths = ", ".join(sorted({d["path"] for d in diagnostics}))
    head = "".join(f'<th scope="col">{name}</th>' for name in ("Line:col", "Rule", "Message", "Fix"))
    rows = "".join(
        "<tr>"
        f'<td><code>{d["line"]}:{d["col"]}</code></td>'
        f'<td><a href="{_e(d["url"])}"><code>{_e(d["code"])}</code></a> {_e(d["name"])}</td>'
        f"<td>{_e(d['message'])}</td>"
        f"<td>{_fix(d)}</td>"
        "</tr>"
        for d in diagnostics
    )
    caption = f"<caption>in <code>{_e(paths)}</code></caption>"
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _fix(diagnostic: dict) -> str:
    if not diagnostic["fix"]:
        return _e(diagnostic["no_fix"] or "none")
    safety = f' ({_e(diagnostic["fix_applicability"])})' if diagnostic["fix_applicability"] else ""
    return _e(diagnostic["fix"]) + safety


def _region(region: dict, out: str) -> str:
    width = len(str(region["last_line"]))
    source = "\n".join(f"{line['line']:>{width}}  {line['text']}" for line in region["source_lines"])
    return "\n".join(
        [
            '<article class="region">',
            f"<h4>Kernel <code>{_e(region['name'])}</code></h4>",
            f"<p><code>{_e(region['location'])}</code> in <code>{_e(region['function'])}</code>,"
            f" {_plural(len(region['nodes']), 'op')}</p>",
            f"<p>{'Line' if region['first_line'] == region['last_line'] else 'Lines'}"
            f" {region['lines']} of the source:</p>",
            f"<pre><code>{_e(source)}</code></pre>" if source else '<p class="none">Source text not available.</p>',
            "<p>Region IR:</p>",
            f"<pre><code>{_e(region['ir'])}</code></pre>",
            (
                f"<p>Kernel files:</p>{_file_links(region['kernel_files'], out)}"
                if region["kernel_files"]
                else '<p class="none">No kernel files.</p>'
            ),
            "</article>",
        ]
    )


def _runtime_section(data: dict) -> str:
    if not data["runtime_files"]:
        return ""
    return (
        '<section aria-labelledby="runtime">\n<h2 id="runtime">Runtime support</h2>\n'
        "<p>Written once into the output, imported by every kernel file:</p>\n"
        f"{_file_links(data['runtime_files'], data['output'])}\n</section>"
    )


def _file_links(paths: list[str], out: str) -> str:
    return "<ul>" + "".join(f'<li><a href="{_href(p, out)}"><code>{_e(p)}</code></a></li>' for p in paths) + "</ul>"


def _href(path: str, out: str) -> str:
    """A link from the report (in `out`) to `path`; both as the build spelled them."""
    return _e(quote(posixpath.relpath(path, out)))


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)
