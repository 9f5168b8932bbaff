"""Unit tests of the analysis front end through its public pieces.

`transpiler.lint.engine.analyze_source` (one file) + `transpiler.lint.engine.resolve` (the
project: module classes, call graph, selection) and `transpiler.analysis.project.Project`.
Sources are given as {module name: text}; a module named `pkg.__init__` is the
package `pkg` itself.
"""

from __future__ import annotations

import textwrap

import pytest

from transpiler.lint.engine import FileResult, analyze_source, resolve
from transpiler.analysis.project import Project


def analyze(files: dict[str, str]) -> list[FileResult]:
    results = []
    for name, text in files.items():
        is_package = name.endswith(".__init__")
        module = name.removesuffix(".__init__")
        path = name.replace(".", "/") + ".py"
        results.append(analyze_source(path, textwrap.dedent(text).encode(), module, is_package))
    return results


def lint(files: dict[str, str]) -> list[tuple[str, int, str]]:
    """(path, line, code) of every diagnostic, all rules selected."""
    return [(d.path, d.line, d.code) for d in resolve(analyze(files), lambda code: True)]


def codes(text: str) -> list[tuple[int, str]]:
    """(line, code) of the diagnostics of a single module `m`."""
    return [(line, code) for _, line, code in lint({"m": text})]


def project(files: dict[str, str]) -> tuple[Project, set[tuple[str, str]]]:
    summaries = [r.summary for r in analyze(files) if r.summary is not None]
    return Project.from_summaries(summaries), {root for s in summaries for root in s.compile_roots}


def compiled(files: dict[str, str]) -> set[str]:
    proj, roots = project(files)
    return set(proj.compiled_functions(roots))


def module_classes(files: dict[str, str]) -> set[str]:
    return project(files)[0].module_classes()


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing `needle` in the dedented text."""
    for number, line in enumerate(textwrap.dedent(text).splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in source")


# -- nn.Module classes through every import spelling -------------------------------------

SPELLINGS = [
    ("import torch.nn as nn", "nn.Module"),
    ("from torch import nn", "nn.Module"),
    ("from torch.nn import Module", "Module"),
    ("from torch.nn import Module as Base", "Base"),
    ("import torch", "torch.nn.Module"),
    ("import torch.nn", "torch.nn.Module"),
    ("from torch import nn", "nn.Sequential"),
    ("from torch import nn", "nn.ModuleList"),
    ("from torch.nn.modules.container import ModuleList", "ModuleList"),
    ("from transformers import PreTrainedModel", "PreTrainedModel"),
    ("from transformers.modeling_utils import PreTrainedModel", "PreTrainedModel"),
    ("import transformers", "transformers.PreTrainedModel"),
]


@pytest.mark.parametrize(("imports", "base"), SPELLINGS)
def test_module_class_through_each_import_spelling(imports, base):
    text = f"""
    import torch
    {imports}

    class Model({base}):
        def forward(self, x):
            print("seen")  # the one finding
            return x
    """
    assert module_classes({"m": text}) == {"m.Model"}
    assert codes(text) == [(line_of(text, "print("), "TP101")]


@pytest.mark.parametrize(
    "base",
    ["object", "Config", "torch.nn.Parameter", "torch.autograd.Function", "torch.utils.data.Dataset"],
)
def test_non_module_bases_are_not_modules(base):
    text = f"""
    import torch
    from torch import nn

    class Config:
        pass

    class Thing({base}):
        def forward(self, x):
            print("not compiled")
            return x
    """
    assert "m.Thing" not in module_classes({"m": text})
    assert codes(text) == []


def test_module_class_deriving_from_a_module_class_of_the_same_file():
    text = """
    from torch import nn

    class Base(nn.Module):
        pass

    class Mid(Base):
        pass

    class Leaf(Mid):
        def forward(self, x):
            print("leaf")
            return x
    """
    assert module_classes({"m": text}) == {"m.Base", "m.Mid", "m.Leaf"}


# -- cross-file base classes, relative imports, re-exports -----------------------------

BASE = """
import torch
from torch import nn

class BaseBlock(nn.Module):
    def forward(self, x):
        return self.mix(x)

    def mix(self, x):
        return x
