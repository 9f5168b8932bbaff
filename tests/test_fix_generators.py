"""TP518's and TP522's fix: a seeded `torch.Generator` made in compiled code becomes a `TraceableGenerator`,
whose state travels as a tensor through custom operators, and its draws call dispatchers.

The text written, the refusals with their reasons, and the original and rewritten modules run side by
side: the same numbers bit for bit in eager for several seeds and repeated calls (the state advances
between draws as the original's does), Dynamo finding breaks before and none after, the same numbers
compiled with AOTAutograd under `fullgraph=True` and with Inductor; the dispatchers keep torch's behaviour
for `generator=None` and a real `torch.Generator`; two files in one process share the operators.
"""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")

from tests.rule_examples import fix_snippet  # noqa: E402

# A generator made and seeded in forward, drawn from several times, passed through a helper function with a
# `generator=None` parameter and through an inner module's forward.
SOURCE = textwrap.dedent("""
    import torch
    from torch import nn


    def jitter(x, generator=None):
        return x + 0.1 * torch.randn(x.shape, generator=generator)


    class Sampler(nn.Module):
        def forward(self, logits, generator):
            picks = torch.multinomial(logits.softmax(-1), 2, generator=generator)
            keep = torch.bernoulli(torch.full_like(logits, 0.5), generator=generator)
            return picks, keep


    class Model(nn.Module):
        def __init__(self, seed=0):
            super().__init__()
            self.seed = seed
            self.linear = nn.Linear(6, 4)
            self.sampler = Sampler()

        def forward(self, x):
            g = torch.Generator(device=x.device)
            g.manual_seed(self.seed)
            h = self.linear(jitter(x, generator=g))
            noise = torch.rand(4, generator=g)
            index = torch.randint(0, 4, (3,), generator=g)
            order = torch.randperm(5, generator=g)
            picks, keep = self.sampler(h, g)
            return h * noise, index, order, picks, keep * h, jitter(h), torch.tensor(g.initial_seed())
""").lstrip()

BREAKING = {"TP518", "TP522"}


@pytest.fixture(scope="module")
def fixed() -> str:
    result, text = fix_snippet(SOURCE)
    assert "TP518" in {d.code for d in result.applied}
    assert not [d for d in result.remaining if d.code in BREAKING]
    return text


def load(source: str, seed: int = 0) -> torch.nn.Module:
    namespace: dict = {}
    exec(compile(source, "<model>", "exec"), namespace)
    torch.manual_seed(0)
    return namespace["Model"](seed)


def same(expected, actual) -> None:
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def run(model, x, global_seed: int = 0):
    """The model's outputs, the global generator (for `jitter(h)`'s draw) seeded first."""
    torch.manual_seed(global_seed)
    return model(x)


def test_text_written(fixed):
    assert "g = TraceableGenerator(device=x.device)" in fixed
    for draw in ("randn(x.shape", "rand(4", "randint(0, 4", "randperm(5", "multinomial(logits", "bernoulli("):
        assert f"traceable_{draw}" in fixed
    assert "torch.Generator(device=x.device)" not in fixed
    assert "def traceable_normal" not in fixed  # only what the file draws with
    # Written once, before the first class, and formatted as black formats it.
    assert fixed.count("class TraceableGenerator") == 1
    assert fixed.index("class TraceableGenerator") < fixed.index("def jitter")
    black = pytest.importorskip("black")
    assert black.format_str(fixed, mode=black.Mode(line_length=120)) == fixed


@pytest.mark.parametrize("seed", [0, 1, 1234])
def test_eager_bit_identical(fixed, seed):
    original, rewritten = load(SOURCE, seed), load(fixed, seed)
    rewritten.load_state_dict(original.state_dict())
    x = torch.randn(3, 6)
    for call in range(2):  # a new generator each call: the same numbers again
        same(run(original, x, call), run(rewritten, x, call))


