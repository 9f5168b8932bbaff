"""benchmarks/energy.py on CPU: a fake libnvidia-ml with scripted counters stands for the GPU's, and a fake clock
for the time; and the energy table of benchmarks/models_bench.py."""

import ctypes
from types import SimpleNamespace

import pytest
import torch

from tests.benchmark_modules import load

NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NOT_FOUND = 3, 6
# Two GPUs as torch numbers them, (PCI domain, bus, device), and their bus ids as NVML names them: cuda:1 is
# 00000000:3b:00.0, whatever NVML's own index of it.
GPUS = {0: (0, 0x18, 0), 1: (0, 0x3B, 0)}
BUS_IDS = {0: "00000000:18:00.0", 1: "00000000:3b:00.0"}


energy = load("energy")


class FakeNvml:
    """The libnvidia-ml calls energy.py makes, on GPUs named by PCI bus id. Each read of a GPU's counter returns its
    next scripted millijoules; a GPU scripted None has no counter. `events` records the reads (and, through the
    fixture, the synchronizations and forwards) in order."""

    def __init__(self, counters: dict[str, list[int] | None]):
        self.counters = {bus_id: None if values is None else iter(values) for bus_id, values in counters.items()}
        self.handles = list(counters)  # a handle is 1 + the index of its bus id here
        self.events: list[str] = []

    def nvmlInit_v2(self) -> int:
        return 0

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id: bytes, handle) -> int:
        if bus_id.decode() not in self.counters:
            return NVML_ERROR_NOT_FOUND
        handle._obj.value = 1 + self.handles.index(bus_id.decode())  # `_obj`: what ctypes.byref points to
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: ctypes.c_void_p, energy) -> int:
        values = self.counters[self.handles[handle.value - 1]]
        if values is None:
            return NVML_ERROR_NOT_SUPPORTED
        energy._obj.value = next(values)
        self.events.append("read")
        return 0

    @staticmethod  # a function, not a bound method: energy.py sets its `restype`, as on a ctypes function
    def nvmlErrorString(status: int) -> bytes:
        return {NVML_ERROR_NOT_SUPPORTED: b"Not Supported", NVML_ERROR_NOT_FOUND: b"Not Found"}[status]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _properties(device) -> SimpleNamespace:
    """torch.cuda.get_device_properties of the two GPUS: the fields of the PCI bus id."""
    domain, bus, device_id = GPUS[torch.device(device).index]
    return SimpleNamespace(pci_domain_id=domain, pci_bus_id=bus, pci_device_id=device_id)


