"""Which forwards replay as CUDA graphs by default (transpiler/compiler/graphing.py), what the build emits
for them (emit/host/graphs.py), and the emitted decorator on CPU, where it must run the forward as it is.

The replays themselves, and the runtime's refusals, are tested on CUDA in tests/test_graphs.py (`-m gpu`)."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from transpiler.compiler.graphing import graph_sites, hazards_by_function

ROOT = Path(__file__).resolve().parent.parent


def sites(source: str, hazards: dict | None = None):
    found, refused = graph_sites(ast.parse(textwrap.dedent(source)), hazards or {})
    return {s.cls: s.reads for s in found}, {n.cls: (n.line, n.reason) for n in refused}


MODEL = """
import torch
from torch import nn


def helper(x, scale):
    return x * scale


class Mlp(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.hidden, config.hidden)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.fc(x)) * self.config_scale()

    def config_scale(self):
        return self.scale


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.mlp = Mlp(config)
        self.norm = nn.LayerNorm(config.hidden, eps=config.eps)

    def forward(self, x, mask=None):
        h = self.norm(x)
        if self.config.use_mlp and getattr(self.config, "double", False):
            h = h + self.mlp(h)
        return helper(h, self.norm.eps) + x


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList([Block(config) for _ in range(config.layers)])
        self.head = nn.Linear(config.hidden, 4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)
