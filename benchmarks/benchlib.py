"""Measuring helpers shared by the benchmark harnesses: steady-state timing, peak memory, fresh processes, environment.

Steady state: warm-up, then enough iterations to fill a budget of seconds (at least 10),
median. CPU times with `time.perf_counter`; CUDA with events around each call, after
overwriting a 256 MiB buffer so that no input is still in L2. On a shared CPU, each
timing also records how many cores other processes kept busy meanwhile, and is taken
again (up to `--attempts` times) while they are busier than `--max-busy`.

Fresh processes: the harness runs itself again with `--child SPEC`; the child reports
one JSON line. Inductor, Triton and the transpiled C++ kernels keep their caches in
per-variant directories, so a first run is cold and the next one warm.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

MIN_ITERATIONS = 10
RETRY_PAUSE_S = 3.0
L2_FLUSH_BYTES = 256 * 2**20
# Where Inductor, Triton and the transpiled C++ kernels keep what they compiled, per user.
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRANSPILE_CACHE_DIR")
PARENT_START = "BENCH_PARENT_START"  # the parent's clock when it started the child
MMAP_THRESHOLD = 128 * 1024  # glibc serves blocks this large by mmap: freed, they leave the resident set
# Where glibc's own thresholds settle in a process that frees blocks of a size again and again: it raises the mmap
# threshold to each freed block's size up to DEFAULT_MMAP_THRESHOLD_MAX (64-bit), and trims at twice that.
SETTLED_MMAP_THRESHOLD = 32 * 1024 * 1024
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


# -- steady state ------------------------------------------------------------------------
def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def median_seconds(call: Callable[[], object], device: str, budget: float) -> tuple[float, int]:
    """Steady-state median time of `call` and the number of timed iterations."""
    for _ in range(3):  # warm-up: compilation, kernel loading, allocator pools
        call()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(3):
        call()
    synchronize(device)
    estimate = (time.perf_counter() - start) / 3
    iterations = max(MIN_ITERATIONS, min(1000, int(budget / max(estimate, 1e-6))))
    if device == "cuda":
        flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=device)
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iterations)
        ]
        for begin, end in events:
            flush.zero_()
            begin.record()
            call()
            end.record()
        torch.cuda.synchronize()
        times = [begin.elapsed_time(end) / 1e3 for begin, end in events]
    else:
        times = []
        for _ in range(iterations):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    return statistics.median(times), iterations


def machine_seconds() -> float | None:
    """CPU seconds all processes (and the hypervisor, as steal) have used since boot; None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed_with_contention(call: Callable[[], object], device: str, budget: float) -> dict:
    """`median_seconds`, and how many cores other processes kept busy meanwhile: on 2 shared cores,
    any of them stalls the OpenMP barriers of every variant and the numbers mean little."""
    start, machine, own = time.perf_counter(), machine_seconds(), own_seconds()
    seconds, iterations = median_seconds(call, device, budget)
    result = {"seconds": seconds, "iterations": iterations, "other_processes_cores": None}
    if machine is not None:
        others = machine_seconds() - machine - (own_seconds() - own)
        result["other_processes_cores"] = max(0.0, others) / (time.perf_counter() - start)
    return result


def quietest_timing(call: Callable[[], object], args: argparse.Namespace) -> dict:
    """The timing least disturbed by other processes, trying again (after a pause) while they are busy."""
    attempts = [timed_with_contention(call, args.device, args.budget)]
    while len(attempts) < args.attempts and (attempts[-1]["other_processes_cores"] or 0.0) > args.max_busy:
        time.sleep(RETRY_PAUSE_S)
        attempts.append(timed_with_contention(call, args.device, args.budget))
    best = min(attempts, key=lambda a: a["other_processes_cores"] or 0.0)
    return {**best, "attempts": len(attempts)}


def alternating_seconds(
    calls: dict[str, Callable[[], object]], device: str, rounds: int = 9, per_round: int = 1000
) -> dict[str, float]:
    """Seconds per call of each of `calls`, compared in one process: `rounds` rounds, each timing `per_round`
    calls of every one in turn (the order reversed every other round), the median over rounds. On a shared
    machine whatever slows one round slows its neighbours too, so the ratios hold where the times drift."""
    for call in calls.values():  # warm-up: plans, kernel loading, allocator pools
        for _ in range(min(per_round, 50)):
            call()
    synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else order[::-1]:
            call = calls[name]
            start = time.perf_counter()
            for _ in range(per_round):
                call()
            synchronize(device)
            times[name].append((time.perf_counter() - start) / per_round)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def pick(parser: argparse.ArgumentParser, names: str, table: dict, noun: str) -> list:
    """The entries of `table` that `names` lists (comma-separated, `all` or `none`); an unknown name is a usage error."""
    if names in ("all", "none"):
        return list(table.values()) if names == "all" else []
    unknown = [n for n in names.split(",") if n not in table]
    if unknown:
        parser.error(f"unknown {noun} {', '.join(unknown)}; the {noun}s are {', '.join(table)}")
    return [table[n] for n in names.split(",")]