@pytest.fixture
def gpus(monkeypatch):
    """torch sees the two GPUS; energy.py opens and initialises NVML afresh in each test."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", _properties)
    energy._nvml.cache_clear()
    yield
    energy._nvml.cache_clear()


@pytest.fixture
def nvml(gpus, monkeypatch):
    """A function that installs a FakeNvml as the library energy.py opens, and records synchronizations in it."""
    real = ctypes.CDLL

    def install(counters: dict[str, list[int] | None]) -> FakeNvml:
        fake = FakeNvml(counters)
        monkeypatch.setattr(
            ctypes, "CDLL", lambda name, *a, **k: fake if name == energy.LIBRARY else real(name, *a, **k)
        )
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: fake.events.append("sync"))
        return fake

    return install


def _forwards(fake: FakeNvml, clock: FakeClock, seconds: float):
    """A forward that takes `seconds` on the fake clock."""

    def call():
        fake.events.append("forward")
        clock.now += seconds

    return call


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(energy, "time", fake)
    return fake


def test_joules_per_forward_and_watts_from_the_millijoule_counter(nvml, clock):
    # 1/64 s per forward (exact in binary): the minimum second is 64 forwards; 5 J each, 320 J over 1 s
    fake = nvml({BUS_IDS[0]: [0], BUS_IDS[1]: [0, 2_000_000, 2_000_000 + 64 * 5_000]})
    meter = energy.EnergyMeter.for_device("cuda:1")
    found = meter.measure(_forwards(fake, clock, 1 / 64))
    assert found == {"energy_j": 5.0, "power_w": 320.0, "energy_forwards": 64, "energy_seconds": 1.0}
    # the counter is read with the device idle: after a synchronization, before the first and after the last forward
    assert fake.events == ["read", "sync", "read", *["forward"] * 64, "sync", "read"]


def test_a_slow_forward_still_runs_the_minimum_number_of_forwards(nvml, clock):
    fake = nvml({BUS_IDS[1]: [0, 0, energy.MIN_FORWARDS * 300_000]})
    found = energy.EnergyMeter.for_device("cuda:1").measure(_forwards(fake, clock, 0.5))
    assert found["energy_forwards"] == energy.MIN_FORWARDS > energy.MIN_SECONDS / 0.5
    assert found["energy_seconds"] == energy.MIN_FORWARDS * 0.5
    assert found["energy_j"] == 300.0 and found["power_w"] == 600.0


def test_the_gpu_is_found_by_pci_bus_id_not_by_index(nvml, clock):
    # NVML lists cuda:1's GPU first (as it would with CUDA_VISIBLE_DEVICES=1 on a two-GPU machine, or another
    # device order): cuda:1 must read its counter, 7 J a forward, not the other's 1 J
    fake = nvml({BUS_IDS[1]: [0, 0, 64 * 7_000], BUS_IDS[0]: [0, 0, 64 * 1_000]})
    found = energy.EnergyMeter.for_device(torch.device("cuda", 1)).measure(_forwards(fake, clock, 1 / 64))
    assert found["energy_j"] == 7.0


def test_no_library_gives_a_reason_not_an_exception(gpus, monkeypatch):
    # the real ctypes.CDLL, asked for a library no machine has
    monkeypatch.setattr(energy, "LIBRARY", "libnvidia-ml-absent.so.1")
    found = energy.EnergyMeter.for_device("cuda:0")
    assert isinstance(found, energy.Unmetered) and "libnvidia-ml-absent.so.1" in found.reason
    assert found.measure(lambda: pytest.fail("an unmetered device runs no forward")) == {
        "energy_j": None,
        "power_w": None,
        "energy_unavailable": found.reason,
    }


@pytest.mark.parametrize(("counters", "why"), [({BUS_IDS[0]: None}, "Not Supported"), ({BUS_IDS[1]: [0]}, "Not Found")])
def test_an_unsupported_counter_or_an_unknown_gpu_gives_a_reason(nvml, counters, why):
    nvml(counters)
    found = energy.EnergyMeter.for_device("cuda:0")
    assert isinstance(found, energy.Unmetered) and why in found.reason and BUS_IDS[0] in found.reason


def test_a_torch_without_pci_bus_ids_gives_a_reason(nvml, monkeypatch):
    nvml({BUS_IDS[0]: [0]})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(name="a GPU"))
    found = energy.EnergyMeter.for_device("cuda:0")
    assert isinstance(found, energy.Unmetered) and "PCI bus id" in found.reason


def test_the_cpu_has_no_counter():
    found = energy.EnergyMeter.for_device("cpu")
    assert isinstance(found, energy.Unmetered) and "cpu" in found.reason


# -- the table in models_bench's markdown --------------------------------------------------
def _report(device: str, transpiled: dict) -> dict:
    measured = {"energy_forwards": 200, "energy_seconds": 1.0}
    variants = {
        "eager": {"energy_j": 3.0, "power_w": 600.0, **measured},
        "compile": {"energy_j": 2.0, "power_w": 400.0, **measured},
        "transpiled": transpiled,
    }
    return {"device": device, "steady_state": [{"model": "gpt2", "dtype": "bfloat16", "variants": variants}]}


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("transformers")
    return load("models_bench")


def test_the_energy_table_shows_joules_watts_and_ratios_to_eager(bench):
    table = bench._energy_table(_report("cuda", {"energy_j": 1.5, "power_w": 450.0, "energy_forwards": 300}))
    assert table.splitlines()[2] == "| gpt2 | bfloat16 | 3.000 / 2.000 / 1.500 | 600 / 400 / 450 | 1.50x | 2.00x | - |"


def test_the_energy_table_shows_why_a_counter_was_not_read(bench):
    why = "no energy counter for GPU 00000000:18:00.0: NVML: Not Supported"
    table = bench._energy_table(_report("cuda", {"energy_j": None, "power_w": None, "energy_unavailable": why}))
    assert table.splitlines()[2] == f"| gpt2 | bfloat16 | 3.000 / 2.000 / n/a | 600 / 400 / n/a | 1.50x | - | {why} |"


def test_a_cpu_run_has_no_energy_table(bench):
    assert bench._energy_table(_report("cpu", {"energy_j": None, "power_w": None, "energy_unavailable": "cpu"})) == ""
