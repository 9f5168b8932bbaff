"""The build report: its data from a hand-built BuildResult, the escaped HTML, and the page as a real
headless Chromium renders it."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from transpiler.source.diagnostics import Diagnostic, Fix
from transpiler.compiler.ir import Input, Node, Output, Region, format_region
from transpiler.pipeline import report
from transpiler.pipeline.report import (
    REPORT_DIR,
    REPORT_HTML,
    REPORT_JSON,
    render_file_pages,
    render_html,
    report_data,
    write_report,
)
from transpiler.pipeline.build import BuildResult

# A source line that would run script if the report pasted it into the page unescaped.
INJECTION = "<script>document.body.setAttribute('data-pwned', '1')</script>"

ORIGINAL = f"""import torch


def scaled(x):
    print("scaling")
    y = x * 0.5  # "{INJECTION}"
    return torch.clamp(y, max=float("inf"))
"""
# As the fixes rewrote it: the region moved down two lines, and its line numbers refer to this text.
REWRITTEN = ORIGINAL.replace(
    '    print("scaling")\n', '    if not torch.compiler.is_compiling():\n        print("scaling")\n'
)


def _numbered(text: str) -> dict[int, str]:
    """The lines of `text` by number, as the build hands them to the report."""
    return dict(enumerate(text.splitlines(), 1))


SUB_TEXT = """def shift(x, b):
    z = x + b
    return z.abs()
