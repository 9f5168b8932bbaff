"""C++ kernels built ahead of time (`transpile precompile`, transpiler/pipeline/precompiling.py) and loaded by the
runtime (emit/runtime/artifacts.py): a tree precompiled for the levels this CPU runs calls its C++ kernels with no
compiler and no cache; a changed, corrupt or foreign library is not loaded, and the runtime says why and builds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from transpiler.cli.main import main
from transpiler.pipeline import precompiling

torch = pytest.importorskip("torch")

from emit.runtime import artifacts, cpp_support  # noqa: E402  (imports torch)

RUNS = [level for level, needs in cpp_support.CPU_LEVELS.items() if needs <= cpp_support.cpu_features()]
needs_levels = pytest.mark.skipif(
    not RUNS or shutil.which("g++") is None, reason="an x86-64 CPU of level 2 or more and g++"
)

MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        h = self.proj(x)
        h = torch.sigmoid(h) * h + 1.0
        return h * x.mean(-1, keepdim=True)
"""

# Runs the transpiled Net against the original on the same weights, on inputs of the shapes in argv[3] (JSON) on the
# device argv[4]; prints the kernels' calls by path, the library each C++ kernel file loaded, and the runtime's
# warnings, as JSON (`run_net`; tests/test_triton_artifacts.py runs it too).
RUN = """\
import importlib.util, json, sys, warnings
import torch

sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("original", sys.argv[2])
original = importlib.util.module_from_spec(spec)
spec.loader.exec_module(original)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import net
    import _transpile_runtime as runtime
    from _transpile_runtime.cpp_support import CppLibrary

    torch.manual_seed(0)
    device = sys.argv[4]
    a, b = original.Net().eval().to(device), net.Net().eval().to(device)
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        for shape in json.loads(sys.argv[3]):
            x = torch.randn(*shape, device=device)
            torch.testing.assert_close(b(x), a(x), rtol=1e-5, atol=1e-5)
counts = {}
for kernel in runtime.KERNELS:
    for path, n in kernel.counts.items():
        counts[path] = counts.get(path, 0) + n
print(json.dumps({
    "counts": counts,
    "loaded": {p.name: (l if isinstance(l, str) else l.path.name) for p, l in CppLibrary._loaded.items()},
    "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
}))
"""


