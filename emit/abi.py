"""The kernel ABI (emit/runtime/abi.py) for the generator, as `from emit.abi import abi`.

Loaded by its path: importing it as `emit.runtime.abi` would first import the runtime package, and with it
torch, which rendering kernels does not need. Registered under that name, so that the runtime, imported
later, finds this same module.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "emit.runtime.abi"


def _load():
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).parent / "runtime" / "abi.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module  # before running it: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


abi = _load()
