"""The model benchmark harness runs end to end on CPU: a small BERT transpiled from the installed transformers, eager
against transpiled (no torch.compile: it alone takes half a minute here), steady state and fresh processes."""

from pathlib import Path

import pytest
import torch

from tests.benchmark_modules import load

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bench():
    return load("models_bench")


@pytest.fixture(scope="module")
def compiled(bench, tmp_path_factory):
    directory = tmp_path_factory.mktemp("prepared") / "hf"
    assert bench.main(["--prepare", str(directory), "--models", "bert"]) == 0
    return directory


def _run(bench, compiled, report: Path, *options: str) -> tuple[int, dict]:
    """One run of the harness on the small BERT, float32, eager and transpiled: exit status and JSON report."""
    arguments = [
        "--compiled",
        str(compiled),
        "--device",
        "cpu",
        "--dtypes",
        "float32",
        "--variants",
        "eager,transpiled",
    ]
    status = bench.main([*arguments, *options, "--budget", "0.01", "--attempts", "1", "--json", str(report)])
    return status, bench.json.loads(report.read_text())


@pytest.fixture(scope="module")
def run(bench, compiled, tmp_path_factory):
    return _run(
        bench, compiled, tmp_path_factory.mktemp("run") / "report.json", "--models", "bert", "--first-call", "none"
    )


def test_the_transpiled_model_matches_eager_on_the_kernel_path(run):
    status, report = run
    assert status == 0
    row = report["steady_state"][0]
    transpiled = row["variants"]["transpiled"]
    assert transpiled["rel_l2_diff"] < 1e-5  # float32, the same weights: only reduction order differs
    paths = {path for kernel in transpiled["kernels"].values() for path in kernel}
    assert paths == {"cpp"}  # every fused kernel of the forward ran in C++, none fell back
    cpp_calls = sum(kernel["cpp"] for kernel in transpiled["kernels"].values())
    assert transpiled["ops_per_forward"] == transpiled["profile"]["aten_ops"] + cpp_calls
    eager = row["variants"]["eager"]
    assert eager["seconds"] > 0 and transpiled["seconds"] > 0
    # the timed calls replayed the tape the second call recorded (BertModel's forward is `graphed`)
    replays = transpiled["default_replays"]
    assert replays["recorded as a tape"] == 1 and replays["tape replay"] >= transpiled["iterations"]
    # reach: the kernel calls of the profiled forward are its generated kernels; the layer norms they fused
    # leave the library calls, the residual adds the leftover eager ops
    reach, eager_reach = transpiled["profile"]["reach"], eager["profile"]["reach"]
    # the fused regions (and the tape's folded values) replaced aten ops that do work: fewer of them, counting
    # each kernel call as one. All calls are not fewer: the tape calls `view` and `addmm` where eager calls `linear`.
    work = reach["generated"] + reach["library"] + reach["leftover"]
    assert work < eager_reach["library"] + eager_reach["leftover"]
    assert reach["generated"] == cpp_calls and eager_reach["generated"] == 0
    assert reach["library_by_class"]["matmul"] == eager_reach["library_by_class"]["matmul"]
    assert reach["library_by_class"].get("normalization", 0) < eager_reach["library_by_class"]["normalization"]
    assert reach["leftover_by_op"].get("aten::add", 0) < eager_reach["leftover_by_op"]["aten::add"]
    assert report["versions"]["transformers"] == report["prepared"]["transformers"]


@pytest.mark.slow  # three fresh interpreters importing transformers, one building the C++ kernels
def test_first_calls_run_in_fresh_processes_with_cold_then_warm_caches(bench, compiled, tmp_path):
    status, report = _run(bench, compiled, tmp_path / "report.json", "--models", "none", "--first-call", "bert")
    assert status == 0
    runs = {(r["variant"], r["cache"]): r for r in report["first_call"]}
    assert set(runs) == {("eager", "none"), ("transpiled", "cold"), ("transpiled", "warm")}
    assert runs[("transpiled", "cold")]["cache_files_at_start"] == 0
    assert runs[("transpiled", "warm")]["cache_files_at_start"] > 0  # the C++ library the cold run built
    for result in runs.values():
        # the clock started in the parent: the child's interpreter and imports are in it
        assert result["to_first_result_s"] > result["construction_s"] + result["first_call_s"]
    assert any(counts.get("cpp") for counts in runs[("transpiled", "warm")]["kernels"].values())


def test_tables_and_plot_read_the_report(bench, run, tmp_path, capsys):
    _, report = run
    saved = tmp_path / "report.json"
    saved.write_text(bench.json.dumps(report))
    assert bench.main(["--tables", str(saved), str(saved)]) == 0
    out = capsys.readouterr().out
    assert out.count("| bert | float32 | 8x64 |") == 2  # both copies' rows, merged
    pytest.importorskip("matplotlib")
    picture = tmp_path / "models.png"
    assert load("plot").main([str(saved), "-o", str(picture)]) == 0
    assert picture.read_bytes().startswith(b"\x89PNG")


def test_counters_delta_keeps_what_ran_between_snapshots(bench):
    before = {"fused_a (m.py:1)": {"cpp": 3}, "fused_b (m.py:9)": {"cpp": 1}}
    after = {"fused_a (m.py:1)": {"cpp": 5, "fallback: autograd": 1}, "fused_b (m.py:9)": {"cpp": 1}}
    assert bench.counters_delta(before, after) == {"fused_a (m.py:1)": {"cpp": 2, "fallback: autograd": 1}}


def test_reach_counts_library_calls_leftover_ops_and_views_apart(bench):
    """One profiled forward of a small module: each aten op called from Python lands in one class."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Dropout(0.5)).eval()
    x = torch.randn(2, 3, 8)
    with torch.no_grad(), torch.profiler.profile() as profile:
        y = model(x)  # linear (matmul), layer_norm (normalization), dropout in eval (returns its input: no work)
        z = (y + 1).relu().reshape(6, 8)  # add and relu: leftover; reshape of a contiguous tensor: a view
        z.t().contiguous()  # t: a view; contiguous of a transposed tensor copies: leftover
    found = bench.reach(profile.events(), generated=3)
    assert found["generated"] == 3
    assert found["library_by_class"] == {"matmul": 1, "normalization": 1}
    assert found["leftover_by_op"] == {"aten::add": 1, "aten::relu": 1, "aten::contiguous": 1}
    assert found["views"] == 3  # dropout, reshape, t
