"""The build report: what `transpile SRC -o OUT` found, rewrote and compiled, file by file, as
`OUT/transpile-report.json` for scripts and `OUT/transpile-report.html` for people.

The HTML report is an index page, `OUT/transpile-report.html` (the summary, and one row per file with
a filter over them), and one page per file under `OUT/transpile-report/`, named after the file: the
index of a tree of hundreds of files stays small, as does each file's page however many findings the
tree has. Pages are self-contained (inline CSS; the index has one inline script, its filter; no
external asset), so they open from the output directory with no server and offline; without script
all is shown. Its counts are those of the build's summary (`build.rule_rows`, `build.file_counts`).
All files are byte-identical for identical builds: no timestamps, everything sorted.
"""

from __future__ import annotations

import ast
import html
import json
import math
import difflib
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from transpiler.source.diagnostics import Diagnostic
from transpiler.source.reading import read_source
from transpiler.lint.formats import diagnostic_record
from transpiler.compiler.ir import Constant, Node, Region, format_region
from transpiler.compiler.regions import TORCH_OP
from transpiler.source.writing import write_atomic

if TYPE_CHECKING:
    from transpiler.pipeline.build import BuildResult

REPORT_JSON = "transpile-report.json"
REPORT_HTML = "transpile-report.html"
REPORT_DIR = "transpile-report"  # the files' pages
SCHEMA_VERSION = 2  # 2: the summary counts as the build's summary does; imports, diff, kernel code


def write_report(
    result: BuildResult,
    out: Path,
    lines: Mapping[Path, Mapping[int, str]] | None = None,
    destinations: Mapping[Path, Path] | None = None,
    shown: Mapping[Path, str] | None = None,
) -> list[Path]:
    """Write the JSON report and the HTML pages into `out`, each atomically and only when changed; returns their
    paths (the JSON's, the index page's, then the files' pages). The build's manifest removes a page an earlier
    build wrote that this one did not.

    `lines`, `destinations` and `shown` are passed to `report_data`.
    """
    data = report_data(result, lines, destinations, shown)
    written = []
    for name, text in (
        (REPORT_JSON, json.dumps(data, indent=1, allow_nan=False) + "\n"),
        (REPORT_HTML, render_html(data)),
        *render_file_pages(data).items(),
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
    from transpiler.pipeline.build import file_counts, rule_rows  # build.py imports this module when it runs

    lines, shown = lines or {}, shown or {}
    imports: dict[Path, list[dict]] = {}
    for r in sorted(result.imports, key=lambda r: (r.path, r.line)):
        imports.setdefault(Path(r.path), []).append({"line": r.line, "relative": r.relative, "absolute": r.absolute})
    sources = {Path(d.path) for d in (*result.found, *result.applied)} | set(result.regions) | set(result.unreadable)
    sources |= imports.keys()
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
        name = shown.get(src, src.as_posix())
        output = outputs.get(src)
        files.append(
            {
                "path": name,
                "output": output.as_posix() if output else None,
                "diagnostics": _diagnostics((d for d in result.found if Path(d.path) == src), shown),
                "applied": _diagnostics((d for d in result.applied if Path(d.path) == src), shown),
                "remaining": _diagnostics(remaining.get(src, ())),
                "imports": imports.get(src, []),
                "regions": _regions(result.regions.get(src, []), src, lines, kernel_files),
                "cuda_graphs": {
                    "replayed": list(result.graphed.get(src, ())),
                    "not_replayed": [
                        {"class": cls, "line": line, "reason": why}
                        for cls, line, why in result.not_graphed.get(src, ())
                    ],
                },
                "not_fused": [
                    {"function": function, "line": line, "reason": why}
                    for function, line, why in result.not_fused.get(src, ())
                ],
                "where": _where_it_runs(src, result.regions.get(src, []), result.not_fused.get(src, ())),
                "kernel_files": [k.as_posix() for k in kernel_files],
                # Imports alone are listed above: a diff of them would be most of a large tree's page.
                "diff": (
                    _diff(src, output, name)
                    if src in result.regions or any(Path(d.path) == src for d in result.applied)
                    else ""
                ),
            }
        )
    kernels_only, copied = file_counts(result)
    rows = rule_rows(result)
    return {
        "version": SCHEMA_VERSION,
        "tool": "transpile",
        "output": result.out.as_posix(),
        "summary": {
            "files": result.files,
            "rewritten_files": len(result.rewritten),
            "kernels_only_files": kernels_only,
            "shared_files": len(result.shared),
            "copied_files": copied,
            "unreadable_files": len(result.unreadable),
            "findings": len(result.found),
            "findings_rewritten": sum(row.rewritten for row in rows),
            "remaining": len(result.remaining),
            "fixes_applied": len(result.applied),
            "imports_made_absolute": len(result.imports),
            "regions": sum(len(f["regions"]) for f in files),
            "region_files": sum(1 for f in files if f["regions"]),
            "cuda_graph_forwards": sum(len(f["cuda_graphs"]["replayed"]) for f in files),
            "forwards_not_replayed": sum(len(f["cuda_graphs"]["not_replayed"]) for f in files),
            "kernel_files": len(result.kernel_files),
        },
        "rules": [asdict(row) for row in rows],
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
    texts = _texts(kernel_files)  # read once for every region of the file
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
            "shares": (shares := _shared_kernel(r.name, texts)),
            "kernel_code": _kernel_code(shares or r.name, texts),
        }
        for r in sorted(regions, key=lambda r: (r.first_line, r.name))
    ]


