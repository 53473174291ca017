"""GPU metric families with Triton's names, read through NVML (nvidia-ml-py) at scrape time.

Triton reports, per GPU and labelled by ``gpu_uuid``: utilisation, total and used memory,
power usage and limit (gauges) and the energy used since the server started (a counter).
Without NVML (no driver, no GPU, the package missing) no GPU family is exported and one line
is logged at start; a device that lacks one reading (power on some boards) just omits it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

#: name -> (documentation, type), as Triton documents them
GPU_FAMILIES: dict[str, tuple[str, str]] = {
    "nv_gpu_utilization": ("GPU utilization rate [0.0 - 1.0)", "gauge"),
    "nv_gpu_memory_total_bytes": ("GPU total memory, in bytes", "gauge"),
    "nv_gpu_memory_used_bytes": ("GPU used memory, in bytes", "gauge"),
    "nv_gpu_power_usage": ("GPU power usage in watts", "gauge"),
    "nv_gpu_power_limit": ("GPU power management limit in watts", "gauge"),
    "nv_energy_consumption": (
        "GPU energy consumption in joules since the Triton Server started",
        "counter",
    ),
}


@dataclass(slots=True)
class _Device:
    handle: Any
    uuid: str
    #: NVML's energy counter (mJ) at start, or None where the board has none
    energy_start: int | None


def _visible(index: int, uuid: str, visible: str | None) -> bool:
    """Whether CUDA_VISIBLE_DEVICES (indices or UUIDs) lets this process use the device."""
    if visible is None:
        return True
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isdigit() and int(entry) == index:
            return True
        if entry.startswith("GPU-") and uuid.startswith(entry):
            return True
    return False


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuCollector(Collector):
    """Triton's GPU families from an NVML module (``pynvml`` from nvidia-ml-py)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._devices = self._open_devices()

    @classmethod
    def create(cls) -> GpuCollector | None:
        """A collector over this host's GPUs, or None (logged once) when there are none."""
        try:
            import pynvml
        except ImportError:
            logger.info("GPU metrics: not collected, nvidia-ml-py (pynvml) is not installed")
            return None
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError: no driver, no library, no device
            logger.info("GPU metrics: not collected, NVML is not available (%s)", exc)
            return None
        collector = cls(pynvml)
        if not collector._devices:
            logger.info("GPU metrics: not collected, NVML reports no GPU visible to CUDA")
            return None
        logger.info("GPU metrics: collecting for %d GPU(s)", len(collector._devices))
        return collector

    def _open_devices(self) -> list[_Device]:
        nvml, visible = self._nvml, os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            if _visible(index, uuid, visible):
                energy = self._read(partial(nvml.nvmlDeviceGetTotalEnergyConsumption, handle))
                devices.append(_Device(handle, uuid, energy))
        return devices

    @staticmethod
    def _read(reading: Callable[[], Any]) -> Any:
        """One NVML reading, or None where the device does not support it."""
        try:
            return reading()
        except Exception:  # NVMLError_NotSupported and kin
            return None

    def _readings(self, device: _Device) -> dict[str, float | None]:
        nvml, handle = self._nvml, device.handle
        utilization = self._read(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        memory = self._read(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        power = self._read(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        limit = self._read(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        energy = self._read(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        return {
            "nv_gpu_utilization": None if utilization is None else utilization.gpu / 100.0,
            "nv_gpu_memory_total_bytes": None if memory is None else float(memory.total),
            "nv_gpu_memory_used_bytes": None if memory is None else float(memory.used),
            # NVML reports milliwatts and millijoules; Triton reports watts and joules.
            "nv_gpu_power_usage": None if power is None else power / 1000.0,
            "nv_gpu_power_limit": None if limit is None else limit / 1000.0,
            "nv_energy_consumption": (
                None
                if energy is None or device.energy_start is None
                else (energy - device.energy_start) / 1000.0
            ),
        }

    def collect(self) -> Iterator[Metric]:
        families = {}
        for name, (documentation, kind) in GPU_FAMILIES.items():
            family = Metric(name, documentation, kind)
            family.name = name  # Metric drops a "_total" suffix from counters; Triton has none
            families[name] = family
        for device in self._devices:
            labels = {"gpu_uuid": device.uuid}
            for name, value in self._readings(device).items():
                if value is not None:
                    families[name].add_sample(name, labels, value)
        yield from families.values()
