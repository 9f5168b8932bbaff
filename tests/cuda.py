"""The GPU half of the Triton tests: a test module's `check_on_cuda()`, with its kernels compiled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def check_compiled(module: str) -> None:
    """Run `module.check_on_cuda()` in a fresh process: Triton must be imported with the interpreter off."""
    environment = {**os.environ, "TRITON_INTERPRET": "0"}
    check = f"from {module} import check_on_cuda; check_on_cuda()"
    result = subprocess.run(
        [sys.executable, "-c", check], env=environment, cwd=Path(__file__).parents[1], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-4000:]