"""

LAYERS = Path("src/pkg/layers.py")
SUB_LAYERS = Path("src/pkg/sub/layers.py")
OUT = Path("out")
DESTINATIONS = {LAYERS: OUT / "layers.py", SUB_LAYERS: OUT / "sub/layers.py"}


def _region(
    path: Path, name: str, function: str, first: int, nodes: tuple[Node, ...], inputs: tuple[Input, ...]
) -> Region:
    outputs = (Output(nodes[-1].out, "return"),)
    return Region(name, path.as_posix(), function, first, nodes[-1].line, inputs, nodes, outputs)


SCALED = _region(
    LAYERS,
    "fused_clamp",
    "pkg.layers.scaled.<locals>.<lambda>",  # a name with angle brackets, as nested functions have
    7,
    (Node("mul", ("x", 0.5), "y", 7, constants=(1,)), Node("clamp_max", ("y", float("inf")), "t0", 8, constants=(1,))),
    (Input("x", "x", True),),
)
SHIFT = _region(
    SUB_LAYERS,
    "fused_abs",
    "pkg.sub.layers.shift",
    2,
    (Node("add", ("x", "b"), "z", 2), Node("abs", ("z",), "t0", 3)),
    (Input("x", "x", True), Input("b", "b", False)),
)

PRINT = Diagnostic(
    LAYERS.as_posix(), 5, 5, 5, 23, "TP101", "print-in-compiled-code", "`print()` <b>breaks</b> the graph & more",
    "safe", fix=Fix("safe", "guard `print()` with `is_compiling()`", "Call", (5, 4, 5, 22)),
)  # fmt: skip
BRANCH = Diagnostic(SUB_LAYERS.as_posix(), 2, 5, 2, 10, "TP201", "data-dependent-if", "`if` on a tensor value")
LEFT = Diagnostic(
    (OUT / "sub/layers.py").as_posix(), 2, 5, 2, 10, "TP201", "data-dependent-if", "`if` on a tensor value"
)
KERNEL_FILES = [OUT / name for name in ("_layers_kernels.py", "_layers_triton.py", "_layers_kernels.cpp")] + [
    OUT / "sub" / name for name in ("_layers_kernels.py", "_layers_triton.py", "_layers_kernels.cpp")
]
RUNTIME_FILES = [OUT / "_transpile_runtime/__init__.py", OUT / "_transpile_runtime/triton_support.py"]


@pytest.fixture
def result(tmp_path, monkeypatch) -> BuildResult:
    """A build of `src/pkg` into `out`, in a fresh current directory, with every file on disk."""
    monkeypatch.chdir(tmp_path)
    for path, text in (
        (LAYERS, ORIGINAL),
        (SUB_LAYERS, SUB_TEXT),
        (OUT / "layers.py", REWRITTEN),
        (OUT / "sub/layers.py", SUB_TEXT),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in [*KERNEL_FILES, *RUNTIME_FILES]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# generated\n")
    return BuildResult(
        OUT,
        files=3,
        rewritten=[],
        found=[BRANCH, PRINT],
        applied=[PRINT],
        remaining=[LEFT],
        regions={SUB_LAYERS: [SHIFT], LAYERS: [SCALED]},
        kernel_files=[*KERNEL_FILES, *RUNTIME_FILES],
        kernels={LAYERS: KERNEL_FILES[:3], SUB_LAYERS: KERNEL_FILES[3:]},
    )


def _data(result: BuildResult, destinations=DESTINATIONS) -> dict:
    return report_data(result, {LAYERS: _numbered(REWRITTEN)}, destinations)


def test_summary_and_files_are_sorted(result):
    data = _data(result)
    assert data["version"] == 2
    assert data["output"] == "out"
    assert data["summary"] == {
        "files": 3,
        "rewritten_files": 0,
        "kernels_only_files": 1,
        "shared_files": 0,
        "copied_files": 2,
        "unreadable_files": 0,
        "findings": 2,
        "findings_rewritten": 1,
        "remaining": 1,
        "fixes_applied": 1,
        "imports_made_absolute": 0,
        "regions": 2,
        "region_files": 2,
        "cuda_graph_forwards": 0,
        "forwards_not_replayed": 0,
        "kernel_files": 8,
    }
    assert data["rules"] == [
        {"code": "TP101", "name": "print-in-compiled-code", "found": 1, "rewritten": 1, "left": 0},
        {"code": "TP201", "name": "data-dependent-if", "found": 1, "rewritten": 0, "left": 1},
    ]
    assert [f["path"] for f in data["files"]] == ["src/pkg/layers.py", "src/pkg/sub/layers.py"]
    assert [f["output"] for f in data["files"]] == ["out/layers.py", "out/sub/layers.py"]
    assert data["runtime_files"] == ["out/_transpile_runtime/__init__.py", "out/_transpile_runtime/triton_support.py"]


# A package whose module has a fix, a region and an import that leaves the output tree (made absolute),
# beside a module with only such an import: the two counts the report missed (fixtures: 6 against 8).
COUNTED = {
    "top/__init__.py": "",
    "top/util.py": "SCALE = 2.0\n",
    "top/sub/__init__.py": "",
    "top/sub/net.py": (
        "import torch\nfrom torch import nn\n\nfrom ..util import SCALE\n\n\nclass Net(nn.Module):\n"
        "    def forward(self, x):\n        print(x)\n        y = torch.sigmoid(x) * 2.0\n        return y + 1.0\n"
    ),
    "top/sub/plain.py": "from .. import util\n",
    "top/sub/left.py": "import torch\n\n\n@torch.compile\ndef f(x):\n    return torch.nonzero(x)\n",
}


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "no-kernels"])
def test_counts_agree_with_the_build_summary(tmp_path, kernels):
    """The page's counts are the command's: files rewritten (imports alone included), findings rewritten
    per rule, fixes applied, imports made absolute, regions."""
    from click.testing import CliRunner

    from transpiler.cli.main import main

    for name, text in COUNTED.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_text(text)
    out = tmp_path / "out"
    args = ["build", "--no-cache", str(tmp_path / "src/top/sub"), "-o", str(out), "--format", "json"]
    run = CliRunner().invoke(main, args + ([] if kernels else ["--no-kernels"]))
    assert run.exit_code == 1, run.output  # the nonzero is left
    command = json.loads(run.stdout)
    data = json.loads((out / REPORT_JSON).read_text())
    s = data["summary"]
    assert s["files"] == command["files"]["total"] == 4
    assert s["rewritten_files"] == command["files"]["rewritten"] == 2
    assert s["kernels_only_files"] == command["files"]["kernels_only"] == 0
    assert s["copied_files"] == command["files"]["copied"] == 2
    assert data["rules"] == command["rules"]
    assert s["findings_rewritten"] == sum(r["rewritten"] for r in command["rules"]) == 1
    assert s["fixes_applied"] == len(command["fixes"]) == 1
    assert s["imports_made_absolute"] == len(command["imports"]) == 2
    assert s["regions"] == len(command["regions"]) == (1 if kernels else 0)
    by_name = {Path(f["path"]).name: f for f in data["files"]}
    assert [i["absolute"] for i in by_name["plain.py"]["imports"]] == ["top"]
    # The rewritten modules come with their diff against the source; the fixed line is in it.
    assert "+from top.util import SCALE" in by_name["net.py"]["diff"]
    assert "+        if not torch.compiler.is_compiling():" in by_name["net.py"]["diff"]
    assert by_name["left.py"]["diff"] == ""  # copied unchanged
    page = _parse((out / REPORT_HTML).read_text())
    cells = "".join(page.text)
    assert "4: 2 rewritten, 2 copied unchanged" in cells and "1 (by 1 fix applied)" in cells
    # The page of each file with findings or rewrites, under the name the summary gives the file; no other.
    pages = {p.relative_to(out / REPORT_DIR).as_posix() for p in (out / REPORT_DIR).rglob("*.html")}
    assert pages == {f"{f['path']}.html" for f in data["files"] if f["diagnostics"] or f["regions"]}


def test_diagnostics_grouped_by_source_file(result):
    layers, sub = _data(result)["files"]
    assert [(d["code"], d["line"], d["fix"]) for d in layers["diagnostics"]] == [
        ("TP101", 5, "guard `print()` with `is_compiling()`")
    ]
    assert [d["code"] for d in layers["applied"]] == ["TP101"] and layers["remaining"] == []
    assert [d["code"] for d in sub["diagnostics"]] == ["TP201"] and sub["applied"] == []
    # A finding left names the output file, and is listed under the source it came from.
    assert [(d["path"], d["code"]) for d in sub["remaining"]] == [("out/sub/layers.py", "TP201")]
    assert layers["diagnostics"][0]["url"].endswith("#tp101-print-in-compiled-code")


@pytest.mark.parametrize("destinations", [DESTINATIONS, None], ids=["plan", "matched-by-directory"])
def test_kernel_files_of_modules_with_one_stem(result, destinations):
    layers, sub = _data(result, destinations)["files"]
    assert layers["kernel_files"] == ["out/_layers_kernels.cpp", "out/_layers_kernels.py", "out/_layers_triton.py"]
    assert sub["kernel_files"] == [
        "out/sub/_layers_kernels.cpp",
        "out/sub/_layers_kernels.py",
        "out/sub/_layers_triton.py",
    ]
    assert sub["output"] == "out/sub/layers.py"
    assert [d["path"] for d in sub["remaining"]] == ["out/sub/layers.py"]


def test_kernel_files_of_renamed_stems(tmp_path):
    """A module whose name is no identifier gets kernel files under another stem (`my-model.py`:
    `_my_model_kernels.py`, or `_my_model_2_kernels.py` beside a `my_model.py`): the report names the
    files the build wrote for it, not those its name would give."""
    from click.testing import CliRunner

    from transpiler.cli.main import main

    module = (
        "import torch\n\n\nclass M(torch.nn.Module):\n"
        "    def forward(self, x):\n        y = torch.sigmoid(x) * 2.0\n        return y + 1.0\n"
    )
    for name in ("my-model.py", "my_model.py"):
        (tmp_path / "src" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "src" / name).write_text(module)
    run = CliRunner().invoke(main, ["build", "--no-cache", str(tmp_path / "src"), "-o", str(tmp_path / "out")])
    assert run.exit_code in (0, 1), run.output
    data = json.loads((tmp_path / "out" / REPORT_JSON).read_text())
    files = {Path(f["path"]).name: [Path(k).name for k in f["kernel_files"]] for f in data["files"]}
    assert files == {
        "my-model.py": [
            "_my_model_backward.cpp",
            "_my_model_kernels.cpp",
            "_my_model_kernels.py",
            "_my_model_triton.py",
        ],
        "my_model.py": [
            "_my_model_2_backward.cpp",
            "_my_model_2_kernels.cpp",
            "_my_model_2_kernels.py",
            "_my_model_2_triton.py",
        ],
    }
    assert all((tmp_path / "out" / k).is_file() for names in files.values() for k in names)
    assert not any("_my_model" in k for k in data["runtime_files"])


def test_region_record(result):
    layers, sub = _data(result)["files"]
    (scaled,) = layers["regions"]
    assert scaled["name"] == "fused_clamp"
    assert scaled["location"] == "src/pkg/layers.py:7-8"
    assert scaled["ir"] == format_region(SCALED)
    assert scaled["inputs"] == [{"name": "x", "source": "x", "is_tensor": True}]
    assert scaled["outputs"] == [{"value": "t0", "target": "return", "aliases": []}]
    # JSON has no infinity: the constant is written as the string float() reads back.
    assert scaled["nodes"][1] == {"out": "t0", "op": "clamp_max", "operands": ["y", "inf"], "constants": [1], "line": 8}
    # The covered lines come from the text the region was found in (the rewritten one), not the file on disk.
    assert scaled["source_lines"] == [
        {"line": 7, "text": f'    y = x * 0.5  # "{INJECTION}"'},
        {"line": 8, "text": '    return torch.clamp(y, max=float("inf"))'},
    ]
    # Without a text, the source file is read.
    (shift,) = sub["regions"]
    assert [line["text"] for line in shift["source_lines"]] == ["    z = x + b", "    return z.abs()"]
    assert shift["kernel_files"] == sub["kernel_files"]
    json.dumps(_data(result), allow_nan=False)


def test_unreadable_source_has_no_lines(result):
    SUB_LAYERS.unlink()
    (shift,) = _data(result)["files"][1]["regions"]
    assert shift["source_lines"] == []
    assert "Source text not available." in render_file_pages(_data(result))[SUB_PAGE]


class _Page(HTMLParser):
    """What a reader of the page sees: headings, texts, links, tags."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.headings: dict[str, list[str]] = {}
        self.pre: list[str] = []
        self.text: list[str] = []
        self._open: list[str] = []
        self._heading = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._open.append(tag)
        if tag in ("h1", "h2", "h3", "h4"):
            self._heading = ""
        if tag == "pre":
            self.pre.append("")

    def handle_endtag(self, tag):
        self._open.pop()
        if tag in ("h1", "h2", "h3", "h4"):
            self.headings.setdefault(tag, []).append(" ".join(self._heading.split()))

    def handle_data(self, data):
        self.text.append(data)
        if any(t in ("h1", "h2", "h3", "h4") for t in self._open):
            self._heading += data
        if "pre" in self._open:
            self.pre[-1] += data


