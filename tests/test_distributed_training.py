"""A transpiled model trains under DDP and FSDP2 as its original does: two CPU processes, gloo.

The backward kernels are autograd nodes like any other (emit/runtime `_Differentiated`), so the engines'
hooks see the parameters' gradients as they see eager's: DDP all-reduces them, FSDP2 (`fully_shard`)
gathers parameters for the forward and reduce-scatters gradients. Each rank trains the original and the
transpiled model from the same weights on its own batches; the losses and the final weights must agree,
and the transpiled model's backward kernels must have run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_backward_kernels import SOURCE
from tests.transpiled import importable

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not built in", allow_module_level=True)

WORKER = """
import json, sys, importlib
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BASE, OUT, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, BASE)


def wrapped(module):
    if MODE == "ddp":
        return torch.nn.parallel.DistributedDataParallel(module)
    from torch.distributed.fsdp import fully_shard

    fully_shard(module.ln)  # a sub-module of its own, then the rest: how FSDP2 is applied to blocks
    return fully_shard(module)


def full(tensor):
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def train(cls, rank):
    torch.manual_seed(0)
    module = wrapped(cls(16))
    # SGD: its update is linear in the gradients, so the weights differ by what the gradients do. AdamW's
    # divides by the gradients' root mean square, which turns rounding in a gradient near 0 into a step of lr.
    optimiser = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(3):
        generator = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(4, 6, 16, generator=generator)
        bias = torch.randn(16, generator=generator)
        loss = module(x, bias).square().mean()
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        losses.append(reduced.item() / dist.get_world_size())
    weights = {name: full(p.detach()).tolist() for name, p in module.named_parameters()}
    return losses, weights


def work(rank, world):
    dist.init_process_group("gloo", init_method=f"file://{OUT}.init", rank=rank, world_size=world)
    original = importlib.import_module("original_backward")
    transpiled = importlib.import_module("transpiled_backward.models")
    runtime = importlib.import_module("transpiled_backward._transpile_runtime")
    results = {"original": train(original.Block, rank), "transpiled": train(transpiled.Block, rank)}
    backward = {}
    for kernel in runtime.KERNELS:
        if kernel.name.endswith("_backward"):
            for path, n in kernel.counts.items():
                backward[path] = backward.get(path, 0) + n
    results["backward_calls"] = backward
    results["kernels"] = {k.name: dict(k.counts) for k in runtime.KERNELS}
    if rank == 0:
        with open(OUT, "w") as file:
            json.dump(results, file)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(2,), nprocs=2)
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("distributed")
    source = base / "src"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "models.py").write_text(SOURCE)
    (base / "original_backward.py").write_text(SOURCE)
    with importable(base, {source: base / "transpiled_backward"}, ("transpiled_backward", "original_backward")):
        yield base


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_training_under_a_distributed_engine_matches_the_original(tree, tmp_path, mode):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(WORKER))
    out = tmp_path / "results.json"
    env = {**os.environ, "TRANSPILE_CACHE_DIR": str(tree / "cache"), "TRANSPILE_COMPILE": "sync"}
    run = subprocess.run(
        [sys.executable, str(script), str(tree), str(out), mode], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads(out.read_text())
    (expected_losses, expected_weights), (losses, weights) = results["original"], results["transpiled"]
    # float32 throughout: the kernels round once where eager rounds per op, a few ulps on values near 1.
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected_losses), rtol=1e-5, atol=1e-6)
    assert weights.keys() == expected_weights.keys()
    for name in weights:
        torch.testing.assert_close(
            torch.tensor(weights[name]), torch.tensor(expected_weights[name]), rtol=1e-4, atol=1e-5
        )
    kernels = results["kernels"]
    ran = {name for name, counts in kernels.items() if name.endswith("_backward") and counts.get("cpp")}
    assert {"fused_rms_norm_backward", "fused_silu_tanh_backward"} <= ran, json.dumps(kernels)
    if mode == "fsdp":
        # `self.ln` is sharded on its own: its parameters are DTensors until its own forward gathers them, so the
        # region reading them takes the original code, whose `self.ln(...)` runs FSDP's hooks.
        assert kernels["fused_softmax_layer_norm"] == {"fallback: an input is not a plain tensor": 3}
    else:
        assert "fused_softmax_layer_norm_backward" in ran