"""


@pytest.mark.parametrize(
    ("module", "imports", "base"),
    [
        ("pkg.b", "from .a import BaseBlock", "BaseBlock"),
        ("pkg.b", "from . import a", "a.BaseBlock"),
        ("pkg.b", "from pkg.a import BaseBlock", "BaseBlock"),
        ("pkg.b", "import pkg.a", "pkg.a.BaseBlock"),
        ("pkg.sub.b", "from ..a import BaseBlock", "BaseBlock"),
        ("pkg.sub.b", "from .. import a as base_mod", "base_mod.BaseBlock"),
    ],
)
def test_cross_file_base_class(module, imports, base):
    child = f"""
    import torch
    {imports}

    class Child({base}):
        def forward(self, x):
            print("child")
            return x
    """
    files = {"pkg.__init__": "", "pkg.a": BASE, module: child}
    assert f"{module}.Child" in module_classes(files)
    path = module.replace(".", "/") + ".py"
    assert lint(files) == [(path, line_of(child, "print("), "TP101")]


def test_cross_file_base_class_through_two_files():
    files = {
        "pkg.a": BASE,
        "pkg.b": "import torch\nfrom .a import BaseBlock\n\nclass Mid(BaseBlock):\n    pass\n",
        "pkg.c": "from .b import Mid\nimport torch\n\nclass Leaf(Mid):\n    def forward(self, x):\n        print(x.shape)\n        return x\n",
    }
    assert {"pkg.a.BaseBlock", "pkg.b.Mid", "pkg.c.Leaf"} <= module_classes(files)
    assert lint(files) == [("pkg/c.py", 6, "TP101")]


def test_unknown_base_class_is_not_a_module():
    files = {
        "pkg.b": "import torch\nfrom .missing import Thing\n\nclass C(Thing):\n    def forward(self, x):\n        print(x)\n"
    }
    assert module_classes(files) == set()
    assert lint(files) == []


REEXPORT_USER = """
import torch
from pkg import BaseBlock, helper

class Child(BaseBlock):
    def forward(self, x):
        print("child")
        return helper(x)
"""
HELPER = """
import torch

def helper(x):
    print("helper")
    return x
"""


def test_reexport_through_package_init():
    files = {
        "pkg.__init__": "import torch  # the package also uses torch itself\nfrom .a import BaseBlock\nfrom .h import helper\n",
        "pkg.a": BASE,
        "pkg.h": HELPER,
        "user": REEXPORT_USER,
    }
    proj, _ = project(files)
    assert proj.canonical("pkg.BaseBlock") == "pkg.a.BaseBlock"
    assert "user.Child" in proj.module_classes()
    assert lint(files) == [("pkg/h.py", 5, "TP101"), ("user.py", line_of(REEXPORT_USER, "print("), "TP101")]


def test_reexport_through_package_init_that_does_not_mention_torch():
    files = {
        "pkg.__init__": '"""The package."""\nfrom .a import BaseBlock\nfrom .h import helper\n',
        "pkg.a": BASE,
        "pkg.h": HELPER,
        "user": REEXPORT_USER,
    }
    proj, _ = project(files)
    assert proj.canonical("pkg.BaseBlock") == "pkg.a.BaseBlock"
    assert "user.Child" in proj.module_classes()


def test_reexported_submodule_attribute():
    files = {
        "pkg.__init__": "import torch\nfrom . import a as blocks\n",
        "pkg.a": BASE,
        "user": "import torch\nimport pkg\n\nclass C(pkg.blocks.BaseBlock):\n    def forward(self, x):\n        print(1)\n",
    }
    assert "user.C" in module_classes(files)


# -- transformers PreTrainedModel --------------------------------------------------------


def test_transformers_library_layout():
    """transformers' own modeling files import PreTrainedModel relatively."""
    files = {
        "transformers.models.tiny.modeling_tiny": """
        import torch
        from torch import nn
        from ...modeling_utils import PreTrainedModel

        class TinyPreTrainedModel(PreTrainedModel):
            config_class = None

        class TinyModel(TinyPreTrainedModel):
            def __init__(self, config):
                super().__init__(config)
                print("building")  # not compiled

            def forward(self, input_ids):
                print(input_ids.shape)
                return input_ids
        """,
    }
    classes = module_classes(files)
    assert {
        "transformers.models.tiny.modeling_tiny.TinyPreTrainedModel",
        "transformers.models.tiny.modeling_tiny.TinyModel",
    } <= classes
    assert lint(files) == [("transformers/models/tiny/modeling_tiny.py", 15, "TP101")]


