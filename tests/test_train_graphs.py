"""CUDA graphs in training (emit/runtime/train_graphs.py): graphed blocks' forwards and backwards replayed under
autograd, against the same model trained with graphs off, on the same inputs.

Without a GPU only the decisions are tested (CPU calls run the source's forward); the `cuda` tests train.
"""

from __future__ import annotations

import contextlib
import gc
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from emit.runtime import graphs, train_graphs
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


class _Saves(torch.autograd.Function):
    @staticmethod
    def forward(ctx, marker, x):
        ctx.save_for_backward(marker)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return None, grad * 2


def test_a_replay_is_pending_until_autograd_frees_what_it_saved():
    marker, x = torch.empty(0), torch.ones(3, requires_grad=True)
    pending = _Saves.apply(marker, x)  # its graph lives while its output does
    assert train_graphs._pending(pending.grad_fn)  # its backward may come
    y = _Saves.apply(marker, x)
    y.sum().backward(retain_graph=True)
    assert train_graphs._pending(y.grad_fn)  # kept: another backward may come
    y.grad_fn.spent = True
    assert not train_graphs._pending(y.grad_fn)  # a backward would recompute: its memory may be reused
    z = _Saves.apply(marker, x)
    z.sum().backward()
    assert not train_graphs._pending(z.grad_fn)


def test_stand_ins_share_the_parameters_memory_with_versions_of_their_own():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[1].weight = model[0].weight  # tied: one stand-in for both
    weight = model[0].weight
    standin = nn.Parameter(train_graphs._alias(weight))
    version = standin._version
    with torch.no_grad():
        weight.add_(1)  # an optimizer's step
    assert standin._version == version and torch.equal(standin, weight)
    back = train_graphs._replace_parameters(model, {id(weight): standin})
    assert model[0].weight is standin and model[1].weight is standin
    train_graphs._replace_parameters(model, back)
    assert model[0].weight is weight and model[1].weight is weight


def test_a_pool_is_retired_with_its_last_step():
    class Step:
        pass

    pool, first, second = train_graphs._Pool(), Step(), Step()
    pool.hold(first)
    pool.hold(second)
    del first
    assert not pool.retired
    del second  # the allocator frees a pool with its last graph: its id cannot be recorded into again
    assert pool.retired


def test_calls_a_replay_cannot_stand_for_run_the_source_with_the_reason():
    layer = Layer(8, 0.0)
    replay = train_graphs.TrainingGraphs(Layer.forward.__wrapped__.__get__(layer))
    x = torch.randn(2, 8, requires_grad=True)
    with torch.autograd.graph.save_on_cpu():
        replay(x).sum().backward()
    y = _Saves.apply(torch.empty(0), x)
    y.register_hook(lambda grad: [replay(x), None][1])  # a forward inside a backward: a checkpoint's recomputation
    y.sum().backward()
    replay(x)
    model = train_graphs.TrainingGraphs(Net().forward)
    model(torch.randn(2, 4, 32))
    assert dict(replay.counts) == {
        "original forward: saved tensor hooks are on (activation checkpointing, save_on_cpu)": 1,
        "original forward: called inside a backward (a checkpoint's recomputation)": 1,
        "original forward: an input is not a CUDA tensor, or none is a tensor": 1,
    }
    assert dict(model.counts) == {"original forward: a model over graphed blocks (the blocks replay)": 1}


def test_a_recomputed_backward_equals_eager_and_refuses_what_it_cannot_reproduce():
    """A backward that reaches a replay whose saved values are gone runs the source's forward again."""
    torch.manual_seed(0)
    layer = Layer(8, 0.0)
    parameters = list(layer.parameters())
    x, grads = torch.randn(2, 8, requires_grad=True), [torch.randn(2, 8)]
    step = object.__new__(train_graphs._Step)  # the fields a recomputation reads, without a CUDA recording
    step.name, step.function, step.call = (
        "Layer.forward",
        Layer.forward.__wrapped__.__get__(layer),
        ((x,), {"scale": 0.5}),
    )
    step.autocast, step.random, step.parameters, step.wanted, step.differentiable = False, False, parameters, [0], [0]
    node = types.SimpleNamespace(inputs=[x], versions=graphs._versions([x, *parameters]))
    got = step._recomputed(node, grads)
    want = torch.autograd.grad(layer(x, scale=0.5), [x, *parameters], grads)
    torch.testing.assert_close(got, list(want), rtol=0, atol=0)
    step.random = True
    with pytest.raises(RuntimeError, match="it draws random numbers"):
        step._recomputed(node, grads)
    step.random = False
    with torch.no_grad():
        layer.up.weight.add_(1)  # an optimizer's step between the forward and this backward
    with pytest.raises(RuntimeError, match="an input or a parameter changed in place"):
        step._recomputed(node, grads)


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
def test_a_second_backward_through_a_replay_recomputes_its_forward_and_equals_eager(exact):
    grads = []
    for enabled in (False, True):
        _, model = _pair()
        with _graphs(enabled):
            for x, _ in _batches(3):  # warm-up, recording (its backward runs eagerly), first replays
                model(x).sum().backward()
            loss = model(_batches(1)[0][0]).pow(2).mean()
            loss.backward(retain_graph=True)
            loss.backward()  # the replays' saved values are gone: the blocks' forwards run again
            model(_batches(1)[0][0]).sum().backward()  # and the next step replays
        grads.append([p.grad for p in model.parameters()])
    assert _counts(model).get("training graph replay", 0) == 12, _counts(model)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)