def _parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


# Header cells of the index page: the summary's 8 row headers, the rule table's 4 and the index's 6 column headers;
# of each file's page, its one finding table's 4 (layers: fixed; sub: left). Empty parts of a file are left out.
HEADER_CELLS = 8 + 4 + 6
LAYERS_PAGE = f"{REPORT_DIR}/src/pkg/layers.py.html"
SUB_PAGE = f"{REPORT_DIR}/src/pkg/sub/layers.py.html"


def _pages(result) -> dict[str, str]:
    """Every page of the report, by its path in the output: the index, then the files'."""
    data = _data(result)
    return {REPORT_HTML: render_html(data), **render_file_pages(data)}


def test_html_escapes_and_structure(result):
    pages = _pages(result)
    assert list(pages) == [REPORT_HTML, LAYERS_PAGE, SUB_PAGE]
    index = pages[REPORT_HTML]
    assert index.lower().count("<script") == 1  # the index's filter, at the end of the body
    parsed = _parse(index)
    assert parsed.headings["h1"] == ["transpile report: out"]
    assert parsed.headings["h2"] == ["Summary", "Files", "Runtime support"]
    tags = [tag for tag, _ in parsed.tags]
    assert tags.count("table") == 3 and tags.count("th") == HEADER_CELLS
    # The index names each file by its relative path, links its page, and has a filter over them.
    rows = [attrs["data-path"] for tag, attrs in parsed.tags if tag == "tr" and "data-path" in attrs]
    assert rows == ["src/pkg/layers.py", "src/pkg/sub/layers.py"]
    links = [attrs["href"] for tag, attrs in parsed.tags if tag == "a" and attrs["href"].startswith(REPORT_DIR)]
    assert links == [LAYERS_PAGE, SUB_PAGE]
    assert ("input", {"id": "filter", "type": "search", "placeholder": "e.g. llama"}) in parsed.tags
    layers, sub = _parse(pages[LAYERS_PAGE]), _parse(pages[SUB_PAGE])
    assert layers.headings["h1"] == ["src/pkg/layers.py"] and sub.headings["h1"] == ["src/pkg/sub/layers.py"]
    # Its region's function is a lambda: no chart.
    assert layers.headings["h2"] == ["Rewrites applied", "Regions compiled into kernels"]
    assert sub.headings["h2"] == [
        "Findings left in the output", "Where each function's tensor operations run", "Regions compiled into kernels"
    ]  # fmt: skip
    assert layers.headings["h3"] == ["Kernel fused_clamp"] and sub.headings["h3"] == ["Kernel fused_abs"]
    for page in (layers, sub):
        tags = [tag for tag, _ in page.tags]
        assert "script" not in tags and tags.count("table") == 1 and tags.count("th") == 4
    # Escaped text reads back as the original characters.
    assert "&lt;script&gt;" in pages[LAYERS_PAGE]
    assert any(INJECTION in pre for pre in layers.pre)
    assert any(format_region(SCALED) in pre for pre in layers.pre)
    assert "print() <b>breaks</b> the graph & more" in "".join(layers.text)
    assert "pkg.layers.scaled.<locals>.<lambda>" in "".join(layers.text)
    assert not {"b", "lambda", "locals"} & {tag for page in (layers, sub) for tag, _ in page.tags}


