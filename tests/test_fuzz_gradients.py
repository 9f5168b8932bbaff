"""The differential fuzzer's gradient check in CI: a fixed budget of seeds per backend, and the checker's tests.

Each seed is a random module (tests/fuzzing.py) transpiled by the real tool; its forward is compared with
eager's, then both run under autograd and backpropagate the same cotangents (`compare_gradients`). The seeds
differ from tests/test_fuzz.py's, so that the forward check sees other programs too. A failing seed prints its
reproducer; `python benchmarks/fuzz.py --gradients --cases 1 --seed S --backend B` minimises it. Seeds that
fail today through a known class of bug are strict xfails, listed with their class.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from tests import fuzzing
from tests.fuzzing import GradientSetup, InputSpec, Program, Stmt, compare_gradients

SEEDS = {"cpp": list(range(1000, 1032)), "triton": list(range(1000, 1024))}
# seed -> the class of bug it reproduces, per backend (strict xfails: a fixed bug fails until taken off).
KNOWN: dict[str, dict[int, str]] = {"cpp": {}, "triton": {}}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict[int, fuzzing.Result]]:
    """Every backend's seeds, run once for the module (the tree's transpile and builds are the cost)."""
    work = tmp_path_factory.mktemp("fuzz_gradients")
    out = {}
    for backend, seeds in SEEDS.items():
        programs = [fuzzing.generate(seed, backend) for seed in seeds]
        out[backend] = {r.program.seed: r for r in fuzzing.run_cases(programs, backend, work, gradients=True)}
    return out


@pytest.mark.parametrize(("backend", "seed"), fuzzing.seed_cases(SEEDS, KNOWN))
def test_gradients_match_eager(results, backend, seed):
    result = results[backend][seed]
    setup = fuzzing.gradient_setup(result.program) if result.backward is not None else None
    assert result.outcome == "ok", (
        f"{result.outcome}: {result.detail}\n\n{result.program.reproducer(gradients=setup)}\n"
        f"minimise with: python benchmarks/fuzz.py --gradients --cases 1 --seed {seed} --backend {backend}"
    )


def test_the_budget_reaches_the_backward_kernels(results):
    """Gradient checks ran, backpropagated, and generated backward kernels computed some of the gradients:
    without them the seeds above would test eager's autograd against itself."""
    for backend, by_seed in results.items():
        counts = fuzzing.summary(by_seed.values())
        assert counts["with a backward"] >= len(by_seed) // 4, (backend, counts)
        assert counts["backward kernel ran"] > 0, (backend, counts, fuzzing.fallback_reasons(by_seed.values(), True))


# -- the checker can fail --------------------------------------------------------------------------
X = InputSpec("x", (3, 4), "float32", "contiguous", "specials", 12)  # a NaN and two infinities among its values
PROGRAM = Program(1, (X,), (), (Stmt("t1", "{0} * 2.0", ("x",)), Stmt("t2", "torch.exp({0})", ("t1",))), ("t2",))
TRAINED = GradientSetup(frozenset({"x"}), parameters=True)