def run_net(out: Path, shapes, device: str, env: dict) -> dict:
    """`RUN` on the tree `out` (its source beside it, in `src/`) in a process of its own, with the environment
    `env`: the printed JSON."""
    script = out.parent / "run.py"
    script.write_text(RUN)
    command = [sys.executable, str(script), str(out), str(out.parent / "src" / "net.py"), json.dumps(shapes), device]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def built_net(tmp_path: Path) -> Path:
    """`MODEL` transpiled into tmp_path/out, its source in tmp_path/src."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "net.py").write_text(MODEL)
    out = tmp_path / "out"
    run = CliRunner().invoke(main, ["build", "--no-cache", str(tmp_path / "src"), "-o", str(out)])
    assert run.exit_code == 0, run.output
    return out


@pytest.fixture
def tree(tmp_path):
    """A transpiled tree (its source beside it), with the environment of a run: an empty kernel cache."""
    return built_net(tmp_path)


def _run(out: Path, tmp_path: Path, compiler: str | None, **variables: str) -> dict:
    env = dict(os.environ, TRANSPILE_CACHE_DIR=str(tmp_path / "cache"), TRANSPILE_TAPES="0", **variables)
    env["CXX"] = compiler or str(tmp_path / "no-compiler")
    result = run_net(out, [[4, 16]], "cpu", env)
    return {**result, "cpp": result["counts"].get("cpp", 0)}


def _precompile(out: Path, *targets: str) -> tuple[int, str]:
    run = CliRunner().invoke(main, ["precompile", str(out), "--targets", ",".join(targets), "-j", "2"])
    return run.exit_code, run.output


def test_the_constants_the_build_and_the_runtime_share_agree():
    assert precompiling.ARTIFACTS == artifacts.MANIFEST and precompiling.VERSION == artifacts.VERSION
    assert precompiling.TARGETS == tuple(cpp_support.CPU_LEVELS)


@needs_levels
def test_a_precompiled_tree_runs_its_cpp_kernels_with_no_compiler_and_no_cache(tree, tmp_path):
    code, output = _precompile(tree, *RUNS)
    assert code == 0, output
    kernel_files = ["_net_backward.cpp", "_net_kernels.cpp"]
    assert f"Built {len(RUNS) * len(kernel_files)} C++ libraries ahead of time, kept 0" in output
    manifest = json.loads((tree / artifacts.MANIFEST).read_text())
    assert sorted(manifest["libraries"]) == kernel_files
    for name, entry in manifest["libraries"].items():
        assert entry["source_sha256"] == artifacts.sha256(tree / name)
        for level, record in entry["targets"].items():
            assert record["sha256"] == artifacts.sha256(tree / record["path"])
            assert f"-march={level}" in record["flags"] and "-march=native" not in record["flags"]
    result = _run(tree, tmp_path, compiler=None)
    assert result["cpp"] >= 1 and result["warnings"] == []
    assert result["loaded"] == {"_net_kernels.cpp": f"_net_kernels.{RUNS[-1]}.so"}  # the highest level it runs
    assert not (tmp_path / "cache").exists()  # nothing was built
    # TRANSPILE_ARTIFACTS=0 ignores them: with no compiler either, the kernels take the original code.
    ignored = _run(tree, tmp_path, compiler=None, TRANSPILE_ARTIFACTS="0")
    assert ignored["cpp"] == 0 and ignored["loaded"] == {"_net_kernels.cpp": "no C++ compiler"}


@needs_levels
def test_a_second_run_builds_nothing_and_a_target_left_out_is_removed(tree):
    assert _precompile(tree, *RUNS)[0] == 0
    libraries = sorted(tree.glob("*.so"))
    times = [p.stat().st_mtime_ns for p in libraries]
    code, output = _precompile(tree, *RUNS)
    assert code == 0 and f"Built 0 C++ libraries ahead of time, kept {len(libraries)} up to date" in output
    assert [p.stat().st_mtime_ns for p in libraries] == times
    if len(RUNS) > 1:
        code, output = _precompile(tree, RUNS[0])
        assert code == 0 and f"Removed {len(libraries) - 2} artifacts no longer asked for." in output
        assert sorted(p.name for p in tree.glob("*.so")) == [
            f"_net_backward.{RUNS[0]}.so",
            f"_net_kernels.{RUNS[0]}.so",
        ]


@needs_levels
@pytest.mark.parametrize("change", ["library", "source"])
def test_a_changed_library_or_source_is_not_loaded_and_the_runtime_builds_it(tree, tmp_path, change):
    assert _precompile(tree, *RUNS)[0] == 0
    if change == "library":
        library = tree / f"_net_kernels.{RUNS[-1]}.so"
        data = bytearray(library.read_bytes())
        data[-1] ^= 0xFF
        library.write_bytes(bytes(data))
        why = f"its {RUNS[-1]} library does not match its recorded SHA-256"
    else:
        with (tree / "_net_kernels.cpp").open("a") as file:
            file.write("// edited\n")
        why = "_net_kernels.cpp changed since its library was built ahead of time"
    result = _run(tree, tmp_path, compiler=shutil.which("g++"))
    assert result["warnings"] == [f"_net_kernels.cpp: {why}: building it here"]
    assert result["cpp"] >= 1 and result["loaded"]["_net_kernels.cpp"].startswith("_net_kernels-")  # the cache's
    assert any((tmp_path / "cache").glob("_net_kernels-*.so"))


def test_the_library_for_the_highest_level_the_cpu_runs(tmp_path):
    """The choice and its refusals, on a hand-made tree and CPU features given as /proc/cpuinfo names them."""
    (tmp_path / "_transpile_runtime").mkdir()
    header = tmp_path / "_transpile_runtime" / "transpile_runtime.h"
    shutil.copy(cpp_support.HEADER, header)
    source = tmp_path / "_m_kernels.cpp"
    source.write_text("// kernels\n")
    targets = {}
    for level in ("x86-64-v3", "x86-64-v4"):
        (tmp_path / f"_m_kernels.{level}.so").write_bytes(level.encode())
        targets[level] = {
            "path": f"_m_kernels.{level}.so",
            "sha256": artifacts.sha256(tmp_path / f"_m_kernels.{level}.so"),
        }
    entry = {"source_sha256": artifacts.sha256(source), "targets": targets}
    manifest = {"tool": "transpile", "version": 1, "header_sha256": artifacts.sha256(header), "libraries": {}}
    manifest["libraries"]["_m_kernels.cpp"] = entry

    def found(features, root=tmp_path):
        (tmp_path / artifacts.MANIFEST).write_text(json.dumps(manifest))
        artifacts.read_manifest.cache_clear()
        return artifacts.precompiled(source, frozenset(features), root)

    v3, v4 = cpp_support.CPU_LEVELS["x86-64-v3"], cpp_support.CPU_LEVELS["x86-64-v4"]
    assert found(v4) == (tmp_path / "_m_kernels.x86-64-v4.so").resolve()
    assert found(v3 | {"avx512f"}) == (tmp_path / "_m_kernels.x86-64-v3.so").resolve()
    assert (
        found({"neon", "asimd"})
        == "its library was built ahead of time for x86-64-v3, x86-64-v4, which this CPU does not run"
    )
    targets["x86-64-v4"]["path"] = "../elsewhere.so"
    assert found(v4) == "its x86-64-v4 library is missing"
    del manifest["libraries"]["_m_kernels.cpp"]
    assert found(v4) == "no library was built ahead of time for _m_kernels.cpp"
    manifest["version"] = 2
    assert found(v4) == f"{artifacts.MANIFEST} is not a version 1 manifest of transpile"
    (tmp_path / artifacts.MANIFEST).unlink()
    artifacts.read_manifest.cache_clear()
    assert artifacts.precompiled(source, frozenset(v4), tmp_path) is None  # no artifacts: the usual build, silently


def test_bad_targets_and_trees_are_usage_errors(tmp_path):
    code, output = _precompile(tmp_path, "sm90")
    assert code == 2 and "unknown target sm90: the targets are x86-64-v2, x86-64-v3, x86-64-v4" in output
    assert "and CUDA capabilities such as sm_80, sm_90" in output
    for target in ("x86-64-v3", "sm_90"):
        code, output = _precompile(tmp_path, target)
        assert code == 2 and "has no readable build manifest" in output
    run = CliRunner().invoke(main, ["build", str(tmp_path), "-o", str(tmp_path / "o"), "--targets", "avx9"])
    assert run.exit_code == 2 and "unknown target avx9" in run.output and not (tmp_path / "o").exists()


@needs_levels
def test_a_file_that_fails_to_build_is_reported_and_the_others_are_built(tree):
    (tree / "_net_backward.cpp").write_text("this is not C++\n")
    code, output = _precompile(tree, RUNS[0])
    assert code == 1
    assert f"_net_backward.cpp: the {RUNS[0]} build failed; the runtime will build it on first use" in output
    manifest = json.loads((tree / artifacts.MANIFEST).read_text())
    assert list(manifest["libraries"]["_net_kernels.cpp"]["targets"]) == [RUNS[0]]
    assert manifest["libraries"]["_net_backward.cpp"]["targets"] == {}


@needs_levels
def test_build_with_targets_precompiles_and_an_output_used_as_input_does_not_copy_the_libraries(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "net.py").write_text(MODEL)
    first, second = tmp_path / "first", tmp_path / "second"
    run = CliRunner().invoke(
        main, ["build", "--no-cache", str(tmp_path / "src"), "-o", str(first), "--targets", RUNS[0]]
    )
    assert run.exit_code == 0, run.output
    assert (first / artifacts.MANIFEST).is_file() and (first / f"_net_kernels.{RUNS[0]}.so").is_file()
    run = CliRunner().invoke(main, ["build", "--no-cache", str(first), "-o", str(second)])
    assert run.exit_code == 0, run.output
    assert not (second / artifacts.MANIFEST).exists() and not list(second.glob("*.so"))
