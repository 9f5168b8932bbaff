"""CUDA graphs in training (emit/runtime/train_graphs.py): graphed blocks' forwards and backwards replayed under
autograd, against the same model trained with graphs off, on the same inputs.

Without a GPU only the decisions are tested (CPU calls run the source's forward); the `cuda` tests train.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from emit.runtime import graphs
from emit.runtime.graphs import graphed

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class Layer(nn.Module):
    def __init__(self, width: int, p: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(p)

    @graphed()
    def forward(self, x, scale: float = 1.0):
        return x + self.drop(self.down(F.gelu(self.up(self.norm(x))))) * scale


class Net(nn.Module):
    def __init__(self, width: int = 32, depth: int = 3, p: float = 0.0, shared: bool = False) -> None:
        super().__init__()
        layers = [Layer(width, p)] * depth if shared else [Layer(width, p) for _ in range(depth)]
        self.layers = nn.ModuleList(layers)
        self.head = nn.Linear(width, 1)
        self.wrap = False  # run each layer under torch.utils.checkpoint

    def forward(self, x, kept: list | None = None):
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.wrap else layer(x)
            if kept is not None:
                kept.append(x)
        return self.head(x)


def _counts(model: nn.Module) -> dict:
    total: dict = {}
    for module in model.modules():
        kept = graphs.replayer(module, graphs._TRAIN_KEY)
        for reason, count in (kept.counts if kept else {}).items():
            total[reason] = total.get(reason, 0) + count
    return total


@contextlib.contextmanager
def _graphs(enabled: bool):
    before = graphs._DEFAULT_ON
    graphs.set_default_graphs(enabled)
    try:
        yield
    finally:
        graphs.set_default_graphs(before)


def _train(model: nn.Module, batches: list, enabled: bool, autocast: torch.dtype | None = None, seed: int = 0):
    """Losses of a few AdamW steps, and the parameters after them."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(seed)
    losses = []
    with _graphs(enabled):
        for x, y in batches:
            with torch.autocast("cuda", dtype=autocast, enabled=autocast is not None):
                loss = F.mse_loss(model(x).float(), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    return torch.tensor(losses), [p.detach().clone() for p in model.parameters()]


def _pair(**options) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(1)
    eager = Net(**options).cuda()
    twin = Net(**options).cuda()
    twin.load_state_dict(eager.state_dict())
    return eager, twin


def _batches(n: int = 6, width: int = 32, grad: bool = False) -> list:
    generator = torch.Generator("cuda").manual_seed(2)
    return [
        (
            torch.randn(4, 8, width, device="cuda", generator=generator).requires_grad_(grad),
            torch.randn(4, 8, 1, device="cuda", generator=generator),
        )
        for _ in range(n)
    ]


def test_cpu_calls_under_autograd_run_the_source_forward():
    layer = Layer(8, 0.0)
    x = torch.randn(2, 8, requires_grad=True)
    layer(x).sum().backward()
    assert graphs.replayer(layer, graphs._TRAIN_KEY) is None and x.grad is not None


@pytest.fixture
def exact():
    """float32 matmuls without TF32: a replay and eager run the same kernels, so they agree to rounding."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@cuda
@pytest.mark.parametrize("p", [0.0, 0.2])
def test_training_steps_replay_and_equal_eager(exact, p):
    eager, twin = _pair(p=p)
    batches = _batches()
    losses, weights = _train(eager, batches, enabled=False)
    graphed_losses, graphed_weights = _train(twin, batches, enabled=True)
    counts = _counts(twin)
    assert counts.get("training graph replay", 0) == (len(batches) - 1) * 3, counts  # every call after the warm-up
    torch.testing.assert_close(graphed_losses, losses, rtol=1e-5, atol=1e-6)  # dropout: eager's masks
    for got, want in zip(graphed_weights, weights):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@cuda
def test_autocast_training_replays_and_follows_eager():
    eager, twin = _pair()
    batches = _batches()
    losses, _ = _train(eager, batches, enabled=False, autocast=torch.bfloat16)
    graphed_losses, _ = _train(twin, batches, enabled=True, autocast=torch.bfloat16)
    assert _counts(twin).get("training graph replay", 0) > 0, _counts(twin)
    # The same kernels on the same values: only the order of float32 accumulations may differ between the runs.
    torch.testing.assert_close(graphed_losses, losses, rtol=2e-2, atol=1e-3)


@cuda
def test_a_block_called_twice_before_a_backward_runs_its_source_the_second_time(exact):
    eager, twin = _pair(shared=True)
    batches = _batches(grad=True)  # every call of the layer has one signature
    losses, weights = _train(eager, batches, enabled=False)
    graphed_losses, graphed_weights = _train(twin, batches, enabled=True)
    counts = _counts(twin)
    assert counts.get("original forward: its previous replay awaits its backward (called again before a backward)")
    torch.testing.assert_close(graphed_losses, losses, rtol=1e-5, atol=1e-6)
    for got, want in zip(graphed_weights, weights):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@cuda
def test_outputs_kept_across_steps_keep_their_values(exact):
    _, twin = _pair()
    kept_steps = []
    with _graphs(True):
        for x, _ in _batches():
            kept: list = []
            twin(x, kept).sum().backward()
            kept_steps.append((kept, [t.detach().clone() for t in kept]))
    assert _counts(twin).get("training graph replay", 0) > 0, _counts(twin)
    for kept, values in kept_steps:
        for got, want in zip(kept, values):
            torch.testing.assert_close(got.detach(), want, rtol=0, atol=0)


@cuda
def test_input_gradients_frozen_parameters_and_accumulation_equal_eager(exact):
    eager, twin = _pair()
    for model in (eager, twin):
        model.layers[1].requires_grad_(False)
    batches = _batches(grad=True)
    results = []
    for model, enabled in ((eager, False), (twin, True)):
        grads = []
        with _graphs(enabled):
            for x, y in batches:
                x = x.detach().requires_grad_()
                F.mse_loss(model(x), y).backward()  # gradients accumulate over the steps (no zero_grad)
                grads.append(x.grad)
        results.append((grads, [p.grad for p in model.parameters() if p.requires_grad]))
    assert _counts(twin).get("training graph replay", 0) > 0, _counts(twin)
    torch.testing.assert_close(results[1], results[0], rtol=1e-4, atol=1e-6)


@cuda
def test_a_second_backward_through_a_replay_raises_a_clear_error():
    _, twin = _pair()
    with _graphs(True):
        for x, _ in _batches(3):  # warm-up, recording (its backward runs eagerly), first replays
            twin(x).sum().backward()
        loss = twin(_batches(1)[0][0]).sum()
        loss.backward(retain_graph=True)
        assert _counts(twin).get("training graph replay", 0) == 9, _counts(twin)
        with pytest.raises(RuntimeError, match="transpile: a backward reached the CUDA-graph replay"):
            loss.backward()
        twin(_batches(1)[0][0]).sum().backward()  # the spent replays' memory is free again
        assert _counts(twin).get("training graph replay", 0) == 12, _counts(twin)


@cuda
def test_checkpointed_and_gradient_free_calls_run_the_source_forward(exact):
    eager, twin = _pair()
    for model in (eager, twin):
        model.wrap = True
    batches = _batches()
    losses, weights = _train(eager, batches, enabled=False)
    graphed_losses, graphed_weights = _train(twin, batches, enabled=True)
    assert _counts(twin).get("original forward: saved tensor hooks are on (activation checkpointing, save_on_cpu)")
    torch.testing.assert_close(graphed_losses, losses, rtol=1e-5, atol=1e-6)
    twin.wrap = False
    twin.requires_grad_(False)
    with _graphs(True):
        twin(batches[0][0])
    assert _counts(twin).get("original forward: nothing requires grad")
