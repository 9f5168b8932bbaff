"""TP512's fix: `nn.LSTM` / `nn.GRU` / `nn.RNN` submodules become the traceable classes of
`rewrites/recurrent.py`, written once into the file.

The text written, every refusal, and the original and fixed modules side by side: eager outputs
bit for bit with the original's `state_dict` loaded, the same `state_dict` keys, Dynamo's break
gone, and compiled (AOTAutograd, Inductor on CPU) outputs and parameter gradients within float32
rounding of eager.
"""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")

from tests.dynamo_harness import load_example  # noqa: E402
from tests.rule_examples import fix_snippet  # noqa: E402


def model(constructor: str, call: str = "self.rnn(x, hx)", extra: str = "") -> str:
    return (
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        f"        self.rnn = {constructor}\n\n"
        "    def forward(self, x, hx=None):\n"
        f"        out, hidden = {call}\n"
        + textwrap.indent(textwrap.dedent(extra).strip("\n"), " " * 8)
        + ("\n" if extra else "")
        + "        return out, hidden\n"
    )


def fixed(source: str, unsafe: bool = True) -> tuple[str, list]:
    result, text = fix_snippet(source, unsafe=unsafe)
    return text, [d for d in result.remaining if d.code == "TP512"]


def test_text_written():
    text, left = fixed(model("nn.LSTM(8, 8, batch_first=True)"))
    assert not left
    assert "        self.rnn = TraceableLSTM(8, 8, batch_first=True)\n" in text
    # once, after the imports, and only the kind used
    assert text.count("class TraceableLSTM(torch.nn.Module):") == 1 and "TraceableGRU" not in text
    assert text.index("from torch import nn") < text.index("class TraceableLSTM") < text.index("class Model")
    again, _ = fixed(text)
    assert again == text


def test_unsafe_only():
    source = model("nn.GRU(8, 8)")
    text, left = fixed(source, unsafe=False)
    assert text == source and left[0].fix is not None and left[0].fix.safety == "unsafe"


def test_one_class_per_kind_for_several_modules():
    source = model(
        "nn.GRU(8, 8)",
        extra="""
        out, hidden = self.rnn(out)
        out, _ = self.other(out)
        """,
    ).replace(
        "        self.rnn = nn.GRU(8, 8)\n", "        self.rnn = nn.GRU(8, 8)\n        self.other = nn.GRU(8, 8)\n"
    )
    text, left = fixed(source)
    assert not left and text.count("class TraceableGRU") == 1 and text.count("TraceableGRU(8, 8)") == 2


@pytest.mark.parametrize(
    ("constructor", "call", "extra", "reason"),
    [
        ("nn.LSTM(8, 8, proj_size=4)", "self.rnn(x, hx)", "", "`proj_size` is not known to be 0"),
        ("nn.LSTM(8, 8, proj_size=size)", "self.rnn(x, hx)", "", "`proj_size` is not known to be 0"),
        ("nn.LSTM(8, 8)", "self.rnn(x.tolist(), hx)", "", "not known to be a tensor"),
        ("nn.LSTM(8, 8)", "self.rnn(x, hx)", "self.rnn.flatten_parameters()", "`self.rnn.flatten_parameters`"),
        ("nn.LSTM(8, 8)", "self.rnn(x, hx)", "assert not isinstance(x, nn.LSTM)", "refers to `nn.LSTM`"),
        ("nn.GRU(8, 8)", "self.rnn(x, hx)", "helper(self.rnn)", "used other than called or read"),
        ("nn.GRU(8, 8, **options)", "self.rnn(x, hx)", "", "`**kwargs`"),
    ],
)
def test_refusals_say_why(constructor, call, extra, reason):
    source = model(constructor, call, extra)
    text, left = fixed(source)
    assert text == source
    assert left and all(reason in (d.no_fix or "") for d in left), [d.no_fix for d in left]


def test_reads_of_hyperparameters_and_parameters_are_kept():
    source = model("nn.LSTM(8, 8)", extra="out = out * self.rnn.hidden_size + self.rnn.weight_hh_l0.sum()")
    text, left = fixed(source)
    assert not left and "TraceableLSTM(8, 8)" in text


# (constructor, batched, with hx): every kind, one and two layers, both directions, both layouts, no bias.
CASES = [
    ("nn.LSTM(5, 4)", True, False),
    ("nn.LSTM(5, 4, num_layers=2, bidirectional=True, batch_first=True)", True, True),
    ("nn.LSTM(5, 4, bias=False)", False, True),
    ("nn.GRU(5, 4, batch_first=True)", True, True),
    ("nn.GRU(5, 4, num_layers=2, bidirectional=True)", False, False),
    ("nn.RNN(5, 4, bidirectional=True, bias=False)", True, False),
    ("nn.RNN(5, 4, num_layers=2, nonlinearity='relu', batch_first=True)", False, True),
]