# torch.nn layers that run as library calls (kernels never compute them; activations and norms they may).
_LIBRARY_LAYERS = re.compile(r"(Linear|Bilinear|Conv\w*|Embedding\w*|LSTM|GRU|RNN|MultiheadAttention)$")


def _where_it_runs(src: Path, regions: list[Region], not_fused: Iterable[tuple[str, int, str]]) -> list[dict]:
    """Per function with tensor code the build looked at (a region's, or a reason's for code it left eager), in
    source order, its operations: those in generated kernels (its regions' ops), its library calls (of a `torch.nn`
    layer its class builds in `__init__` that kernels never compute, `nn.Linear`, convolutions, embeddings, RNNs;
    and of torch's functions, `torch.matmul`, `F.scaled_dot_product_attention`, in statements no region takes), and
    its statements left eager (each counts as one). Empty where the source cannot be read."""
    functions = {r.function: None for r in sorted(regions, key=lambda r: r.first_line)}
    eager: dict[str, set[int]] = {}
    for function, line, _ in not_fused:
        functions.setdefault(function, None)
        eager.setdefault(function, set()).add(line)
    if not functions:
        return []  # a file without tensor code the build looked at
    try:
        tree = ast.parse(read_source(src))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    defs: dict[str, tuple[ast.AST, set[str]]] = {}  # "Class.method" or "function": the node, its class's layers
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs[node.name] = (node, set())
        elif isinstance(node, ast.ClassDef):
            layers = {
                target.attr
                for assign in ast.walk(node)
                if isinstance(assign, ast.Assign) and isinstance(assign.value, ast.Call)
                if _LIBRARY_LAYERS.search(ast.unparse(assign.value.func))
                for target in assign.targets
                if isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            }
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    defs[f"{node.name}.{item.name}"] = (item, layers)
    keys = [max((k for k in defs if f == k or f.endswith(f".{k}")), key=len, default=None) for f in functions]
    named = dict(zip(keys, functions))
    # Every class's forward too: a forward of library calls only (attention's projections) has no region or reason.
    named.update({k: k for k in defs if k.endswith(".forward") and k not in named})
    rows = []
    for key, function in sorted(
        ((k, f) for k, f in named.items() if k is not None), key=lambda p: defs[p[0]][0].lineno
    ):
        node, layers = defs[key]
        own = [r for r in regions if r.function == function]
        left = eager.get(function, set())
        library = 0
        for statement in ast.walk(node):
            if not isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)):
                continue
            lines = set(range(statement.lineno, statement.end_lineno + 1))
            taken = bool(lines & left) or any(r.first_line <= n <= r.last_line for n in lines for r in own)
            for call in ast.walk(statement):
                if isinstance(call, ast.Call):
                    func = call.func
                    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
                        library += func.attr in layers
                    elif not taken and TORCH_OP.match(ast.unparse(func)):
                        library += 1
        counts = {"kernels": sum(len(r.nodes) for r in own), "library": library, "eager": len(left)}
        if any(counts.values()):
            rows.append({"function": key, **counts})
    return rows


