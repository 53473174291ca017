"""GPU metric families: the collection on an NVML-shaped object, NVML's absence here, and
(marked gpu) the real NVML on a GPU machine."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from triton_core.observability.gpu_metrics import GPU_FAMILIES, GpuCollector
from triton_core.tensors.devices import gpu_count


class NotSupported(Exception):
    """What NVML raises for a reading a board does not have."""


class Nvml:
    """Two devices in NVML's units (mW, mJ, bytes, percent); the second has no power sensor."""

    def __init__(self) -> None:
        self.energy = {0: 5_000_000, 1: 0}

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-0000000{handle}-aaaa".encode()

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=75 if handle == 0 else 0, memory=10)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 << 30, used=(1 << 30) * (handle + 1), free=0)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if handle == 1:
            raise NotSupported
        return 250_500

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        if handle == 1:
            raise NotSupported
        return 700_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        if handle == 1:
            raise NotSupported
        return self.energy[handle]


def samples(collector: GpuCollector) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels["gpu_uuid"]): sample.value
        for family in collector.collect()
        for sample in family.samples
    }


def test_readings_are_in_tritons_units_and_labelled_by_uuid(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = Nvml()
    collector = GpuCollector(nvml)
    nvml.energy[0] += 1_500_000  # 1500 J since the server started
    values = samples(collector)
    first = "GPU-00000000-aaaa"
    assert values[("nv_gpu_utilization", first)] == 0.75
    assert values[("nv_gpu_memory_total_bytes", first)] == 80 << 30
    assert values[("nv_gpu_memory_used_bytes", first)] == 1 << 30
    assert values[("nv_gpu_power_usage", first)] == 250.5
    assert values[("nv_gpu_power_limit", first)] == 700.0
    assert values[("nv_energy_consumption", first)] == 1500.0
    # a reading the board lacks is left out, the others of that board are there
    second = "GPU-00000001-aaaa"
    assert ("nv_gpu_power_usage", second) not in values
    assert values[("nv_gpu_memory_used_bytes", second)] == 2 << 30


def test_families_have_tritons_names_and_types(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    families = {f.name: f.type for f in GpuCollector(Nvml()).collect()}
    assert families == {name: kind for name, (_, kind) in GPU_FAMILIES.items()}
    assert families["nv_energy_consumption"] == "counter"


@pytest.mark.parametrize(
    ("visible", "uuids"),
    [
        ("1", ["GPU-00000001-aaaa"]),
        ("GPU-00000000", ["GPU-00000000-aaaa"]),
        ("0,1", ["GPU-00000000-aaaa", "GPU-00000001-aaaa"]),
        ("", []),
    ],
)
def test_only_the_gpus_cuda_may_use_are_reported(monkeypatch, visible, uuids):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    values = samples(GpuCollector(Nvml()))
    assert sorted({uuid for name, uuid in values if name == "nv_gpu_utilization"}) == uuids


@pytest.mark.skipif(gpu_count() > 0, reason="checks the machine without a GPU")
def test_without_a_gpu_there_is_no_collector_and_one_log_line(caplog):
    with caplog.at_level(logging.INFO, logger="triton_core.observability.gpu_metrics"):
        assert GpuCollector.create() is None
    lines = [
        r.getMessage() for r in caplog.records if r.name == "triton_core.observability.gpu_metrics"
    ]
    assert len(lines) == 1 and lines[0].startswith("GPU metrics: not collected"), lines


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() == 0, reason="no CUDA device")
def test_the_real_nvml_reports_every_gpu():
    collector = GpuCollector.create()
    assert collector is not None
    values = samples(collector)
    uuids = {uuid for name, uuid in values if name == "nv_gpu_memory_total_bytes"}
    assert len(uuids) == gpu_count() and all(u.startswith("GPU-") for u in uuids)
    for (name, _), value in values.items():
        if name == "nv_gpu_utilization":
            assert 0.0 <= value <= 1.0
        if name == "nv_gpu_memory_total_bytes":
            assert value > 1 << 30
        if name == "nv_energy_consumption":
            assert value >= 0.0