def _inputs(constructor: str, batched: bool, with_hx: bool) -> tuple:
    generator = torch.Generator().manual_seed(0)
    layers = (2 if "num_layers=2" in constructor else 1) * (2 if "bidirectional=True" in constructor else 1)
    batch_first = "batch_first=True" in constructor
    x = torch.randn((3, 6, 5) if batch_first else (6, 3, 5), generator=generator)
    x = x if batched else x[0]
    if not with_hx:
        return (x,)
    state = torch.randn((layers, 3, 4) if batched else (layers, 4), generator=generator)
    return x, ((state, state.flip(-1)) if "LSTM" in constructor else state)


def _pair(constructor: str) -> tuple:
    """The original and the fixed model, the fixed one with the original's state_dict."""
    source = model(constructor)
    text, left = fixed(source)
    assert not left and "Traceable" in text
    torch.manual_seed(0)
    original = load_example(source, "recurrent").Model()
    torch.manual_seed(0)
    rewritten = load_example(text, "recurrent_fixed").Model()
    assert list(rewritten.state_dict()) == list(original.state_dict())
    for before, after in zip(original.state_dict().values(), rewritten.state_dict().values(), strict=True):
        assert torch.equal(before, after)  # the same random numbers drawn for the initial values
    rewritten.load_state_dict(original.state_dict())
    return original, rewritten, source, text


def _flat(out) -> list:
    return [leaf for item in out for leaf in _flat(item)] if isinstance(out, (list, tuple)) else [out]


@pytest.mark.parametrize(("constructor", "batched", "with_hx"), CASES)
def test_eager_bit_for_bit_and_compiled_within_rounding(constructor, batched, with_hx):
    original, rewritten, source, text = _pair(constructor)
    inputs = _inputs(constructor, batched, with_hx)
    expected = original(*inputs)
    actual = rewritten(*inputs)
    assert type(actual[1]) is type(expected[1])
    for before, after in zip(_flat(expected), _flat(actual), strict=True):
        torch.testing.assert_close(after, before, rtol=0, atol=0)

    torch._dynamo.reset()
    explained = torch._dynamo.explain(rewritten)(*inputs)
    assert explained.graph_break_count == 0 and explained.graph_count == 1

    torch._dynamo.reset()
    _same_compiled(rewritten, torch.compile(rewritten, backend="aot_eager"), inputs)


def _same_compiled(eager, compiled, inputs) -> None:
    """Outputs and parameter gradients of `compiled` within float32 rounding of `eager` (the same module)."""
    grads = []
    for run in (eager, compiled):
        run.zero_grad()
        out = _flat(run(*inputs))
        sum(o.sum() for o in out).backward()
        grads.append((out, [p.grad.clone() for p in eager.parameters()]))
    (expected, expected_grads), (actual, actual_grads) = grads
    for before, after in zip(expected + expected_grads, actual + actual_grads, strict=True):
        torch.testing.assert_close(after, before)


def test_dynamo_breaks_before_and_not_after():
    original, rewritten, _, _ = _pair("nn.GRU(5, 4)")
    x = torch.randn(6, 3, 5)
    # The break comes before any traced op, which `explain` does not count: fullgraph=True shows it.
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match="allow_rnn"):
        torch.compile(original, fullgraph=True, backend="eager")(x)
    torch._dynamo.reset()
    torch.compile(rewritten, fullgraph=True, backend="eager")(x)


def test_inductor_forward_and_backward():
    _, rewritten, _, _ = _pair("nn.LSTM(5, 4, bidirectional=True, batch_first=True)")
    inputs = (torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(1)),)
    torch._dynamo.reset()
    _same_compiled(rewritten, torch.compile(rewritten), inputs)


def test_training_dropout_between_layers_compiles():
    _, rewritten, _, _ = _pair("nn.GRU(5, 4, num_layers=2, dropout=0.5)")
    rewritten.train()
    x = torch.randn(6, 3, 5)
    torch._dynamo.reset()
    out, hidden = torch.compile(rewritten, backend="aot_eager")(x)
    assert out.shape == (6, 3, 4) and hidden.shape == (2, 3, 4)
    rewritten.eval()
    torch.testing.assert_close(torch.compile(rewritten, backend="aot_eager")(x)[0], rewritten(x)[0])


def test_checkpoint_of_the_original_loads_with_assign():
    original, rewritten, _, _ = _pair("nn.LSTM(5, 4, num_layers=2)")
    state = {name: value * 2 for name, value in original.state_dict().items()}
    original.load_state_dict(state)
    rewritten.load_state_dict(state, assign=True)
    x = torch.randn(6, 3, 5)
    for before, after in zip(_flat(original(x)), _flat(rewritten(x)), strict=True):
        torch.testing.assert_close(after, before, rtol=0, atol=0)


