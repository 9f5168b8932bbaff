"""TP507's fix: a gradient taken inside the forward, of a leaf made with `requires_grad_()`, through
`torch.func.vjp` of a function of the leaf.

The text written, the refusals with their reasons, and the original and rewritten modules run side by
side: the same outputs in eager, the same parameter gradients when a loss built on the inner gradient is
backpropagated (a gradient without history stays one; with `create_graph=True` the second-order terms
flow), compiled with AOTAutograd under `fullgraph=True`, and Dynamo finding no break left.
"""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")

from tests.rule_examples import fix_snippet  # noqa: E402


def module(init: str, forward: str, params: str = "x", before: str = "") -> str:
    """A model with `__init__` lines `init` and forward body `forward`; `before`: module-level code."""

    def body(lines: str) -> str:
        return textwrap.indent(textwrap.dedent(lines).strip("\n"), " " * 8)

    return (
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
        + (textwrap.dedent(before).strip("\n") + "\n\n\n" if before else "")
        + "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        + body(init)
        + f"\n\n    def forward(self, {params}):\n"
        + body(forward)
        + "\n"
    )


NET = "self.net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))"

# FGM: the gradient of a loss with respect to a perturbed copy of the input, without history.
ADVERSARIAL = module(
    NET,
    """
    clean = self.net(x)
    with torch.enable_grad():
        x_adv = x.detach().clone().requires_grad_()
        loss = F.cross_entropy(self.net(x_adv), labels)
        (grad,) = torch.autograd.grad(loss, x_adv)
    adv = self.net(x + 0.1 * grad / grad.norm())
    return clean, adv
    """,
    params="x, labels",
)

# WGAN-GP: a penalty on the gradient norm of a critic, differentiated again (create_graph=True).
PENALTY = module(
    NET,
    """
    with torch.enable_grad():
        return gradient_penalty(self.net, x, y, alpha)
    """,
    params="x, y, alpha",
    before="""
    def gradient_penalty(critic, real, fake, alpha):
        interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        scores = critic(interpolates)
        grads = torch.autograd.grad(
            outputs=scores,
            inputs=interpolates,
            grad_outputs=torch.ones_like(scores),
            create_graph=True,
            retain_graph=True,
        )[0]
        return ((grads.norm(2, dim=1) - 1) ** 2).mean()
    """,
)

# The leaf switched on by a statement of its own, the gradients kept as a tuple, `outputs` an expression.
SALIENCY = module(
    NET,
    """
    with torch.enable_grad():
        inputs = x * 1.0
        inputs.requires_grad_()
        grads = torch.autograd.grad(self.net(inputs).logsumexp(-1).sum(), [inputs])
    return grads[0].abs(), self.net(x)
    """,
)


def inputs(name: str, seed: int = 0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 6, generator=g)
    if name == "adversarial":
        return x, torch.randint(0, 3, (5,), generator=g)
    if name == "penalty":
        return x, torch.randn(5, 6, generator=g), torch.rand(5, 1, generator=g)
    return (x,)


def load(source: str) -> torch.nn.Module:
    namespace: dict = {}
    exec(compile(source, "<model>", "exec"), namespace)
    torch.manual_seed(0)
    return namespace["Model"]()


def outputs(result) -> list[torch.Tensor]:
    return list(result) if isinstance(result, tuple) else [result]


def parameter_grads(model: torch.nn.Module, args: tuple) -> dict[str, torch.Tensor | None]:
    """The parameters' gradients of the sum of the outputs, through the inner gradient too (None for a
    parameter the outputs do not depend on: the critic's last bias, under a gradient penalty)."""
    model.zero_grad(set_to_none=True)
    sum(o.sum() for o in outputs(model(*args))).backward()
    return {name: None if p.grad is None else p.grad.clone() for name, p in model.named_parameters()}


CASES = {"adversarial": ADVERSARIAL, "penalty": PENALTY, "saliency": SALIENCY}


