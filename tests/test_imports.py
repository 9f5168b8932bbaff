"""Relative imports that leave the output tree become absolute imports of the original package
(transpiler/pipeline/imports.py): the rewritten text, that the output imports the originals through them,
and the error when the source is not inside a package."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from transpiler.cli.main import main
from transpiler.pipeline.imports import SHARED_HEADER, absolute_imports

# `top` is a package; only `top/sub` is transpiled, so `..` and above leave the tree.
TOP = {
    "top/__init__.py": "LEVEL = 'top'\n",
    "top/util.py": "def helper():\n    return 'original util'\n",
    "top/sub/__init__.py": "from .. import util  # the parent package\n",
    "top/sub/sibling.py": "VALUE = 'sibling'\n",
    "top/sub/mod.py": """\
from __future__ import annotations

from ..util import helper  # outside: made absolute
from . import sibling
from .sibling import VALUE
from .. import LEVEL
from ..import util as spaceless


def inner():
    from ..util import (  # a comment the rewrite keeps
        helper as again,
    )

    return again
""",
    "top/sub/deep/__init__.py": "",
    "top/sub/deep/leaf.py": "from ..sibling import VALUE\nfrom ...util import helper\n",
}
MOD_OUT = """\
from __future__ import annotations

from top.util import helper  # outside: made absolute
from . import sibling
from .sibling import VALUE
from top import LEVEL
from top import util as spaceless


def inner():
    from top.util import (  # a comment the rewrite keeps
        helper as again,
    )

    return again
