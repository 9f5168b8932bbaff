"""Kinds that flow between the functions of one file (transpiler/analysis/calls.py).

A helper's unannotated parameter takes the kind that every call in the file passes, when the
file uses the helper only through calls the analysis sees; a call of a helper gives its
annotated result or what all its `return` statements agree on; NumPy arrays made from tensors
are what Dynamo traces them as. Each test types `probe(expr)` arguments; the programs checked
against Dynamo itself are in tests/lint_corpus (tests/test_rules_recall.py runs them).
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from transpiler.analysis.kinds import Kind, join_tensors
from transpiler.analysis.walker import Walker
from transpiler.lint.engine import analyze_source, resolve
from transpiler.pipeline.rules import load_rules

load_rules()

HEADER = "import numpy as np\nimport torch\nfrom torch import nn\nfrom typing import Optional, Tuple\n\n"


class _Probe:
    """Records the kind of the argument of every `probe(...)` call, by its source text."""

    def __init__(self) -> None:
        self.kinds: dict[str, Kind] = {}

    def visit_Call(self, node: ast.Call, ctx) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "probe":
            self.kinds[ast.unparse(node.args[0])] = ctx.kind(node.args[0])

    def check_function(self, findings, ctx) -> None:
        pass


def kinds(source: str, lint: bool = True) -> dict[str, Kind]:
    text = HEADER + textwrap.dedent(source)
    probe = _Probe()
    Walker([probe], lint=lint).check(ast.parse(text), "m", False, text)
    return probe.kinds


def summary(source: str):
    text = HEADER + textwrap.dedent(source)
    return analyze_source("m.py", text.encode(), "m", False).summary


def codes(source: str) -> list[tuple[int, str]]:
    """(line within `source`, code) of the lint's findings, all rules selected."""
    text = HEADER + textwrap.dedent(source)
    offset = HEADER.count("\n")
    results = [analyze_source("m.py", text.encode(), "m", False)]
    return [(d.line - offset, d.code) for d in resolve(results, lambda code: True)]


# -- parameters from call sites ------------------------------------------------------------------------


def test_a_parameter_takes_the_kind_every_call_passes():
    found = kinds("""
        def masked(values, mask, scale):
            probe(values)
            probe(mask)
            probe(scale)

        class M(nn.Module):
            def forward(self, x):
                masked(x, x > 0, 2.0)
                masked(values=x * 2, mask=x.isnan(), scale=x.shape[0])
        """)
    assert found == {"values": Kind.TENSOR, "mask": Kind.BOOL_TENSOR, "scale": Kind.UNKNOWN}


def test_a_tensor_and_a_bool_tensor_make_a_tensor():
    assert join_tensors([Kind.TENSOR, Kind.BOOL_TENSOR]) is Kind.TENSOR
    found = kinds("""
        def first(v):
            probe(v)

        class M(nn.Module):
            def forward(self, x):
                first(x)
                first(x > 0)
        """)
    assert found == {"v": Kind.TENSOR}


@pytest.mark.parametrize(
    "other_call",
    [
        "first(x.shape[0])",  # an int
        "first(*[x])",  # positions unknown
        "first(**{'v': x})",
        "first(self.maybe)",  # unknown
    ],
)
def test_calls_that_disagree_or_cannot_be_read_leave_the_parameter_unknown(other_call):
    found = kinds(f"""
        def first(v):
            probe(v)

        class M(nn.Module):
            def forward(self, x):
                first(x)
                {other_call}
        """)
    assert found == {"v": Kind.UNKNOWN}


@pytest.mark.parametrize(
    "use",
    [
        "table = {'first': first}",  # module code: a value
        "class Holder:\n    fn = first",  # a class body
        "class Holder:\n    def __init__(self):\n        self.fn = first",  # stored, called unseen
        "def apply(fn=first):\n    return fn",  # a default value
        "def later(xs):\n    return list(map(first, xs))",  # passed as an argument
        "def later(xs):\n    return first.__name__",
        "def later(self):\n    return getattr(self, 'first')",
    ],
)
def test_a_helper_used_otherwise_than_called_keeps_its_parameters_unknown(use):
    source = f"""
        def first(v):
            probe(v)

        class M(nn.Module):
            def forward(self, x):
                return first(x)

        {textwrap.indent(use, " " * 8).strip()}
        """
    assert kinds(source) == {"v": Kind.UNKNOWN}
    info = summary(source).functions["m.first"]
    assert info.unseen_calls and info.open_params == {"v"}


