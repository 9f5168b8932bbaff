"""The opt-in CUDA-graph runtime mode (emit/runtime/graphs.py): when it replays, when it runs the original forward.

Without a GPU only the decisions are tested (every CPU call runs the original forward,
with its reason); the `gpu` tests record and replay, against eager on random inputs.
"""

from __future__ import annotations

import copy
import gc
import inspect
import os
import threading
import weakref

import pytest
import torch
from torch import nn

from emit.runtime import graphs
from emit.runtime.graphs import CudaGraphs, _describe, _rebuild, _Snapshot, cuda_graph_blocks, cuda_graphs

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class Block(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.drop = nn.Dropout(0.5)

    def forward(self, x, scale: float = 1.0, residual=None):
        h = self.drop(torch.nn.functional.gelu(self.linear(self.norm(x)))) * scale
        return {"out": h if residual is None else h + residual, "extra": (h.sum(-1), None)}


def test_arguments_describe_and_rebuild_in_order():
    x, y = torch.randn(2, 3), torch.randn(4)
    tensors: list = []
    key = _describe(((x, [y, 2]), {"flag": True, "none": None}), tensors)
    assert tensors == [x, y]
    hash(key)  # a dict key
    other: list = []
    assert _describe(((x.t(), [y, 2]), {"flag": True, "none": None}), other) != key  # strides are in the key
    assert _describe(((x, [y, 3]), {"flag": True, "none": None}), []) != key  # plain values too
    a, b = torch.zeros(2, 3), torch.zeros(4)
    rebuilt = _rebuild(((x, [y, 2]), {"flag": True, "none": None}), iter([a, b]))
    assert (
        rebuilt[0][0] is a
        and rebuilt[0][1][0] is b
        and rebuilt[0][1][1] == 2
        and rebuilt[1] == {"flag": True, "none": None}
    )


def test_snapshot_sees_replacements_moves_and_modes():
    model = nn.Sequential(Block(), Block()).eval()
    snapshot = _Snapshot(model)
    assert snapshot.holds()
    with torch.no_grad():
        # In place: the recorded kernels read the same memory, but values derived from it and kept (a folded
        # batch norm, a tape's folded values) are made again only by a new recording.
        model[0].linear.weight.mul_(2)
    assert not snapshot.holds()
    assert snapshot.settle() and snapshot.holds()  # the versions taken as they are now: a forward's own writes
    assert not snapshot.settle()
    model[0].linear.weight = nn.Parameter(torch.randn(16, 16))
    assert not snapshot.holds()
    snapshot = _Snapshot(model)
    model[1].linear.weight.data = torch.randn(16, 16)  # same object, new memory
    assert not snapshot.holds()
    snapshot = _Snapshot(model)
    model[1].norm = nn.LayerNorm(16)
    assert not snapshot.holds()
    snapshot = _Snapshot(model)
    model.train()
    assert not snapshot.holds()
    model.eval()
    snapshot = _Snapshot(model)
    model[0].register_buffer("added", torch.zeros(2))  # an entry more: the forward may read it
    assert not snapshot.holds()
    snapshot = _Snapshot(model)
    del model[1].drop  # an entry less, through no registration hook
    assert not snapshot.holds()
    snapshot = _Snapshot(model)
    model[1]._modules["renamed"] = model[1]._modules.pop("norm")  # the same modules under another name
    assert not snapshot.holds()


def test_cpu_calls_run_the_original_forward_with_the_reason():
    torch.manual_seed(0)
    model = Block().eval()
    forward = cuda_graphs(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        out = forward(x, scale=0.5)
    assert torch.equal(out["out"], model(x, scale=0.5)["out"])
    assert forward.counts == {"original forward: an input is not a CUDA tensor, or none is a tensor": 1}
    forward(x)
    assert forward.counts["original forward: autograd is on (graphs are for inference: use torch.no_grad())"] == 1


class Half:
    """A scale the forward accepts but a graph cannot key on."""

    def __rmul__(self, other):
        return other * 0.5


def test_arguments_that_are_not_values_run_the_original_forward():
    model = Block().eval()
    forward = cuda_graphs(model)
    x = torch.randn(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(forward(x, scale=Half())["out"], model(x, scale=0.5)["out"])
    assert forward.counts == {"original forward: an argument of type Half (not a tensor or a plain value)": 1}


def test_a_bound_forward_can_replace_the_module_forward():
    model = Block().eval()
    model.forward = cuda_graphs(model.forward)
    assert model.forward.module is model
    with torch.no_grad():
        out = model(torch.randn(3, 16))["out"]  # through nn.Module.__call__, hooks included
    assert out.shape == (3, 16)
    assert set(model.forward.counts) == {"original forward: an input is not a CUDA tensor, or none is a tensor"}
    with pytest.raises(TypeError, match="module"):
        CudaGraphs(lambda x: x)


# -- on a GPU: record, replay, and against eager -------------------------------------------------
@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("copy_outputs", [True, False])
def test_replays_equal_eager_on_fresh_inputs(copy_outputs):
    torch.manual_seed(0)
    model = Block().cuda().eval()
    forward = cuda_graphs(model, copy_outputs=copy_outputs)
    with torch.no_grad():
        results = []
        for _ in range(4):
            x, residual = torch.randn(8, 16, device="cuda"), torch.randn(8, 16, device="cuda")
            out = forward(x, scale=0.25, residual=residual)
            expected = model(x, scale=0.25, residual=residual)
            torch.testing.assert_close(out["out"], expected["out"])
            torch.testing.assert_close(out["extra"][0], expected["extra"][0])
            assert out["extra"][1] is None
            results.append((out["out"], expected["out"].clone()))
    assert forward.counts == {"warm-up (original forward)": 1, "graph replay": 3}
    earlier, expected = results[1]
    if copy_outputs:  # results of earlier calls stay valid
        torch.testing.assert_close(earlier, expected)
    else:  # the graph's own tensors: the last replay wrote them
        assert earlier.data_ptr() == results[3][0].data_ptr()


@pytest.mark.gpu
@cuda
def test_a_new_signature_records_a_new_graph_and_changes_to_the_model_record_again():
    torch.manual_seed(0)
    model = Block().cuda().eval()
    forward = cuda_graphs(model)
    with torch.no_grad():
        for rows in (4, 4, 4, 6, 6, 6):
            x = torch.randn(rows, 16, device="cuda")
            torch.testing.assert_close(forward(x)["out"], model(x)["out"])
        assert forward.counts["graph replay"] == 4
        model.linear.weight = nn.Parameter(torch.randn(16, 16, device="cuda"))  # a recording would read the old one
        x = torch.randn(4, 16, device="cuda")
        torch.testing.assert_close(forward(x)["out"], model(x)["out"])
        assert forward.counts["warm-up (original forward)"] == 3
        model.linear.weight.data.mul_(3)  # in place: the graph sees it
        forward(x)
        torch.testing.assert_close(forward(x)["out"], model(x)["out"])


class Branches(nn.Module):
    """Reads its input on the host twice: a branch, and a number the kernels use."""

    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x * float(x[0])


@pytest.mark.gpu
@cuda
def test_host_reads_are_answered_from_the_warm_up_and_a_replay_that_would_read_otherwise_runs_the_source():
    model = Branches()
    forward = cuda_graphs(model)
    with torch.no_grad():
        for _ in range(4):  # the branch goes the same way: replays
            x = torch.rand(5, device="cuda") + 0.1
            torch.testing.assert_close(forward(x), x * 2, rtol=0, atol=0)
        assert forward.counts == {
            "warm-up (original forward)": 1,
            "recorded with host reads checked at each replay": 1,
            "graph replay": 3,
        }
        x = -torch.rand(5, device="cuda") - 0.1  # the other arm: the replay's outputs are not used
        torch.testing.assert_close(forward(x), x * float(x[0]), rtol=0, atol=0)
        torch.testing.assert_close(forward(x), x * float(x[0]), rtol=0, atol=0)
        x = torch.rand(5, device="cuda") + 0.1  # the signature's graph is gone for good
        torch.testing.assert_close(forward(x), x * 2, rtol=0, atol=0)
    reason = "original forward: a host read differed from the one its recording answered"
    assert forward.counts[reason] == 3
    assert torch.cuda.is_current_stream_capturing is graphs.host_reads._is_capturing  # restored after recording


@pytest.mark.gpu
@cuda
def test_a_number_read_on_the_host_replays_only_while_it_is_the_same_value():
    class Scales(nn.Module):
        def forward(self, x, s):
            return x * s.item()

    model = Scales()
    forward = cuda_graphs(model)
    x = torch.randn(5, device="cuda")
    with torch.no_grad():
        for value in (0.5, 0.5, 0.5, -0.0, 0.0, float("nan"), float("nan")):
            s = torch.tensor(value, device="cuda")
            torch.testing.assert_close(forward(x, s), x * value, rtol=0, atol=0, equal_nan=True)
    # 0.5 replays twice; -0.0 differs from it (the signature then runs the source for every later call)
    assert forward.counts["graph replay"] == 2
    assert forward.counts["original forward: a host read differed from the one its recording answered"] == 4


@pytest.mark.gpu
@cuda
def test_libraries_take_their_eager_path_while_recording_and_other_waits_still_refuse():
    class AsksForCapture(nn.Module):
        def forward(self, x):
            if torch.cuda.is_current_stream_capturing():
                return x + 1  # the path a library takes when it cannot read values
            return x * 2

    forward = cuda_graphs(AsksForCapture())
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(5, device="cuda")
            torch.testing.assert_close(forward(x), x * 2, rtol=0, atol=0)
    assert forward.counts["graph replay"] == 2

    class Selects(nn.Module):
        def forward(self, x):
            return x[x > 0]  # a data-dependent shape: still waits on the device

    forward = cuda_graphs(Selects())
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(5, device="cuda")
            torch.testing.assert_close(forward(x), x[x > 0])
        y = torch.randn(5, device="cuda")  # CUDA still works after the refused recording
        torch.testing.assert_close(forward(y), y[y > 0])
    (reason,) = [r for r in forward.counts if r.startswith("original forward: the forward cannot be recorded")]
    assert forward.counts[reason] == 3


class Positions(nn.Module):
    """transformers' packed-sequence check: a host read of values made from constants (not from the input)."""

    def forward(self, x):
        positions = torch.arange(x.shape[-1], device=x.device)
        if (positions.diff() != 1).any():
            return x - 1
        return x * 2


def _triton_copy():
    """A compiled Triton kernel whatever the order of the test modules: test_triton_backend turns the
    interpreter on at its import, and `triton.jit` reads the setting when it decorates."""
    import triton
    import triton.language as tl

    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:

        @triton.jit
        def copy(source, target):
            tl.store(target, tl.load(source))

    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
    return copy


class WrittenOutside(nn.Module):
    """A zero-filled buffer a Triton kernel (outside PyTorch's dispatcher) writes, then read on the host."""

    copy = None

    def forward(self, x):
        flag = torch.zeros((), dtype=torch.bool, device=x.device)
        WrittenOutside.copy[(1,)](x[0] > 0, flag)
        if flag:
            return x * 2
        return x - 1


@pytest.mark.gpu
@cuda
def test_a_read_of_values_made_from_constants_is_proved_fixed_and_the_host_does_not_wait():
    forward = cuda_graphs(Positions())
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(5, device="cuda")
            torch.testing.assert_close(forward(x), x * 2, rtol=0, atol=0)
    assert forward.counts["recorded with host reads proved fixed (checked one replay later)"] == 1
    (graph,) = [g for g in forward._graphs.values() if not isinstance(g, str)]
    assert (graph.fixed_reads, graph.checked_reads) == (1, 0)


@pytest.mark.gpu
@cuda
def test_memory_handed_to_a_kernel_outside_the_dispatcher_is_not_proved_fixed(monkeypatch):
    WrittenOutside.copy = _triton_copy()
    forward = cuda_graphs(WrittenOutside())
    with torch.no_grad():
        x = torch.rand(5, device="cuda") + 0.1
        for _ in range(3):
            torch.testing.assert_close(forward(x), x * 2, rtol=0, atol=0)
        (graph,) = [g for g in forward._graphs.values() if not isinstance(g, str)]
        assert (graph.fixed_reads, graph.checked_reads) == (0, 1)
        y = -x
        torch.testing.assert_close(forward(y), y - 1, rtol=0, atol=0)  # the check, before the outputs go out
    assert forward.counts["original forward: a host read differed from the one its recording answered"] == 1

    # Were the pointer not seen, the read would look fixed: the next replay looks at the previous one's check
    # and raises, naming the broken assumption, rather than let it pass unseen; the graph is dropped.
    monkeypatch.setattr(graphs.host_reads, "POINTER_METHODS", set())
    forward = cuda_graphs(WrittenOutside())
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(forward(x), x * 2, rtol=0, atol=0)
        forward(y)  # its outputs are the recorded arm's: what the check one replay later is for
        with pytest.raises(RuntimeError, match="proved fixed"):
            forward(x)
        torch.testing.assert_close(forward(y), y - 1, rtol=0, atol=0)
    assert forward.counts["original forward: a host read its recording proved fixed changed"] == 1


@pytest.mark.gpu
@cuda
def test_a_recording_that_fails_for_any_reason_runs_the_source_forward(monkeypatch):
    def unsuited(self, func, types, args=(), kwargs=None):
        raise TypeError("a tensor subclass the mode does not know")

    monkeypatch.setattr(graphs.host_reads.Noting, "__torch_dispatch__", unsuited)
    model = Block().cuda().eval()
    forward = cuda_graphs(model)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(8, 16, device="cuda")
            torch.testing.assert_close(forward(x)["out"], model(x)["out"])
    assert (
        forward.counts["original forward: the forward cannot be recorded (a tensor subclass the mode does not know)"]
        == 2
    )


def test_recordings_in_two_threads_keep_the_answer_until_the_last_one_ends():
    from emit.runtime import host_reads

    flag = torch.zeros((), dtype=torch.bool)
    first, second = (host_reads.Answering([], flag, flag) for _ in range(2))
    entered, first_ended, seen = threading.Event(), threading.Event(), []

    def record_in_another_thread():
        with second:
            entered.set()
            first_ended.wait(10)
            seen.append(torch.cuda.is_current_stream_capturing)

    thread = threading.Thread(target=record_in_another_thread)
    with first:
        thread.start()
        entered.wait(10)
    first_ended.set()  # the other recording is still under way: still told
    thread.join(10)
    assert seen == [host_reads._capturing_as_told]
    assert torch.cuda.is_current_stream_capturing is host_reads._is_capturing  # the last one ended


def test_a_host_read_differs_exactly_when_the_value_would_read_otherwise():
    from emit.runtime.host_reads import Unanswered, _differs

    cases = [
        (torch.tensor(True), True, False),
        (torch.tensor(True), False, True),
        (torch.tensor(3), 3, False),
        (torch.tensor(3), 4, True),
        (torch.tensor(0.1, dtype=torch.float16), torch.tensor(0.1, dtype=torch.float16).item(), False),
        (torch.tensor(0.0), -0.0, True),
        (torch.tensor(-0.0), -0.0, False),
        (torch.tensor(float("nan")), float("nan"), False),
        (torch.tensor(1.0), float("nan"), True),
        (torch.tensor(float("nan")), 1.0, True),
    ]
    for tensor, value, differs in cases:
        assert bool(_differs(tensor, value)) is differs, (tensor, value)
    with pytest.raises(Unanswered):
        _differs(torch.tensor(1j), 1j)


def test_warm_up_counts_stay_bounded_when_shapes_never_repeat(monkeypatch):
    import emit.runtime.graphs as graphs

    monkeypatch.setattr(graphs, "SEEN_LIMIT", 4)
    forward = cuda_graphs(Block().eval())
    forward._signature = lambda args, kwargs: ((args[0].shape,), [args[0]])  # as a CUDA call would be keyed
    with torch.no_grad():
        for rows in range(1, 11):
            forward(torch.randn(rows, 16))
    assert forward.counts == {"warm-up (original forward)": 10}
    assert len(forward._seen) <= 4


class Stack(nn.Module):
    """A transformer-shaped model: glue that asks whether it is being recorded (as transformers'
    mask set-up does), a list of blocks, and a nested list inside one block that is not a block."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 16)
        self.layers = nn.ModuleList(Block() for _ in range(3))
        self.layers[1].inner = nn.ModuleList([nn.Identity()])
        self.head = nn.Linear(16, 4)
        self.masked_calls = 0

    def forward(self, x):
        # The path a recording of the whole forward would take.
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            self.masked_calls += 1
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h, scale=0.5, residual=h)["out"]
        return self.head(h)


def test_block_graphs_wrap_the_outermost_list_and_come_off_again():
    model = Stack().eval()
    blocks = cuda_graph_blocks(model)
    assert list(blocks.blocks) == ["layers.0", "layers.1", "layers.2"]  # not layers.1.inner.0
    assert model.layers[0].forward is blocks.blocks["layers.0"]
    with torch.no_grad():
        x = torch.randn(2, 16)
        out = model(x)
        assert blocks.counts == {"original forward: an input is not a CUDA tensor, or none is a tensor": 3}
        with pytest.raises(ValueError, match="layers.0 has its own forward already"):
            cuda_graph_blocks(model)
        blocks.remove()
        assert "forward" not in vars(model.layers[0]) and blocks.counts == {}
        torch.testing.assert_close(model(x), out)
        assert set(model.state_dict()) == set(Stack().state_dict())
    with pytest.raises(ValueError, match="no nn.ModuleList"):
        cuda_graph_blocks(Block())


@pytest.mark.gpu
@cuda
def test_block_graphs_replay_the_blocks_and_leave_the_glue_eager():
    torch.manual_seed(0)
    model = Stack().cuda().eval()
    eager = copy.deepcopy(model)
    blocks = cuda_graph_blocks(model)
    with torch.no_grad():
        results = []
        for _ in range(4):
            x = torch.randn(8, 16, device="cuda")
            out = model(x)
            torch.testing.assert_close(out, eager(x))
            results.append((out, out.clone()))
    assert blocks.counts == {"warm-up (original forward)": 3, "graph replay": 9}
    assert model.masked_calls == 0  # the glue never ran inside a recording
    for out, expected in results:  # one pool for all blocks, outputs copied out: earlier results stay valid
        torch.testing.assert_close(out, expected)
    assert {wrapper._pool for wrapper in blocks.blocks.values()} == {blocks.pool}  # one pool for all blocks
    recorded_into = blocks.pool.handle()
    blocks.reset()
    with torch.no_grad():
        for _ in range(3):  # warm-up, then record and replay, then replay: into a new pool
            x = torch.randn(8, 16, device="cuda")
            torch.testing.assert_close(model(x), eager(x))
    assert blocks.counts["graph replay"] == 9 + 6 and blocks.pool.handle() != recorded_into


# -- the default replay of the forwards the build marked `graphed` ---------------------------------------
from emit.runtime.graphs import default_graph_counts, graphed, replayer, set_default_graphs  # noqa: E402


class Scaled(nn.Module):
    """A block as the build emits it: the source's forward under `graphed`, reading `self.scale`."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.scale = 2.0

    @graphed(reads=("scale", "linear.weight.shape", "missing.attribute"))
    def forward(self, x, bias=None):
        h = torch.nn.functional.gelu(self.linear(x)) * self.scale
        return h if bias is None else h + bias


def test_graphed_forward_runs_as_it_is_off_cuda_and_keeps_its_signature():
    block = Scaled().eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        expected = torch.nn.functional.gelu(block.linear(x)) * 2.0
        torch.testing.assert_close(block(x), expected, rtol=0, atol=0)
    assert replayer(block) is None  # nothing recorded, nothing kept for a CPU call
    assert list(inspect.signature(Scaled.forward).parameters) == ["self", "x", "bias"]
    assert Scaled.forward.__transpile_reads__ == ("scale", "linear.weight.shape", "missing.attribute")


def test_snapshot_guards_the_reads_by_value_and_tensor_attributes_by_identity_and_memory():
    block = Scaled().eval()
    snapshot = _Snapshot(block, Scaled.forward.__transpile_reads__)
    # `linear.weight.shape`: the path up to the tensor, whose attributes change only with it.
    paths = ["scale", "linear.weight", "linear.weight.data_ptr()", "missing.attribute"]
    assert [path for path, *_ in snapshot.reads] == paths
    assert snapshot.holds()
    block.scale = 2  # an int equal to the float: a different value for the forward's arithmetic
    assert not snapshot.holds()
    block.scale = 2.0
    assert snapshot.holds()
    block.missing = nn.Module()
    block.missing.attribute = 1  # appears: the forward would read it now
    assert not snapshot.holds()


class Chunked(nn.Module):
    def forward(self, x):
        return x

    @property
    def fresh(self):
        return [object()]


def test_bound_methods_are_guarded_by_value_and_properties_that_build_objects_are_not_guarded():
    module = Chunked()
    snapshot = _Snapshot(module, ("forward", "fresh"))
    assert [path for path, *_ in snapshot.reads] == ["forward"]  # equal at every read
    assert snapshot.holds() and snapshot.unstable == "fresh"  # CudaGraphs then runs the original forward


class Writes(nn.Module):
    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        self.linear = nn.Linear(8, 8)
        self.calls = 0

    @graphed()
    def forward(self, x, items=None):
        if self.what == "input":
            x.add_(1)
        elif self.what == "attribute":
            self.calls += 1
        elif self.what == "argument":
            items.append(x)
        elif self.what == "alias":
            return x[0]
        return self.linear(x)


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Scaled(), Scaled()])

    @graphed()
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def _calls(model, *args, n: int = 4, **kwargs):
    with torch.no_grad():
        return [model(*args, **kwargs) for _ in range(n)]


@cuda
@pytest.mark.gpu
def test_graphed_blocks_replay_and_match_eager_on_fresh_inputs():
    torch.manual_seed(0)
    model = nn.Sequential(Scaled(), Scaled()).cuda().eval()
    before = default_graph_counts()["graph replay"]
    for _ in range(4):
        x, bias = torch.randn(8, 16, device="cuda"), torch.randn(16, device="cuda")
        with torch.no_grad():
            got = model[1](model[0](x), bias=bias)
            h = model[0].linear(x)
            h = torch.nn.functional.gelu(model[1].linear(torch.nn.functional.gelu(h) * 2.0)) * 2.0 + bias
        torch.testing.assert_close(got, h)
    assert default_graph_counts()["graph replay"] - before >= 4  # two blocks, calls 3 and 4 replay
    # A read attribute changed: the block records again, and computes with the new value.
    model[0].scale = 3.0
    x = torch.randn(8, 16, device="cuda")
    for got in _calls(model[0], x):
        torch.testing.assert_close(got, torch.nn.functional.gelu(model[0].linear(x)) * 3.0)


@cuda
@pytest.mark.gpu
def test_a_block_reads_an_earlier_blocks_output_in_place_and_later_outputs_move_before_a_replay():
    """Block 1 recorded after block 0: its replay cannot write where block 0's outputs lie (they were alive while
    it recorded), so the hidden state passes without a copy; block 0's replay may write where block 1's lie."""
    torch.manual_seed(0)
    first, second = Scaled().cuda().eval(), Scaled().cuda().eval()
    x = torch.randn(8, 16, device="cuda")
    with torch.no_grad():
        for _ in range(3):  # warm-up, then the recordings: block 0's first
            second(first(x))
        h = first(x)
        where = h.data_ptr()
        out = second(h)
        assert h.data_ptr() == where  # not moved: no copy of the hidden state between the blocks
        kept = out.clone()
        again = first(x)  # writes its intermediates: block 1's output, still referenced, moved out first
        wanted = torch.nn.functional.gelu(second.linear(torch.nn.functional.gelu(first.linear(x)) * 2.0)) * 2.0
    assert replayer(first).counts["graph replay"] >= 2 and replayer(second).counts["graph replay"] >= 2
    torch.testing.assert_close(out, kept, rtol=0, atol=0)
    torch.testing.assert_close(out, wanted)
    torch.testing.assert_close(again, h)


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize(
    ("what", "reason"),
    [
        ("input", "the forward writes into an input tensor"),
        ("attribute", "the forward sets Python attributes of its modules"),
        ("argument", "the forward changes its arguments"),
        ("alias", "an output is an input or a parameter"),
    ],
)
def test_what_a_replay_would_not_reproduce_runs_the_original_forward(what, reason):
    block = Writes(what).cuda().eval()
    x = torch.randn(4, 8, device="cuda")
    eager_x = x.clone()
    with torch.no_grad():  # a fresh list each call: one signature, recorded at the second call
        outs = [block(x, items=[] if what == "argument" else None) for _ in range(4)]
    counts = replayer(block).counts
    assert any(reason in key for key in counts), counts
    assert counts["graph replay"] == 0
    if what == "input":
        torch.testing.assert_close(x, eager_x + 4)  # every call wrote into the caller's tensor, as eager
    if what == "attribute":
        assert block.calls == 4 + 1  # and the recording's warm-up call
    if what == "alias":
        assert all(out.data_ptr() == x.data_ptr() for out in outs)


def _timings(monkeypatch, blocks: float, whole: float) -> None:
    """`_faster`'s two timings, made deterministic: the blocks' path, then the one graph."""
    times = iter([blocks, whole])
    monkeypatch.setattr(graphs, "_best_seconds", lambda call: (call(), next(times))[1])


@cuda
@pytest.mark.gpu
def test_a_model_replays_as_one_graph_with_its_blocks_inside_where_that_is_faster(monkeypatch):
    _timings(monkeypatch, blocks=2e-3, whole=1e-3)
    model = Outer().cuda().eval()
    x = torch.randn(4, 16, device="cuda")
    outs = _calls(model, x)
    assert replayer(model).counts["graph replay"] == 3  # the recording call replays too
    # Inside the model's recording the blocks ran as they are; their own recordings (timed) are gone.
    assert all(not replayer(block)._graphs for block in model.blocks)
    with torch.no_grad():
        h = x
        for block in model.blocks:
            h = torch.nn.functional.gelu(block.linear(h)) * block.scale
    for out in outs:
        torch.testing.assert_close(out, h)


@cuda
@pytest.mark.gpu
def test_a_model_whose_blocks_graphs_are_faster_runs_its_forward_with_them(monkeypatch):
    _timings(monkeypatch, blocks=1e-3, whole=2e-3)
    model = Outer().cuda().eval()
    x = torch.randn(4, 16, device="cuda")
    outs = _calls(model, x)
    (reason,) = [key for key in replayer(model).counts if key.startswith("original forward: its blocks' graphs")]
    assert "1.00 ms against 2.00 ms as one graph" in reason and replayer(model).counts["graph replay"] == 0
    assert all(replayer(block).counts["graph replay"] >= 2 for block in model.blocks)
    for out in outs:
        torch.testing.assert_close(out, outs[0])
    # Decided: the model's calls run its forward without walking the model's guards (the blocks guard themselves).
    walks = []
    model_snapshot = replayer(model)._state
    monkeypatch.setattr(graphs._Snapshot, "holds", lambda self: walks.append(self is model_snapshot) or True)
    with torch.no_grad():
        model(x)
    assert walks and not any(walks)


@cuda
@pytest.mark.gpu
def test_default_graphs_can_be_turned_off():
    block = Scaled().cuda().eval()
    x = torch.randn(4, 16, device="cuda")
    set_default_graphs(False)
    try:
        _calls(block, x)
        assert replayer(block) is None
    finally:
        set_default_graphs(True)


@cuda
@pytest.mark.gpu
def test_a_graphed_module_is_freed_with_its_recordings_and_copies_record_their_own():
    block = Scaled().cuda().eval()
    x = torch.randn(4, 16, device="cuda")
    first = _calls(block, x)[-1]
    assert replayer(block).counts["graph replay"] == 3
    twin = copy.deepcopy(block)  # the copy has no recordings: graphs are not copied
    assert replayer(twin) is None
    twin.scale = 5.0
    torch.testing.assert_close(_calls(twin, x)[-1], first / 2.0 * 5.0)
    assert replayer(twin).counts["graph replay"] == 3 and replayer(block).counts["graph replay"] == 3
    shallow = copy.copy(block)  # shares the original's attributes: must not run the original's replayer
    assert replayer(shallow) is None
    gone = weakref.ref(block)
    del block, shallow
    gc.collect()
    assert gone() is None  # the replayer, its graphs and guards do not keep the module alive


def test_snapshot_of_a_model_guards_its_blocks_reads_under_their_names():
    model = Outer().eval()
    snapshot = _Snapshot(model, ())
    paths = [path for path, *_ in snapshot.reads]
    assert {"blocks.0.scale", "blocks.1.scale", "blocks.1.linear.weight"} <= set(paths)
    assert snapshot.holds()
    model.blocks[1].scale = 3.0  # read by a block inside the model's graph: the model records again
    assert not snapshot.holds()


class Config:
    def __init__(self) -> None:
        self.hidden, self.output_hidden_states, self.name = 16, False, "tiny"


class Configured(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = Config()
        self.table = torch.randn(16)  # a plain tensor attribute, not a buffer

    @graphed(reads=("config.hidden", "table"))
    def forward(self, x):
        return x * self.table[: self.config.hidden]


def test_snapshot_guards_every_plain_field_of_an_object_read_and_plain_tensor_attributes():
    module = Configured()
    snapshot = _Snapshot(module, Configured.forward.__transpile_reads__)
    assert snapshot.holds()
    module.config.output_hidden_states = True  # not read by the file: a library around the forward may
    assert not snapshot.holds()
    module.config.output_hidden_states = False
    assert snapshot.holds()
    del module.config.name
    assert not snapshot.holds()
    snapshot = _Snapshot(module, Configured.forward.__transpile_reads__)
    module.table = torch.randn(16)  # replaced: the recorded kernels read the old tensor's memory
    assert not snapshot.holds()
    snapshot = _Snapshot(module, Configured.forward.__transpile_reads__)
    module.table.data = torch.randn(16)  # the same tensor given new memory
    assert not snapshot.holds()


@pytest.mark.skipif(not hasattr(torch.UntypedStorage, "_swap_data_ptr_"), reason="torch < 2.12")
def test_handed_out_outputs_alias_the_graph_memory_until_it_is_written_again_while_they_live():
    from emit.runtime.graphs import _Handout

    static = torch.arange(12.0)
    outputs = [static[:6].view(2, 3), 7, static[6:]]  # two tensors on one storage, and a plain value
    handout = _Handout(outputs, order=0)
    first = handout.hand_out()
    assert first[1] == 7 and first[0].data_ptr() == static.data_ptr()  # no copy
    assert torch.equal(first[0], static[:6].view(2, 3)) and first[2].stride() == (1,)
    kept = first[2][1:]  # a view of a handed-out output, the output itself dropped
    del first
    assert handout.evict()  # the storage is still referenced (by `kept`): it gets memory of its own first
    static.fill_(-1)  # the next replay writes the graph's memory
    assert torch.equal(kept, torch.arange(7.0, 12.0)) and kept.data_ptr() != static.data_ptr() + 7 * 4
    second = handout.hand_out()
    assert second[0].data_ptr() == static.data_ptr()
    del second
    assert handout.evict() and handout.handed == []  # nothing referenced any more: nothing copied or watched


def test_before_torch_2_12_outputs_move_one_by_one_and_a_view_holds_the_graph(monkeypatch):
    from emit.runtime import graphs
    from emit.runtime.graphs import _Handout

    monkeypatch.setattr(graphs, "_SWAP", False)
    static = torch.arange(12.0)
    handout = _Handout([static[:6], static[6:]], order=0)
    first = handout.hand_out()
    assert handout.evict()  # only the outputs themselves hold their storage: each pointed at a copy
    static.fill_(-1)
    assert torch.equal(torch.cat(first), torch.arange(12.0)) and first[0].data_ptr() != static.data_ptr()
    second = handout.hand_out()
    view = second[1][2:]
    assert not handout.evict()  # a view cannot be moved: the graph must not be replayed while it lives
    assert handout.evict() is False and handout.hand_out()[0].data_ptr() != static.data_ptr()  # copies now
    del second, view
    assert handout.evict() and handout.handed == []


@cuda
@pytest.mark.gpu
def test_outputs_kept_across_replays_stay_valid_and_dropped_ones_are_not_copied():
    torch.manual_seed(0)
    block = Scaled().cuda().eval()
    inputs = [torch.randn(4, 16, device="cuda") for _ in range(5)]
    kept = _calls(block, inputs[0], n=1) + [_calls(block, x, n=1)[0] for x in inputs[1:]]
    assert replayer(block).counts["graph replay"] == 4
    with torch.no_grad():
        for x, out in zip(inputs, kept):  # each replay wrote the graph's memory: the kept ones were moved first
            torch.testing.assert_close(out, torch.nn.functional.gelu(block.linear(x)) * 2.0)
        first = block(inputs[0]).data_ptr()
        second = block(inputs[1])  # the first output was dropped: the replay wrote its memory, no copy
        assert second.data_ptr() == first
        view = second[1:]
        del second
        third = block(inputs[2])  # a view keeps the output alive: moved out before the replay
        torch.testing.assert_close(view, (torch.nn.functional.gelu(block.linear(inputs[1])) * 2.0)[1:])
        torch.testing.assert_close(third, torch.nn.functional.gelu(block.linear(inputs[2])) * 2.0)
        if graphs._SWAP:
            assert third.data_ptr() == first and view.data_ptr() != first + 16 * 4
        else:  # older torch: the view holds the graph's memory; the original forward ran, and copies follow
            assert replayer(block).counts["original forward: a view of an earlier output holds the graph's memory"]
            assert view.data_ptr() == first + 16 * 4 and third.data_ptr() != first


@cuda
@pytest.mark.gpu
def test_outputs_outlive_their_graph_and_cpu_tensor_arguments_run_the_original_forward():
    block = Scaled().cuda().eval()
    x = torch.randn(4, 16, device="cuda")
    out = _calls(block, x)[-1]
    expected = out.clone()
    replayer(block).reset()  # the graph and its memory go: the output still referenced gets its own
    gc.collect()
    noise = [torch.randn(4, 16, device="cuda") for _ in range(64)]
    _calls(block, x * 3)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    del noise
    with torch.no_grad():  # a CPU tensor's values would reach the graph as recorded: never replayed
        for scale in (1.0, 2.0, 3.0):
            torch.testing.assert_close(
                block(x, bias=torch.tensor(scale)), torch.nn.functional.gelu(block.linear(x)) * 2.0 + scale
            )
    assert "original forward: an input is not a CUDA tensor, or none is a tensor" in replayer(block).counts


@cuda
@pytest.mark.gpu
def test_an_output_kept_is_not_overwritten_by_another_graph_of_its_pool():
    # The second block records after the first into the shared pool, possibly into memory the first freed:
    # the first block's next replay must move the second's output the caller kept before writing there.
    torch.manual_seed(0)
    model = nn.Sequential(Scaled(), Scaled()).cuda().eval()
    inputs = [torch.randn(64, 16, device="cuda") for _ in range(5)]
    with torch.no_grad():
        kept = [model(x) for x in inputs]
        for x, out in zip(inputs, kept):
            h = torch.nn.functional.gelu(model[0].linear(x)) * 2.0
            torch.testing.assert_close(out, torch.nn.functional.gelu(model[1].linear(h)) * 2.0)
    assert replayer(model[1]).counts["graph replay"] == 4


@pytest.mark.gpu
@cuda
def test_transformers_records_its_eager_attention_path_and_replays_only_while_its_mask_reads_agree(monkeypatch):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, use_cache=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).cuda().eval()
    masks_seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        if graphs.host_reads.capturing():
            masks_seen.append(kwargs.get("attn_mask") if len(args) < 4 else args[3])
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    forward = cuda_graphs(model)
    ids = torch.randint(0, 128, (2, 16), device="cuda")
    with torch.no_grad():
        for _ in range(3):  # no padding mask: the recording takes SDPA's causal path, as eager does
            torch.testing.assert_close(forward(input_ids=ids).logits, model(input_ids=ids).logits)
        assert masks_seen and all(mask is None for mask in masks_seen)
        mask = torch.ones(2, 16, dtype=torch.long, device="cuda")
        mask[1, :5] = 0
        masks_seen.clear()
        for row in range(3):  # left padding: a mask is built, and replays follow the mask's values
            mask[1, : 5 + row] = 0
            expected = model(input_ids=ids, attention_mask=mask).logits
            torch.testing.assert_close(forward(input_ids=ids, attention_mask=mask).logits, expected)
        assert masks_seen and all(mask is not None for mask in masks_seen)
        mask.fill_(1)  # no padding left: eager drops the mask, so the recording's reads differ
        expected = model(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(forward(input_ids=ids, attention_mask=mask).logits, expected)
    assert forward.counts["graph replay"] == 4
    assert forward.counts["original forward: a host read differed from the one its recording answered"] == 1