PACKED = """\
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = {constructor}

    def forward(self, x, lengths, hx=None):
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first={batch_first}, enforce_sorted=False)
        out, hidden = self.rnn(packed, hx)
        out, out_lengths = pad_packed_sequence(out, {padding}, total_length={total})
        return out, hidden, out_lengths
"""
PACKED_CASES = [
    # the usual tagger: bidirectional, batch first, padded back to the input's length
    ("nn.LSTM(5, 4, bidirectional=True, batch_first=True)", "True", "batch_first=True", "x.size(1)", False),
    # time-major in, batch-first out, a padding value, longer than the input, a given state
    ("nn.GRU(5, 4, num_layers=2)", "False", "batch_first=True, padding_value=-1.0", "x.size(0) + 2", True),
    ("nn.RNN(5, 4, nonlinearity='relu', bidirectional=True, batch_first=True)", "True", "True", "x.size(1)", False),
]


@pytest.mark.parametrize(("constructor", "batch_first", "padding", "total", "with_hx"), PACKED_CASES)
def test_packed_batches_run_masked_under_compile(constructor, batch_first, padding, total, with_hx):
    """`pack_padded_sequence`, the module and `pad_packed_sequence` in a row: eager makes torch's calls, bit for
    bit; compiled, the padded batch runs masked (each sequence keeps its state past its end, as packing
    computes), in one graph, within rounding of eager, gradients included. Unsorted lengths, none full."""
    source = PACKED.format(constructor=constructor, batch_first=batch_first, padding=padding, total=total)
    text, left = fixed(source)
    assert not left and "pack_padded_sequence_for_tracing(x, lengths.cpu()" in text
    assert "pad_packed_sequence_for_tracing(out, " in text and "class PaddedSequence:" in text
    assert "from torch.nn.utils.rnn import" not in text  # both names replaced: the import is dropped, not left unused
    torch.manual_seed(0)
    original = load_example(source, "recurrent_packed").Model()
    torch.manual_seed(0)
    rewritten = load_example(text, "recurrent_packed_fixed").Model()
    rewritten.load_state_dict(original.state_dict())
    generator = torch.Generator().manual_seed(0)
    x = torch.randn((3, 7, 5) if batch_first == "True" else (7, 3, 5), generator=generator)
    inputs = [x, torch.tensor([4, 6, 2])]
    if with_hx:
        inputs.append(torch.randn(2, 3, 4, generator=generator))
    for before, after in zip(_flat(original(*inputs)), _flat(rewritten(*inputs)), strict=True):
        torch.testing.assert_close(after, before, rtol=0, atol=0)
    torch._dynamo.reset()  # packing breaks before any traced op, which `explain` does not count: fullgraph shows it
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(original, fullgraph=True, backend="eager")(*inputs)
    torch._dynamo.reset()
    compiled = torch.compile(rewritten, backend="aot_eager", fullgraph=True)
    _same_compiled(rewritten, compiled, inputs)


def test_packing_used_otherwise_is_left_alone():
    source = PACKED.format(
        constructor="nn.LSTM(5, 4)", batch_first="False", padding="batch_first=False", total="x.size(0)"
    ).replace("        return out, hidden, out_lengths", "        return out, hidden, packed.batch_sizes")
    assert fixed(source)[1][0].no_fix == "`packed` is used besides the call of the recurrent module"
    source = PACKED.format(constructor="nn.LSTM(5, 4)", batch_first="False", padding="batch_first=False", total="None")
    source = source.replace(", total_length=None", "")
    assert "has no `total_length`" in fixed(source)[1][0].no_fix


def test_imports_the_rewrite_leaves_unused_are_dropped():
    """`from torch.nn import LSTM, Linear`: `LSTM` is no longer named once the constructor is replaced (a linter
    would flag it); `Linear` stays, as does a packing function still called elsewhere."""
    source = (
        "import torch\nfrom torch.nn import LSTM, Linear\nfrom torch import nn\n"
        "from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence\n\n\n"
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.rnn = LSTM(4, 4)\n        self.out = Linear(4, 2)\n\n"
        "    def forward(self, x):\n        y, _ = self.rnn(x)\n        return self.out(y)\n\n\n"
        "def pack(x, lengths):\n    return pack_padded_sequence(x, lengths)\n"
    )
    text, left = fixed(source)
    assert not left
    assert "from torch.nn import Linear\n" in text and "self.rnn = TraceableLSTM(4, 4)" in text
    assert "from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence\n" in text  # not this fix's