class Eager(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return torch.exp(x * 2.0) + self.w


def _outcome(transpiled, setup: GradientSetup = TRAINED) -> str:
    return compare_gradients(PROGRAM, Eager, transpiled, setup=setup)[0]


def _with_hook(hook):
    """Eager's module with `hook` applied to the gradient reaching `x * 2.0`."""

    class Hooked(Eager):
        def forward(self, x):
            t1 = x * 2.0
            t1.register_hook(hook)
            return torch.exp(t1) + self.w

    return Hooked


def test_an_identical_module_passes_and_backpropagates():
    for leaves in (True, False):
        setup = GradientSetup(frozenset({"x"}), parameters=True, leaves=leaves)
        assert compare_gradients(PROGRAM, Eager, Eager, setup=setup) == ("ok", "", True)
    frozen = GradientSetup(frozenset(), parameters=False)  # nothing requires grad: nothing to backpropagate
    assert compare_gradients(PROGRAM, Eager, Eager, setup=frozen) == ("ok", "", False)


def test_wrong_gradients_are_caught():
    x = fuzzing.make_input(X)
    assert x.isnan().any() and x.isinf().sum() == 2  # what the cases below rely on
    assert _outcome(_with_hook(lambda g: g * (1 + 1e-3))) == "wrong gradient"
    # NaN placement is part of a gradient's value (the forward's infinities stay as they are)
    assert _outcome(_with_hook(lambda g: g.nan_to_num(nan=0.0, posinf=math.inf, neginf=-math.inf))) == "wrong gradient"


def test_a_gradient_computed_exactly_passes():
    """A backward in float64, rounded once to float32: closer to the exact gradient than eager, not wrong."""

    class Exact(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.exp(x.double() * 2.0).float()

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return (grad.double() * 2.0 * torch.exp(x.double() * 2.0)).float()

    class Fused(Eager):
        def forward(self, x):
            return Exact.apply(x) + self.w

    assert _outcome(Fused) == "ok"


def test_missing_and_extra_gradients_are_caught():
    class Detached(Eager):
        def forward(self, x):
            return torch.exp(x * 2.0).detach() + self.w.detach()

    class Untrained(Eager):  # w takes no part in the graph: its .grad stays None
        def forward(self, x):
            return torch.exp(x * 2.0) + self.w.detach()

    assert _outcome(Detached) == "missing gradient"  # the output requires grad in eager only
    assert _outcome(Untrained) == "missing gradient"  # w.grad None
    assert compare_gradients(PROGRAM, Untrained, Eager, setup=TRAINED)[0] == "extra gradient"
    assert compare_gradients(PROGRAM, Detached, Eager, setup=TRAINED)[0] == "extra gradient"


def test_errors_under_autograd_are_compared():
    """An update in place of a leaf that requires grad raises in eager, and must in the transpiled module; an
    error only the transpiled backward raises is caught, one only eager's raises is allowed (which values a
    backward saves, and so which updates in place it notices, is the implementation's)."""

    class InPlace(Eager):
        def forward(self, x):
            x.mul_(2.0)
            return torch.exp(x) + self.w

    class OutOfPlace(Eager):
        def forward(self, x):
            return torch.exp(x * 2.0) + self.w

    leaves = GradientSetup(frozenset({"x"}), parameters=True, leaves=True)
    assert compare_gradients(PROGRAM, InPlace, OutOfPlace, setup=leaves)[0] == "missing error"
    assert compare_gradients(PROGRAM, InPlace, InPlace, setup=leaves)[0] == "ok"

    class SavedThenUpdated(Eager):  # exp saves its result, which the update then changes
        def forward(self, x):
            t = torch.exp(x * 2.0)
            t.mul_(1.0)
            return t + self.w

    def fail(g):
        raise RuntimeError("no backward")

    assert _outcome(_with_hook(fail)) == "extra error"
    assert compare_gradients(PROGRAM, SavedThenUpdated, Eager, setup=TRAINED)[:2] == (
        "ok",
        "eager's backward raises RuntimeError",
    )


def test_the_setup_is_drawn_per_seed_and_trains_something():
    for seed in range(40):
        program = fuzzing.generate(seed)
        setup = fuzzing.gradient_setup(program)
        assert setup == fuzzing.gradient_setup(program)
        floating = {i.name for i in program.inputs if i.dtype in fuzzing.FLOATING}
        assert setup.inputs <= floating
    drawn = {fuzzing.gradient_setup(fuzzing.generate(seed)) for seed in range(40)}
    assert any(s.leaves for s in drawn) and any(not s.leaves for s in drawn)
    assert any(not s.parameters for s in drawn)  # frozen parameters are drawn too


def test_the_gradient_reproducer_runs_alone():
    for leaves in (True, False):
        setup = GradientSetup(frozenset({"x"}), parameters=True, leaves=leaves)
        namespace: dict = {}
        exec(PROGRAM.reproducer("the mismatch", setup), namespace)  # prints the gradients
        leaf = namespace["x" if leaves else "x_leaf"]
        expected = fuzzing.make_input(X)
        assert leaf.grad is not None and leaf.grad.shape == expected.shape
