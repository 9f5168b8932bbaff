"""Region extraction: what becomes a region, what bounds one, and the IR it gives."""

from __future__ import annotations

import ast
import textwrap

import pytest

from transpiler.compiler.ir import format_region
from transpiler.compiler.regions import MIN_OPS, find_regions

HEADER = "import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n"


def regions_of(body: str, init: str = "pass", signature: str = "self, x, y"):
    """Regions of `forward(signature)` with `body`, in a module whose __init__ runs `init`."""
    text = (
        HEADER
        + "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        + textwrap.indent(textwrap.dedent(init).strip(), " " * 8)
        + f"\n\n    def forward({signature}):\n"
        + textwrap.indent(textwrap.dedent(body).strip(), " " * 8)
        + "\n"
    )
    return find_regions(ast.parse(text), "m.py", "m", False, text)


def ir(body: str, **kwargs) -> list[str]:
    return [format_region(r).split("\n", 1)[1] for r in regions_of(body, **kwargs)]


def test_a_run_of_statements_is_one_region_with_live_outputs():
    (region,) = regions_of(
        """
        a = x * 2.0 + y
        b = torch.exp(a) - 1
        c = a.sigmoid()  # dead: never read
        return self.proj(b, a)
        """,
        init="self.proj = nn.Bilinear(4, 4, 4)",
    )
    assert [i.source for i in region.inputs] == ["x", "y"]
    assert [n.op for n in region.nodes] == ["mul", "add", "exp", "sub", "sigmoid"]
    assert {(o.target, o.value) for o in region.outputs} == {("a", "a"), ("b", "b")}
    assert (region.first_line, region.last_line) == (12, 14)


def test_constants_are_folded_and_scalars_become_inputs():
    (text,) = ir("return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))")
    assert "0.7978845608028654" in text and "math" not in text
    (text,) = ir("return x * self.scale + y * x.shape[-1]", init="self.scale = 0.5")
    assert "in  scale: scalar = self.scale" in text
    assert "in  scalar: scalar = x.shape[-1]" in text


@pytest.mark.parametrize(
    "body",
    [
        "h = self.linear(x)\nreturn h * 2",  # a submodule call
        "h = x @ y\nreturn h + 1",  # matmul
        "h = x.view(-1)\nreturn h",  # a view
        "return x[0] + y",  # indexing
        "return torch.exp(x)",  # a single op: not worth a kernel
        "return x * unknown_thing + 1",  # an unknown name
    ],
)
def test_what_is_not_a_region(body):
    assert ir(body, init="self.linear = nn.Linear(4, 4)") == []


def test_a_single_op_is_not_worth_a_kernel():
    assert MIN_OPS == 2
    assert ir("return x + y") == []
    assert len(ir("return (x + y).relu()")) == 1
    assert ir("return x.float().to(torch.float16)") == []  # casts compute nothing


def test_unknown_statements_split_runs():
    texts = ir(
        """
        a = torch.relu(x) * 2
        b = self.linear(a)
        c = torch.sigmoid(b) + y
        return c
        """,
        init="self.linear = nn.Linear(4, 4)",
    )
    assert len(texts) == 2


def test_module_activations_known_from_init():
    (text,) = ir("return self.act(x) * y", init="self.act = nn.GELU(approximate='tanh')")
    assert "gelu_tanh(x)" in text
    assert ir("return self.act(x) * y", init="self.act = nn.ReLU(inplace=True)") == []


def test_dropout_stays_eager_around_the_region():
    """Dropout's call is no op of a region: in training it draws eager's random numbers and keeps its own mask
    for its backward, and the pointwise work around it still fuses (docs/compiler.md)."""
    (text,) = ir(
        "h = self.drop(x)\nreturn self.act(h) * y",
        init="self.act = nn.GELU(approximate='tanh')\nself.drop = nn.Dropout(0.1)",
    )
    assert "in  h: tensor = h" in text and "gelu_tanh(h)" in text and "when" not in text