def _shared_kernel(name: str, texts: Mapping[Path, str]) -> str | None:
    """The kernel whose code region `name` runs where the build gave it an earlier region's (the same computation
    on values of other names: `same_as=` in its `Kernel(...)` of the host module), else None."""
    for path, text in texts.items():
        if path.name.endswith("_kernels.py"):
            block = re.search(rf"^{re.escape(name)} = Kernel\(\n.*?^\)", text, re.M | re.S)
            same = block and re.search(r'^    same_as="(\w+)",$', block.group(0), re.M)
            if same:
                return same.group(1)
    return None


def _texts(kernel_files: list[Path]) -> dict[Path, str]:
    """The kernel files beside a module, by path; one that cannot be read is left out."""
    texts = {}
    for path in kernel_files:
        try:
            texts[path] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def _kernel_code(name: str, texts: Mapping[Path, str]) -> dict[str, str]:
    """The generated code of kernel `name`, by backend ("triton", "cpp"), cut out of the kernel files
    beside its module (`_texts`); a backend whose file cannot be read or lacks the kernel is left out."""
    code = {}
    for path, text in texts.items():
        if path.name.endswith("_triton.py"):
            code["triton"] = _triton_kernel(text, name)
        elif path.suffix == ".cpp":
            code["cpp"] = _cpp_kernel(text, name)
    return {backend: text for backend, text in sorted(code.items()) if text}


def _triton_kernel(module: str, name: str) -> str:
    """The `@triton.jit` function `<name>_kernel` of a generated module: from its decorator to the next
    top-level statement."""
    found = re.search(rf"^@triton\.jit\ndef {re.escape(name)}_kernel\(.*?(?=^\S|\Z)", module, re.M | re.S)
    return found.group(0).rstrip() if found else ""


def _cpp_kernel(module: str, name: str) -> str:
    """The C++ template of kernel `name`: from the comment that names it (`// name: path:lines, ...`) to
    the brace that closes it, the first one in column 0."""
    found = re.search(rf"^// {re.escape(name)}: .*?^}}$", module, re.M | re.S)
    return found.group(0) if found else ""