def test_a_helper_named_in_strings_and_comments_is_still_typed():
    source = """
        \"\"\"The model: `first` drops what `first(x)` would keep.\"\"\"

        def first(v):
            probe(v)

        class M(nn.Module):
            def forward(self, x):
                return first(x)  # first(x) in a comment
        """
    assert kinds(source) == {"v": Kind.TENSOR}
    assert not summary(source).functions["m.first"].unseen_calls


def test_methods_called_by_a_computed_name_keep_their_parameters_unknown():
    source = """
        class M(nn.Module):
            def limit_rows(self, n):
                probe(n)

            def forward(self, x):
                self.limit_rows(x)
                return getattr(self, f"limit_{self.mode}")(x.shape[0])
        """
    assert kinds(source) == {"n": Kind.UNKNOWN}
    assert summary(source).classes["m.M"].methods["limit_rows"].unseen_calls


def test_self_method_parameters_and_results():
    found = kinds("""
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(4, 4)

            def decode(self, x):
                return self.head(x).sigmoid()

            def keep(self, scores):
                probe(scores)
                return scores > 0.5

            def forward(self, x):
                mask = self.keep(self.decode(x))
                probe(mask)
        """)
    assert found == {"scores": Kind.TENSOR, "mask": Kind.BOOL_TENSOR}


def test_a_static_method_called_on_self_lines_up_its_arguments():
    found = kinds("""
        class M(nn.Module):
            @staticmethod
            def keep(values, floor):
                probe(values)
                probe(floor)

            def forward(self, x):
                return self.keep(x, 0.0)
        """)
    assert found == {"values": Kind.TENSOR, "floor": Kind.UNKNOWN}


def test_a_method_defined_again_in_its_class_hierarchy_is_not_typed():
    """`self.step(x)` in Base may run Child.step, and Child's calls may reach Base.step through super()."""
    found = kinds("""
        class Base(nn.Module):
            def step(self, v):
                probe(v)
                return v

            def forward(self, x):
                return self.step(x)

        class Child(Base):
            def step(self, w):
                probe(w)
                return w
        """)
    assert found == {"v": Kind.UNKNOWN, "w": Kind.UNKNOWN}


def test_methods_of_unrelated_classes_with_one_name_are_typed_apart():
    found = kinds("""
        class A(nn.Module):
            def shape_of(self, v):
                probe(v)

            def forward(self, x):
                return self.shape_of(x)

        class B(nn.Module):
            def shape_of(self, w):
                probe(w)

            def forward(self, x):
                return self.shape_of(x.shape[0])
        """)
    assert found == {"v": Kind.TENSOR, "w": Kind.UNKNOWN}


def test_entry_points_and_dunder_methods_keep_their_own_kinds():
    """forward's parameters come from its name rules (a tensor unless named like a size), not its callers."""
    found = kinds("""
        class M(nn.Module):
            def forward(self, x, n_steps):
                probe(x)
                probe(n_steps)
                return x

            def __call__(self, h):
                probe(h)
                return self.forward(h.shape[0], h)

            def run(self, x):
                return self.__call__(x)

        @torch.compile
        def compiled(v):
            probe(v)

        def caller(t: torch.Tensor):
            return compiled(t.shape[0])
        """)
    assert found == {"x": Kind.TENSOR, "n_steps": Kind.UNKNOWN, "h": Kind.UNKNOWN, "v": Kind.TENSOR}


def test_kinds_flow_through_chains_of_helpers():
    found = kinds("""
        def leaf(d):
            probe(d)
            return d.abs()

        def middle(c):
            return leaf(c * 2)

        def top(b):
            return middle(b + 1)

        class M(nn.Module):
            def forward(self, x):
                out = top(x)
                probe(out)
        """)
    assert found == {"d": Kind.TENSOR, "out": Kind.TENSOR}


