"""Plot the speed-ups of benchmarks/kernels.py and models_bench.py results: transpiled and torch.compile over eager.

    python benchmarks/plot.py cpu.json [gpu.json ...] -o benchmarks/kernels_cpu.png

One panel per JSON file (its device and machine in the title), one group of bars per
kernel case, size and dtype, or per model and dtype: eager time / variant time, so 1 is
eager and higher is faster; a variant that failed or was not run has no bar.
The y axis turns logarithmic when the speed-ups span more than a factor of ten.
Needs matplotlib (plotting runs on the development machine, not the GPU machine).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

VARIANTS = (
    ("transpiled", "transpiled", "tab:blue"),
    ("compile", "torch.compile", "tab:orange"),
    # CUDA graphs, opt-in on both sides: plotted where a run measured them (models_bench.py --variants)
    ("transpiled-block-graphs", "transpiled, CUDA graph per block", "tab:cyan"),
    ("compile-graphs", "torch.compile reduce-overhead", "tab:red"),
)


def plotted(report: dict) -> list[tuple[str, str, str]]:
    """The variants some row of the report ran."""
    return [v for v in VARIANTS if any(v[0] in row["variants"] for row in report["steady_state"])]


def speedups(report: dict) -> tuple[list[str], dict[str, list[float]]]:
    """Bar labels and, per variant, eager time over the variant's time (NaN where it was not run)."""
    labels = []
    values: dict[str, list[float]] = {name: [] for name, _, _ in plotted(report)}
    for row in report["steady_state"]:
        labels.append(label(row))
        eager = row["variants"]["eager"].get("seconds", float("nan"))
        for name in values:
            seconds = row["variants"].get(name, {}).get("seconds")
            values[name].append(eager / seconds if seconds else float("nan"))
    return labels, values


def label(row: dict) -> str:
    """A group of bars: a kernel case at its size, or a model (benchmarks/models_bench.py) at its input shape."""
    if "model" in row:
        return f"{row['model']}\n{row['shape']} {row['dtype']}"
    return f"{row['case']}\n2^{row['elements'].bit_length() - 1} {row['dtype']}"


def panel(axis, report: dict) -> None:
    labels, values = speedups(report)
    variants = plotted(report)
    width = 0.8 / len(variants)
    positions = range(len(labels))
    for index, (name, legend, color) in enumerate(variants):
        offsets = [p + (index - (len(variants) - 1) / 2) * width for p in positions]
        bars = axis.bar(offsets, values[name], width, label=legend, color=color)
        axis.bar_label(bars, fmt="%.3g", fontsize=7, padding=1)
    finite = [v for series in values.values() for v in series if v == v and v > 0]
    if finite and max(finite) / min(finite) > 10:
        axis.set_yscale("log")
    axis.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="eager")
    axis.set_xticks(list(positions), labels, fontsize=7)
    axis.set_ylabel("speed-up over eager (eager time / time)")
    machine = report["machine"]
    device = machine["gpu"] or f"{machine['cpu']}, {machine['cores']} cores"
    axis.set_title(
        f"{report['device']}: {device}; torch {report['versions']['torch']}, {report['date'][:10]}", fontsize=9
    )
    axis.legend(fontsize=8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "reports", nargs="+", type=Path, help="JSON files written by benchmarks/kernels.py or models_bench.py --json"
    )
    parser.add_argument("-o", "--output", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    reports = [json.loads(path.read_text()) for path in args.reports]
    width = max(6.0, 1.4 * max(len(r["steady_state"]) for r in reports))
    figure, axes = pyplot.subplots(len(reports), 1, figsize=(width, 4.5 * len(reports)), squeeze=False)
    for axis, report in zip(axes[:, 0], reports):
        panel(axis, report)
    figure.tight_layout()
    figure.savefig(args.output, dpi=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
