"""What a graph break in a loop costs under Dynamo, and what isolating it (TP501's fix) gives back.

    python benchmarks/isolation.py [--programs a,b] [--json out.json]

For each program (below: loops whose break no rewrite removes), the original and the output of
the default fixes (`transpile lint --fix`, which isolates the loop) are run eagerly side by side
(outputs and recorded side effects compared bit for bit) and under `torch.compile` with a
counting backend. Reported per version: the aten ops one eager forward runs, the share of them
that ran inside Dynamo's graphs, the graphs compiled and the graph calls per forward (second
call), and explain's break count. `graph_share` is the measure; tests/test_isolation.py uses it.
`DATA_DEPENDENT`: loops whose iterable or test is data-dependent, as layers stacked three deep.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch._dynamo
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: A002
        self.ops += 1
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class Share:
    """One forward under Dynamo: how much of it ran inside compiled graphs."""

    ops: int  # aten ops of one eager forward
    in_graphs: int  # aten ops that ran inside Dynamo's graphs (second compiled call)
    graphs: int  # graphs compiled over two calls
    graph_calls: int  # graphs run by the second call
    explain_breaks: int  # torch._dynamo.explain's graph_break_count (misses skipped frames)

    @property
    def fraction(self) -> float:
        return self.in_graphs / self.ops if self.ops else 1.0


def graph_share(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Share:
    """Run `fn(*args, **kwargs)` eagerly and twice compiled (a backend that counts the ops its graphs dispatch)."""
    with _Count() as eager, contextlib.redirect_stdout(io.StringIO()):
        fn(*args, **kwargs)
    inside, calls, graphs = [0], [0], [0]

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs[0] += 1

        def run(*a: Any) -> Any:
            with _Count() as counted:
                out = gm.forward(*a)
            inside[0] += counted.ops
            calls[0] += 1
            return out

        return run

    torch._dynamo.reset()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            compiled = torch.compile(fn, backend=backend)
            compiled(*args, **kwargs)
            inside[0] = calls[0] = 0
            compiled(*args, **kwargs)
            torch._dynamo.reset()
            explained = torch._dynamo.explain(fn)(*args, **kwargs)
    finally:
        torch._dynamo.reset()
    return Share(eager.ops, inside[0], graphs[0], calls[0], explained.graph_break_count)


def fix_source(source: str, unsafe: bool = False) -> tuple[str, list]:
    """`source` after transpile's fixes (default flags unless `unsafe`), and the findings left."""
    from transpiler.lint import engine
    from transpiler.lint.fixer import fix_project
    from transpiler.pipeline.rules import load_rules

    load_rules()

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "program.py"
        path.write_text(source, encoding="utf-8")
        files = [path]
        result = fix_project(
            files, lambda overlay: engine.lint(files, lambda code: True, "all", None, 1, None, overlay), unsafe, "guard"
        )
        return result.sources.get(path, source), result.remaining


def load(source: str, name: str) -> Any:
    """A module object for `source` (compiled under a fake file name that linecache knows)."""
    import linecache
    import types

    filename = f"<isolation {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


HEADER = "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
BLOCK = """
class Block(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


"""

# Loops whose break has no meaning-keeping rewrite: a value read into a Python list, a numpy
# statistic kept for later, a per-step generator, an explicit break, nested loops, a `while`,
# a `while` whose test is the break, and a break statement that calls a submodule (whose frame
# compiled on its own in the skipped loop: isolation must keep it compiled).
PROGRAMS: dict[str, str] = {
    "layer_argmax_log": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(6))
        self.picked = []

    def forward(self, x):
        x = x * 2 + 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            h = torch.tanh(x) * 0.5 + x.sigmoid()
            self.picked.append(int(h.argmax()))
            x = x + h
        return x.softmax(-1)
