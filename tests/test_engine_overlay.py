"""The lint engine reads an overlay (texts a fix run has not written) wherever it reads a file: the linted
files, the context files that define their base classes, and the helpers it checks again with tensor
parameters. The overlay is an argument, not state: two runs with different overlays do not see each other's."""

from __future__ import annotations

from pathlib import Path

from transpiler.lint import engine

BASE_ON_DISK = "class Base:\n    pass\n"
BASE_A_MODULE = "from torch import nn\n\n\nclass Base(nn.Module):\n    pass\n"
SUBCLASS = (
    "from base import Base\n\n\nclass Block(Base):\n    def forward(self, x):\n        print(x)\n        return x\n"
)
HELPER = (
    "import torch\nfrom torch import nn\n\n\ndef clip(t):\n    if t.sum() > 0:\n        return t\n    return -t\n\n\n"
    "class Block(nn.Module):\n    def forward(self, x):\n        return clip(x)\n"
)


def _codes(files: list[Path], overlay=None) -> list[tuple[str, int, str]]:
    return [
        (Path(d.path).name, d.line, d.code)
        for d in engine.lint(files, lambda code: True, "all", None, 1, None, overlay)
    ]


def test_a_context_file_is_read_from_the_overlay(tmp_path):
    (tmp_path / "base.py").write_text(BASE_ON_DISK)
    (tmp_path / "block.py").write_text(SUBCLASS)
    block = tmp_path / "block.py"
    assert _codes([block]) == []  # Block is no module: its forward is not compiled code
    assert _codes([block], {tmp_path / "base.py": BASE_A_MODULE.encode()}) == [("block.py", 6, "TP101")]
    assert _codes([block]) == []  # the overlay went with its run


def test_a_helper_is_checked_again_from_the_overlay(tmp_path):
    path = tmp_path / "block.py"
    path.write_text("")  # on disk the file is empty: only the overlay has the helper
    # `clip`'s parameter is a tensor only once its call site is known: the engine checks it a second time.
    assert _codes([path], {path: HELPER.encode()}) == [("block.py", 6, "TP201")]
