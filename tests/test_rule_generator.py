"""TP518 and TP522 (`torch.Generator` made or used in compiled code) on whole programs, against Dynamo.

In a program, a line marked `# break` must be reported (by a rule of the `break` family) and
must break under Dynamo; a reported line that is not marked fails the test. The clean programs
use generators in ways Dynamo traces (`None`, only inspected, handed on unused): no finding,
one graph. The last tests pin what the rules leave alone because the value is not known to be
a generator (though some of it does break when a generator is passed at run time).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.dynamo_harness import run_example  # noqa: E402
from tests.rule_examples import lint_snippet  # noqa: E402
from transpiler.lint.rule import REGISTRY  # noqa: E402

PROGRAMS = {
    "rotation-from-a-seeded-generator": """
import torch
from torch import nn


def random_rotation(n: int, generator: torch.Generator):
    base = torch.ones(n, n) * 0.5
    return base + torch.randn(n, n, generator=generator)  # break


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.seed = 3

    def forward(self, x):
        h = x * 2
        generator = torch.Generator(device=x.device)  # break
        h = h + 1
        generator.manual_seed(self.seed)  # break
        h = h - 1
        return random_rotation(8, generator) @ h
""",
    "noise-drawn-only-when-evaluating": """
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x + 1
        generator = None
        if not self.training:
            generator = torch.Generator().manual_seed(0)  # break
        h = h * 2
        return h + torch.randn(8, generator=generator)  # break
""",
    "reseeded-local-generator": """
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x + 1
        generator = torch.Generator()  # break
        h = h * 2
        generator = generator.manual_seed(1)  # break
        h = h - 1
        return h * torch.rand(  # break
            8,
            generator=generator,
        )
""",
    "default-generator-state-and-draws": """
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x + 1
        state = torch.default_generator.get_state()  # break
        h = h * 2
        picked = torch.multinomial(h.abs() + 0.1, 2, generator=torch.default_generator)  # break
        return h, picked, state
""",
    "weights-from-a-passed-generator": """
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x, generator: "torch.Generator"):
        h = x + 1
        w = nn.init.kaiming_uniform_(torch.empty(8, 8), generator=generator)  # break
        h = h @ w
        keep = [torch.empty(8).bernoulli_(0.9, generator=generator) for _ in range(2)]  # break
        return h * keep[0] * keep[1]


def make_inputs(call):
    return torch.randn(8), torch.Generator().manual_seed(call)
""",
}

CLEAN = {
    "generators-left-none": """
from typing import Optional

import torch
from torch import nn


def noise_like(t, generator: Optional[torch.Generator] = None):
    return torch.randn(t.shape, generator=generator)


class Model(nn.Module):
    def forward(self, x, generator=None):
        h = x + noise_like(x)
        h = h + torch.rand(8, generator=None)
        if generator is not None:
            h = h * 2
        return h * torch.randn(8, generator=generator)
""",
    "generator-inspected-or-handed-on-unused": """
import torch
from torch import nn


def scale(t, generator: torch.Generator):
    return t * 2


class Model(nn.Module):
    def forward(self, x, generator: torch.Generator):
        h = scale(x + 1, generator)
        if generator.device.type == "cpu":
            h = h - 1
        return h


def make_inputs(call):
    return torch.randn(8), torch.Generator().manual_seed(call)
""",
}


def _break_lines(source: str) -> list[int]:
    return sorted({d.line for d in lint_snippet(source) if REGISTRY[d.code].family == "break"})


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_generator_breaks_are_reported_where_dynamo_breaks(name):
    source = PROGRAMS[name].lstrip("\n")
    marked = [n for n, line in enumerate(source.splitlines(), 1) if line.endswith("# break")]
    assert _break_lines(source) == marked
    report = run_example(source, name=name)
    for line in marked:
        assert report.breaks_at(line), f"line {line}: {report.summary()}"


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_traced_generator_code_is_clean(name):
    source = CLEAN[name].lstrip("\n")
    assert lint_snippet(source) == []
    report = run_example(source, name=name)
    assert report.clean(), report.summary()


# Values that may hold a generator, of unknown provenance: an unannotated parameter, what a
# function returns, unpacking, a loop variable, a comprehension's or a lambda's own name, an
# attribute's methods (`self.env.seed()` is not a generator's). No use of them is reported.
UNKNOWN = """
import torch
from torch import nn


def make_generator(seed):
    return torch.Generator().manual_seed(seed)


def draw(n, generator):
    return torch.randn(n, generator=generator)


