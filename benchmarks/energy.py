"""GPU energy per forward: NVML's total energy counter, read before and after a loop of forwards.

Through ctypes on libnvidia-ml (three calls need no package, and the GPU machines have no pynvml). The counter
(millijoules since the driver loaded) exists on Volta and newer. Under MIG it is the whole GPU's.
"""

from __future__ import annotations

import ctypes
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

LIBRARY = "libnvidia-ml.so.1"
NVML_SUCCESS = 0
# The counter advances in steps, every few tens of milliseconds on some GPUs, not with each kernel: over a loop
# this long the step it may be behind at either end stays a few percent of the total.
MIN_SECONDS = 1.0
MIN_FORWARDS = 10  # a forward slower than MIN_SECONDS / MIN_FORWARDS: still an average over several


class NvmlError(RuntimeError):
    pass


@functools.cache
def _nvml() -> ctypes.CDLL:
    """NVML, initialised once per process: the handles stay valid until the process exits."""
    library = ctypes.CDLL(LIBRARY)
    library.nvmlErrorString.restype = ctypes.c_char_p
    _check(library, library.nvmlInit_v2())
    return library


def _check(library: ctypes.CDLL, status: int) -> None:
    if status != NVML_SUCCESS:
        raise NvmlError(f"NVML: {library.nvmlErrorString(status).decode()}")


@dataclass(frozen=True)
class Unmetered:
    """A device whose energy is not read, and why: the report's fields null, with the reason."""

    reason: str

    def measure(self, call: Callable[[], object]) -> dict:
        return {"energy_j": None, "power_w": None, "energy_unavailable": self.reason}


@dataclass(frozen=True)
class EnergyMeter:
    """The energy counter of the GPU behind one torch CUDA device."""

    library: ctypes.CDLL
    handle: ctypes.c_void_p
    device: torch.device

    @classmethod
    def for_device(cls, device: str | torch.device) -> EnergyMeter | Unmetered:
        """The meter of `device`, or Unmetered (never an exception) where there is no counter to read.

        Found by PCI bus id: NVML numbers every GPU of the machine in its own order, torch only those that
        CUDA_VISIBLE_DEVICES shows, in CUDA's order, so their indices differ."""
        device = torch.device(device)
        if device.type != "cuda":
            return Unmetered(f"no GPU energy counter on {device.type}")
        properties = torch.cuda.get_device_properties(device)
        if not hasattr(properties, "pci_bus_id"):
            return Unmetered(f"torch {torch.__version__} gives no PCI bus id to find the GPU in NVML by")
        bus_id = f"{properties.pci_domain_id:08x}:{properties.pci_bus_id:02x}:{properties.pci_device_id:02x}.0"
        try:
            library = _nvml()
            handle = ctypes.c_void_p()
            _check(library, library.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), ctypes.byref(handle)))
            meter = cls(library, handle, device)
            meter.millijoules()  # not supported before Volta, nor on some virtual GPUs
        except (OSError, AttributeError, NvmlError) as error:  # no library; a driver without the call; an error
            return Unmetered(f"no energy counter for GPU {bus_id}: {error}")
        return meter

    def millijoules(self) -> int:
        energy = ctypes.c_ulonglong()
        _check(self.library, self.library.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(energy)))
        return energy.value

    def measure(self, call: Callable[[], object]) -> dict:
        """Joules per forward and average watts over back-to-back calls of `call`, MIN_SECONDS and MIN_FORWARDS
        at least. A loop of its own, after the timings: it runs longer than they need, and without their L2
        flush between calls, whose own energy would count. The counter is read with the device idle."""
        torch.cuda.synchronize(self.device)
        start_mj, start = self.millijoules(), time.perf_counter()
        forwards = 0
        while forwards < MIN_FORWARDS or time.perf_counter() - start < MIN_SECONDS:
            call()
            forwards += 1
        torch.cuda.synchronize(self.device)
        joules, seconds = (self.millijoules() - start_mj) / 1e3, time.perf_counter() - start
        return {
            "energy_j": joules / forwards,
            "power_w": joules / seconds,
            "energy_forwards": forwards,
            "energy_seconds": seconds,
        }