""",
    "numpy_stats_per_layer": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(4))
        self.stats = {}

    def forward(self, x):
        residual = x
        for index, layer in enumerate(self.layers):
            x = layer(x)
            self.stats[index] = x.norm(dim=-1).tolist()
            x = 0.5 * (x + residual)
        return torch.relu(x) - residual
""",
    "denoise_with_generator": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = Block()
        self.steps = 5

    def forward(self, x):
        x = torch.tanh(x)
        t = 0
        while t < self.steps:
            noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(t))
            x = self.step(x) * 0.9 + 0.1 * noise
            t += 1
        return x.mean(-1, keepdim=True) + x
""",
    "explicit_break_in_scan": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(32, 32)

    def forward(self, x):
        state = torch.zeros_like(x[0])
        outputs = []
        for row in x:
            state = torch.tanh(self.cell(state) + row)
            torch._dynamo.graph_break()
            outputs.append(state * 2)
        else:
            outputs.append(state)
        return torch.stack(outputs).sum(0)
""",
    "nested_heads_tolist": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(3))
        self.top = []

    def forward(self, x):
        x = torch.nn.functional.normalize(x, dim=-1)
        for layer in self.layers:
            x = layer(x)
            scores = x.view(x.shape[0], 4, -1).mean(-1)
            for head in range(4):
                self.top.append(scores[:, head].tolist())
            if x.shape[0] > 2:
                gate = torch.sigmoid(scores.mean())
            else:
                gate = torch.ones(())
            x = x * gate
        return x * 3 - 1
""",
    "while_test_tolist": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = Block()

    def forward(self, x):
        x = self.step(x)
        while max(x.abs().amax(-1).tolist()) > 0.5:
            x = torch.tanh(self.step(x)) * 0.4
        return x.softmax(-1)
""",
    "probe_submodule_tolist": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(3))
        self.probe = Block()
        self.trace = []

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            self.trace.append(self.probe(x).argmax(-1).tolist())
        return x
""",
}


# Loops whose iterable or test is itself data-dependent (a `nonzero` result iterated, `unique(...).tolist()`,
# `range(int(n))`, a `while` on `float(...)`): each a `Layer`, stacked three deep (`stacked`), so that Dynamo
# meets the same frames again with other lengths (automatic dynamic shapes, recompiles), as in a model.
DATA_DEPENDENT: dict[str, str] = {
    "nonzero_iterated": """
class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = Block()
        self.post = Block()
        self.experts = nn.ModuleList(Block() for _ in range(8))

    def forward(self, x):
        x = self.pre(x)
        hit = (x[:, :8].sum(0) > 0).nonzero()
        out = torch.zeros_like(x)
        for idx in hit:
            rows = torch.where(x[:, idx[0]] > 0)[0]
            out = out.index_add(0, rows, self.experts[idx[0]](x[rows]) * 0.5)
        return self.post(out) * 2
""",
    "unique_tolist_iterated": """
class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = Block()
        self.post = Block()
        self.experts = nn.ModuleList(Block() for _ in range(8))

    def forward(self, x):
        x = self.pre(x)
        experts = x[:, :8].argmax(-1)
        out = torch.zeros_like(x)
        for e in torch.unique(experts).tolist():
            rows = torch.where(experts == e)[0]
            out = out.index_add(0, rows, self.experts[e](x[rows]) * 0.5)
        return self.post(out) * 2
""",
    "tolist_name_iterated": """
class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = Block()
        self.post = Block()
        self.step = Block()
        self.seen = []

    def forward(self, x):
        x = self.pre(x)
        picks = x[:, 0].gt(0).nonzero().flatten().tolist()
        for p in picks:
            x = self.step(x) * 0.5
            self.seen.append(int(x[p].argmax()))
        return self.post(x) * 2
""",
    "range_of_int": """
class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = Block()
        self.post = Block()
        self.step = Block()
        self.seen = []

    def forward(self, x):
        x = self.pre(x)
        n = int(x.abs().sum().clamp(1, 4))
        for i in range(n):
            x = x * 0.6 + 0.01 * self.step(x).tanh()
            self.seen.append(int(x.argmax()))
        return self.post(x) * 2