def test_functional_spellings_with_keywords():
    (text,) = ir("return F.gelu(x, approximate='tanh') + torch.clamp(y, max=1.0)")
    assert "gelu_tanh(x)" in text and "clamp_max(y, 1.0)" in text
    assert ir("return torch.add(x, y, alpha=2).relu()") == []  # `alpha` is not in the spelling


def test_in_place_ops_only_on_tensors_the_region_made():
    (text,) = ir("h = x * y\nh += 1\nh.relu_()\nreturn h")
    assert "add_(h, 1)" in text and "relu_(h_1)" in text  # marked in place: eager keeps h's shape and dtype
    # `x` comes from the caller: mutating it in place must stay as it is
    texts = ir("x += y\nreturn x.exp() * 2")
    assert all("add(x, y)" not in t and "add_(x, y)" not in t for t in texts)
    # Nor through an op that may return its operand itself (`x.float()` of a float32 x is x)
    assert all("mul_" not in t for t in ir("h = x.float()\nh.mul_(2.0)\nreturn h + x"))
    # An in-place call inside an expression updates its tensor too: not fusible
    assert all("add" not in t for t in ir("h = x * y\nz = h.add_(1) * 2\nreturn z + h"))


def test_no_output_is_a_tensor_the_caller_holds():
    """Eager returns the caller's tensor itself from `x.float()` of a float32 x, a kernel a new one."""
    assert ir("h = x.float()\ny = (h * 2).exp()\nreturn h, y") == []
    assert ir("h = x * 1.0\ny = (h * 2).exp()\nreturn h, y") != []  # h is a new tensor in eager too
    assert ir("h = (x * 2).exp()\nreturn h.float()") != []  # a tensor the region made


def test_casts_and_dtype_names():
    (text,) = ir("return (x.float() * y).to(torch.bfloat16) + 1")
    assert "to(x, 'float32')" in text and "'bfloat16'" in text


def test_helper_parameters_typed_from_call_sites():
    text = HEADER + textwrap.dedent("""
        def act(v):
            return v * torch.sigmoid(v)

        class M(nn.Module):
            def forward(self, x):
                return act(x)
        """)
    tree = ast.parse(text)
    assert find_regions(tree, "m.py", "m", False, text) == []  # `v` could be anything
    (region,) = find_regions(tree, "m.py", "m", False, text, tensor_params={"m.act": frozenset({"v"})})
    assert region.function == "m.act"


def test_kernel_names_say_what_they_compute_and_are_unique():
    regions = regions_of(
        """
        a = torch.tanh(x) * y
        b = self.linear(a)
        c = torch.tanh(b) * y
        return c
        """,
        init="self.linear = nn.Linear(4, 4)",
    )
    assert [r.name for r in regions] == ["fused_tanh", "fused_tanh_2"]


def test_statements_sharing_a_line_are_left_alone():
    assert ir("a = x * 2 + 1; b = a.exp()\nreturn b") == []


def test_transpile_explain_prints_the_regions_of_a_file(monkeypatch):
    from pathlib import Path

    from click.testing import CliRunner

    from transpiler.cli.main import main

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    result = CliRunner().invoke(main, ["explain", "fixtures/models/layers.py", "fixtures/models/moe.py"])
    assert result.exit_code == 0, result.output
    assert (
        "region fused_rms_norm (fixtures/models/layers.py:36-37, in fixtures.models.layers.RMSNorm.forward)"
        in result.output
    )
    assert (
        "  in  eps: scalar = self.eps\n" in result.output
        and "  variance = mean(t0, -1, True)  # line 36\n" in result.output
    )
    # A split statement (transpiler/compiler/hoisting.py): the region on the line the file has, its temporary as input.
    assert "region fused_sum (fixtures/models/moe.py:25, in fixtures.models.moe.Router.forward)" in result.output
    assert "  _sum_div = div(weights, t0)  # line 25\n" in result.output
    result = CliRunner().invoke(main, ["explain", "fixtures/models/__init__.py"])
    assert result.exit_code == 0 and "fixtures/models/__init__.py: no region" in result.output, result.output