def test_the_index_page_does_not_grow_with_a_files_findings(result):
    """The index of a large tree stays small: a file's findings, diff and regions are on its own page, so the
    index grows by a row per file, not by what the file holds (the whole transformers tree's one page was
    1.3 MB, 0.8 MB of it finding tables)."""
    before = render_html(_data(result))
    many = [replace(d, line=n, message=f"{d.message} ({n})") for d in result.remaining for n in range(1, 301)]
    result.remaining[:] = many
    data = _data(result)
    after = render_html(data)
    assert len(after) - len(before) < 40  # the counts' digits
    assert len(render_file_pages(data)[SUB_PAGE]) > 300 * 100


@pytest.mark.parametrize(
    "message, html_text",
    [
        ("`print()` <b>x</b>", "<code>print()</code> &lt;b&gt;x&lt;/b&gt;"),
        ("`a` and `b`", "<code>a</code> and <code>b</code>"),
        ("an odd ` backtick and `code`", "an odd <code> backtick and </code>code`"),
        ("no code", "no code"),
        ("``", "<code></code>"),
    ],
)
def test_backticks_become_code(message, html_text):
    from transpiler.pipeline.report import _prose

    assert _prose(message) == html_text


def test_a_region_sharing_an_earlier_regions_kernel_shows_that_kernel_and_says_so(result):
    """The build gives a region that computes what an earlier one does, on values of other names, the earlier
    region's kernel (`same_as=` in its `Kernel(...)`): the page shows that kernel's code and names it."""
    (OUT / "_layers_kernels.py").write_text(
        'fused_clamp = Kernel(\n    "fused_clamp",\n    fused_clamp_reference,\n    same_as="fused_scale",\n'
        '    renamed={"x": "y"},\n)\n\n\nfused_other = Kernel(\n    "fused_other",\n    same_as="fused_nothing",\n)\n'
    )
    (OUT / "_layers_triton.py").write_text("@triton.jit\ndef fused_scale_kernel(y_ptr):\n    y = 2\n")
    (scaled,) = _data(result)["files"][0]["regions"]
    assert scaled["shares"] == "fused_scale"
    assert scaled["kernel_code"] == {"triton": "@triton.jit\ndef fused_scale_kernel(y_ptr):\n    y = 2"}
    page = render_file_pages(_data(result))[LAYERS_PAGE]
    assert "Runs the kernel of <code>fused_scale</code>: the same computation on other values." in page
    (OUT / "_layers_kernels.py").write_text('fused_clamp = Kernel(\n    "fused_clamp",\n)\n')
    assert _data(result)["files"][0]["regions"][0]["shares"] is None


