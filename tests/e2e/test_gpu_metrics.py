"""GPU metrics of a served process: absent without a GPU (one log line), present per GPU with
Triton's names where NVML sees one, and off with --allow-gpu-metrics=false."""

from __future__ import annotations

import urllib.request

import pytest

from tests.support import ServerProcess, write_numpy_model
from triton_core.tensors.devices import gpu_count

GPU_FAMILIES = (
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
)


NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}


def serve(tmp_path, *args: str) -> ServerProcess:
    """A process serving one small model, ready."""
    repo = tmp_path / "models"
    if not repo.exists():
        write_numpy_model(repo, "plain")
    process = ServerProcess([repo], *args, env=NUMPY_PLUGIN)
    process.wait_ready()
    return process


def scrape(process: ServerProcess) -> str:
    with urllib.request.urlopen(process.metrics_url, timeout=10) as reply:
        return reply.read().decode()


def gpu_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("nv_gpu_", "nv_energy_"))]


@pytest.mark.skipif(gpu_count() > 0, reason="checks the machine without a GPU")
def test_without_a_gpu_no_gpu_family_is_exported(tmp_path):
    with serve(tmp_path) as process:
        text = scrape(process)
        log = process.log()
    assert "nv_cpu_utilization" in text and gpu_lines(text) == []
    assert log.count("GPU metrics: not collected") == 1, log


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() == 0, reason="no CUDA device")
def test_each_gpu_is_reported_and_the_flag_turns_them_off(tmp_path):
    with serve(tmp_path) as process:
        text = scrape(process)
    for family in GPU_FAMILIES[:3]:
        lines = [line for line in gpu_lines(text) if line.startswith(family + "{")]
        assert len(lines) == gpu_count(), text
        assert all('gpu_uuid="GPU-' in line for line in lines)
    with serve(tmp_path, "--allow-gpu-metrics=false") as process:
        assert gpu_lines(scrape(process)) == []