def _diff(src: Path, output: Path | None, name: str) -> str:
    """The output module as a unified diff against its source, both as on disk; empty when either
    cannot be read."""
    if output is None:
        return ""
    try:
        before, after = read_source(src), read_source(output)
    except (OSError, UnicodeDecodeError, SyntaxError):
        return ""
    out_name = f"{name} (transpiled)"
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), name, out_name, n=2))


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
svg.where { font: 13px system-ui, sans-serif; max-width: 100%; height: auto; }
.swatch { display: inline-block; width: .8em; height: .8em; margin: 0 .25em 0 .6em; vertical-align: -.05em; }
main { max-width: 72rem; margin: 0 auto; padding: 1rem 1.5rem 3rem; }
h1 { font-size: 1.6rem; overflow-wrap: anywhere; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ccc; }
h2, h3 { overflow-wrap: anywhere; } h3 { margin-bottom: .3rem; } nav { margin-top: 1rem; }
table { border-collapse: collapse; margin: .4rem 0 1rem; }
th, td { border: 1px solid #ccc; padding: .25rem .55rem; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em; }
pre { background: #f6f8fa; border: 1px solid #ddd; padding: .5rem .75rem; overflow-x: auto; }
pre.wrap { white-space: pre-wrap; overflow-wrap: anywhere; }
.region { border-left: 4px solid #4a7fb5; padding-left: 1rem; margin: 1.2rem 0; }
.none { color: #555; font-style: italic; }
.refused { border-left: 4px solid #b58a4a; padding-left: 1rem; }
summary { cursor: pointer; color: #0b57a4; }
.add { color: #116329; } .del { color: #82071e; } .hunk { color: #555; }
#filter { font: inherit; padding: .25rem .5rem; width: min(30rem, 100%); }
a { color: #0b57a4; }
""".strip()

# The index's filter: rows whose path does not contain the text typed (or `?q=` of the address) hide.
_SCRIPT = """
const box = document.getElementById("filter");
const rows = Array.from(document.querySelectorAll("#index tbody tr"));
const count = document.getElementById("shown");
function filter() {
  const text = box.value.trim().toLowerCase();
  let shown = 0;
  for (const row of rows) {
    row.hidden = text !== "" && !row.dataset.path.includes(text);
    if (!row.hidden) shown += 1;
  }
  count.textContent = shown + " of " + rows.length + " files";
}
box.value = new URLSearchParams(location.search).get("q") || "";
box.addEventListener("input", filter);
filter();
""".strip()


def render_html(data: dict) -> str:
    """The index page: the summary, the files' rows linking to their pages, the files with imports made absolute
    only, and the runtime's files. Every text from the data is escaped."""
    title = f"transpile report: {data['output']}"
    pages = _file_pages(data)
    body = [
        f"<h1>{_e(title)}</h1>",
        _summary(data),
        _index(pages),
        _imports_only([entry for entry in data["files"] if not any(entry is e for e, _ in pages)]),
        _runtime_section(data),
    ]
    return _page(title, body, _SCRIPT if pages else "")


def render_file_pages(data: dict) -> dict[str, str]:
    """Per file with findings, rewrites, regions or forwards replayed, its page, by its path in the output."""
    out = data["output"]
    index = f"transpile report: {out}"
    pages = {}
    for entry, name in _file_pages(data):
        base = posixpath.join(out, posixpath.dirname(name))  # where the page's links start
        back = _href(posixpath.join(out, REPORT_HTML), base)
        body = [f'<nav><a href="{back}">{_e(index)}</a></nav>', _file_section(entry, out, base)]
        pages[name] = _page(f"{entry['path']}: {index}", body)
    return pages


def _file_pages(data: dict) -> list[tuple[dict, str]]:
    """The files given a page, with its path in the output: `transpile-report/<path as shown>.html`. Files whose
    only change is imports made absolute (most of a package's) get none: the index names them once, at its end."""
    keys = ("diagnostics", "applied", "remaining", "regions")
    pages, taken = [], set()
    for entry in data["files"]:
        if not (any(entry[k] for k in keys) or any(entry["cuda_graphs"].values())):
            continue
        # A path as shown is relative, but one a caller gave may not be: its root and `..` parts are dropped.
        parts = [p for p in entry["path"].split("/") if p not in ("", ".", "..")] or ["file"]
        stem, n = "/".join(parts), 1
        while (name := f"{REPORT_DIR}/{stem}{'' if n == 1 else f'-{n}'}.html") in taken:
            n += 1
        taken.add(name)
        pages.append((entry, name))
    return pages


def _page(title: str, body: list[str], script: str = "") -> str:
    script = f"<script>\n{script}\n</script>\n" if script else ""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>\n{_CSS}\n</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(part for part in body if part)
        + f"\n</main>\n{script}</body>\n</html>\n"
    )


def _summary(data: dict) -> str:
    """The build summary's counts, in its words, and its per-rule table."""
    s = data["summary"]
    from transpiler.pipeline.build import file_counts_text

    counts = ("rewritten_files", "kernels_only_files", "shared_files", "copied_files", "unreadable_files")
    files = file_counts_text(*(s.get(key, 0) for key in counts))
    rows = [
        ("Files", f"{s['files']}: {files}"),
        ("Findings in the input", s["findings"]),
        ("Findings rewritten", f"{s['findings_rewritten']} (by {_plural(s['fixes_applied'], 'fix')} applied)"),
        ("Findings left in the output", s["remaining"]),
        ("Relative imports made absolute", s["imports_made_absolute"]),
        ("Regions compiled into kernels", f"{s['regions']} in {_plural(s['region_files'], 'file')}"),
        ("Forwards replayed as CUDA graphs", f"{s['cuda_graph_forwards']} ({s['forwards_not_replayed']} refused)"),
        ("Kernel and runtime files written", s["kernel_files"]),
    ]
    table = "".join(f'<tr><th scope="row">{_e(label)}</th><td>{_e(value)}</td></tr>' for label, value in rows)
    rules = ""
    if data["rules"]:
        head = "".join(f'<th scope="col">{name}</th>' for name in ("Rule", "Found", "Rewritten", "Left"))
        body = "".join(
            f'<tr><td><code>{_e(r["code"])}</code> {_e(r["name"])}</td>'
            + "".join(f'<td class="number">{r[k]}</td>' for k in ("found", "rewritten", "left"))
            + "</tr>"
            for r in data["rules"]
        )
        rules = f"<table><caption>Per rule</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"
    return (
        f'<section aria-labelledby="summary">\n<h2 id="summary">Summary</h2>\n<table>{table}</table>\n{rules}</section>'
    )


def _imports_only(entries: list[dict]) -> str:
    if not entries:
        return ""
    items = "".join(f"<li><code>{_e(e['path'])}</code>: {len(e['imports'])}</li>" for e in entries)
    return (
        '<section aria-labelledby="imports-only">\n<h2 id="imports-only">Files with imports made absolute only</h2>\n'
        + _details(f"{_plural(len(entries), 'file')}, with the number of imports", f"<ul>{items}</ul>")
        + "\n</section>"
    )


def _index(pages: list[tuple[dict, str]]) -> str:
    """One row per file with a page, with what it has, and a filter over the paths."""
    if not pages:
        return '<p class="none">No file has findings, rewrites or regions.</p>'
    # "Rewrites": the fixes applied and the imports made absolute, as the file's section and the summary count them.
    head = "".join(
        f'<th scope="col">{name}</th>' for name in ("File", "Findings", "Rewrites", "Left", "Regions", "Refused")
    )
    rows = "".join(
        f'<tr data-path="{_e(entry["path"].lower())}"><td><a href="{_e(quote(name))}"><code>{_e(entry["path"])}</code></a></td>'
        + "".join(f'<td class="number">{n}</td>' for n in _counts(entry))
        + "</tr>"
        for entry, name in pages
    )
    return (
        '<section aria-labelledby="files">\n<h2 id="files">Files</h2>\n'
        '<p><label>Filter by path: <input id="filter" type="search" placeholder="e.g. llama"></label>'
        ' <span id="shown" aria-live="polite"></span></p>\n'
        f'<table id="index"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>\n</section>'
    )


def _counts(entry: dict) -> tuple[int, ...]:
    refused = len(entry["cuda_graphs"]["not_replayed"])
    applied = len(entry["applied"]) + len(entry["imports"])
    return len(entry["diagnostics"]), applied, len(entry["remaining"]), len(entry["regions"]), refused


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 or word.endswith('s') else 'es' if word.endswith('x') else 's'}"


def _file_section(entry: dict, out: str, base: str) -> str:
    """A file's findings, fixes, imports, regions and refusals, for its page in `base`; empty parts are left out."""
    parts = [f'<h1><code>{_e(entry["path"])}</code></h1>']
    if entry["output"]:
        shown = posixpath.relpath(entry["output"], out)
        parts.append(f'<p>Output: <a href="{_href(entry["output"], base)}"><code>{_e(shown)}</code></a></p>')
    # The findings of the input are those rewritten and those left: listing them too doubled a large tree's page.
    for title, key in (
        ("Rewrites applied", "applied"),
        ("Findings left in the output", "remaining"),
    ):
        if entry[key]:
            parts += [f"<h2>{title}</h2>", _diagnostic_table(entry[key])]
    if entry["imports"]:
        items = "; ".join(
            f"line {i['line']} <code>{_e(i['relative'])}</code> &rarr; <code>{_e(i['absolute'])}</code>"
            for i in entry["imports"]
        )
        parts.append(f"<p>Relative imports made absolute: {items}.</p>")
    if entry["diff"]:
        parts.append(_details("The transpiled module, as a diff against the source", _diff_html(entry["diff"])))
    if entry.get("where"):
        parts += ["<h2>Where each function's tensor operations run</h2>", _where_chart(entry["where"])]
    if entry["regions"]:
        parts += [
            "<h2>Regions compiled into kernels</h2>",
            *(_region(region, out, base) for region in entry["regions"]),
        ]
    if entry["not_fused"]:
        items = "".join(
            f'<li class="refused">line {n["line"]} (<code>{_e(n["function"])}</code>): {_prose(n["reason"])}</li>'
            for n in entry["not_fused"]
        )
        title = f"Tensor code left eager, and why ({len(entry['not_fused'])})"
        parts.append(_details(title, f"<ul>{items}</ul>"))
    graphs = entry["cuda_graphs"]
    if graphs["replayed"] or graphs["not_replayed"]:
        parts += ["<h2>Forwards replayed as CUDA graphs</h2>", _graphs(graphs)]
    return "\n".join(parts)


_WHERE = (("kernels", "ops in generated kernels", "#2e7d32"), ("library", "library calls", "#1565c0"))
_WHERE += (("eager", "statements left eager", "#e65100"),)


def _where_chart(rows: list[dict]) -> str:
    """One bar per function: its operations in generated kernels, its library calls and its statements left eager
    (`_where_it_runs`), as shares of the bar, with the counts beside it."""
    label, bar, gap, height = 260, 360, 8, 22
    parts = []
    for index, row in enumerate(rows):
        y = index * height
        total = sum(row[key] for key, _, _ in _WHERE)
        name = row["function"] if len(row["function"]) <= 34 else f"{row['function'][:33]}…"
        parts.append(f'<text x="0" y="{y + 15}"><title>{_e(row["function"])}</title>{_e(name)}</text>')
        x = float(label)
        for key, words, colour in _WHERE:
            width = bar * row[key] / total
            if width:
                parts.append(
                    f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{height - 6}" fill="{colour}">'
                    f"<title>{_e(row['function'])}: {row[key]} {words}</title></rect>"
                )
            x += width
        counts = " / ".join(str(row[key]) for key, _, _ in _WHERE)
        parts.append(f'<text x="{label + bar + gap}" y="{y + 15}">{counts}</text>')
    legend = " ".join(f'<span class="swatch" style="background:{colour}"></span>{words}' for _, words, colour in _WHERE)
    total_height = len(rows) * height
    summary = "; ".join(
        f"{row['function']}: " + ", ".join(f"{row[key]} {words}" for key, words, _ in _WHERE) for row in rows
    )
    return (
        f'<p class="legend">{legend} (counts in that order)</p>\n'
        f'<svg class="where" role="img" aria-label="{_e(summary)}" width="{label + bar + 90}" '
        f'height="{total_height}" viewBox="0 0 {label + bar + 90} {total_height}">{"".join(parts)}</svg>'
    )


def _graphs(graphs: dict) -> str:
    """Which models and blocks replay as CUDA graphs by default (eval, no autograd, CUDA), and why the others do
    not."""
    items = [f"<li><code>{_e(cls)}.forward</code>: replayed</li>" for cls in graphs["replayed"]]
    items += [
        f'<li class="refused"><code>{_e(n["class"])}.forward</code>: not replayed (line {n["line"]}):'
        f' {_prose(n["reason"])}</li>'
        for n in graphs["not_replayed"]
    ]
    return f"<ul>{''.join(items)}</ul>"


def _diagnostic_table(diagnostics: list[dict]) -> str:
    head = "".join(f'<th scope="col">{name}</th>' for name in ("Line:col", "Rule", "Message", "Fix"))
    rows = "".join(
        "<tr>"
        f'<td><code>{d["line"]}:{d["col"]}</code></td>'
        f'<td><a href="{_e(d["url"])}"><code>{_e(d["code"])}</code></a> {_e(d["name"])}</td>'
        f"<td>{_prose(d['message'])}</td>"
        f"<td>{_fix(d)}</td>"
        "</tr>"
        for d in diagnostics
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _fix(diagnostic: dict) -> str:
    if not diagnostic["fix"]:
        return _prose(diagnostic["no_fix"] or "none")
    safety = f' ({_e(diagnostic["fix_applicability"])})' if diagnostic["fix_applicability"] else ""
    return _prose(diagnostic["fix"]) + safety


def _region(region: dict, out: str, base: str) -> str:
    width = len(str(region["last_line"]))
    source = "\n".join(f"{line['line']:>{width}}  {line['text']}" for line in region["source_lines"])
    code = [
        _details(f"Generated {label} kernel", f"<pre><code>{_e(region['kernel_code'][backend])}</code></pre>")
        for backend, label in (("triton", "Triton (CUDA)"), ("cpp", "C++ (CPU)"))
        if backend in region["kernel_code"]
    ]
    return "\n".join(
        [
            '<article class="region">',
            f"<h3>Kernel <code>{_e(region['name'])}</code></h3>",
            f"<p><code>{_e(region['location'])}</code> in <code>{_e(region['function'])}</code>,"
            f" {_plural(len(region['nodes']), 'op')}</p>",
            f"<p>{'Line' if region['first_line'] == region['last_line'] else 'Lines'}"
            f" {region['lines']} of the source:</p>",
            f"<pre><code>{_e(source)}</code></pre>" if source else '<p class="none">Source text not available.</p>',
            (
                f"<p>Runs the kernel of <code>{_e(region['shares'])}</code>: the same computation on other values.</p>"
                if region.get("shares")
                else ""
            ),
            *code,
            _details("Region IR", f"<pre class=\"wrap\"><code>{_e(region['ir'])}</code></pre>"),
            (
                f"<p>Kernel files:</p>{_file_links(region['kernel_files'], out, base)}"
                if region["kernel_files"]
                else '<p class="none">No kernel files.</p>'
            ),
            "</article>",
        ]
    )


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{_e(summary)}</summary>\n{body}\n</details>"


def _diff_html(diff: str) -> str:
    """A unified diff with its added, removed and hunk lines marked."""
    classes = {"+": "add", "-": "del", "@": "hunk"}
    lines = []
    for line in diff.splitlines():
        kind = classes.get(line[:1]) if not line.startswith(("+++", "---")) else None
        lines.append(f'<span class="{kind}">{_e(line)}</span>' if kind else _e(line))
    return "<pre><code>" + "\n".join(lines) + "</code></pre>"


def _runtime_section(data: dict) -> str:
    if not data["runtime_files"]:
        return ""
    return (
        '<section aria-labelledby="runtime">\n<h2 id="runtime">Runtime support</h2>\n'
        "<p>Written once into the output, imported by every kernel file:</p>\n"
        f"{_file_links(data['runtime_files'], data['output'], data['output'])}\n</section>"
    )


def _file_links(paths: list[str], out: str, base: str) -> str:
    """Links from a page in `base` to `paths`, named relative to the output directory `out`."""
    return (
        "<ul>"
        + "".join(
            f'<li><a href="{_href(p, base)}"><code>{_e(posixpath.relpath(p, out))}</code></a></li>' for p in paths
        )
        + "</ul>"
    )


def _href(path: str, base: str) -> str:
    """A link from a page in the directory `base` to `path`; both as the build spelled them."""
    return _e(quote(posixpath.relpath(path, base)))


def _prose(text: str) -> str:
    """A message as the linter writes it: `backticked` spans become code, the rest is escaped text; an
    unpaired backtick stays a backtick."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: the last one is a character
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    return "".join(f"<code>{_e(p)}</code>" if i % 2 else _e(p) for i, p in enumerate(parts))


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)