def test_recursion_alone_types_nothing():
    found = kinds("""
        def halve(v, depth):
            probe(v)
            if depth == 0:
                return v
            return halve(v / 2, depth - 1)

        def count(n):
            return count(n - 1)
        """)
    assert found == {"v": Kind.UNKNOWN}


def test_the_compiler_walks_keep_their_kinds():
    """The compiler's walks (not lint rules) learn helpers' parameters from the project's call sites, as before:
    its regions and goldens do not move; nor do the open parameters the project reads for it."""
    source = """
        def helper(a, b):
            probe(a)
            return a

        class M(nn.Module):
            def forward(self, x):
                probe(helper(x, x.shape[0]))
        """
    assert kinds(source, lint=False) == {"a": Kind.UNKNOWN, "helper(x, x.shape[0])": Kind.UNKNOWN}
    assert kinds(source) == {"a": Kind.TENSOR, "helper(x, x.shape[0])": Kind.TENSOR}
    info = summary(source).functions["m.helper"]
    assert info.open_params == {"a", "b"} and not info.unseen_calls


def test_a_recheck_with_engine_parameters_keeps_a_bool_tensor():
    text = HEADER + textwrap.dedent("""
        def helper(mask):
            probe(mask)

        class M(nn.Module):
            def forward(self, x):
                return helper(x > 0)
        """)
    probe = _Probe()
    Walker([probe], lint=True).check(ast.parse(text), "m", False, text, {"m.helper": frozenset({"mask"})})
    assert probe.kinds == {"mask": Kind.BOOL_TENSOR}


# -- results of calls ----------------------------------------------------------------------------------


def test_a_call_gives_what_every_return_agrees_on():
    found = kinds("""
        def grid(n):
            steps = torch.arange(n)
            if n > 2:
                return steps.float()
            return steps > 0

        def pair(t):
            return t * 2, t.any()

        class M(nn.Module):
            def forward(self, x):
                probe(grid(4))
                a, b = pair(x)
                probe(a)
                probe(b)
                probe(pair(x))
        """)
    assert found == {"grid(4)": Kind.TENSOR, "a": Kind.TENSOR, "b": Kind.BOOL_TENSOR, "pair(x)": Kind.UNKNOWN}


@pytest.mark.parametrize(
    "body",
    [
        "if v:\n    return torch.ones(1)\nreturn 0.5",  # a tensor or a float
        "if v:\n    return torch.ones(1)",  # or None, falling off the end
        "for i in range(3):\n    return torch.ones(i)",  # a loop may not run
        "yield torch.ones(1)\nreturn torch.ones(1)",  # a generator
        "if v:\n    return torch.ones(1), 2\nreturn torch.ones(1)",  # a tuple or a tensor
    ],
)
def test_returns_that_disagree_give_nothing(body):
    found = kinds(f"""
        def helper(v):
            {textwrap.indent(body, " " * 12).strip()}

        class M(nn.Module):
            def forward(self, x):
                probe(helper(True))
        """)
    assert found == {"helper(True)": Kind.UNKNOWN}


@pytest.mark.parametrize(
    ("annotation", "unpacked", "called"),
    [
        ("torch.Tensor", (Kind.TENSOR, Kind.TENSOR), Kind.TENSOR),
        ("Optional[torch.Tensor]", (Kind.UNKNOWN, Kind.UNKNOWN), Kind.MAYBE_TENSOR),
        ("Tuple[torch.Tensor, torch.Tensor]", (Kind.TENSOR, Kind.TENSOR), Kind.UNKNOWN),
        ("tuple[torch.Tensor, int]", (Kind.TENSOR, Kind.UNKNOWN), Kind.UNKNOWN),
        ("tuple[torch.Tensor, ...]", (Kind.TENSOR, Kind.TENSOR), Kind.UNKNOWN),
        ('"tuple[Tensor, Tensor]"', (Kind.TENSOR, Kind.TENSOR), Kind.UNKNOWN),
        ("list[torch.Tensor]", (Kind.UNKNOWN, Kind.UNKNOWN), Kind.UNKNOWN),
        ("int", (Kind.UNKNOWN, Kind.UNKNOWN), Kind.UNKNOWN),
    ],
)
def test_a_return_annotation_says_what_a_call_gives(annotation, unpacked, called):
    found = kinds(f"""
        def helper(v) -> {annotation}:
            return v

        class M(nn.Module):
            def forward(self, x):
                first, second = helper(x)
                probe(first)
                probe(second)
                probe(helper(x))
        """)
    assert (found["first"], found["second"]) == unpacked and found["helper(x)"] is called


