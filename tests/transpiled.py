"""Shared by the tests that transpile a tree and import the result as a package."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from transpiler.cli.main import main


@contextlib.contextmanager
def importable(base: Path, builds: dict[Path, Path], packages: tuple[str, ...]) -> Iterator[Path]:
    """Transpile each source directory of `builds` into its output (under `base`), C++ builds cached
    in `base` (never the user's cache), with `base` on sys.path; afterwards `packages` are forgotten."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRANSPILE_CACHE_DIR", str(base / "cache"))
        for source, out in builds.items():
            run = CliRunner().invoke(main, ["build", "--no-cache", str(source), "-o", str(out)])
            assert run.exit_code in (0, 1), run.output  # 1: findings left, which the output keeps as they were
        sys.path.insert(0, str(base))
        try:
            yield base
        finally:
            sys.path.remove(str(base))
            for name in [n for n in sys.modules if n.split(".")[0] in packages]:
                del sys.modules[name]


@contextlib.contextmanager
def original_and_transpiled(base: Path, text: str, package: str, stem: str, original: str) -> Iterator[tuple]:
    """The module source `text` imported twice: as written (module `original`) and transpiled (`package.stem`),
    built under `base` (see `importable`)."""
    import importlib

    source = base / "src"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / f"{stem}.py").write_text(text)
    (base / f"{original}.py").write_text(text)
    with importable(base, {source: base / package}, (package, original)):
        yield importlib.import_module(original), importlib.import_module(f"{package}.{stem}")


def shapes_of(region):
    """The `Shapes` a kernel file gives the runtime's Kernel for `region` (emit.host.module.shape_program)."""
    from emit.host.module import shape_program
    from emit.runtime import Shapes, Step

    return eval(shape_program(region), {"Shapes": Shapes, "Step": Step})


def reference_of(region):
    """The eager reference a kernel file gives the runtime's Kernel for `region` (emit.host.module): one value a
    line, under its name, as the runtime reads each value's dtype from its locals."""
    import torch

    from emit.host.module import _reference

    namespace = {"torch": torch}
    exec(_reference(region, "test.py", []), namespace)
    return namespace[f"{region.name}_reference"]
