"""scripts/gpu-check.sh without a GPU: its dry run lists every GPU-marked test file and the
benchmark, and the benchmark says why each backend it cannot run here is left out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.support import ROOT

SCRIPT = ROOT / "scripts" / "gpu-check.sh"


def gpu_marked_files() -> list[str]:
    found = []
    for top in ("tests", "plugins", "examples"):
        for path in sorted((ROOT / top).rglob("test_*.py")):
            if "pytest.mark.gpu" in path.read_text():
                found.append(str(path.relative_to(ROOT)))
    return found


def test_the_dry_run_lists_every_gpu_test_and_the_benchmark(tmp_path):
    result = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OUT": str(tmp_path)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    pytest_line = next(line for line in result.stdout.splitlines() if " -m pytest -m gpu " in line)
    files = gpu_marked_files()
    assert "plugins/tensorrt/tests/test_gpu.py" in files
    assert all(path in pytest_line.split() for path in files), (files, pytest_line)
    assert "bench/gpu_backends.py" in result.stdout


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_script_is_shellcheck_clean():
    result = subprocess.run(
        ["shellcheck", str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout


def test_the_benchmark_names_what_this_machine_lacks():
    pytest.importorskip("onnx")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "bench/gpu_backends.py", "--no-docs", "--width", "4"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in result.stdout.splitlines() if "|" in line}
    for backend in ("TensorRT (FP16)", "ONNX Runtime CUDA", "PyTorch CUDA"):
        assert "not run" in rows[backend] and "Error" in rows[backend], result.stdout
