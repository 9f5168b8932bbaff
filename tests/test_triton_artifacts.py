"""Triton kernels built ahead of time (`transpile precompile --targets sm_90 --signatures FILE`,
transpiler/pipeline/triton_binaries.py) and found by the runtime (emit/runtime/triton_artifacts.py).

Signatures are recorded on this CPU under Triton's interpreter and compiled for CUDA capabilities here, with no GPU;
the runtime's lookup (the specialisation its own binder computes, the manifest's hashes) runs with the device's
capability stood in. Loading and launching a binary needs a GPU: the last test runs a precompiled tree there with no
compiler and an empty Triton cache, and is skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from transpiler.cli.main import main

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.test_precompile import built_net, run_net  # noqa: E402  (the same Net: a pointwise product and a row mean)

# For each description in argv[2] (JSON lines), what the tree's runtime finds for it on a GPU of capability
# argv[3] (90: sm_90): the binary's path (loading it stood in), or why none serves.
LOOKUP = """\
import json, sys
import torch

sys.path.insert(0, sys.argv[1])
from _transpile_runtime import _load_file, triton_artifacts

torch.cuda.get_device_capability = lambda device=None: divmod(int(sys.argv[3]), 10)
if len(sys.argv) < 5:
    triton_artifacts._load = lambda found, variant, device: found["path"]
found = []
for line in open(sys.argv[2]):
    description = json.loads(line)
    kernel = getattr(_load_file(triton_artifacts.ROOT / description["file"]), description["kernel"])
    found.append(triton_artifacts._find(kernel, description, torch.device("cuda", 0)))