def test_user_model_on_pretrained_model_from_another_file():
    files = {
        "app.base": "import torch\nfrom transformers import PreTrainedModel\n\nclass MyPreTrained(PreTrainedModel):\n    pass\n",
        "app.model": "import torch\nfrom .base import MyPreTrained\n\nclass MyModel(MyPreTrained):\n    def forward(self, x):\n        print(x)\n        return x\n",
    }
    assert {"app.base.MyPreTrained", "app.model.MyModel"} <= module_classes(files)
    assert lint(files) == [("app/model.py", 6, "TP101")]


# -- which functions run compiled --------------------------------------------------------

CALL_GRAPH = {
    "pkg.__init__": "",
    "pkg.ops": """
    import torch

    def scale(x):
        return x * 2

    def shift(x):
        return x + 1

    def unused(x):
        print("never called from compiled code")
        return x
    """,
    "pkg.models": """
    import torch
    from torch import nn
    from . import ops
    from .ops import scale

    class Base(nn.Module):
        def forward(self, x):
            return self.base_helper(x)

        def base_helper(self, x):
            return x

    class Model(Base):
        def __init__(self):
            super().__init__()
            print("init is not compiled")

        def forward(self, x):
            x = super().forward(x)
            x = self.helper(x)
            return ops.shift(scale(x))

        def helper(self, x):
            return self.inner(x)

        def inner(self, x):
            return x

        def never_called(self, x):
            print("dead code")
            return x

    def train(model, data):
        for x in data:
            print(model(x).sum().item())

    print("module level")
    """,
    "pkg.fns": """
    import torch

    @torch.compile
    def decorated(x):
        return x

    @torch.compile(fullgraph=True, backend="eager")
    def decorated_with_args(x):
        return x

    def passed(x):
        return x

    def not_passed(x):
        return x

    fast = torch.compile(passed)
    """,
}


def test_compiled_functions():
    assert compiled(CALL_GRAPH) == {
        "pkg.models.Base.forward",
        "pkg.models.Base.base_helper",  # called from Base.forward, reached through super().forward
        "pkg.models.Model.forward",
        "pkg.models.Model.helper",  # self.helper(...)
        "pkg.models.Model.inner",  # self.inner(...) from a method called via self
        "pkg.ops.scale",  # from .ops import scale
        "pkg.ops.shift",  # from . import ops; ops.shift(...)
        "pkg.fns.decorated",
        "pkg.fns.decorated_with_args",
        "pkg.fns.passed",  # torch.compile(passed)
    }


def test_compiled_functions_exclude_init_training_loop_and_module_level_code():
    assert lint(CALL_GRAPH) == []  # every print above is in code that runs eagerly


def test_compile_roots_are_recorded_per_file():
    _, roots = project(CALL_GRAPH)
    assert roots == {("name", "pkg.fns.decorated"), ("name", "pkg.fns.decorated_with_args"), ("name", "pkg.fns.passed")}


def test_compile_of_an_imported_function():
    files = {
        "pkg.ops": "import torch\n\ndef kernel(x):\n    print('kernel')\n    return x\n",
        "pkg.main": "import torch\nfrom .ops import kernel\n\nfast_kernel = torch.compile(kernel)\n",
    }
    assert compiled(files) == {"pkg.ops.kernel"}
    assert lint(files) == [("pkg/ops.py", 4, "TP101")]


def test_compiled_function_calls_functions_in_other_files():
    files = {
        "pkg.ops": "import torch\n\ndef kernel(x):\n    print('kernel')\n    return x\n",
        "pkg.main": "import torch\nfrom pkg.ops import kernel\n\n@torch.compile\ndef step(x):\n    return kernel(x)\n",
    }
    assert compiled(files) == {"pkg.main.step", "pkg.ops.kernel"}


def test_object_built_in_forward_runs_its_init_compiled():
    text = """
    import torch
    from torch import nn

    class Stats:
        def __init__(self, x):
            print("stats")
            self.mean = x.mean()

    class Model(nn.Module):
        def forward(self, x):
            return Stats(x).mean
    """
    assert "m.Stats.__init__" in compiled({"m": text})
    assert codes(text) == [(line_of(text, "print("), "TP101")]


# -- kinds: what is data-dependent -------------------------------------------------------

KIND_TEMPLATE = """
import torch
import torch.nn.functional as F
from torch import nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.norms = nn.ModuleList([nn.LayerNorm(4), nn.LayerNorm(4)])
        self.count = 0
        self.names = ["a", "b"]

    def forward(self, x, mask=None):
        {setup}
        if {condition}:
            x = x + 1
        return x
"""