"""


# Spellings the tokenizer must get right (in `top/sub/m.py`, `top/sub` transpiled): before ->
# after, and the line of the import.
SPELLINGS = [
    ("from ..util import helper\n", "from top.util import helper\n", 1),
    ("from . . util import helper  # spaced dots\n", "from top.util import helper  # spaced dots\n", 1),
    ("from .. \\\n    util import helper\n", "from top.util import helper\n", 1),
    ("from ..import util\n", "from top import util\n", 1),
    ("from ..util import (\n    helper,  # kept\n)\n", "from top.util import (\n    helper,  # kept\n)\n", 1),
    ("s = 'é'; from ..util import helper as h\n", "s = 'é'; from top.util import helper as h\n", 1),
    ("if True:\n    from .. util import helper\n", "if True:\n    from top.util import helper\n", 2),
    ('"""\nfrom ..util import helper\n"""\n', '"""\nfrom ..util import helper\n"""\n', None),  # a string
    ("from .sibling import x\n", "from .sibling import x\n", None),  # inside the tree
]


@pytest.mark.parametrize("before, after, line", SPELLINGS)
def test_each_spelling_is_rewritten_in_place(tmp_path, before, after, line):
    write_tree(tmp_path, {"top/__init__.py": "", "top/sub/__init__.py": "", "top/sub/m.py": before})
    text, rewrites = absolute_imports(before, tmp_path / "top/sub/m.py", 0)
    assert text == after
    assert [r.line for r in rewrites] == ([line] if line else [])
    compile(text, "m.py", "exec")


def write_tree(root: Path, files: dict[str, str]) -> None:
    for relative, content in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(content, encoding="utf-8")


@pytest.fixture
def transpile(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRANSPILE_TRACEBACK", raising=False)

    def invoke(*args: object):
        return CliRunner().invoke(main, ["build", "--no-cache", *map(str, args)], prog_name="transpile")

    return invoke


@pytest.fixture
def importable(tmp_path):
    """Calling it puts `tmp_path/src` and `tmp_path/build` on sys.path; every module imported from them
    is forgotten after. While the sources are not importable, the build shares no module with them."""
    paths = [str(tmp_path / "src"), str(tmp_path / "build")]

    def enable() -> None:
        sys.path[:0] = paths
        importlib.invalidate_caches()  # `build` did not exist when the finders last looked

    yield enable
    for path in paths:
        if path in sys.path:
            sys.path.remove(path)
    for name in [n for n in sys.modules if n.split(".")[0] in ("top", "outpkg", "lib")]:
        del sys.modules[name]


def test_imports_leaving_the_tree_become_absolute_and_the_rest_stay(tmp_path, transpile, importable):
    write_tree(tmp_path / "src", TOP)
    out = tmp_path / "build" / "outpkg"
    run = transpile(tmp_path / "src" / "top" / "sub", "-o", out, "--format", "json")
    assert run.exit_code == 0, run.output
    assert (out / "mod.py").read_text() == MOD_OUT
    assert (out / "__init__.py").read_text() == "from top import util  # the parent package\n"
    assert (out / "deep" / "leaf.py").read_text() == "from ..sibling import VALUE\nfrom top.util import helper\n"
    assert (out / "sibling.py").read_bytes() == (tmp_path / "src/top/sub/sibling.py").read_bytes()
    summary = json.loads(run.stdout)
    assert summary["files"]["rewritten"] == 3 and summary["files"]["copied"] == 2
    listed = {
        (Path(r["path"]).relative_to(tmp_path / "src").as_posix(), r["line"], r["relative"], r["absolute"])
        for r in summary["imports"]
    }
    assert listed == {
        ("top/sub/__init__.py", 1, "..", "top"),
        ("top/sub/mod.py", 3, "..util", "top.util"),
        ("top/sub/mod.py", 6, "..", "top"),
        ("top/sub/mod.py", 7, "..", "top"),
        ("top/sub/mod.py", 11, "..util", "top.util"),
        ("top/sub/deep/leaf.py", 2, "...util", "top.util"),
    }

    # Imported as a package, the output reaches its own modules and the original package's.
    importable()
    mod = importlib.import_module("outpkg.mod")
    assert mod.sibling.__name__ == "outpkg.sibling" and mod.VALUE == "sibling"
    assert mod.helper() == "original util" and mod.helper.__module__ == "top.util"
    assert mod.inner() is mod.helper and mod.LEVEL == "top" and mod.spaceless is sys.modules["top.util"]
    assert importlib.import_module("outpkg.deep.leaf").helper is mod.helper


def test_the_text_summary_counts_the_imports(tmp_path, transpile):
    write_tree(tmp_path / "src", TOP)
    run = transpile(tmp_path / "src" / "top" / "sub", "-o", tmp_path / "out")
    assert run.exit_code == 0, run.output
    assert "3 rewritten, 2 copied unchanged" in run.stdout
    assert "Made 6 relative imports of 3 files that leave the output tree absolute (`..` -> `top`, ...)." in run.stdout


def test_a_file_with_fixes_gets_both(tmp_path, transpile):
    """The imports of a fixed file are made absolute in the fixed text (here with a line added above)."""
    net = "from torch import nn\n\nfrom ..util import helper\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n        print(x)\n        return x\n"
    write_tree(
        tmp_path / "src", {"top/__init__.py": "", "top/util.py": "", "top/sub/__init__.py": "", "top/sub/net.py": net}
    )
    run = transpile(tmp_path / "src" / "top" / "sub", "-o", tmp_path / "out", "--format", "json")
    assert run.exit_code == 0, run.output
    text = (tmp_path / "out" / "net.py").read_text()
    assert text.startswith("import torch\nfrom torch import nn\n\nfrom top.util import helper\n")
    assert "if not torch.compiler.is_compiling():\n            print(x)\n" in text
    assert [(r["line"], r["absolute"]) for r in json.loads(run.stdout)["imports"]] == [(3, "top.util")]


def test_a_package_transpiled_whole_keeps_its_relative_imports(tmp_path, transpile):
    write_tree(tmp_path / "src", TOP)
    out = tmp_path / "out"
    assert transpile(tmp_path / "src" / "top", "-o", out).exit_code == 0
    for path in (tmp_path / "src" / "top").rglob("*.py"):
        assert (out / path.relative_to(tmp_path / "src" / "top")).read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    "package, why",
    [
        ("loose", "and {src} is not a package (no __init__.py)"),
        ("top/sub", "and climbs above the top-level package `top`"),
    ],
)
def test_an_import_with_no_absolute_name_is_an_error(tmp_path, transpile, package, why):
    files = {"top/__init__.py": "", "top/sub/__init__.py": "", f"{package}/fine.py": "X = 1\n"}
    write_tree(tmp_path / "src", {**files, f"{package}/m.py": "import os\n\nfrom ...elsewhere import thing\n"})
    src, out = tmp_path / "src" / package, tmp_path / "out"
    run = transpile(src, "-o", out)
    assert run.exit_code == 2
    assert (
        f"{src / 'm.py'}:3: `from ...elsewhere import ...` leaves the output tree {why.format(src=src)}" in run.stderr
    )
    assert not out.exists() or not any(out.iterdir())  # nothing written half-way (OUT's writability is checked first)


# An installed package's subpackage: the build changes modeling_fam (a kernel) and nothing else.
LIB = {
    "lib/__init__.py": "",
    "lib/fam/__init__.py": "",
    "lib/fam/configuration_fam.py": "class FamConfig:\n    width = 4\n",
    "lib/fam/util.py": "from .configuration_fam import FamConfig\n",  # imports only what is shared
    "lib/fam/heads.py": "from .modeling_fam import Fam\n\n\nclass Head(Fam):\n    pass\n",  # imports a changed module
    "lib/fam/modeling_fam.py": """\