def test_region_shows_its_kernel_code_and_the_module_diff(result):
    """Each region has its generated kernels (cut from the files beside the module) and the file its diff,
    all folded in <details>; a backend whose file lacks the kernel is left out."""
    triton = OUT / "_layers_triton.py"
    triton.write_text(
        "import triton\n\n\n@triton.jit\ndef fused_clamp_2_kernel(x_ptr):\n    pass\n\n\n"
        "@triton.jit\ndef fused_clamp_kernel(x_ptr,\n    y_ptr):\n    y = x * 0.5  # <b>\n\n\ndef launch():\n    pass\n"
    )
    (OUT / "_layers_kernels.cpp").write_text(
        "// fused_clamp: src/pkg/layers.py:7-8\ntemplate <typename T>\nstatic void fused_clamp(T* x) {\n"
        "  x[0] = 1;\n}\n\n// fused_clamp on untyped pointers\n"
    )
    layers, sub = _data(result)["files"]
    (scaled,) = layers["regions"]
    assert scaled["kernel_code"] == {
        "cpp": "// fused_clamp: src/pkg/layers.py:7-8\ntemplate <typename T>\nstatic void fused_clamp(T* x) {\n"
        "  x[0] = 1;\n}",
        "triton": "@triton.jit\ndef fused_clamp_kernel(x_ptr,\n    y_ptr):\n    y = x * 0.5  # <b>",
    }
    assert sub["regions"][0]["kernel_code"] == {}  # "# generated": no kernel in them
    # The module as written against its source: the fixed lines.
    assert "+    if not torch.compiler.is_compiling():\n" in layers["diff"]
    assert layers["diff"].startswith("--- src/pkg/layers.py\n+++ src/pkg/layers.py (transpiled)\n")
    page = "".join(render_file_pages(_data(result)).values())
    parsed = _parse(page)
    summaries = [t for t in parsed.text if t in ("Generated Triton (CUDA) kernel", "Generated C++ (CPU) kernel")]
    assert summaries == ["Generated Triton (CUDA) kernel", "Generated C++ (CPU) kernel"]
    assert "y = x * 0.5  # &lt;b&gt;" in page
    assert [tag for tag, _ in parsed.tags].count("details") == 2 + 2 + 1  # kernels, IRs, the one diff
    assert _data(result)["files"][1]["diff"] == ""  # out/sub/layers.py is its source