def test_reductions_and_normalisations_join_the_pointwise_code_around_them():
    (text,) = ir(
        """
        h = x + y
        out = self.ln(h)
        p = self.softmax(out * 0.125 + y)
        v = x.var(-1, unbiased=False, keepdim=True)
        z = (x - x.mean(dim=-1, keepdim=True)) / torch.sqrt(v + 1e-5)
        return h, p, z
        """,
        init="self.ln = nn.LayerNorm(64, eps=1e-6)\nself.softmax = nn.Softmax(dim=-1)",
    )
    assert "in  ln_weight: tensor = self.ln.weight" in text and "in  ln_eps: scalar = self.ln.eps" in text
    assert "out = layer_norm(h, ln_weight, ln_bias, ln_eps)" in text
    assert "softmax(t1, -1)" in text and "var(x, -1, 0, True)" in text and "mean(x, -1, True)" in text


@pytest.mark.parametrize(
    "body",
    [
        "return (x * 2).sum(dim=(0, 1)) + 1",  # several dims
        "return (x * 2).sum(dim=self.dim) + 1",  # a dim the transpiler cannot read
        "return (x * 2).sum() + 1",  # all dims
        "return (x * 2).softmax(-1, dtype=torch.float32) + 1",  # an argument the spelling does not know
    ],
)
def test_reductions_kernels_cannot_shape_are_left_alone(body):
    assert ir(body) == []


def test_one_kernel_reduces_along_one_dim():
    regions = regions_of("a = (x * 2).softmax(-1)\nb = (y + 1).sum(0, keepdim=True)\nreturn a, b")
    assert [r.last_line - r.first_line for r in regions] == [0, 0]  # split: one region per dim
    # A keepdim=False result broadcast against the elements (shapes differ): the run splits there.
    reduced, pointwise = regions_of("s = (x * 2).sum(-1)\nreturn (x - s).exp()")
    assert [n.op for n in reduced.nodes] == ["mul", "sum"] and [n.op for n in pointwise.nodes] == ["sub", "exp"]


def test_casts_back_to_an_input_dtype_held_in_a_variable():
    body = """
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.w * h.to(dtype)
        """
    (region,) = regions_of(body, init="self.w = nn.Parameter(torch.ones(8))")
    assert region.name == "fused_rms_norm"
    assert region.nodes[-2].op == "to_like" and region.nodes[-2].operands[1] == "x"
    # `x` rebound between the dtype's line and the region: the region's `x` is not the dtype's tensor.
    rebound = "dtype = x.dtype\nx = x.view(x.shape)\n" + "\n".join(
        line.strip() for line in body.strip().splitlines()[1:]
    )
    assert all(
        n.op != "to_like" for r in regions_of(rebound, init="self.w = nn.Parameter(torch.ones(8))") for n in r.nodes
    )


def test_aliases_of_values_the_region_computed_carry_them_out():
    (region,) = regions_of(
        "h = x + y\nresidual = h\nh = self.ln(h)\nreturn h * 2, residual", init="self.ln = nn.LayerNorm(8)"
    )
    assert [n.op for n in region.nodes] == ["add", "layer_norm"]
    assert {(o.target, o.value) for o in region.outputs} == {("h", "h_1"), ("residual", "h")}
    (region,) = regions_of("residual = x\nh = self.ln(x) * 2\nreturn h + residual", init="self.ln = nn.LayerNorm(8)")
    assert region.first_line == 13  # an alias of an input stays before the region


def test_names_holding_one_value_share_one_output():
    """A post-norm block (`h = norm(h); residual = h`): one kernel output, the other name aliases it."""
    (region,) = regions_of(
        "h = x + y\nh = self.ln(h)\nresidual = h\nh = self.fc(h)\nreturn h + residual",
        init="self.ln = nn.LayerNorm(8)\nself.fc = nn.Linear(8, 8)",
    )
    assert [(o.value, o.target, o.aliases) for o in region.outputs] == [("h_1", "h", ("residual",))]
    assert format_region(region).endswith("out h = residual = h_1")


