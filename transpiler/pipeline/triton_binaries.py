"""Triton kernels of an output tree compiled ahead of time for CUDA capabilities (`transpile precompile --targets
sm_90 --signatures FILE`), on any machine: Triton compiles for a named GPU without one.

What to compile comes from call signatures recorded by runs (emit/runtime/triton_artifacts.py, `describe`): a
Triton kernel is compiled per specialisation of its launch (dtypes, alignment, integers that are 1 or multiples of
16, block sizes), which the source alone does not decide. The signatures a tree was precompiled for are kept in
its manifest, so that a later run (after a rebuild, or for another target) needs no file. Each binary is written
to `<kernel file stem>.<target>/<kernel>-<key>.cubin` beside the kernel file.

The compiles run in worker processes that import the tree's own runtime and kernel files, so the specialisation
computed here is the one the tree's runtime computes; Triton's front end holds the GIL, so threads would not help.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import multiprocessing
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

CUDA_TARGET = re.compile(r"sm_(\d{2,3})")


class SignatureError(ValueError):
    """A file of recorded signatures cannot be read: the message names the file and line."""


def capability(target: str) -> int:
    """`sm_90` as 90."""
    return int(CUDA_TARGET.fullmatch(target).group(1))


def read_signatures(paths: Iterable[Path], kept: Iterable = ()) -> list[dict]:
    """The descriptions of launches recorded in `paths` (JSON lines), then those `kept` in the manifest by an earlier
    run (the manifest is a file of the tree, which may come from elsewhere: the invalid ones are dropped), each
    once, in the order first seen."""
    seen: dict[str, dict] = {}
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise SignatureError(f"{path}: cannot be read ({getattr(error, 'strerror', None) or error})") from error
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                description = json.loads(line)
                check_signature(description)
            except (ValueError, KeyError, TypeError) as error:
                raise SignatureError(f"{path}:{number}: not a recorded signature ({error})") from error
            seen.setdefault(json.dumps(description, sort_keys=True), description)
    for description in kept:
        try:
            check_signature(description)
        except (ValueError, KeyError, TypeError):
            continue
        seen.setdefault(json.dumps(description, sort_keys=True), description)
    return list(seen.values())


def check_signature(description) -> None:
    """TypeError or ValueError where `description` is not a recorded signature of a kernel inside the tree."""
    if not isinstance(description, dict):
        raise TypeError("not an object")
    for field, kind in (("file", str), ("kernel", str), ("arguments", list), ("constexprs", dict), ("num_warps", int)):
        if not isinstance(description[field], kind):
            raise TypeError(f"{field} is not a {kind.__name__}")
    # Precompile imports the file and writes binaries named after the kernel: both stay inside the tree.
    file = Path(description["file"])
    if file.is_absolute() or ".." in file.parts or file.suffix != ".py":
        raise ValueError(f"file {description['file']!r} is not a Python file inside the tree")
    if not description["kernel"].isidentifier():
        raise ValueError(f"kernel {description['kernel']!r} is not a name")


def binary_path(file: str, target: str, kernel: str, key: str) -> str:
    return (Path(file).with_suffix(f".{target}") / f"{kernel}-{key}.cubin").as_posix()


def compile_binaries(
    out: Path, signatures: Sequence[dict], targets: Sequence[str], previous: dict, jobs: int
) -> tuple[dict, list[str], list[tuple[str, str, str]]]:
    """Compile every signature for every target: the manifest's per-file entries (sources' hashes, signatures,
    binaries), the binaries written or kept (paths), and the failures (what, target, why). `previous`: the manifest's
    "triton" section from the last run, whose binaries are kept where still up to date."""
    by_file: dict[str, list[dict]] = {}
    for description in signatures:
        by_file.setdefault(description["file"], []).append(description)
    work = [
        (str(out), file, descriptions, list(targets), previous.get(file, {})) for file, descriptions in by_file.items()
    ]
    entries, paths, failures = {}, [], []
    if not work:
        return entries, paths, failures
    # Spawned, not forked: a fresh interpreter imports Triton with the interpreter off (`TRITON_INTERPRET` would
    # make every kernel an interpreted function), the runtime's backend left alone, and none of this process's threads.
    context = multiprocessing.get_context("spawn")
    with _environment(TRITON_INTERPRET=None, TRANSPILE_BACKEND="eager"):
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(work))), mp_context=context) as pool:
            for file, entry, written, failed in pool.map(_compile_file, work):
                if entry is not None:
                    entries[file] = entry
                paths += written
                failures += failed
    return entries, paths, failures


@contextlib.contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """The process's environment with `values` set (None: unset), as spawned workers inherit it; restored after."""
    saved = {name: os.environ.get(name) for name in values}

    def apply(settings: dict) -> None:
        for name, value in settings.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    apply(values)
    try:
        yield
    finally:
        apply(saved)