def test_an_annotation_its_returns_contradict_is_not_used():
    found = kinds("""
        def merged(v) -> torch.Tensor | None:
            return {"labels": v}

        def three(v) -> tuple[torch.Tensor, torch.Tensor]:
            return v, v, v

        class M(nn.Module):
            def forward(self, x):
                probe(merged(x))
                probe(merged(x)["labels"])
                a, b = three(x)
                probe(a)
        """)
    assert set(found.values()) == {Kind.UNKNOWN}


def test_a_mapping_read_by_key_is_not_a_tensor():
    found = kinds("""
        class M(nn.Module):
            def forward(self, x, outputs=None):
                probe(outputs["logits"])
                probe(outputs[0])
        """)
    assert found == {"outputs['logits']": Kind.UNKNOWN, "outputs[0]": Kind.TENSOR}


# -- NumPy arrays made from tensors ----------------------------------------------------------------------


ARRAYS = """
    def above(values, limit):
        probe(values)
        return values > limit

    class M(nn.Module):
        def forward(self, x):
            arr = x.detach().cpu().numpy()
            threshold = np.mean(arr) + 3.0 * np.std(arr)
            probe(arr)
            probe(threshold)
            probe(float(threshold))
            probe(arr.mean().item())
            probe(arr.T)
            probe(np.shape(arr))
            probe(len(arr))
            probe(torch.from_numpy(arr > threshold))
            probe(above(arr, threshold))
            counts, edges = np.histogram(arr, bins=4)
            probe(edges)
    """


def test_numpy_arrays_made_from_tensors_are_traced_as_tensors():
    assert kinds(ARRAYS) == {
        "values": Kind.ARRAY,
        "arr": Kind.ARRAY,
        "threshold": Kind.ARRAY,
        "float(threshold)": Kind.DATA_SCALAR,
        "arr.mean().item()": Kind.DATA_SCALAR,
        "arr.T": Kind.ARRAY,
        "np.shape(arr)": Kind.UNKNOWN,
        "len(arr)": Kind.SCALAR,
        "torch.from_numpy(arr > threshold)": Kind.TENSOR,
        "above(arr, threshold)": Kind.ARRAY,
        "edges": Kind.ARRAY,
    }


def test_the_compiler_sees_no_arrays():
    """Its kernels take torch tensors: to the compiler's walks an array stays unknown (as before)."""
    found = kinds(ARRAYS, lint=False)
    assert found["arr"] is found["threshold"] is found["values"] is found["above(arr, threshold)"] is Kind.UNKNOWN
    assert found["torch.from_numpy(arr > threshold)"] is Kind.TENSOR


def test_arrays_and_tensors_at_the_calls_of_one_helper_type_nothing():
    assert join_tensors([Kind.ARRAY, Kind.TENSOR]) is Kind.UNKNOWN
    found = kinds("""
        def scale(v):
            probe(v)

        class M(nn.Module):
            def forward(self, x):
                scale(x)
                scale(x.numpy())
        """)
    assert found == {"v": Kind.UNKNOWN}


def test_arrays_are_no_tensor_arguments_for_the_project():
    """The engine types helpers of other files from `tensor_args`: an array there would become a tensor."""
    info = summary("""
        from other import helper

        class M(nn.Module):
            def forward(self, x):
                return helper(x, x.numpy())
        """).classes["m.M"].methods["forward"]
    assert info.tensor_args[("name", "other.helper")] == [frozenset({0})]


def test_findings_about_arrays_get_no_fix_and_the_others_keep_theirs():
    text = HEADER + textwrap.dedent("""
        import io

        class M(nn.Module):
            def forward(self, x):
                arr = x.detach().numpy()
                np.save(io.BytesIO(), arr)
                return x / float(arr.sum())
        """)
    result = analyze_source("m.py", text.encode(), "m", False)
    found = {f.code: f for f in result.findings["m.M.forward"]}
    assert found["TP112"].fix is not None  # the guard skips the statement, whatever it holds
    assert found["TP303"].fix is None and "NumPy" in found["TP303"].no_fix