import torch
from torch import nn

from .configuration_fam import FamConfig


class Fam(nn.Module):
    def __init__(self, config):
        super().__init__()
        if not isinstance(config, FamConfig):  # transformers' composite models check their sub-configs so
            raise TypeError(f"expected FamConfig, got {type(config)}")

    def forward(self, x):
        y = x * 2.0 + 1.0
        return torch.exp(y) - 1.0
""",
}


def test_modules_the_build_leaves_as_they_are_are_the_originals(tmp_path, transpile, importable, monkeypatch):
    """A drop-in accepts the original's objects: the unchanged configuration module is imported from the
    installed package, so a config made there passes the transpiled model's isinstance check."""
    # tmp_path stands in for site-packages: only installed packages are shared (imports._installed)
    monkeypatch.setattr("transpiler.pipeline.imports._installed", lambda src: True)
    write_tree(tmp_path / "src", LIB)
    importable()  # the source is an installed package: Python imports `lib.fam.*` from these files
    out = tmp_path / "build" / "outpkg"
    run = transpile(tmp_path / "src" / "lib" / "fam", "-o", out)
    assert run.exit_code == 0, run.output
    for name in ("configuration_fam", "util"):
        assert (out / f"{name}.py").read_text().startswith(SHARED_HEADER)
    # The summary counts them apart, and not the imports their sources had: the output's files do not hold them.
    counts = run.stdout.split("into ", 1)[1].split(".\n", 1)[0]
    assert ", 2 shared with the original (importing its module), " in counts, counts
    report = json.loads((out / "transpile-report.json").read_text())["summary"]
    assert report["shared_files"] == 2
    kinds = ("rewritten_files", "kernels_only_files", "shared_files", "copied_files", "unreadable_files")
    assert report["files"] == sum(report[k] for k in kinds)  # every file counted once
    for name in ("heads.py", "__init__.py"):  # imports a compiled module; a package must find its submodules here
        assert (out / name).read_bytes() == (tmp_path / "src/lib/fam" / name).read_bytes()
    assert "fused_" in (out / "modeling_fam.py").read_text()

    importlib.invalidate_caches()
    original = importlib.import_module("lib.fam.configuration_fam")
    compiled = importlib.import_module("outpkg.modeling_fam")
    assert importlib.import_module("outpkg.configuration_fam") is original
    assert importlib.import_module("outpkg.util").FamConfig is original.FamConfig
    assert importlib.import_module("outpkg.heads").Head.__bases__ == (compiled.Fam,)
    compiled.Fam(original.FamConfig())  # the original's config object is accepted


def test_a_tree_python_does_not_import_from_its_files_shares_nothing(tmp_path, transpile):
    write_tree(tmp_path / "src", LIB)  # `lib` is not on sys.path
    out = tmp_path / "build" / "outpkg"
    assert transpile(tmp_path / "src" / "lib" / "fam", "-o", out).exit_code == 0
    for name in ("configuration_fam.py", "util.py"):
        assert (out / name).read_bytes() == (tmp_path / "src/lib/fam" / name).read_bytes()