@cuda
def test_a_second_backward_through_a_replay_that_draws_random_numbers_raises_a_clear_error():
    _, model = _pair(p=0.2)
    with _graphs(True):
        for x, _ in _batches(3):
            model(x).sum().backward()
        loss = model(_batches(1)[0][0]).sum()
        loss.backward(retain_graph=True)
        with pytest.raises(RuntimeError, match="it draws random numbers"):
            loss.backward()


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


def _in_a_graph_pool(tensor: torch.Tensor) -> bool:
    address = tensor.untyped_storage().data_ptr()
    return any(
        tuple(segment["segment_pool_id"]) != (0, 0)
        and segment["address"] <= address < segment["address"] + segment["total_size"]
        for segment in torch.cuda.memory_snapshot()
    )


@cuda
def test_a_block_reads_the_previous_blocks_output_where_it_lies_and_gradients_take_the_pools_memory(exact):
    _, model = _pair()
    with _graphs(True):
        for x, _ in _batches(4):
            model.zero_grad()
            model(x).sum().backward()
    steps = [next(iter(graphs.replayer(layer, graphs._TRAIN_KEY)._steps.values())) for layer in model.layers]
    # The first layer's input is the caller's (copied in); each next one reads its predecessor's output.
    assert [output is not None for output in steps[0].chained] == [False]
    assert all(output is not None for step in steps[1:] for output in step.chained)
    assert all(_in_a_graph_pool(p.grad) for p in model.layers.parameters())  # no copy out of the pool
    assert not any(_in_a_graph_pool(p.grad) for p in model.head.parameters())  # eager's: the allocator's


@cuda
def test_a_block_called_on_another_tensor_than_recorded_runs_its_source_and_equals_eager(exact):
    grads = []
    for enabled in (False, True):
        _, model = _pair()
        with _graphs(enabled):
            for x, _ in _batches(3):
                model(x).sum().backward()
            x = _batches(1)[0][0]
            hidden = model.layers[0](x)
            for layer in model.layers[1:]:
                hidden = layer(hidden.clone())  # not where the recording read its input
            model.head(hidden).sum().backward()
        grads.append([p.grad for p in model.parameters()])
    assert (
        _counts(model).get(
            "original forward: an input is not the output it was recorded on (the previous block's, where it lies)"
        )
        == 2
    )
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)


def _held_outside_pools() -> int:
    in_pools = sum(
        segment["allocated_size"]
        for segment in torch.cuda.memory_snapshot()
        if tuple(segment["segment_pool_id"]) != (0, 0)
    )
    return torch.cuda.memory_allocated() - in_pools


@cuda
def test_recordings_leave_no_memory_behind_per_recording():
    """Libraries keep state per stream (cuBLAS a workspace of up to 32 MiB): graphs record on one stream, so
    what a model holds outside the pools does not grow with the number of blocks recorded."""
    held = {}
    for enabled in (False, True):
        for depth in (2, 8):
            torch.manual_seed(1)
            model = Net(depth=depth).cuda()
            gc.collect()
            before = _held_outside_pools()
            _train(model, _batches(4), enabled=enabled)
            gc.collect()
            held[enabled, depth] = _held_outside_pools() - before
            del model
    growth_with_graphs = held[True, 8] - held[True, 2]
    growth_without = held[False, 8] - held[False, 2]
    assert abs(growth_with_graphs - growth_without) < 2**20, held
