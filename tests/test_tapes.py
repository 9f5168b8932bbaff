"""Tapes (emit/runtime/tapes.py): the CPU's default replay of the forwards the build marked `graphed`.

Every test runs the replayed forward and the source's forward (`forward.__wrapped__`) side by side on the
same inputs: the tape runs the ops the recording saw, so results are equal bit for bit, and so are writes
into inputs and buffers, and random draws from a seeded generator.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from emit.runtime import graphs
from emit.runtime.graphs import graphed
from tests.test_graphing import build


def tape_of(module: nn.Module):
    kept = graphs.replayer(module, graphs._TAPES_KEY)
    assert kept is not None
    return kept


def only_tape(module: nn.Module):
    (recorded,) = tape_of(module)._graphs.values()
    assert not isinstance(recorded, str), recorded
    return recorded


def source(module: nn.Module, *args, **kwargs):
    return type(module).forward.__wrapped__(module, *args, **kwargs)


class Masked(nn.Module):
    """Position ids and a causal mask made from shapes (folded), a host read of an input (checked), an unused op."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    @graphed()
    def forward(self, x, mask=None):
        positions = torch.arange(x.shape[1])
        causal = torch.ones(x.shape[1], x.shape[1]).tril() > 0
        unused = x * 3  # noqa: F841 - dropped from the tape
        if bool((positions >= 0).all()):  # a read of a fixed value: no check at replay
            h = self.linear(self.norm(x)) + positions[:, None]
        if mask is not None and bool(mask.any()):  # a read of an input: checked at replay
            h = h * mask
        scores = (h @ h.transpose(-1, -2)).masked_fill(~causal, -1e4).softmax(-1)
        return {"h": scores @ h, "positions": positions, "count": 3}


def calls(module, inputs: list[tuple], runs: int = 4):
    """Each input run `runs` times through the module and through its source, compared exactly."""
    with torch.no_grad():
        for args in inputs:
            for _ in range(runs):
                got, want = module(*args), source(module, *args)
                assert got.keys() == want.keys()
                for key in want:
                    if isinstance(want[key], torch.Tensor):
                        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape
                        assert torch.equal(got[key], want[key]), key
                    else:
                        assert got[key] == want[key]


def test_a_tape_replays_the_forward_exactly_and_leaves_out_what_it_proves_it_may():
    torch.manual_seed(0)
    model = Masked().eval()
    x = torch.randn(2, 5, 16)
    calls(model, [(x,), (torch.randn(2, 5, 16),)])
    counts = tape_of(model).counts
    assert counts["warm-up (original forward)"] == 1 and counts["recorded as a tape"] == 1
    assert counts["tape replay"] == 6
    tape = only_tape(model)
    assert tape.guards == 0 and tape.folded_reads == 1  # `(positions >= 0).all()` is made from constants
    text = tape.source
    assert "arange" not in text and "tril" not in text  # folded: computed once, at the recording
    assert "aten_mul_Tensor" not in text  # `unused` is dropped
    assert "aten_t_default" not in text  # a view of the weight alone: bound once, reads the weight at each call


def test_a_host_read_of_an_input_is_checked_and_a_different_value_runs_the_source():
    torch.manual_seed(0)
    model = Masked().eval()
    x, ones, zeros = torch.randn(2, 5, 16), torch.ones(2, 5, 1), torch.zeros(2, 5, 1)
    calls(model, [(x, ones)])
    assert only_tape(model).guards == 1
    calls(model, [(x, zeros)], runs=1)  # `mask.any()` reads False: the tape stops, the source runs
    (reason,) = tape_of(model)._graphs.values()
    assert reason == "original forward: a host read differed from the one its recording answered"
    calls(model, [(x, ones)], runs=2)  # the signature runs the source from then on, still right


def test_new_shapes_dtypes_and_repeated_arguments_record_again():
    torch.manual_seed(0)
    model = Masked().eval()
    x = torch.randn(2, 5, 16)
    calls(model, [(x,), (torch.randn(3, 7, 16),)])
    assert sum(not isinstance(t, str) for t in tape_of(model)._graphs.values()) == 2

    class Pair(nn.Module):
        @graphed()
        def forward(self, a, b):
            a.add_(1)
            return a * b

    pair = Pair().eval()
    with torch.no_grad():
        for _ in range(3):
            t = torch.ones(3)
            assert torch.equal(pair(t, t), torch.full((3,), 4.0))  # one tensor twice: (1 + 1) * 2
            u, v = torch.ones(3), torch.ones(3)
            assert torch.equal(pair(u, v), torch.full((3,), 2.0)) and torch.equal(u, torch.full((3,), 2.0))
    assert len(tape_of(pair)._graphs) == 2


