"""A transpiled module's classes stand in for the original's (emit/host/twins.py, runtime twins.py): a sub-model
built through an Auto-style factory is the transpiled twin, and code that decides by a class's module name
(transformers' `is_custom_code`) gets the original's answer. A small hand-written package, not transformers:
only `pkg/models` is transpiled; the factory, the base class and the config stay outside the tree."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from tests.transpiled import importable

PACKAGE = {
    "twinpkg/__init__.py": "",
    "twinpkg/config.py": "class InnerConfig:\n    width = 4\n",
    "twinpkg/base.py": '''\
import torch


class Base(torch.nn.Module):
    @classmethod
    def is_custom_code(cls):
        """As transformers: a class outside this package is custom code, initialised differently."""
        return not cls.__module__.startswith("twinpkg.")
''',
    # An Auto-style factory: the config's class names the model class, found in the original package (imported
    # from the module under `auto/`, as qwen3_vl imports transformers' `models.auto.modeling_auto`).
    "twinpkg/auto/__init__.py": "",
    "twinpkg/auto/modeling_auto.py": """\
import importlib


class _Mapping:
    def __contains__(self, config_class):
        return config_class.__name__ == "InnerConfig"

    def __getitem__(self, config_class):
        return importlib.import_module("twinpkg.models.modeling").Inner


class AutoModel:
    _model_mapping = _Mapping()

    @classmethod
    def from_config(cls, config):
        if type(config) not in cls._model_mapping:
            raise ValueError(type(config))
        return cls._model_mapping[type(config)](config)
""",
    "twinpkg/models/__init__.py": "",
    "twinpkg/models/modeling.py": """\
import torch

from ..auto.modeling_auto import AutoModel
from ..base import Base


class Inner(Base):
    def __init__(self, config):
        super().__init__()
        scale = 3.0 if self.is_custom_code() else 1.0
        self.scale = torch.nn.Parameter(torch.full((config.width,), scale))

    def forward(self, x):
        y = torch.sigmoid(x * self.scale) * 2.0
        return y + x


class Outer(Base):
    def __init__(self, config):
        super().__init__()
        self.inner = AutoModel.from_config(config)

    def forward(self, x):
        return self.inner(x)
""",
}


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """(the original modeling module, its transpiled twin)."""
    base = tmp_path_factory.mktemp("twins")
    for name, text in PACKAGE.items():
        (base / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (base / "src" / name).write_text(text)
    sys.path.insert(0, str(base / "src"))
    try:
        with importable(base, {base / "src/twinpkg/models": base / "compiled/models"}, ("compiled", "twinpkg")):
            yield importlib.import_module("twinpkg.models.modeling"), importlib.import_module(
                "compiled.models.modeling"
            )
    finally:
        sys.path.remove(str(base / "src"))


def test_the_factory_builds_the_twin(modules):
    original, transpiled = modules
    from twinpkg.config import InnerConfig

    assert type(original.Outer(InnerConfig()).inner) is original.Inner  # the original factory is left as it is
    assert type(transpiled.Outer(InnerConfig()).inner) is transpiled.Inner


def test_classes_answer_by_the_original_module_name(modules):
    original, transpiled = modules
    from twinpkg.config import InnerConfig

    assert transpiled.Inner.is_custom_code() is original.Inner.is_custom_code() is False
    want, got = original.Outer(InnerConfig()), transpiled.Outer(InnerConfig())
    assert torch.equal(want.inner.scale, got.inner.scale)  # built alike
    x = torch.randn(3, 4)
    torch.testing.assert_close(got(x), want(x))


def test_a_subclass_elsewhere_answers_as_before(modules):
    _, transpiled = modules
    custom = type("Custom", (transpiled.Inner,), {"__module__": "user_code"})
    assert custom.is_custom_code() is True
    assert transpiled.Outer.is_custom_code() is False  # a class of the module inheriting the answer from Base
