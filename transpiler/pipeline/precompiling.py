"""`transpile precompile OUT --targets ...`: an output tree's C++ kernel files built ahead of time, so that the
first call of its kernels loads a library instead of compiling one (7-70 s for a model family on two cores).

Each kernel file (`_<module>_kernels.cpp`, `_<module>_backward.cpp`, as the build's manifest lists them) is built
once per target, an x86-64 level of the psABI, into `<file stem>.<target>.so` beside it, with the tree's own
runtime header. `OUT/transpile-artifacts.json` records, per file, the SHA-256 of the source and of each library,
the compiler and the flags; the runtime (emit/runtime/artifacts.py) loads the highest level the CPU runs, after
checking those hashes, and builds the file itself (saying why) where none fits. A library whose source, header,
compiler and flags are those recorded, and whose bytes still match, is kept as it is: a second run builds nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from emit.host.module import RUNTIME
from transpiler.source.writing import WriteError, replacing, write_atomic

# emit/runtime/artifacts.py `MANIFEST` (here ARTIFACTS) and `VERSION`, which the runtime reads: the runtime imports
# torch, which a build of the source alone (`--no-kernels`) and `artifact_files` do without (tests/test_precompile.py
# checks they agree).
ARTIFACTS = "transpile-artifacts.json"
VERSION = 1
# emit/runtime/cpp_support.py `CPU_LEVELS`, lowest first (checked like ARTIFACTS).
TARGETS = ("x86-64-v2", "x86-64-v3", "x86-64-v4")
_KERNEL_FILES = ("_kernels.cpp", "_backward.cpp")

if TYPE_CHECKING:
    from emit.runtime.cpp_support import Compiler


class PrecompileError(ValueError):
    """The tree or the targets cannot be precompiled: the message says why."""


@dataclass
class Precompiled:
    manifest: Path
    built: list[tuple[str, str]] = field(default_factory=list)  # (kernel file, target), built by this run
    kept: list[tuple[str, str]] = field(default_factory=list)  # up to date already
    compiled: list[str] = field(default_factory=list)  # Triton binaries compiled by this run
    reused: list[str] = field(default_factory=list)  # up to date already
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (kernel file or kernel, target, message)
    removed: list[Path] = field(default_factory=list)  # artifacts of files or targets no longer asked for
    seconds: float = 0.0


def parse_targets(text: str) -> tuple[str, ...]:
    """`x86-64-v3,sm_90` as targets: the CPU levels in TARGETS' order, then the CUDA capabilities; PrecompileError
    naming the valid ones."""
    from transpiler.pipeline.triton_binaries import CUDA_TARGET

    asked = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in asked if t not in TARGETS and not CUDA_TARGET.fullmatch(t)]
    if unknown or not asked:
        raise PrecompileError(
            f"unknown target {', '.join(unknown) or '(none)'}: the targets are {', '.join(TARGETS)}"
            " and CUDA capabilities such as sm_80, sm_90"
        )
    return (*(t for t in TARGETS if t in asked), *sorted({t for t in asked if t not in TARGETS}))


def kernel_files(out: Path) -> list[str]:
    """The C++ kernel files the build wrote into `out`, relative to it (from its manifest; NotBuilt without one)."""
    from transpiler.pipeline.build import built_files

    return sorted(rel for rel in built_files(out) if rel.endswith(_KERNEL_FILES) and Path(rel).name.startswith("_"))


def library_path(source: str, target: str) -> str:
    return str(Path(source).with_suffix(f".{target}.so").as_posix())


def artifact_files(root: Path) -> set[Path]:
    """The manifest of artifacts under `root` and the libraries it lists (what a build of an output tree used as
    input must not copy)."""
    return {root / ARTIFACTS, *_listed(root, _previous(root))}


def _listed(root: Path, manifest: dict) -> set[Path]:
    """The libraries a manifest of artifacts lists."""
    try:
        libraries = {root / t["path"] for e in manifest.get("libraries", {}).values() for t in e["targets"].values()}
        binaries = {root / b["path"] for e in manifest.get("triton", {}).values() for b in e["binaries"].values()}
    except (KeyError, TypeError, AttributeError):
        return set()
    return libraries | binaries


def precompile(out: Path, targets: Sequence[str], jobs: int = 1, signatures: Sequence[Path] = ()) -> Precompiled:
    """Build the output tree `out`'s C++ kernel files for each CPU level of `targets`, and its Triton kernels for
    each CUDA capability, from the recorded `signatures` and those of the last run; see the module's docstring.
    Artifacts of targets not asked for are removed."""
    started = time.perf_counter()
    result = Precompiled(out / ARTIFACTS)
    previous = _previous(out)
    earlier = _listed(out, previous)
    manifest: dict = {"tool": "transpile", "version": VERSION}
    levels = [t for t in targets if t in TARGETS]
    capabilities = [t for t in targets if t not in TARGETS]
    if levels:
        manifest.update(_libraries(out, levels, previous, jobs, result))
    if capabilities:
        manifest.update(_binaries(out, capabilities, signatures, previous, jobs, result))
    write_atomic(result.manifest, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    for path in sorted(earlier - _listed(out, manifest)):
        if path.is_file() and not path.is_symlink() and path.resolve().is_relative_to(out.resolve()):
            path.unlink()
            result.removed.append(path)
            if path.parent != out and not any(path.parent.iterdir()):  # a target's folder of Triton binaries
                path.parent.rmdir()
    result.seconds = time.perf_counter() - started
    return result


def _libraries(out: Path, levels: Sequence[str], previous: dict, jobs: int, result: Precompiled) -> dict:
    """The C++ part of the manifest, building what is not up to date."""
    from emit.runtime.artifacts import matches, sha256
    from emit.runtime.cpp_support import find_compiler, flags

    compiler = find_compiler()
    if compiler is None:
        raise PrecompileError("no C++ compiler (set CXX, or install g++ or clang++)")
    sources = kernel_files(out)
    header = out / RUNTIME / "transpile_runtime.h"
    if not header.is_file():
        raise PrecompileError(f"{out} has no runtime header ({header.relative_to(out)}): build it first")
    header_sha = sha256(header)
    libraries: dict[str, dict] = {s: {"source_sha256": sha256(out / s), "targets": {}} for s in sources}
    work = []
    for source in sources:
        for target in levels:
            record = {
                "path": library_path(source, target),
                "compiler": compiler.version,
                "flags": list(flags(compiler, target)),
            }
            old = previous.get("libraries", {}).get(source, {})
            kept = old.get("targets", {}).get(target, {})
            if (
                previous.get("header_sha256") == header_sha
                and old.get("source_sha256") == libraries[source]["source_sha256"]
                and {k: kept.get(k) for k in record} == record
                and matches(out / record["path"], kept.get("sha256"))
            ):
                libraries[source]["targets"][target] = kept
                result.kept.append((source, target))
            else:
                work.append((source, target, record))

    def run(item: tuple[str, str, dict]) -> tuple[str, str, dict, str | None]:
        source, target, record = item
        return source, target, record, _build(out, source, record, compiler, header.parent)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:  # each build is a compiler process
        for source, target, record, error in pool.map(run, work):
            if error is None:
                record["sha256"] = sha256(out / record["path"])
                libraries[source]["targets"][target] = record
                result.built.append((source, target))
            else:
                result.failed.append((source, target, error))
    return {"header_sha256": header_sha, "libraries": libraries}


def _binaries(
    out: Path, capabilities: Sequence[str], signatures: Sequence[Path], previous: dict, jobs: int, result: Precompiled
) -> dict:
    """The Triton part of the manifest: the recorded signatures, with those the last run kept, compiled for each
    capability (triton_binaries.py)."""
    from importlib.metadata import PackageNotFoundError, version

    from emit.runtime.artifacts import sha256
    from transpiler.pipeline.build import built_files
    from transpiler.pipeline.triton_binaries import SignatureError, compile_binaries, read_signatures

    try:
        triton_version = version("triton")
    except PackageNotFoundError:
        raise PrecompileError("CUDA targets need Triton installed (pip install triton)") from None
    built_files(out)  # NotBuilt: a tree the build did not write
    support = out / RUNTIME / "triton_support.py"
    if not support.is_file():
        raise PrecompileError(f"{out} has no Triton runtime ({support.relative_to(out)}): build it first")
    old = previous.get("triton", {}) if isinstance(previous.get("triton"), dict) else {}
    kept = [d for entry in old.values() if isinstance(entry, dict) for d in entry.get("signatures", [])]
    try:
        recorded = read_signatures(signatures, kept)
    except SignatureError as error:
        raise PrecompileError(str(error)) from error
    if not recorded and not signatures:
        raise PrecompileError(
            "CUDA targets need the call signatures of the kernels, which runs record: run the model with"
            " TRANSPILE_RECORD_SIGNATURES=FILE, then pass --signatures FILE"
        )
    support_sha = sha256(support)
    if previous.get("triton_version") != triton_version or previous.get("triton_support_sha256") != support_sha:
        old = {}  # nothing the last run built is up to date
    entries, written, failures = compile_binaries(out, recorded, capabilities, old, jobs)
    earlier = {
        b.get("path") for entry in old.values() if isinstance(entry, dict) for b in entry.get("binaries", {}).values()
    }
    for path in written:
        (result.reused if path in earlier else result.compiled).append(path)
    result.failed += failures
    return {"triton": entries, "triton_version": triton_version, "triton_support_sha256": support_sha}


def _previous(out: Path) -> dict:
    try:
        data = json.loads((out / ARTIFACTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("version") == VERSION else {}


def _build(out: Path, source: str, record: dict, compiler: "Compiler", include: Path) -> str | None:
    """Compile `source` into its library, written atomically; None, or the compiler's message."""
    from emit.runtime.cpp_support import CppBuildError, compile_library

    try:
        with replacing(out / record["path"]) as temporary:  # a killed run's temporary is removed by the next build
            compile_library((out / source).read_text(), compiler, record["flags"], temporary, include)
    except (CppBuildError, WriteError) as error:
        return str(error)
    return None


def render(result: Precompiled, out: Path) -> str:
    """The summary of a run, as the command prints it."""
    lines = []
    if result.built or result.kept:
        lines.append(f"Built {len(result.built)} C++ libraries ahead of time, kept {len(result.kept)} up to date.")
    if result.compiled or result.reused:
        lines.append(
            f"Compiled {len(result.compiled)} Triton binaries ahead of time, kept {len(result.reused)} up to date."
        )
    for what, target, error in result.failed:
        lines.append(f"{out / what}: the {target} build failed; the runtime will build it on first use:\n{error}")
    if result.removed:
        lines.append(f"Removed {len(result.removed)} artifacts no longer asked for.")
    if not (result.built or result.kept or result.compiled or result.reused or result.failed):
        lines.append("No kernel in the tree to build for these targets.")
    lines.append(f"In {result.seconds:.1f} s.")
    lines.append(f"Manifest: {result.manifest}")
    return "\n".join(lines) + "\n"