def test_links_are_relative_and_resolve(result):
    """Every link of every page, from where that page lies: to an output file, another page, or an anchor."""
    pages = _pages(result)
    for name, text in pages.items():
        (OUT / name).parent.mkdir(parents=True, exist_ok=True)
        (OUT / name).write_text(text)
    targets = set()
    for name, text in pages.items():
        parsed = _parse(text)
        hrefs = [attrs["href"] for tag, attrs in parsed.tags if tag == "a"]
        local = [h for h in hrefs if not h.startswith(("#", "https://"))]
        assert all(not h.startswith("/") and ((OUT / name).parent / h).is_file() for h in local), name
        targets |= {((OUT / name).parent / h).resolve() for h in local}
        anchors = {attrs["id"] for _, attrs in parsed.tags if "id" in attrs}
        assert {h[1:] for h in hrefs if h.startswith("#")} <= anchors
    assert {(OUT / p).resolve() for p in (LAYERS_PAGE, SUB_PAGE, REPORT_HTML)} <= targets  # index <-> files
    assert {(OUT / p).resolve() for p in ("sub/_layers_triton.py", "_transpile_runtime/triton_support.py")} <= targets


def test_a_file_page_name_stays_in_the_reports_folder():
    """A path as a caller spelled it (absolute, with `..`) names a page inside `transpile-report/`, one per file."""
    from transpiler.pipeline.report import _file_pages

    entry = {"diagnostics": [1], "applied": [], "remaining": [], "regions": [], "cuda_graphs": {}}
    files = [dict(entry, path=p) for p in ("/abs/m.py", "../abs/m.py", "abs/m.py", "a/./b.py")]
    names = [name for _, name in _file_pages({"files": files})]
    assert names == [
        f"{REPORT_DIR}/abs/m.py.html", f"{REPORT_DIR}/abs/m.py-2.html", f"{REPORT_DIR}/abs/m.py-3.html",
        f"{REPORT_DIR}/a/b.py.html",
    ]  # fmt: skip


