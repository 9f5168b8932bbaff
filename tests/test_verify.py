"""`transpile verify` (transpiler/pipeline/verifying.py) catches each class of miscompile the differential
tests have found, planted back into a built tree: a wrong value, a wrong gradient, a wrong shape, a wrong dtype,
an output that aliases and changes an input, and a result where eager raises. The tree as built verifies clean,
and the command's exit status gates on it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from transpiler.cli.main import main

pytest.importorskip("torch")

MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)

    def forward(self, x, y):
        h = torch.sigmoid(x) * y + 0.25
        return self.ln(h)
"""

# Where each plant goes, and what it replaces: generated kernel code, or the tree's runtime.
LAUNCH_END = "            outputs = tuple(o if shape is None else _narrowed(o, shape) for o, shape in zip(outputs, plan.narrow))\n        return outputs\n"
PLANTS = {
    "value": ("_net_kernels.cpp", "sigmoid(x)", "sigmoid(x * C(1.001))", "wrong value"),
    "gradient": ("_net_backward.cpp", "C(1) - t0", "C(1.01) - t0", "gradient of"),
    "shape": (
        "_transpile_runtime/__init__.py",
        LAUNCH_END,
        LAUNCH_END.replace(
            "        return outputs", "        outputs = tuple(o.flatten() for o in outputs)\n        return outputs"
        ),
        "wrong shape",
    ),
    "dtype": (
        "_transpile_runtime/__init__.py",
        LAUNCH_END,
        LAUNCH_END.replace(
            "        return outputs", "        outputs = tuple(o.double() for o in outputs)\n        return outputs"
        ),
        "wrong dtype",
    ),
    "aliasing": (
        "_transpile_runtime/__init__.py",
        LAUNCH_END,
        LAUNCH_END.replace(
            "        return outputs",
            "        if tensors[1].shape == outputs[0].shape and tensors[1].dtype == outputs[0].dtype:\n"
            "            outputs = (tensors[1].copy_(outputs[0]),)\n        return outputs",
        ),
        "side effect",
    ),
    # The check that a layer norm's weight is one value per element of the last dim, gone: the kernel computes
    # where eager raises (a bias of another shape) or where eager normalises over more dims (a weight of two):
    # the shrunk case is whichever is simplest.
    "missing check": (
        "_transpile_runtime/__init__.py",
        "        if step.affine and any(",
        "        if False and any(",
        ("eager raises", "wrong value"),
    ),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("verify")
    (base / "src").mkdir()
    (base / "src" / "net.py").write_text(MODEL)
    run = CliRunner().invoke(main, ["build", "--no-cache", str(base / "src"), "-o", str(base / "out")])
    assert run.exit_code == 0, run.output
    return base / "out"


def _verify(out: Path, tmp_path: Path, *options: str) -> tuple[int, dict]:
    """`transpile verify OUT --format json` in a process of its own (a tree's runtime is imported once per
    process), with a C++ cache of its own: an edited kernel file is built anew."""
    env = dict(os.environ, TRANSPILE_CACHE_DIR=str(tmp_path / "cache"), TRANSPILE_TAPES="0")
    command = [sys.executable, "-m", "transpiler", "verify", str(out), "--cases", "8", "--format", "json", *options]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def _copy(out: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(out, to, symlinks=True)
    return to


def test_the_tree_as_built_verifies_clean(built, tmp_path):
    code, report = _verify(built, tmp_path)
    (kernel,) = report["kernels"]
    assert code == 0 and kernel["outcome"] in ("equal", "within tolerance"), kernel
    assert kernel["kernel"] == "fused_sigmoid_layer_norm" and kernel["source"] == "src/net.py:11-12"
    assert kernel["ran"] == 8 and report["counts"]["different"] == 0


@pytest.mark.parametrize("plant", PLANTS)
def test_a_planted_miscompile_is_caught(built, tmp_path, plant):
    out = _copy(built, tmp_path / "out")
    name, old, new, says = PLANTS[plant]
    path = out / name
    text = path.read_text()
    assert old in text, f"the plant's anchor is not in {name}"
    path.write_text(text.replace(old, new))
    code, report = _verify(out, tmp_path)
    (kernel,) = report["kernels"]
    assert code == 1 and kernel["outcome"] == "different", kernel
    assert any(words in kernel["detail"] for words in ((says,) if isinstance(says, str) else says)), kernel
    # The case is shrunk and said in words: each input's dtype and shape, and the scalars.
    assert re.search(r"x: (float32|bfloat16|float16) \(", kernel["case"]) and "ln_eps=" in kernel["case"]


def test_a_kernel_file_whose_globals_grow_while_its_kernels_run_is_verified(built, tmp_path):
    """Running a kernel may add to its file's globals (an activation table's first lookup, wav2vec2's): verify
    walked the file's globals while it ran them ("dictionary changed size during iteration")."""
    out = _copy(built, tmp_path / "out")
    kernels = out / "_net_kernels.py"
    anchor = '    """src/net.py:11-12 in eager PyTorch."""\n'
    text = kernels.read_text()
    assert anchor in text
    kernels.write_text(text.replace(anchor, anchor + '    globals()[f"_call_{len(globals())}"] = True\n'))
    code, report = _verify(out, tmp_path)
    (kernel,) = report["kernels"]
    assert code == 0 and kernel["outcome"] in ("equal", "within tolerance") and kernel["ran"] == 8, kernel


def test_not_a_tree_is_a_usage_error(tmp_path):
    run = CliRunner().invoke(main, ["verify", str(tmp_path)])
    assert run.exit_code == 2 and "has no readable build manifest" in run.output


def test_the_text_report_counts_the_outcomes(built, tmp_path):
    env = dict(os.environ, TRANSPILE_CACHE_DIR=str(tmp_path / "cache"))
    command = [sys.executable, "-m", "transpiler", "verify", str(built), "--cases", "4", "--no-gradients"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(
        r"src/net\.py:11-12: fused_sigmoid_layer_norm: (equal|within tolerance) \(4 of \d+ cases computed\)", lines[0]
    )
    assert re.fullmatch(r"1 kernels: \d equal, \d within tolerance, 0 different, 0 not exercised", lines[-1])


def test_nan_and_infinities_only_when_asked_never_in_parameters_nor_before_an_integer_cast():
    """`--nonfinite` draws them into a fifth of the cases, in the inputs that are not `self.*`; a region casting to
    an integer dtype gets none (the conversion is undefined in C++)."""
    import random

    from transpiler.pipeline import verifying

    region = {
        "inputs": [
            {"name": "x", "source": "x", "is_tensor": True},
            {"name": "w", "source": "self.w", "is_tensor": True},
        ],
        "nodes": [{"op": "mul", "operands": ["x", "w"], "constants": [], "out": "t0", "line": 1}],
        "conditions": [],
    }
    inputs = verifying._inputs_of(region)
    drawn = [verifying._draw(inputs, random.Random(n), nonfinite=True).special for n in range(200)]
    assert 20 < sum(s == (True, False) for s in drawn) < 80 and all(s in {(True, False), (False, False)} for s in drawn)
    assert not any(any(verifying._draw(inputs, random.Random(n), nonfinite=False).special) for n in range(200))
    region["nodes"].append({"op": "to", "operands": ["t0", "int64"], "constants": [1], "out": "t1", "line": 1})
    inputs = verifying._inputs_of(region)
    assert not any(any(verifying._draw(inputs, random.Random(n), nonfinite=True).special) for n in range(200))


# Runs the transpiled Net on the model's own inputs (argv[2]'s shapes) with its calls captured.
CAPTURE = """\
import json, sys
import torch

sys.path.insert(0, sys.argv[1])
import net

torch.manual_seed(0)
with torch.no_grad():
    for x_shape, y_shape in json.loads(sys.argv[2]):
        net.Net().eval()(torch.randn(*x_shape), torch.randn(*y_shape))
"""


def _capture(out: Path, tmp_path: Path, shapes) -> Path:
    calls = tmp_path / "calls"
    script = tmp_path / "capture.py"
    script.write_text(CAPTURE)
    env = dict(os.environ, TRANSPILE_CACHE_DIR=str(tmp_path / "cache"), TRANSPILE_CAPTURE_CALLS=str(calls))
    done = subprocess.run(
        [sys.executable, str(script), str(out), json.dumps(shapes)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return calls


def test_calls_a_run_captured_are_cases_and_catch_what_its_shapes_alone_show(built, tmp_path):
    """A miscompile of one shape only, the model's own (3, 7, 8): drawn cases miss it, the captured call does not."""
    calls = _capture(built, tmp_path, [[[3, 7, 8], [3, 7, 8]], [[3, 7, 8], [8]], [[3, 7, 8], [3, 7, 8]]])
    assert len(list(calls.glob("_net_kernels.fused_sigmoid_layer_norm.*.pt"))) == 2  # one a signature
    code, report = _verify(built, tmp_path, "--calls", str(calls))
    (kernel,) = report["kernels"]
    assert code == 0 and kernel["captured"] == 2 and kernel["cases"] >= 10 and kernel["ran"] == 10, kernel
    out = _copy(built, tmp_path / "out")
    runtime = out / "_transpile_runtime/__init__.py"
    plant = LAUNCH_END.replace(
        "        return outputs",
        "        if tuple(tensors[0].shape) == (3, 7, 8):\n"
        "            outputs = tuple(o * 1.01 for o in outputs)\n        return outputs",
    )
    runtime.write_text(runtime.read_text().replace(LAUNCH_END, plant))
    assert _verify(out, tmp_path)[0] == 0  # the drawn cases alone
    code, report = _verify(out, tmp_path, "--calls", str(calls))
    (kernel,) = report["kernels"]
    assert code == 1 and kernel["outcome"] == "different" and "wrong value" in kernel["detail"], kernel
    assert re.fullmatch(r"the captured call _net_kernels\.fused_sigmoid_layer_norm\.\d+-1\.pt", kernel["case"])


def test_a_capture_that_cannot_be_read_is_named(built, tmp_path):
    (tmp_path / "calls").mkdir()
    (tmp_path / "calls" / "broken.pt").write_bytes(b"not a capture")
    run = CliRunner().invoke(main, ["verify", str(built), "--calls", str(tmp_path / "calls")])
    assert run.exit_code == 2 and "broken.pt: not a captured call" in run.output