def if_is_flagged(condition: str, setup: str = "pass") -> bool:
    setup = setup.replace("\n", "\n        ")
    text = KIND_TEMPLATE.replace("{setup}", setup).replace("{condition}", condition)
    line = line_of(text, f"if {condition.splitlines()[0]}")
    return (line, "TP201") in codes(text)


@pytest.mark.parametrize(
    "condition",
    [
        "x.shape[0] > 1",
        "x.size(0) > 1",
        "x.shape[-1] == 4 and x.shape[0] > 1",
        "x.dim() == 2",
        "x.ndim == 2",
        "x.numel() > 0",
        "x.is_floating_point()",
        "x.requires_grad",
        "self.training",
        "not self.training",
        "self.training and x.dim() == 2",
        "x is None",
        "mask is None",
        "mask is not None",
        "mask",  # a `mask=None` parameter may be a flag: not assumed to be a tensor
        "len(x) > 1",
        "len(self.layers) > 1",
        "isinstance(x, torch.Tensor)",
        "torch.is_grad_enabled()",
        "self.count > 3",
    ],
)
def test_not_data_dependent(condition):
    assert not if_is_flagged(condition)


@pytest.mark.parametrize(
    "condition",
    [
        "x.sum() > 0",
        "x.max() > 1",
        "x",
        "mask.any()",
        "(x > 0).all()",
        "torch.isnan(x).any()",
        "x.eq(0).any()",
        "not x.any()",
        "x.shape[0] > 1 and x.sum() > 0",
        "mask is not None and mask.any()",
        "self.training or x.mean() > 0",
        "F.relu(x).sum() > 0",
        "torch.any(x > 0)",
    ],
)
def test_data_dependent(condition):
    assert if_is_flagged(condition)


def test_submodule_call_outputs_are_tensors():
    assert if_is_flagged("h.sum() > 0", setup="h = self.lin(x)")
    assert if_is_flagged("h.sum() > 0", setup="h = self.layers[0](x)")


LOOP_TEMPLATE = """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.norms = nn.ModuleList([nn.LayerNorm(4), nn.LayerNorm(4)])
        self.callbacks = []

    def forward(self, x):
        for {target} in {iterable}:
            h = {call}
            if h.sum() > 0:
                x = x + h
        return x
"""


@pytest.mark.parametrize(
    ("target", "iterable", "call"),
    [
        ("layer", "self.layers", "layer(x)"),
        ("i, layer", "enumerate(self.layers)", "layer(x)"),
        ("layer, norm", "zip(self.layers, self.norms)", "norm(layer(x))"),
        ("layer", "reversed(self.layers[1:])", "layer(x)"),
        ("layer", "self.layers[::-1]", "layer(x)"),
    ],
)
def test_modulelist_iteration_yields_modules(target, iterable, call):
    text = LOOP_TEMPLATE.format(target=target, iterable=iterable, call=call)
    line = line_of(text, "if h.sum()")
    assert codes(text) == [(line, "TP201"), (line, "TP501")]


def test_iteration_over_a_plain_list_does_not_yield_modules():
    text = LOOP_TEMPLATE.format(target="callback", iterable="self.callbacks", call="callback(x)")
    assert codes(text) == []


def test_data_dependent_branch_inside_layer_loop_is_also_a_loop_break():
    text = KIND_TEMPLATE.replace(
        "{setup}",
        "for layer in self.layers:\n            x = layer(x)\n            if x.sum() > 0:\n                x = -x",
    ).replace("{condition}", "x.dim() == 2")
    line = line_of(text, "if x.sum() > 0")
    assert codes(text) == [(line, "TP201"), (line, "TP501")]


def test_scalar_attribute_mutated_in_forward_is_tp601():
    assert any(
        code == "TP601"
        for _, code in codes(KIND_TEMPLATE.replace("{setup}", "self.count += 1").replace("{condition}", "x.dim() == 2"))
    )


# -- torch.compiler.is_compiling() guards ------------------------------------------------


@pytest.mark.parametrize(
    "guarded",
    [
        "if not torch.compiler.is_compiling():\n    print('eager only')",
        "if torch.compiler.is_compiling():\n    pass\nelse:\n    print('eager only')",
        "if not torch._dynamo.is_compiling():\n    print('eager only')",
        "if not is_compiling():\n    print('eager only')",
    ],
)
def test_print_behind_is_compiling_is_not_flagged(guarded):
    text = (
        "import torch\n"
        "from torch import nn\n"
        "from torch.compiler import is_compiling\n\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n" + textwrap.indent(guarded, " " * 8) + "\n        return x\n"
    )
    assert codes(text) == []