def _compile_file(item) -> tuple[str, dict | None, list[str], list[tuple[str, str, str]]]:
    """In a worker: every signature of one kernel file for every target."""
    root, file, descriptions, targets, previous = item
    out = Path(root)
    if root not in sys.path:
        sys.path.insert(0, root)  # the tree's `_transpile_runtime`, as its modules import it
    from _transpile_runtime import _load_file, artifacts, triton_artifacts  # the tree's own runtime

    from emit.host.module import RUNTIME
    from transpiler.source.writing import write_atomic

    path = out / file
    if not path.is_file():
        return file, None, [], [(file, "sm_*", "the kernel file is not in the tree (recorded from another tree?)")]
    source_sha = artifacts.sha256(path)
    up_to_date = previous.get("source_sha256") == source_sha
    # The runtime's own kernels (channel_bias.py) import their package relatively: imported as its modules.
    runtime = Path(file).parts[0] == RUNTIME
    module = importlib.import_module(".".join(Path(file).with_suffix("").parts)) if runtime else _load_file(path)
    binaries, written, failed = {}, [], []
    for description in descriptions:
        kernel = getattr(module, description["kernel"], None)
        if kernel is None:
            failed.append(
                (
                    f"{file}: {description['kernel']}",
                    "sm_*",
                    "no such kernel in the file (recorded from an earlier build)",
                )
            )
            continue
        for target in targets:
            number = capability(target)
            try:
                variant = triton_artifacts.specialize(kernel, description, number)
            except Exception as error:  # arguments that no longer fit the kernel
                failed.append((f"{file}: {description['kernel']}", target, f"{type(error).__name__}: {error}"))
                continue
            key = triton_artifacts.key(description["kernel"], variant, number)
            if key in binaries:
                continue
            kept = previous.get("binaries", {}).get(key)
            if (
                up_to_date
                and isinstance(kept, dict)
                and artifacts.matches(out / kept.get("path", ""), kept.get("sha256"))
            ):
                binaries[key] = kept
                written.append(kept["path"])
                continue
            try:
                record, data = _compile(kernel, variant, number)
            except Exception as error:  # a compile error: the runtime compiles this launch itself
                failed.append((f"{file}: {description['kernel']}", target, f"{type(error).__name__}: {error}"))
                continue
            record.update(
                kernel=description["kernel"], target=target, path=binary_path(file, target, description["kernel"], key)
            )
            record["sha256"] = hashlib.sha256(data).hexdigest()
            write_atomic(out / record["path"], data)
            binaries[key] = record
            written.append(record["path"])
    entry = {"source_sha256": source_sha, "signatures": descriptions, "binaries": binaries}
    return file, entry, written, failed


def _compile(kernel, variant, number: int) -> tuple[dict, bytes]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(kernel, variant.signature, variant.constexprs, variant.attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", number, 32), options=variant.options)
    metadata = compiled.metadata
    record = {
        "name": metadata.name,
        "shared": metadata.shared,
        "num_warps": metadata.num_warps,
        "parameters": [kind for _, kind in variant.parameters()],
        # Scratch memory and clusters are set up by Triton's launcher only: the runtime compiles such a launch.
        "scratch": bool(metadata.global_scratch_size or metadata.profile_scratch_size or metadata.num_ctas != 1),
    }
    return record, compiled.asm["cubin"]