"""


def test_blocks_of_a_module_list_are_sites_with_the_attributes_they_and_their_callees_read():
    found, refused = sites(MODEL)
    assert refused == {}
    # The block, and the model that builds its list; Mlp, inside the block, is not a candidate.
    assert set(found) == {"Block", "Model"}
    assert found["Block"] == ("config.double", "config.use_mlp", "mlp.scale", "norm.eps")
    # The model's own reads; its blocks' reads are added at run time under each block's name.
    assert found["Model"] == ("layers",)


def test_a_sequential_of_a_local_list_and_the_classes_holding_a_model_are_sites():
    found, refused = sites("""
        import torch
        from torch import nn
        from elsewhere import Imported
        class Bottleneck(nn.Module):
            def forward(self, x):
                return torch.relu(x) + x
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer1 = self._layer(3)
                self.stem = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
            def _layer(self, blocks):
                layers = [Bottleneck()]
                layers += [Bottleneck() for _ in range(1, blocks)]
                return nn.Sequential(*layers)
            def forward(self, x):
                return self.layer1(self.stem(x))
        class Classifier(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Net()
                self.head = nn.Linear(8, 2)
            def forward(self, x):
                return self.head(self.net(x).mean((2, 3)))
        class Other(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([Imported() for _ in range(2)])
            def forward(self, x):
                return x
        """)
    # Other's list holds a class of another file: nothing here can be checked, so it is no candidate.
    assert refused == {} and set(found) == {"Bottleneck", "Net", "Classifier"}


def test_a_model_whose_block_is_refused_is_refused_with_the_blocks_reason():
    found, refused = sites("""
        from torch import nn
        class Block(nn.Module):
            def forward(self, x):
                self.last = x
                return x
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([Block()])
            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return x
        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.model = Model()
            def forward(self, x):
                return self.model(x)
        """)
    assert found == {}
    assert refused == {
        "Block": (5, "stores into `self.last`"),
        "Model": (5, "in Block.forward: stores into `self.last`"),
        "Head": (5, "in Block.forward: stores into `self.last`"),
    }


def test_blocks_appended_to_a_module_list_are_sites():
    found, _ = sites("""
        from torch import nn
        class Stage(nn.Module):
            def forward(self, x):
                return x * 2
        class Encoder(nn.Module):
            def __init__(self, depths):
                super().__init__()
                self.stages = nn.ModuleList([])
                for depth in depths:
                    self.stages.append(Stage())
            def forward(self, x):
                return x
        """)
    assert set(found) == {"Stage", "Encoder"}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("self.calls = self.calls + 1\n        return x", "stores into `self.calls`"),
        ("self.cache[0] = x\n        return x", "stores into `self.cache[0]`"),
        ("self.seen.append(x)\n        return x", "`self.seen.append(...)` changes module state"),
        ("global COUNT\n        COUNT = 1\n        return x", "`global` state"),
        ("yield x", "a generator or coroutine"),
    ],
)
def test_side_effects_refuse_the_block_with_the_line(body, reason):
    source = f"""
from torch import nn
class Block(nn.Module):
    def forward(self, x):
        {body}
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block()])
"""
    found, refused = sites(source)
    assert found == {}
    assert refused == {"Block": (5, reason)}  # Model, a candidate, has no forward of its own


def test_a_store_into_an_argument_or_a_local_is_left_to_the_runtime():
    found, refused = sites("""
        from torch import nn
        class Block(nn.Module):
            def forward(self, x, cache):
                out = {}
                out["h"] = x
                cache.is_updated[self.layer_idx] = True
                return out["h"]
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([Block()])
        """)
    assert refused == {} and "Block" in found


def test_a_hazard_in_a_callee_refuses_the_block_naming_the_callee():
    tree = ast.parse(MODEL)
    line = next(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Return) and ast.unparse(n) == "return self.scale")
    hazards = hazards_by_function(tree, [(line, "TP301 `.item()` call")])
    assert hazards == {"Mlp.config_scale": (line, "TP301 `.item()` call")}
    found, refused = graph_sites(tree, hazards)
    assert [s.cls for s in found] == []
    assert [(n.cls, n.line, n.reason) for n in refused] == [
        ("Block", line, "in Mlp.config_scale: TP301 `.item()` call"),
        ("Model", line, "in Mlp.config_scale: TP301 `.item()` call"),
    ]


def build(tmp_path: Path, source: str, out_name: str = "out") -> Path:
    package = tmp_path / "src" / "models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "net.py").write_text(source)
    out = tmp_path / out_name
    command = [sys.executable, "-m", "transpiler.cli.main", "build", str(tmp_path / "src"), "-o", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    return out


def test_the_build_decorates_block_forwards_and_the_output_runs_as_the_source(tmp_path, monkeypatch):
    # Imported as a package of its own, so that the output imports its own copy of the runtime.
    out = build(tmp_path, MODEL, out_name=f"graphed_{tmp_path.name}".replace("-", "_"))
    (out / "__init__.py").write_text("")
    text = (out / "models" / "net.py").read_text()
    assert text.count("@_transpile_graphed(") == 2  # Block's forward and Model's
    decorated = text[text.index("@_transpile_graphed(") :]
    assert decorated.split("def ", 1)[1].startswith("forward(self, x, mask=None)")  # Block's first
    assert '"config.use_mlp"' in decorated.split("def ", 1)[0]
    assert '@_transpile_graphed(reads=("layers",))\n    def forward(self, x):' in text  # Model's
    ast.parse(text)

    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "models", raising=False)
    monkeypatch.delitem(sys.modules, "models.net", raising=False)
    original = importlib.import_module("models.net")
    compiled = importlib.import_module(f"{out.name}.models.net")
    assert compiled.__file__ != original.__file__

    class Config:
        hidden, eps, layers, use_mlp, double = 8, 1e-5, 2, True, True

    torch.manual_seed(0)
    reference = original.Model(Config()).eval()
    model = compiled.Model(Config()).eval()
    for layer in (*reference.layers, *model.layers):
        layer.mlp.scale = 0.5
    model.load_state_dict(reference.state_dict())
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=0, atol=0)  # on CPU: the same code
    # The decorated forward keeps the source's signature (libraries inspect it) and names what it reads.
    block = compiled.Block.forward
    assert inspect.signature(block) == inspect.signature(original.Block.forward)
    assert block.__transpile_reads__ == ("config.double", "config.use_mlp", "mlp.scale", "norm.eps")


def test_a_file_without_regions_gets_its_blocks_graphed_and_a_header(tmp_path):
    out = build(
        tmp_path,
        textwrap.dedent("""
            from torch import nn
            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 4)
                def forward(self, x):
                    return self.fc(x)
            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = nn.ModuleList([Block() for _ in range(2)])
            """),
    )
    text = (out / "models" / "net.py").read_text()
    assert text.startswith("# Generated by transpile ")
    assert "@_transpile_graphed()\n    def forward(self, x):" in text
    assert not list((out / "models").glob("_net_kernels*"))  # no region, no kernel files


def test_the_report_says_which_forwards_replay_and_why_the_others_do_not(tmp_path):
    out = build(tmp_path, MODEL.replace("return self.scale", "self.scale = 2\n        return self.scale"))
    report = json.loads((out / "transpile-report.json").read_text())
    (entry,) = [f for f in report["files"] if f["path"].endswith("net.py")]
    line = 1 + MODEL.splitlines().index("        return self.scale")  # the store, inserted above it
    assert entry["cuda_graphs"] == {
        "replayed": [],
        "not_replayed": [
            {"class": "Block", "line": line, "reason": "in Mlp.config_scale: stores into `self.scale`"},
            {"class": "Model", "line": line, "reason": "in Mlp.config_scale: stores into `self.scale`"},
        ],
    }
    html = (out / "transpile-report" / entry["path"]).with_name("net.py.html").read_text()
    assert "<code>Block.forward</code>: not replayed (line" in html
    report = json.loads((build(tmp_path / "again", MODEL) / "transpile-report.json").read_text())
    assert report["summary"]["cuda_graph_forwards"] == 2


def test_explain_passes_names_replayed_and_refused_blocks(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(MODEL.replace("return self.scale", "self.scale = 2\n        return self.scale"))
    command = [sys.executable, "-m", "transpiler.cli.main", "explain", "--passes", str(path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "== after graph_sites" in done.stdout
    assert "Block.forward: not replayed: in Mlp.config_scale: stores into `self.scale`" in done.stdout