def test_text_written():
    text = fix_snippet(ADVERSARIAL)[1]
    expected = """
        with torch.enable_grad():
            # transpile (TP507): `torch.func.vjp` takes the gradient for `x_adv`; Dynamo traces it.
            def loss_of(x_adv):
                loss = F.cross_entropy(self.net(x_adv), labels)
                return loss

            loss, loss_vjp = torch.func.vjp(loss_of, x.detach().clone())
            grad = loss_vjp(torch.ones_like(loss))[0].detach()
        adv = self.net(x + 0.1 * grad / grad.norm())
    """
    assert textwrap.indent(textwrap.dedent(expected).strip("\n"), " " * 8) in text
    penalty = fix_snippet(PENALTY)[1]
    assert "    scores, scores_vjp = torch.func.vjp(scores_of, alpha * real + (1 - alpha) * fake)\n" in penalty
    assert "    grads = scores_vjp(torch.ones_like(scores))[0]\n" in penalty  # create_graph=True: no detach
    saliency = fix_snippet(SALIENCY)[1]
    assert "def output_of(inputs):\n                return self.net(inputs).logsumexp(-1).sum()\n" in saliency
    assert "output, output_vjp = torch.func.vjp(output_of, x * 1.0)\n" in saliency
    assert "grads = (output_vjp(torch.ones_like(output))[0].detach(),)\n" in saliency
    assert "requires_grad" not in saliency
    assert fix_snippet(ADVERSARIAL, unsafe=False)[1] == ADVERSARIAL  # unsafe only


@pytest.mark.parametrize("name", sorted(CASES))
def test_original_and_fixed_agree(name):
    """Outputs in eager without and with grad mode, parameter gradients through the inner gradient, and the
    fixed model compiled in one graph."""
    original = CASES[name]
    result, text = fix_snippet(original)
    assert not [d for d in result.remaining if d.code in ("TP507", "TP514")]
    before, after = load(original), load(text)
    after.load_state_dict(before.state_dict())
    for seed in range(3):
        args = inputs(name, seed)
        with torch.no_grad():
            torch.testing.assert_close(outputs(after(*args)), outputs(before(*args)))
        torch.testing.assert_close(parameter_grads(after, args), parameter_grads(before, args))
        compiled = torch.compile(after, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(outputs(compiled(*args)), outputs(before(*args)))
    torch._dynamo.reset()
    assert torch._dynamo.explain(load(original))(*inputs(name)).graph_break_count > 0
    assert torch._dynamo.explain(after)(*inputs(name)).graph_break_count == 0


@pytest.mark.parametrize(
    ("forward", "reason"),
    [
        (
            """
            x_adv = x.detach().requires_grad_()
            loss = self.net(x_adv).sum()
            (grad,) = torch.autograd.grad(loss, x_adv)
            return grad + x_adv
            """,
            "the leaf `x_adv` is read outside",
        ),
        (
            """
            x_adv = x.detach().requires_grad_()
            loss = self.net(x_adv).sum()
            (grad,) = torch.autograd.grad(loss, x_adv, allow_unused=True)
            return grad
            """,
            "`allow_unused=` has no counterpart",
        ),
        (
            """
            x_adv = x.requires_grad_()
            loss = self.net(x_adv).sum()
            (grad,) = torch.autograd.grad(loss, x_adv)
            return grad
            """,
            "`x` may be a tensor used elsewhere",
        ),
        (
            """
            a = x.detach().requires_grad_()
            b = (x * 2).requires_grad_()
            loss = self.net(a + b).sum()
            ga, gb = torch.autograd.grad(loss, (a, b))
            return ga + gb
            """,
            "`inputs` is not one name",
        ),
        (
            """
            x_adv = x.detach().requires_grad_()
            hidden = self.net(x_adv)
            loss = hidden.sum()
            (grad,) = torch.autograd.grad(loss, x_adv)
            return grad, hidden
            """,
            "`hidden`, computed for the gradient, is also read after it",
        ),
    ],
)
def test_left_alone_says_why(forward, reason):
    result, _ = fix_snippet(module(NET, forward))
    (finding,) = [d for d in result.remaining if d.code == "TP507"]
    assert reason in finding.no_fix