def test_layout_methods_keep_a_mask_boolean_but_a_dtype_view_does_not():
    found = kinds("""
        class M(nn.Module):
            def forward(self, x):
                keep = x > 0
                probe(keep.view(-1))
                probe(keep.reshape(x.shape[0], -1).t())
                probe(keep.view(x.shape))
                probe(keep.view(torch.uint8))
                probe(keep.view(self.dtype))
                probe(keep.sum())
        """)
    assert found == {
        "keep.view(-1)": Kind.BOOL_TENSOR,
        "keep.reshape(x.shape[0], -1).t()": Kind.BOOL_TENSOR,
        "keep.view(x.shape)": Kind.BOOL_TENSOR,
        "keep.view(torch.uint8)": Kind.TENSOR,
        "keep.view(self.dtype)": Kind.TENSOR,
        "keep.sum()": Kind.TENSOR,
    }


def test_values_and_indices_of_named_results_are_tensors():
    found = kinds("""
        class M(nn.Module):
            def forward(self, x):
                probe(x.max(dim=-1).values > 0)
                probe(torch.topk(x, 2).indices)
                probe(self.table.values)
        """)
    assert found == {
        "x.max(dim=-1).values > 0": Kind.BOOL_TENSOR,
        "torch.topk(x, 2).indices": Kind.TENSOR,
        "self.table.values": Kind.UNKNOWN,
    }


def test_generators_flow_into_parameters_that_every_call_gives_one():
    """An unannotated parameter, or one defaulting to None, that every call in the file gives a generator
    holds one (a local that is None on some path counts: used as a generator where it is one). One that a
    call leaves None does not."""
    found = kinds("""
        def noise(t, stream):
            probe(stream)

        def maybe_noise(t, seeded_stream=None):
            probe(seeded_stream)

        def left_none(t, optional_stream=None):
            probe(optional_stream)

        class M(nn.Module):
            def forward(self, x, seeded: torch.Generator):
                g = None
                if not self.training:
                    g = torch.Generator().manual_seed(0)
                noise(x, g)
                maybe_noise(x, seeded_stream=seeded)
                left_none(x)
                left_none(x, g)
        """)
    assert found == {"stream": Kind.GENERATOR, "seeded_stream": Kind.GENERATOR, "optional_stream": Kind.UNKNOWN}


# -- what a submodule of the file gives ------------------------------------------------------------------


def test_names_unpacked_from_a_submodule_take_the_kinds_its_forward_returns():
    """`embeddings, num_frames, width = self.patch_embeddings(x)` (timesformer): the counts are Python ints
    from shapes, so `if num_frames != ...` is no data-dependent branch; the tensor still is one. Only a class
    defined before its user, whose forward ends in its one `return` of a tuple."""
    found = kinds("""
        class PatchEmbeddings(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Conv2d(3, 8, 4, 4)

            def forward(self, pixel_values):
                batch, frames, channels, height, width = pixel_values.shape
                embeddings = self.proj(pixel_values.reshape(batch * frames, channels, height, width))
                return embeddings.flatten(2).transpose(1, 2), frames, embeddings.size(-1)

        class Branchy(nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return x, x.shape[0]
                return x * 2, x.shape[0]

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.patch_embeddings = PatchEmbeddings()
                self.branchy = Branchy()

            def forward(self, pixel_values):
                embeddings, num_frames, patch_width = self.patch_embeddings(pixel_values)
                probe(embeddings)
                probe(num_frames)
                probe(patch_width)
                y, n = self.branchy(embeddings)
                probe(n)
        """)
    assert found == {
        "embeddings": Kind.TENSOR,
        "num_frames": Kind.UNKNOWN,  # unpacked from `.shape`: no tensor (the typer keeps it unknown)
        "patch_width": Kind.SCALAR,
        "n": Kind.TENSOR,  # two returns: not followed, the old guess stands
    }