def test_write_report_is_atomic_and_stable(result):
    paths = write_report(result, OUT, {LAYERS: _numbered(REWRITTEN)}, DESTINATIONS)
    assert paths == [OUT / REPORT_JSON, OUT / REPORT_HTML, OUT / LAYERS_PAGE, OUT / SUB_PAGE]
    first = [p.read_bytes() for p in paths]
    assert json.loads(first[0]) == _data(result)
    assert [page.decode() for page in first[1:]] == list(_pages(result).values())
    times = [p.stat().st_mtime_ns for p in paths]
    assert [p.read_bytes() for p in write_report(result, OUT, {LAYERS: _numbered(REWRITTEN)}, DESTINATIONS)] == first
    assert [p.stat().st_mtime_ns for p in paths] == times  # unchanged: not written again
    result.applied.clear()
    write_report(result, OUT, {LAYERS: _numbered(REWRITTEN)}, DESTINATIONS)
    assert json.loads(paths[0].read_text())["summary"]["fixes_applied"] == 0
    assert [p for p in OUT.rglob(".*")] == []  # no temporary file left


CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_pages_in_headless_chromium(result, tmp_path):
    """The pages as a browser builds them: the DOM after parsing (and after any script would have run)."""
    write_report(result, OUT, {LAYERS: _numbered(REWRITTEN)}, DESTINATIONS)
    index = _parse(_chromium(tmp_path, "--dump-dom", (OUT / REPORT_HTML).resolve().as_uri()).stdout)
    assert index.headings["h1"] == ["transpile report: out"]
    assert index.headings["h2"] == ["Summary", "Files", "Runtime support"]
    assert [tag for tag, _ in index.tags].count("th") == HEADER_CELLS
    assert "2 of 2 files" in index.text  # the filter ran: with no text, every file is shown
    layers = _parse(_chromium(tmp_path, "--dump-dom", (OUT / LAYERS_PAGE).resolve().as_uri()).stdout)
    assert layers.headings["h1"] == ["src/pkg/layers.py"] and layers.headings["h3"] == ["Kernel fused_clamp"]
    assert any(f'7      y = x * 0.5  # "{INJECTION}"' in pre for pre in layers.pre)
    sub = _parse(_chromium(tmp_path, "--dump-dom", (OUT / SUB_PAGE).resolve().as_uri()).stdout)
    assert any("2      z = x + b\n3      return z.abs()" in pre for pre in sub.pre)
    # The source line stayed text: the script in the line never ran, and no page but the index has a script.
    for page, scripts in ((index, 1), (layers, 0), (sub, 0)):
        assert [tag for tag, _ in page.tags].count("script") == scripts
        (body,) = [attrs for tag, attrs in page.tags if tag == "body"]
        assert "data-pwned" not in body


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr", "--v=0", *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_filter_and_console_in_headless_chromium(result, tmp_path):
    """`?q=` filters the index as typing does; the page logs no console message (no script error), and
    every link in it resolves to a file or an anchor of the page."""
    write_report(result, OUT, {LAYERS: _numbered(REWRITTEN)}, DESTINATIONS)
    uri = (OUT / REPORT_HTML).resolve().as_uri()
    run = _chromium(tmp_path, "--dump-dom", f"{uri}?q=SUB/")
    rows = [attrs for tag, attrs in _parse(run.stdout).tags if tag == "tr" and "data-path" in attrs]
    assert [(r["data-path"], "hidden" in r) for r in rows] == [
        ("src/pkg/layers.py", True),
        ("src/pkg/sub/layers.py", False),
    ]
    assert "1 of 2 files" in _parse(run.stdout).text
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
    run = _chromium(tmp_path, "--dump-dom", (OUT / SUB_PAGE).resolve().as_uri())
    assert [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line] == []


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_screenshot_in_headless_chromium(result, tmp_path):
    """The page paints: a PNG of the requested size, not one colour (the style and text are there)."""
    import struct
    import zlib

    write_report(result, OUT, {LAYERS: _numbered(REWRITTEN)}, DESTINATIONS)
    shot = tmp_path / "report.png"
    uri = (OUT / LAYERS_PAGE).resolve().as_uri()
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,1400", "--hide-scrollbars", uri)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1000, 1400)
    # The image's rows, decompressed: a blank page would be one byte value repeated.
    chunks, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        if data[at + 4 : at + 8] == b"IDAT":
            chunks.append(data[at + 8 : at + 8 + length])
        at += 12 + length
    pixels = zlib.decompress(b"".join(chunks))
    assert len(set(pixels)) > 16