def test_dynamo_breaks_before_none_after(fixed):
    x = torch.randn(3, 6)
    torch._dynamo.reset()
    assert torch._dynamo.explain(load(SOURCE))(x).graph_break_count > 0
    torch._dynamo.reset()
    explained = torch._dynamo.explain(load(fixed))(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_bit_identical(fixed, backend):
    original, rewritten = load(SOURCE, 7), load(fixed, 7)
    rewritten.load_state_dict(original.state_dict())
    x = torch.randn(3, 6)
    torch._dynamo.reset()
    compiled = torch.compile(rewritten, backend=backend, fullgraph=True)
    expected = run(original, x)
    # Inductor draws from the global generator (`jitter(h)`) its own way unless told to fall back to eager's.
    with torch._inductor.config.patch(fallback_random=True):
        for _ in range(2):
            same(expected, run(compiled, x))


def namespace_of(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<model>", "exec"), namespace)
    return namespace


def test_dispatchers_keep_torch_behaviour(fixed):
    ns = namespace_of(fixed)
    torch.manual_seed(3)
    expected = [torch.randn(2, 3), torch.rand((4,)), torch.randint(5, (3,)), torch.randperm(6)]
    torch.manual_seed(3)
    same(
        expected,
        [
            ns["traceable_randn"](2, 3),
            ns["traceable_rand"]((4,)),
            ns["traceable_randint"](5, (3,)),
            ns["traceable_randperm"](6),
        ],
    )
    real, traceable = torch.Generator().manual_seed(5), ns["TraceableGenerator"]().manual_seed(5)
    for generator in (real, traceable):  # a real generator goes to torch; both give torch's numbers
        drawn = [
            ns["traceable_randn"](2, 3, generator=generator, dtype=torch.float64),
            ns["traceable_randint"](1, 9, (4,), generator=generator),
            ns["traceable_multinomial"](torch.ones(3, 4), 2, True, generator=generator),
            ns["traceable_bernoulli"](torch.full((5,), 0.3), generator=generator),
            ns["traceable_bernoulli"](torch.ones(5), 0.5, generator=generator),
        ]
        if generator is real:
            first = drawn
    same(first, drawn)
    same(real.get_state(), traceable.get_state())
    assert traceable.initial_seed() == 5
    assert ns["TraceableGenerator"]().initial_seed() == torch.Generator().initial_seed()
    same(ns["TraceableGenerator"]().get_state(), torch.Generator().get_state())


def test_operators_shared_by_files_and_reruns(fixed):
    first, second = namespace_of(fixed), namespace_of(fixed)  # a second file, or the same one executed again
    assert first["_randn_operator"] is second["_randn_operator"] is torch.ops.transpile.randn_v1
    for ns in (first, second):
        generator = ns["TraceableGenerator"]().manual_seed(1)
        same(torch.randn(3, generator=torch.Generator().manual_seed(1)), ns["traceable_randn"](3, generator=generator))


def test_fixing_again_changes_nothing(fixed):
    result, text = fix_snippet(fixed)
    assert text == fixed and not [d for d in result.remaining if d.code in BREAKING]


def forward_module(forward: str, before: str = "") -> str:
    return (
        "import torch\nfrom torch import nn\n\n\n"
        + (textwrap.dedent(before).strip("\n") + "\n\n\n" if before else "")
        + "class Model(nn.Module):\n    def forward(self, x):\n"
        + textwrap.indent(textwrap.dedent(forward).strip("\n"), " " * 8)
        + "\n"
    )


@pytest.mark.parametrize(
    "forward, before, reason",
    [
        (
            "g = torch.Generator().manual_seed(0)\nreturn torch.nn.init.normal_(x, generator=g)",
            "",
            "`torch.nn.init.normal_()` has no traceable version",
        ),
        (
            "g = torch.Generator().manual_seed(0)\nreturn x + torch.normal(0.0, 1.0, (3,), generator=g)",
            "",
            "`torch.normal()` has no traceable version",
        ),
        (
            "g = torch.Generator().manual_seed(0)\nreturn x + torch.randn(3, generator=g, layout=torch.strided)",
            "",
            "`torch.randn()` gets `layout=`",
        ),
        (
            "g = torch.Generator().manual_seed(0)\nreturn x.uniform_(generator=g)",
            "",
            "`.uniform_()` has no traceable version",
        ),
        ("g = torch.Generator()\nreturn x, g", "", "the generator is used in `(x, g)`"),
        ("g = torch.Generator()\nreturn g", "", "the generator is returned"),
        (
            "g = torch.Generator().manual_seed(0)\nreturn noisy(x, g)",
            "def noisy(x, g):\n    return x + torch.utils.data.random_split(range(4), [2, 2], generator=g)[0][0]",
            "no traceable version",
        ),
        (
            "self.g = torch.Generator().manual_seed(0)\nreturn x + torch.rand(3, generator=self.g)",
            "",
            "the generator is used in `self.g = ",
        ),
    ],
)
def test_left_alone_says_why(forward, before, reason):
    result, text = fix_snippet(forward_module(forward, before))
    assert "TraceableGenerator" not in text
    reasons = [d.no_fix or "" for d in result.remaining if d.code == "TP518"]
    assert reasons and reason in reasons[0], reasons
