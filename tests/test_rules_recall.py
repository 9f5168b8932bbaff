"""Recall of the side-effect and skipped-call rules on whole programs, checked against the real Dynamo.

Each program is written the way model code is (a sampler with a progress bar, a module
that logs through its own logger, debugging dumps, noise from a fresh generator, ...).
A line marked `# break` must be reported by the linter and must break under Dynamo; a
reported line that is not marked fails the test (precision), and so does a marked line
the linter misses (recall). The `clean-*` programs are the negatives: code that looks
alike but that Dynamo traces, on which the linter must stay silent.

`tests/lint_corpus/` holds more such programs, one file each, over every family (values read
into Python, sizes and slice bounds from tensors, sorting, logging, generators, explicit
breaks, ...); `benchmarks/lint_recall.py` measures the linter's precision and recall on them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rewrites.side_effects import FileIoInCompiledCode, NumpyIoInCompiledCode  # noqa: E402
from tests.dynamo_harness import run_example  # noqa: E402
from tests.rule_examples import lint_snippet  # noqa: E402
from transpiler.lint.rule import REGISTRY  # noqa: E402

PROGRAMS = {
    "sampler-with-progress-bar": """
import torch
from torch import nn
from tqdm import tqdm


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.denoise = nn.Linear(8, 8)

    def forward(self, x):
        h = x * 0.5
        for t in tqdm(range(3), leave=False, disable=True):  # break
            h = h - 0.1 * self.denoise(h)
        return h
""",
    "module-logging-through-its-logger": """
import logging

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.logger = logging.getLogger("block")
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = self.proj(x)
        self.logger.debug("hidden %s", h.shape)  # break
        return torch.relu(h)
""",
    "debug-dumps": """
import io
import os

import numpy as np
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = self.proj(x)
        os.makedirs("/tmp", exist_ok=True)  # break
        h = h * 2
        np.savez(io.BytesIO(), hidden=h.detach().numpy())  # break
        h = h + 1
        torch.save(h.detach(), io.BytesIO())  # break
        return torch.tanh(h)
""",
    "noise-from-fresh-generator": """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 8)

    def forward(self, x):
        h = self.head(x)
        generator = torch.Generator()  # break
        return h * 2, generator
""",
    "noise-from-module-generator": """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 8)
        self.generator = torch.Generator().manual_seed(0)

    def forward(self, x, generator=None):
        h = self.head(x)
        h = h + torch.rand(8, generator=generator)
        return h * torch.rand(8, generator=self.generator)  # break
""",
    "explicit-breaks-and-disabled-helpers": """
import torch
from torch import nn


def _to_host(h):
    return h.tolist()


to_host = torch.compiler.disable(_to_host)


class Model(nn.Module):
    def forward(self, x):
        h = x.relu()
        torch._dynamo.graph_break()  # break
        h = h * 3
        values = to_host(h)  # break
        return h + 1, values
""",
    "snapshot-and-checks": """
import copy

import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x * 2
        snapshot = copy.deepcopy(h)  # break
        h = h + 1
        positive = all(h > -100)  # break
        return h - snapshot, positive
""",
    "clean-lookalikes": """
import logging

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

logger = logging.getLogger(__name__)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.logger = logging.getLogger("model")

    def forward(self, x):
        h = x * 2
        np.random.seed(0)
        spread = np.std(h.detach().numpy())
        steps = [1.0, 0.5]
        for scale in steps if torch.compiler.is_compiling() else tqdm(steps, disable=True):
            h = h * scale
        if not torch.compiler.is_compiling():
            self.logger.info("scale done")
        wide = any(size > 4 for size in h.shape)
        leaf = h.detach().requires_grad_(False)
        return h + leaf, spread, wide
""",
}


CORPUS = Path(__file__).parent / "lint_corpus"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_reported_lines_are_exactly_dynamo_breaks(name):
    _check(PROGRAMS[name].lstrip("\n"), name)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.py")), ids=lambda path: path.stem)
def test_corpus_reported_lines_are_exactly_dynamo_breaks(path):
    _check(path.read_text(encoding="utf-8"), path.stem)


def _check(source: str, name: str) -> None:
    reported = sorted({d.line for d in lint_snippet(source) if REGISTRY[d.code].family == "break"})
    marked = [n for n, line in enumerate(source.splitlines(), 1) if line.endswith("# break")]
    assert reported == marked
    report = run_example(source, name=name)
    for line in marked:
        # A break under a loop makes Dynamo skip the whole frame, and then it names no line.
        assert report.breaks_at(line) or report.frame_skipped, f"line {line}: {report.summary()}"
    if not marked:
        assert report.clean(), report.summary()


def test_numpy_io_functions_have_no_traced_counterpart():
    """TP112's premise: Dynamo traces NumPy through `torch._numpy`, which lacks these."""
    import torch._numpy as tnp

    for callee in NumpyIoInCompiledCode.callees:
        assert not hasattr(tnp, callee.removeprefix("numpy.")), callee


_FILESYSTEM_CALLS = {
    "os.makedirs": "os.makedirs('/tmp', exist_ok=True)",
    "os.listdir": "os.listdir('/')",
    "os.getcwd": "os.getcwd()",
    "os.path.exists": "os.path.exists('/nonexistent')",
    "os.path.isdir": "os.path.isdir('/tmp')",
    "shutil.which": "shutil.which('sh')",
    "pprint.pprint": "pprint.pprint('x', stream=io.StringIO())",
}


@pytest.mark.parametrize("callee", sorted(_FILESYSTEM_CALLS))
def test_filesystem_calls_break_where_reported(callee):
    assert callee in FileIoInCompiledCode.callees
    source = f"""import io
import os
import pprint
import shutil

import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        y = x + 1
        {_FILESYSTEM_CALLS[callee]}
        return y * 2
"""
    assert [(d.code, d.line) for d in lint_snippet(source)] == [("TP104", 13)]
    assert run_example(source, name=callee).breaks_at(13)