def test_tensor_code_left_eager_is_in_the_report_with_its_reason(tmp_path):
    """The report says why code a reader expects in a kernel stays eager (LLaMA's mask add and softmax)."""
    from click.testing import CliRunner

    from transpiler.cli.main import main

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "attn.py").write_text(
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
        "class Attention(nn.Module):\n"
        "    def forward(self, q, k, mask):\n"
        "        s = torch.matmul(q, k)\n"
        "        s = s + mask\n"
        "        p = F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)\n"
        "        return torch.tanh(p * 2.0) * p\n"
    )
    out = tmp_path / "out"
    run = CliRunner().invoke(main, ["build", "--no-cache", str(tmp_path / "src"), "-o", str(out)])
    assert run.exit_code == 0, run.output
    (entry,) = [f for f in json.loads((out / REPORT_JSON).read_text())["files"] if f["path"].endswith("attn.py")]
    assert len(entry["regions"]) == 1
    assert [(n["line"], n["reason"].split(":")[0]) for n in entry["not_fused"]] == [
        (9, "`add` alone, between statements the kernels do not compute"),
        (10, "`torch.nn.functional.softmax` with these arguments (dim=, dtype=)"),
    ]
    page = (out / REPORT_DIR / "src" / "attn.py.html").read_text()
    assert "Tensor code left eager, and why (2)" in page
    assert "<code>torch.nn.functional.softmax</code> with these arguments" in page


WHERE_SOURCE = """import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.act = nn.GELU()

    def forward(self, x, mask):
        if torch.compiler.is_compiling():
            pass
        h = self.proj(x)
        h = self.act(h) * 2.0 + 1.0
        s = torch.matmul(h, h.transpose(-1, -2))
        s = s.cumsum(-1)
        return F.softmax(s + mask, dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(4, 4)
        self.k = nn.Linear(4, 4)

    def forward(self, x):
        return torch.matmul(self.q(x), self.k(x).transpose(-1, -2))


def helper(x):
    return torch.tanh(x)
"""


def test_where_each_functions_tensor_operations_run_is_counted_and_drawn(tmp_path):
    """Per function: its regions' ops, its library calls (a torch.nn layer that kernels never compute; a torch
    function in a statement no region or reason takes) and its statements left eager. Every forward is listed,
    also one of library calls only; calls of torch that are not operations (`is_compiling`) do not count."""
    source = tmp_path / "block.py"
    source.write_text(WHERE_SOURCE)
    lines = WHERE_SOURCE.splitlines()
    at = {text.strip(): n for n, text in enumerate(lines, 1)}
    nodes = (
        Node("gelu", ("h",), "t0", at["h = self.act(h) * 2.0 + 1.0"]),
        Node("mul", ("t0", "2.0"), "t1", at["h = self.act(h) * 2.0 + 1.0"], constants=(1,)),
        Node("add", ("t1", "1.0"), "h_2", at["h = self.act(h) * 2.0 + 1.0"], constants=(1,)),
    )
    region = _region(
        source, "fused_gelu", "m.Block.forward", at["h = self.act(h) * 2.0 + 1.0"], nodes, (Input("h", "h", True),)
    )
    left = [("m.Block.forward", at["s = s.cumsum(-1)"], "`.cumsum` is not in the op table")]
    rows = report._where_it_runs(source, [region], left)
    assert rows == [
        # proj (nn.Linear) and torch.matmul; the softmax's statement is neither a region nor a reason: a library call;
        # `self.act` (nn.GELU) is in the region, and a kernel may compute it.
        {"function": "Block.forward", "kernels": 3, "library": 3, "eager": 1},
        {"function": "Attention.forward", "kernels": 0, "library": 3, "eager": 0},
    ]
    page = report._where_chart(rows)
    parsed = _parse(page)
    assert [tag for tag, _ in parsed.tags].count("rect") == 4  # Block: three shares; Attention: one
    assert 'aria-label="Block.forward: 3 ops in generated kernels, 3 library calls, 1 statements left eager;' in page
    assert report._where_it_runs(tmp_path / "missing.py", [region], left) == []
    assert report._where_it_runs(source, [], []) == []