def test_print_in_the_compiled_branch_is_flagged():
    text = """
    import torch
    from torch import nn

    class Model(nn.Module):
        def forward(self, x):
            if torch.compiler.is_compiling():
                print("compiled")
            return x
    """
    assert codes(text) == [(line_of(text, "print("), "TP101")]


def test_what_follows_a_compiled_return_is_eager_only():
    """`if torch.compiler.is_compiling(): return ...` leaves the function under compile (Dynamo folds the check),
    so what follows runs in eager only: not flagged (TP512's packing function is written this way). The
    opposite guard leaves in eager, and what follows it is compiled."""
    text = """
    import torch
    from torch import nn

    class Model(nn.Module):
        def forward(self, x):
            if torch.compiler.is_compiling():
                return x * 2
            print("eager", x.sum().item())
            return x
    """
    assert codes(text) == []
    flagged = text.replace("if torch.compiler.is_compiling():", "if not torch.compiler.is_compiling():")
    assert [code for _, code in codes(flagged)] == ["TP101", "TP301"]


# -- bugs found while building the fixtures, kept as regression tests ----------------------


def test_eager_only_check_behind_is_compiling_is_not_flagged():
    text = """
    import warnings

    import torch
    from torch import nn

    class Model(nn.Module):
        def forward(self, x):
            if not torch.compiler.is_compiling() and torch.isnan(x).any():
                warnings.warn("NaN input")
            return x
    """
    assert codes(text) == []


@pytest.mark.parametrize(
    "files",
    [
        {
            "m": "from transformers import PreTrainedModel\n\n"
            "class Model(PreTrainedModel):\n    def forward(self, x):\n        print(x)\n        return x\n"
        },
        {
            "pkg.a": BASE,
            "pkg.b": "from .a import BaseBlock\n\n"
            "class Block(BaseBlock):\n    def forward(self, x):\n        print(x)\n        return x\n",
        },
    ],
    ids=["transformers-subclass", "project-subclass"],
)
def test_file_that_never_names_torch_is_still_analysed(files):
    """A subclass of a project or transformers model runs compiled without naming torch."""
    assert [code for *_, code in lint(files)] == ["TP101"]


def test_name_bound_only_inside_a_loop_keeps_its_kind_after_it():
    text = """
    import torch
    from torch import nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4)])

        def forward(self, x):
            for layer in self.layers:
                out = layer(x)
            if out.sum() > 0:
                out = -out
            return out
    """
    assert codes(text) == [(line_of(text, "if out.sum()"), "TP201")]


def test_template_method_override_in_subclass_is_compiled():
    files = {
        "pkg.a": BASE,
        "pkg.b": "import torch\nfrom .a import BaseBlock\n\nclass Sub(BaseBlock):\n    def mix(self, x):\n        print('mix')\n        return x\n",
    }
    assert "pkg.b.Sub.mix" in compiled(files)


def test_attributes_inherited_from_base_init():
    text = """
    import torch
    from torch import nn

    class Base(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(4)
            self.count = 0

    class Sub(Base):
        def forward(self, x):
            h = self.norm(x)
            if h.sum() > 0:
                h = -h
            self.count += 1
            return h
    """
    assert codes(text) == [(line_of(text, "if h.sum()"), "TP201"), (line_of(text, "self.count +="), "TP601")]


def test_method_of_a_submodule_is_compiled():
    text = """
    import torch
    from torch import nn

    class Rotary(nn.Module):
        def forward(self, x):
            return x

        def rotate(self, q):
            print("rotate")
            return q

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.rotary = Rotary()

        def forward(self, x):
            return self.rotary.rotate(x)
    """
    assert "m.Rotary.rotate" in compiled({"m": text})


def test_nested_submodule_call_output_is_a_tensor():
    text = """
    import torch
    from torch import nn

    class Router(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(4, 2)

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = Router()

        def forward(self, x):
            probs = self.router.gate(x).softmax(-1)
            if probs.max() > 0.9:
                x = x * 2
            return x
    """
    assert codes(text) == [(line_of(text, "if probs.max()"), "TP201")]


def test_parameters_of_torch_compile_call_target_are_tensors():
    text = """
    import torch

    def step(x):
        if x.sum() > 0:
            x = -x
        return x

    fast_step = torch.compile(step)
    """
    assert codes(text) == [(line_of(text, "if x.sum()"), "TP201")]