""",
    "while_float_test": """
class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = Block()
        self.post = Block()
        self.step = Block()
        self.seen = []

    def forward(self, x):
        x = self.pre(x)
        while float(x.abs().max()) > 0.5:
            x = x * 0.6 + 0.01 * self.step(x).tanh()
            self.seen.append(int(x.argmax()))
        return self.post(x) * 2
""",
    # transformers' MoE dispatch (switch_transformers): experts looked up by an f-string of a tensor (Dynamo
    # raises on the key and skips the body's frame unless that statement runs outside with the break).
    "switch_experts_by_key": """
class Layer(nn.ModuleDict):
    def __init__(self):
        super().__init__()
        for index in range(4):
            self[f"expert_{index}"] = Block()

    def forward(self, x):
        selected = torch.nn.functional.one_hot(x[:, :4].argmax(-1), 4)[:, None, :]
        routing = x[:, :1].sigmoid()
        final = torch.zeros_like(x)
        expert_mask = selected.permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current_state = x[None, top_x].reshape(-1, x.shape[-1])
            current = self[f"expert_{expert_idx[0]}"](current_state) * routing[top_x, idx, None]
            final.index_add_(0, top_x, current.to(x.dtype))
        return final
""",
}
STACK = """

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
"""


def program(name: str) -> str:
    if name in DATA_DEPENDENT:
        return HEADER + BLOCK + textwrap.dedent(DATA_DEPENDENT[name]).lstrip("\n") + STACK
    return HEADER + BLOCK + textwrap.dedent(PROGRAMS[name]).lstrip("\n")


def _inputs(name: str = "") -> tuple:
    rows = 6 if name in DATA_DEPENDENT else 4
    return (torch.randn(rows, 32, generator=torch.Generator().manual_seed(0 if rows == 4 else 1)),)


def _state(model: Any) -> Any:
    return {k: v for k, v in vars(model).items() if not k.startswith("_") and k != "training"}


def compare(name: str) -> dict:
    """Original and default-fixed program: outputs and side effects equal, and their graph shares."""
    original = program(name)
    fixed, left = fix_source(original)
    versions = {"original": load(original, f"iso_{name}_o"), "isolated": load(fixed, f"iso_{name}_i")}
    row: dict = {"program": name, "rewritten": "_isolated_loop_" in fixed, "left": sorted({d.code for d in left})}
    results = []
    weights = None
    for version, module in versions.items():
        torch.manual_seed(0)
        model = module.Model().eval()
        weights = weights or model.state_dict()
        model.load_state_dict(weights)
        with torch.no_grad():
            out = model(*_inputs(name))
            results.append((out, repr(_state(model))))
            share = graph_share(model, *_inputs(name))
        row[version] = {**asdict(share), "fraction": round(share.fraction, 3)}
    row["equal"] = torch.equal(results[0][0], results[1][0]) and results[0][1] == results[1][1]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--programs", help="comma-separated names (default: all, the stacked data-dependent last)")
    args = parser.parse_args(argv)
    names = args.programs.split(",") if args.programs else [*PROGRAMS, *DATA_DEPENDENT]
    rows = [compare(name) for name in names]
    print("| program | isolated | outputs | ops in graphs before -> after | graphs | graph calls per forward |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        o, i = r["original"], r["isolated"]
        print(
            f"| {r['program']} | {'yes' if r['rewritten'] else 'no'} | {'equal' if r['equal'] else 'DIFFERENT'} | "
            f"{o['in_graphs']}/{o['ops']} ({o['fraction']:.0%}) -> {i['in_graphs']}/{i['ops']} ({i['fraction']:.0%}) | "
            f"{o['graphs']} -> {i['graphs']} | {o['graph_calls']} -> {i['graph_calls']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