def test_an_in_place_update_of_a_value_another_name_holds_ends_the_region():
    """`r = h; h.mul_(2)` changes r too in eager: the update is not computed as a new value."""
    (region,) = regions_of(
        "h = x * y + 1.0\nr = h\nh.mul_(2.0)\nreturn self.fc(h), r", init="self.fc = nn.Linear(8, 8)"
    )
    assert [n.op for n in region.nodes] == ["mul", "add"]
    assert [(o.target, o.aliases) for o in region.outputs] == [("h", ("r",))]


def test_a_name_deleted_after_the_region_is_an_output():
    """`del logits` needs logits bound: the kernel path must assign it (reformer)."""
    (region,) = regions_of(
        "a = x * 2.0 + y\nlogits = a.exp()\nz = self.fc(a)\ndel logits\nreturn z", init="self.fc = nn.Linear(8, 8)"
    )
    assert {o.target for o in region.outputs} == {"a", "logits"}


def test_tensor_code_left_eager_is_listed_with_its_reason():
    """What a reader expects in a kernel and does not find there, with the reason: an op the table lacks or
    takes with other arguments, one op alone between library calls. A statement that is one library call
    (`self.proj(h)`, `torch.matmul(a, b)`) and the statements of a region are not listed."""
    body = """
        s = torch.matmul(x, y) * 0.5
        s = s + y
        p = F.softmax(s, dim=-1, dtype=torch.float32).to(x.dtype)
        o = torch.matmul(p, y)
        h = torch.tanh(o * 2.0) * o
        return self.proj(h)
    """
    text = (
        HEADER
        + "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        + "        self.proj = nn.Linear(4, 4)\n\n    def forward(self, x, y):\n"
        + textwrap.indent(textwrap.dedent(body).strip(), " " * 8)
        + "\n"
    )
    not_fused: list = []
    regions = find_regions(ast.parse(text), "m.py", "m", False, text, not_fused=not_fused)
    first = text.splitlines().index("        s = torch.matmul(x, y) * 0.5") + 1
    assert [(r.first_line - first, r.last_line - first) for r in regions] == [(4, 4)]
    assert [(n.function, n.line - first, n.reason) for n in not_fused] == [
        ("m.M.forward", 0, "`torch.matmul` is not in the op table (a library call, or an op not written yet)"),
        (
            "m.M.forward",
            1,
            "`add` alone, between statements the kernels do not compute: eager runs it as one kernel already",
        ),
        (
            "m.M.forward",
            2,
            "`torch.nn.functional.softmax` with these arguments (dim=, dtype=): no spelling of the op table takes them",
        ),
    ]


def test_a_function_a_forward_passes_on_as_a_value_is_listed_as_not_compiled():
    """An attention interface's default (`get_interface(name, eager_attention)`): the forward does not call the
    function, so the build does not compile it; the reader learns why its softmax is in no kernel. A function the
    forward calls is compiled (its code is typed from the call: no such entry), and one nobody passes is not listed.
    A file whose helpers are typed from their call sites keeps the other functions' reasons (LLaMA's lost them)."""
    text = HEADER + textwrap.dedent("""
        def eager_attention(q, k):
            return torch.softmax(q @ k.transpose(-1, -2), dim=-1)


        def unused(q):
            return torch.tanh(q)


        def scale(q):
            return q * 2.0 + 1.0


        class M(nn.Module):
            def forward(self, q, k):
                attend = INTERFACES.get(self.kind, eager_attention)
                s = torch.matmul(q, k) * 0.5
                return attend(scale(q), k) + s
        """)
    compiled = {"m.M.forward", "m.scale"}
    for tensor_params in (None, {"m.scale": frozenset({"q"})}):
        not_fused: list = []
        find_regions(ast.parse(text), "m.py", "m", False, text, compiled, tensor_params, not_fused=not_fused)
        reasons = {n.function: n.reason for n in not_fused}
        assert reasons["m.eager_attention"] == (
            "`eager_attention` is not compiled: `M.forward` passes it on as a value"
            " (`INTERFACES.get(self.kind, eager_attention)`) rather than calling it, and the build compiles only what"
            " a forward calls"
        )
        assert "m.unused" not in reasons and "m.scale" not in reasons
        assert "`torch.matmul` is not in the op table" in reasons["m.M.forward"]  # kept beside the typed walk's