class Stateful(nn.Module):
    """Writes into its input and its own buffer, draws random numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.scale = nn.Parameter(torch.full((4,), 2.0))

    @graphed()
    def forward(self, x):
        self.steps.add_(1)
        x.mul_(self.scale)
        noise = torch.rand(x.shape)
        return x + noise + self.steps


def test_writes_into_inputs_and_buffers_and_random_draws_happen_as_in_the_source():
    model, twin = Stateful().eval(), Stateful().eval()
    with torch.no_grad():
        for call in range(6):
            x = torch.randn(3, 4)
            y = x.clone()
            torch.manual_seed(call)
            got = model(x)
            torch.manual_seed(call)
            want = source(twin, y)
            assert torch.equal(got, want) and torch.equal(x, y) and torch.equal(model.steps, twin.steps)
    counts = tape_of(model).counts
    assert counts["tape replay"] == 4 and counts["recorded as a tape"] == 1  # its own writes record nothing again


def test_parameters_changed_in_place_are_read_and_folded_values_follow_them():
    class Folding(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(4))

        @graphed()
        def forward(self, x):
            return x * self.weight.t() + torch.arange(4)

    model = Folding().eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(3):
            model(x)
        model.load_state_dict({"weight": torch.full((4,), 3.0)})  # in place
        assert torch.equal(model(x), x * 3 + torch.arange(4))
        model.weight.mul_(2)
        assert torch.equal(model(x), x * 6 + torch.arange(4))


def test_values_made_from_buffers_are_folded_and_follow_changes_to_them():
    class Rotary(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 8, 2) / 8), persistent=False)

        @graphed()
        def forward(self, x):
            angles = torch.arange(x.shape[1])[:, None] * self.inv_freq[None, :]
            emb = torch.cat((angles, angles), dim=-1)
            return x * emb.cos() + x.flip(-1) * emb.sin()

    model = Rotary().eval()
    x = torch.randn(2, 6, 8)
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(model(x), source(model, x))
        text = only_tape(model).source
        assert "cos" not in text and "sin" not in text and "cat" not in text, text
        model.inv_freq.mul_(2)  # in place: the guards see its version, the tape records again
        for _ in range(3):
            assert torch.equal(model(x), source(model, x))
    assert tape_of(model).counts["recorded as a tape"] == 2


def test_an_output_viewing_a_parameter_stays_a_view_of_it():
    class Exposed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(3, 2))

        @graphed()
        def forward(self, x):
            return x + 1, self.weight.t()

    model = Exposed().eval()
    with torch.no_grad():
        for _ in range(4):
            _, view = model(torch.ones(2))
        view.add_(1)  # through the view, as in eager
    assert torch.equal(model.weight, torch.ones(3, 2)) and only_tape(model).ops >= 2


def test_outputs_are_new_tensors_at_each_call():
    model = Masked().eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        outputs = [model(x) for _ in range(4)]
    first, last = outputs[0], outputs[-1]
    assert first["positions"].data_ptr() != last["positions"].data_ptr()  # a folded value is handed out as a copy
    last["positions"].add_(100)
    with torch.no_grad():
        assert torch.equal(model(x)["positions"], torch.arange(5))
    assert first["h"].data_ptr() != last["h"].data_ptr()


def test_what_a_tape_cannot_stand_for_runs_the_source_with_the_reason():
    class Raw(nn.Module):
        @graphed()
        def forward(self, x):
            return x * len(x.tolist())

    class ReadAfterWrite(nn.Module):
        @graphed()
        def forward(self, x, flag):
            x.add_(1)
            return x * 2 if bool(flag) else x

    raw, late = Raw().eval(), ReadAfterWrite().eval()
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(raw(torch.ones(3)), torch.full((3,), 3.0))
            x = torch.ones(2)
            assert torch.equal(late(x, torch.tensor(True)), torch.full((2,), 4.0)) and torch.equal(
                x, torch.full((2,), 2.0)
            )
    (why,) = tape_of(raw)._graphs.values()
    assert "outside PyTorch's dispatcher (`tolist()`)" in why
    (why,) = tape_of(late)._graphs.values()
    assert "before a host read" in why


def test_hooks_of_the_modules_inside_run_at_every_call():
    """A replay runs no Python: a module inside with a hook, or a global module hook, runs the source's forward,
    from the call the hook appears on, so the hook sees every call as in eager."""
    module = Masked().eval()
    seen = []
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        for _ in range(3):
            module(x)
        assert tape_of(module).counts["tape replay"] == 1
        handle = module.norm.register_forward_hook(lambda m, args, out: seen.append(out.shape))
        for _ in range(2):
            assert torch.equal(module(x)["h"], source(module, x)["h"])
        handle.remove()
        module(x)  # replays again
        assert tape_of(module).counts["tape replay"] == 2
        hook = nn.modules.module.register_module_forward_pre_hook(lambda m, args: seen.append(type(m).__name__))
        try:
            module(x)
        finally:
            hook.remove()
    assert seen[:2] == [torch.Size([2, 5, 16])] * 2 and {"LayerNorm", "Linear"} <= set(seen[2:])
    assert tape_of(module).counts[graphs.HOOKED] == 3


def test_past_the_folding_budget_values_are_computed_at_each_replay(monkeypatch):
    monkeypatch.setattr(graphs.tapes, "FOLDED_BYTES", 0)
    model = Masked().eval()
    calls(model, [(torch.randn(2, 5, 16),)])
    text = only_tape(model).source
    assert "arange" in text and "tril" in text  # nothing folded: the mask and the positions are made each call
    assert "aten_t_default" not in text  # views of parameters hold no memory of their own: still bound


def test_inputs_that_are_parameters_attribute_stores_and_autocast_are_refused():
    class Attributes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(3))
            self.calls = 0

        @graphed()
        def forward(self, x):
            self.calls += 1
            return x * self.weight

    model, other = Attributes().eval(), Attributes().eval()
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(model(model.weight), torch.ones(3))
            other(torch.ones(3))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.ones(3))
    assert tape_of(model).counts["original forward: an input is a parameter or buffer of the module, or a view of one"]
    assert tape_of(model).counts["original forward: autocast is on"] == 1
    (why,) = tape_of(other)._graphs.values()
    assert why == "original forward: the forward sets Python attributes of its modules"
    assert other.calls == 3  # every call ran the source, the recording's included


def test_autograd_training_and_the_switch_run_the_source():
    model = Masked()
    x = torch.randn(2, 5, 16)
    model(x)  # training
    model.eval()
    model(x)  # autograd on
    assert graphs.replayer(model, graphs._TAPES_KEY) is None
    graphs.set_default_tapes(False)
    try:
        with torch.no_grad():
            for _ in range(3):
                model(x)
        assert graphs.replayer(model, graphs._TAPES_KEY) is None
    finally:
        graphs.set_default_tapes(True)


MODEL = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32)

    def forward(self, x):
        h = self.up(x)
        h = h * torch.sigmoid(h) * 0.5 + 1.0
        return x + self.down(h)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
"""


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_transpiled_model_replays_its_kernels_from_the_tape(tmp_path, monkeypatch, dtype):
    """A model transpiled with fused C++ kernels: the tape calls them as one call each, and matches eager."""
    out = build(tmp_path, MODEL, out_name=f"taped_{tmp_path.name}".replace("-", "_"))
    (out / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(f"{out.name}.models.net")
    runtime = importlib.import_module(f"{out.name}._transpile_runtime")
    torch.manual_seed(0)
    model = module.Model().to(dtype).eval()
    x = torch.randn(4, 8, 32, dtype=dtype)
    with torch.no_grad():
        want = type(model).forward.__wrapped__(model, x)
        for _ in range(4):
            got = model(x)
            assert torch.equal(got, want)
    tape = graphs_of(runtime).replayer(model, "_transpile_tapes")._graphs
    (recorded,) = tape.values()
    assert not isinstance(recorded, str), recorded
    assert "kernel_fused" in recorded.source, recorded.source  # the fused region, called once per block


def graphs_of(runtime):
    return importlib.import_module(f"{runtime.__name__}.graphs")