def test_fallback_class_defined_under_try_except():
    text = """
    import torch
    from torch import nn

    try:
        from apex.normalization import FusedRMSNorm as RMSNorm
    except ImportError:
        class RMSNorm(nn.Module):
            def forward(self, x):
                print("fallback")
                return x
    """
    assert codes(text) == [(line_of(text, "print("), "TP101")]


def test_unpacking_a_generator_of_tensors():
    text = """
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(8, 24)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))
            if q.sum() > 0:
                q = -q
            return q + k + v
    """
    assert codes(text) == [(line_of(text, "if q.sum()"), "TP201")]


def test_moduledict_items_iteration_yields_modules():
    text = """
    import torch
    from torch import nn

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)})

        def forward(self, x):
            for name, head in self.heads.items():
                h = head(x)
            if h.sum() > 0:
                h = -h
            return h
    """
    assert codes(text) == [(line_of(text, "if h.sum()"), "TP201")]


def test_bincount_is_a_dynamic_shape_op():
    text = """
    import torch
    from torch import nn

    class Load(nn.Module):
        def forward(self, experts):
            counts = torch.bincount(experts.flatten(), minlength=4)
            return counts / experts.numel()
    """
    assert [code for line, code in codes(text) if line == line_of(text, "torch.bincount")] != []


# -- precision fixes from the transformers review (benchmarks/RESULTS.md) ---------------


@pytest.mark.parametrize(
    ("annotation", "flagged"),
    [
        ("torch.Tensor", True),
        ("Optional[torch.Tensor]", True),
        ("torch.Tensor | None", True),
        ('"torch.Tensor"', True),
        ("list[int] | torch.Tensor", False),
        ("Union[torch.Tensor, list[int]]", False),
        ("int", False),
    ],
)
def test_union_of_tensor_and_other_types_is_not_assumed_a_tensor(annotation, flagged):
    text = f"""
    from typing import Optional, Union
    import torch
    from torch import nn

    class M(nn.Module):
        def forward(self, x, grid: {annotation}):
            if grid.sum() > 0:
                x = x * 2
            return x
    """
    assert bool(codes(text)) == flagged


@pytest.mark.parametrize("name", ["output_attentions", "use_cache", "num_steps", "input_shape", "layer_idx", "device"])
def test_flag_and_size_parameters_of_forward_are_not_tensors(name):
    text = f"""
    import torch
    from torch import nn

    class M(nn.Module):
        def forward(self, x, {name}):
            if {name}:
                x = x * 2
            return x
    """
    assert codes(text) == []


def test_unannotated_forward_parameter_is_a_tensor():
    text = """
    import torch
    from torch import nn

    class M(nn.Module):
        def forward(self, x, mask):
            if mask:
                x = x * 2
            return x
    """
    assert codes(text) == [(line_of(text, "if mask"), "TP201")]


def test_message_lambda_of_a_check_is_not_traced():
    text = """
    import torch
    from torch import nn

    class M(nn.Module):
        def forward(self, x):
            torch._check(x.shape[0] > 0, lambda: f"empty batch, max {int(x.max())}")
            return x * 2
    """
    assert codes(text) == []


# -- methods a tensor does not have ------------------------------------------------------


def test_the_tensor_names_cover_the_installed_torch():
    torch = pytest.importorskip("torch")
    from transpiler.analysis.tensor_names import TENSOR_NAMES

    missing = sorted(n for n in dir(torch.Tensor) if not n.startswith("_") and n not in TENSOR_NAMES)
    assert not missing, f"regenerate transpiler/analysis/tensor_names.py (its docstring says how): {missing}"


def test_a_method_no_tensor_has_says_the_guessed_parameter_is_no_tensor():
    text = textwrap.dedent("""
        import torch
        from torch import nn


        class Block(nn.Module):
            def forward(self, x, cache):
                if cache.get_seq_length(0) > 0:
                    x = x * 2
                if cache.sum() > 0:
                    x = x + 1
                return x
        """)
    assert codes(text) == [(line_of(text, "cache.sum()"), "TP201")]


def test_a_forward_parameter_put_into_a_key_is_not_taken_for_a_tensor():
    text = textwrap.dedent("""
        import torch
        from torch import nn


        class Rotary(nn.Module):
            def forward(self, x, layer_type, idx):
                inv_freq = getattr(self, f"{layer_type}_inv_freq")
                expert = getattr(self, f"expert_{idx[0]}")
                return x * inv_freq + expert(x)
        """)
    assert codes(text) == [(line_of(text, "idx[0]"), "TP305")]