print(json.dumps(found))
"""


@pytest.fixture
def tree(tmp_path):
    """A transpiled tree (its source beside it) and the signatures of two shapes, recorded under the interpreter."""
    out = built_net(tmp_path)
    recorded = _run(
        out,
        [[4, 16], [3, 5, 16]],
        TRITON_INTERPRET="1",
        TRANSPILE_BACKEND="triton",
        TRANSPILE_RECORD_SIGNATURES=str(tmp_path / "signatures.jsonl"),
    )
    assert recorded["counts"].get("triton", 0) == 2 and not any(p.startswith("fallback") for p in recorded["counts"])
    return out


def _run(out: Path, shapes, device: str = "cpu", **variables: str) -> dict:
    env = dict(_compiling(), TRANSPILE_CACHE_DIR=str(out.parent / "cache"), TRANSPILE_TAPES="0", **variables)
    return run_net(out, shapes, device, env)


def _lookup(out: Path, signatures: Path, capability: int, *, load: bool = False) -> list:
    script = out.parent / "lookup.py"
    script.write_text(LOOKUP)
    command = [sys.executable, str(script), str(out), str(signatures), str(capability), *(["load"] if load else [])]
    done = subprocess.run(command, capture_output=True, text=True, env=_compiling(), timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _compiling() -> dict:
    """The environment without the interpreter the test session may run Triton under: kernels are JIT functions."""
    return {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}


def _precompile(out: Path, targets: str, *signatures: Path) -> tuple[int, str]:
    arguments = ["precompile", str(out), "--targets", targets, "-j", "2"]
    for path in signatures:
        arguments += ["--signatures", str(path)]
    run = CliRunner().invoke(main, arguments)
    return run.exit_code, run.output


def _manifest(out: Path) -> dict:
    return json.loads((out / "transpile-artifacts.json").read_text())


def test_recorded_signatures_are_compiled_and_the_runtime_finds_each(tree):
    signatures = tree.parent / "signatures.jsonl"
    described = [json.loads(line) for line in signatures.read_text().splitlines()]
    assert {d["file"] for d in described} == {"_net_triton.py"} and len(described) >= 2
    code, output = _precompile(tree, "sm_90", signatures)
    assert code == 0, output
    manifest = _manifest(tree)
    entry = manifest["triton"]["_net_triton.py"]
    binaries = entry["binaries"]
    assert f"Compiled {len(binaries)} Triton binaries ahead of time, kept 0 up to date." in output
    assert manifest["triton_version"] and len(binaries) >= 2 and len(entry["signatures"]) == len(described)
    for key, binary in binaries.items():
        assert binary["target"] == "sm_90" and binary["path"].endswith(f"-{key}.cubin")
        assert (tree / binary["path"]).read_bytes()[:4] == b"\x7fELF"  # a cubin
        assert binary["parameters"][0].startswith("*") and not binary["scratch"]
    # The runtime's own specialisation of each recorded launch names a binary of the manifest.
    found = _lookup(tree, signatures, 90)
    assert sorted(set(found)) == sorted(b["path"] for b in binaries.values())
    # Another capability has none; nor has a launch whose integers specialise otherwise (17 rows: not a multiple of 16).
    assert all("no sm_80 binary of" in reason for reason in _lookup(tree, signatures, 80))
    changed = dict(
        described[0], arguments=[a if "int" not in a else {"int": a["int"] + 1} for a in described[0]["arguments"]]
    )
    other = tree.parent / "other.jsonl"
    other.write_text(json.dumps(changed) + "\n")
    assert "for this call signature" in _lookup(tree, other, 90)[0]


def test_stale_damaged_or_foreign_binaries_are_not_used(tree):
    signatures = tree.parent / "signatures.jsonl"
    assert _precompile(tree, "sm_90", signatures)[0] == 0
    manifest = _manifest(tree)
    first = next(iter(manifest["triton"]["_net_triton.py"]["binaries"].values()))
    (tree / first["path"]).write_bytes(b"\x7fELF not a cubin")
    reasons = _lookup(tree, signatures, 90, load=True)
    assert f"the Triton binary {first['path']} does not match its recorded SHA-256" in reasons
    (tree / "transpile-artifacts.json").write_text(json.dumps(dict(manifest, triton_version="0.0")))
    assert all("built by Triton 0.0" in r for r in _lookup(tree, signatures, 90))
    (tree / "transpile-artifacts.json").write_text(json.dumps(manifest))
    kernels = tree / "_net_triton.py"
    kernels.write_text(kernels.read_text() + "\n")
    assert all(
        "_net_triton.py changed since its Triton binaries were built" in r for r in _lookup(tree, signatures, 90)
    )
    # Signatures kept in a manifest that came from elsewhere go through the same checks: one naming a file outside
    # the tree is dropped, never imported.
    entry = manifest["triton"]["_net_triton.py"]
    entry["signatures"] = [dict(d, file="../src/net.py") for d in entry["signatures"]]
    (tree / "transpile-artifacts.json").write_text(json.dumps(manifest))
    code, output = _precompile(tree, "sm_90")
    assert code == 2 and "TRANSPILE_RECORD_SIGNATURES=FILE" in output


def test_a_second_run_compiles_nothing_and_a_target_left_out_is_removed(tree):
    signatures = tree.parent / "signatures.jsonl"
    assert _precompile(tree, "sm_90", signatures)[0] == 0
    binaries = sorted(tree.glob("_net_triton.sm_90/*.cubin"))
    times = [p.stat().st_mtime_ns for p in binaries]
    code, output = _precompile(tree, "sm_90")  # the signatures come from the manifest now
    assert code == 0 and f"Compiled 0 Triton binaries ahead of time, kept {len(binaries)} up to date." in output
    assert [p.stat().st_mtime_ns for p in binaries] == times
    code, output = _precompile(tree, "sm_80")
    assert code == 0 and f"Removed {len(binaries)} artifacts no longer asked for." in output
    assert not (tree / "_net_triton.sm_90").exists() and len(list(tree.glob("_net_triton.sm_80/*.cubin"))) == len(
        binaries
    )


def test_missing_or_bad_signatures_are_errors_that_say_where(tree):
    code, output = _precompile(tree, "sm_90")
    assert code == 2 and "TRANSPILE_RECORD_SIGNATURES=FILE" in output
    bad = tree.parent / "bad.jsonl"
    first = (tree.parent / "signatures.jsonl").read_text().splitlines()[0]
    bad.write_text(first + "\n{not json\n")
    code, output = _precompile(tree, "sm_90", bad)
    assert code == 2 and f"{bad}:2: not a recorded signature" in output
    for field, value in (("file", "../net.py"), ("file", "/etc/passwd.py"), ("kernel", "../../x")):
        bad.write_text(json.dumps(dict(json.loads(first), **{field: value})) + "\n")
        code, output = _precompile(tree, "sm_90", bad)
        assert code == 2 and f"{bad}:1: not a recorded signature" in output
        assert ("inside the tree" if field == "file" else "is not a name") in output
    gone = tree.parent / "gone.jsonl"
    gone.write_text(json.dumps(dict(json.loads(first), kernel="fused_gone_kernel")) + "\n")
    code, output = _precompile(tree, "sm_90", gone)
    assert code == 1 and "fused_gone_kernel: the sm_* build failed" in output and "no such kernel" in output


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA GPU")
def test_a_precompiled_tree_runs_its_kernels_on_the_gpu_with_no_compiler(tree):
    major, minor = torch.cuda.get_device_capability()
    assert _precompile(tree, f"sm_{major}{minor}", tree.parent / "signatures.jsonl")[0] == 0
    cache = tree.parent / "triton-cache"
    cache.mkdir()
    none = str(tree.parent / "no-compiler")
    ran = _run(
        tree,
        [[4, 16], [3, 5, 16]],
        "cuda",
        TRITON_CACHE_DIR=str(cache),
        CC=none,
        CXX=none,
        TRITON_PTXAS_PATH=none,
        TRANSPILE_COMPILE="sync",
    )
    assert ran["counts"].get("triton", 0) == 2 and not any(p.startswith("fallback") for p in ran["counts"])
    assert not list(cache.rglob("*"))  # Triton compiled nothing: no kernel, no launcher, no driver module