def add_timing_arguments(parser: argparse.ArgumentParser, budget: float) -> None:
    """--budget, --max-busy and --attempts, which `quietest_timing` reads."""
    parser.add_argument(
        "--budget",
        type=float,
        default=budget,
        help=f"seconds of timed iterations per measurement (default {budget:g})",
    )
    parser.add_argument(
        "--max-busy",
        type=float,
        default=0.25,
        metavar="CORES",
        help="time again when other processes kept more cores than this busy meanwhile (default 0.25)",
    )
    parser.add_argument("--attempts", type=int, default=4, help="timings per measurement at most (default 4)")


# -- peak memory -------------------------------------------------------------------------
def peak_extra_bytes(call: Callable[[], object], device: str) -> int | None:
    """Memory one call needs above what is live before it (its output included); None where unmeasurable."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        call()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    call()  # once untimed: the heap (blocks below the mmap threshold) grows to what a call of this one needs
    try:
        base = _status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # the high water mark restarts from the current RSS
        call()
        return (_status_kib("VmHWM") - base) * 1024
    except OSError:
        return None


def graph_pools() -> set[tuple]:
    """The ids of the CUDA graphs' private memory pools that hold memory now."""
    return {tuple(s["segment_pool_id"]) for s in torch.cuda.memory_snapshot()} - {(0, 0)}


def graph_pool_idle_bytes(excluding: set[tuple] = frozenset()) -> int:
    """CUDA memory the private pools of CUDA graphs (other than `excluding`) hold with no live tensor on it: where
    their replays write their intermediates (a training graph's saved values), which `memory_allocated` misses."""
    return sum(
        s["total_size"] - s["allocated_size"]
        for s in torch.cuda.memory_snapshot()
        if tuple(s["segment_pool_id"]) not in {(0, 0), *excluding}
    )


def allocator_for_memory() -> None:
    """In this process, as `MALLOC_MMAP_THRESHOLD_` does for a child: freed tensors return to the OS, so the
    resident set that `peak_extra_bytes` reads on CPU tracks live ones (glibc otherwise raises the threshold
    as blocks are freed, and keeps them). A no-op off glibc. Not for timings: `allocator_for_timing`."""
    _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    _mallopt(M_TRIM_THRESHOLD, MMAP_THRESHOLD)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # what the heap holds free goes back now


def allocator_for_timing() -> None:
    """glibc's thresholds where a long-running process settles by itself (SETTLED_MMAP_THRESHOLD): a freed tensor's
    memory serves the next call's. Once `allocator_for_memory` pinned them low (glibc stops adjusting them once
    set), every CPU call faulted its tensors in afresh: each variant of models_bench's CPU run took 2-2.5 times
    as long as in a process of its own, the variants that allocate most the most. A no-op off glibc."""
    _mallopt(M_MMAP_THRESHOLD, SETTLED_MMAP_THRESHOLD)
    _mallopt(M_TRIM_THRESHOLD, 2 * SETTLED_MMAP_THRESHOLD)


def _mallopt(parameter: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(parameter, value)


def _status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1])
    raise OSError(f"no {field_name} in /proc/self/status")


# -- fresh processes ----------------------------------------------------------------------
def fresh_process(script: Path, spec: dict, caches: Path, label: str, env: dict[str, str] | None = None) -> dict:
    """Run `script --child SPEC` in a new interpreter whose compile caches live under `caches`
    (empty: cold; left by an earlier run: warm), with `env` added to its environment; its last stdout
    line, as JSON, or {"error": ...}."""
    env = {**os.environ, **(env or {}), **{name: str(caches / name.lower()) for name in CACHE_VARIABLES}}
    env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)  # freed tensors return to the OS: RSS tracks live ones
    env[PARENT_START] = repr(time.time())
    done = subprocess.run(
        [sys.executable, str(script), "--child", json.dumps(spec)], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        print(f"first call of {label} failed:\n{done.stderr}", file=sys.stderr)
        return {"error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def since_parent_start() -> float:
    """In a child: seconds since the parent started it (interpreter start and imports included)."""
    return time.time() - float(os.environ[PARENT_START])


def cache_files() -> int:
    """In a child: files in its compile caches (0: a cold start indeed)."""
    return sum(len(files) for name in CACHE_VARIABLES for _, _, files in os.walk(os.environ[name]))


# -- report --------------------------------------------------------------------------------
def environment(device: str) -> dict:
    """Date, command, machine and versions, for the JSON report."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    cpu = platform.processor()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", *sys.argv]),
        "machine": {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
            "platform": platform.platform(),
            "load_average_at_start": os.getloadavg(),  # other processes on the machine skew CPU timings
        },
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "triton": triton_version},
        "device": device,
    }


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"