class Model(nn.Module):
    def __init__(self, env, generators):
        super().__init__()
        self.env = env
        self.generators = generators

    def forward(self, x):
        h = x + draw(8, self.generators[0])
        made = make_generator(0)
        h = h + torch.rand(8, generator=made)
        first, second = self.generators
        h = h + torch.rand(8, generator=first) + torch.rand(8, generator=second)
        for g in self.generators:
            h = h + torch.rand(8, generator=g)
        h = h + sum(torch.rand(8, generator=g) for g in self.generators)
        h = h + (lambda g: torch.rand(8, generator=g))(self.generators[1])
        self.env.seed(0)
        return h
"""


def test_unknown_generators_are_not_reported():
    findings = [(d.code, d.line) for d in lint_snippet(UNKNOWN.lstrip("\n"))]
    assert findings == [("TP518", 6)]  # the creation in make_generator, which forward calls


def test_names_are_followed_in_their_own_scope():
    source = """
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x, generator: torch.Generator):
        h = x + 1
        rows = [torch.rand(8, generator=generator) for _ in range(2)]
        shadowed = [torch.rand(8, generator=generator) for generator in (None, None)]
        nested = (lambda generator=None: torch.rand(8, generator=generator))()
        return h, rows, shadowed, nested
"""
    assert [(d.code, d.line) for d in lint_snippet(source.lstrip("\n"))] == [("TP522", 8)]


# One call of each entry of the rule's tables, with a generator the caller passes in.
DRAWS = {
    "torch.randn": "torch.randn(8, generator=generator)",
    "torch.rand": "torch.rand(8, generator=generator)",
    "torch.randint": "torch.randint(0, 5, (8,), generator=generator)",
    "torch.randperm": "torch.randperm(8, generator=generator)",
    "torch.multinomial": "torch.multinomial(h.abs() + 0.1, 2, generator=generator)",
    "torch.normal": "torch.normal(h, h.abs() + 1, generator=generator)",
    "torch.bernoulli": "torch.bernoulli(h.clamp(0, 1), generator=generator)",
    "torch.poisson": "torch.poisson(h.abs(), generator=generator)",
    "torch.binomial": "torch.binomial(torch.full((8,), 5.0), torch.full((8,), 0.5), generator=generator)",
    "torch.rand_like": "torch.rand_like(h, generator=generator)",
    "torch.randn_like": "torch.randn_like(h, generator=generator)",
    "torch.randint_like": "torch.randint_like(h, 5, generator=generator)",
    **{
        f"torch.nn.init.{name}": f"nn.init.{name}(torch.empty(4, 8), generator=generator)"
        for name in ("uniform_", "normal_", "trunc_normal_", "orthogonal_")
        + ("kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_")
    },
    "torch.nn.init.sparse_": "nn.init.sparse_(torch.empty(4, 8), 0.5, generator=generator)",
    ".uniform_": "torch.empty(8).uniform_(0, 1, generator=generator)",
    ".normal_": "torch.empty(8).normal_(generator=generator)",
    ".bernoulli": "h.clamp(0, 1).bernoulli(generator=generator)",
    ".bernoulli_": "torch.empty(8).bernoulli_(0.5, generator=generator)",
    ".exponential_": "torch.empty(8).exponential_(generator=generator)",
    ".cauchy_": "torch.empty(8).cauchy_(generator=generator)",
    ".geometric_": "torch.empty(8).geometric_(0.5, generator=generator)",
    ".log_normal_": "torch.empty(8).log_normal_(generator=generator)",
    ".multinomial": "(h.abs() + 0.1).multinomial(2, generator=generator)",
    # The methods that work on a CPU generator (`get_offset` and the `graphsafe_` ones raise there).
    **{
        f"Generator.{name}": f"generator.{name}({argument})"
        for name, argument in [("manual_seed", "0"), ("seed", ""), ("initial_seed", ""), ("get_state", "")]
        + [("clone_state", ""), ("set_state", "generator.get_state()")]
    },
}


def test_every_table_entry_is_measured():
    from rewrites import unsupported

    methods = {f".{m}" for m in unsupported._SAMPLING_METHODS}
    state = {f"Generator.{m}" for m in unsupported._GENERATOR_METHODS - {"get_offset", "set_offset"}}
    assert set(DRAWS) == unsupported._SAMPLING_FUNCTIONS | methods | state - {
        "Generator.graphsafe_get_state",
        "Generator.graphsafe_set_state",
    }


@pytest.mark.parametrize("entry", sorted(DRAWS))
def test_each_draw_or_state_call_breaks_where_reported(entry):
    source = f"""import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x, generator: torch.Generator):
        h = x + 1
        drawn = {DRAWS[entry]}
        return h, drawn


def make_inputs(call):
    return torch.randn(8), torch.Generator().manual_seed(call)
"""
    assert {(d.code, d.line) for d in lint_snippet(source)} == {("TP522", 8)}
    report = run_example(source, name=entry)
    assert report.breaks_at(8), report.summary()
