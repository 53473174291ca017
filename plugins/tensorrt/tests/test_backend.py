"""The plugin without TensorRT or a GPU: it imports, lists, and a plan model fails to load
with a message that says what is missing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton_core_tensorrt.plugin
from triton_core_tensorrt.backend import TensorRTBackend

from triton_core import ModelContext, Status, TritonError
from triton_core.testing import ModelRepository, ServerProcess

HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
NO_TENSORRT = pytest.mark.skipif(HAS_TENSORRT, reason="checks the failure without tensorrt")

CONFIG = {
    "backend": "tensorrt",
    "max_batch_size": 8,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [64]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [10]}],
}


def test_the_backend_is_named_as_in_triton():
    assert TensorRTBackend.name == "tensorrt"
    assert TensorRTBackend.platforms == ("tensorrt_plan",)
    assert TensorRTBackend.default_model_filename == "model.plan"


def test_importing_the_plugin_imports_neither_tensorrt_nor_cuda():
    code = (
        "import sys, triton_core_tensorrt.plugin, triton_core_tensorrt.backend;"
        "print(sorted(m for m in ('tensorrt', 'cuda', 'torch') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"


@NO_TENSORRT
def test_auto_complete_without_tensorrt_says_what_to_install(make_config, tmp_path: Path):
    plan = tmp_path / "m" / "1" / "model.plan"
    plan.parent.mkdir(parents=True)
    plan.write_bytes(b"not an engine")
    with pytest.raises(TritonError) as info:
        TensorRTBackend().auto_complete_config(make_config(), plan)
    assert info.value.status is Status.UNAVAILABLE
    assert info.value.message.startswith(
        "unable to load model 'm': the TensorRT backend needs the tensorrt package and a CUDA "
        "GPU (pip install triton-core-tensorrt[gpu])"
    )


@NO_TENSORRT
def test_load_without_tensorrt_says_what_to_install(make_config, tmp_path: Path):
    plan = tmp_path / "m" / "1" / "model.plan"
    plan.parent.mkdir(parents=True)
    plan.write_bytes(b"not an engine")
    context = ModelContext(
        name="m",
        version=1,
        config=make_config('backend: "tensorrt"'),
        model_dir=plan.parent.parent,
        version_dir=plan.parent,
        model_path=plan,
    )
    with pytest.raises(TritonError) as info:
        TensorRTBackend().load_model(context)
    assert "needs the tensorrt package and a CUDA GPU" in info.value.message


@NO_TENSORRT
def test_a_served_plan_model_is_unavailable_with_the_reason(tmp_path: Path):
    repository = ModelRepository(tmp_path / "models")
    repository.add_model("plan", CONFIG, versions={1: {"model.plan": b"not an engine"}})
    args = ("--exit-on-error=false", "--strict-readiness=false")
    with ServerProcess([repository], *args, plugins=[triton_core_tensorrt.plugin]) as process:
        process.wait_ready()
        with process.http_client() as http:
            index = {m["name"]: m for m in http.get_model_repository_index()}
            assert not http.is_model_ready("plan")
    assert index["plan"]["state"] == "UNAVAILABLE"
    assert "needs the tensorrt package and a CUDA GPU" in index["plan"]["reason"]


def test_triton_core_plugins_lists_the_installed_distribution():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_CORE_PLUGINS"}
    listing = subprocess.run(
        [sys.executable, "-m", "triton_core", "plugins"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=300,
    ).stdout
    rows = [line.split(maxsplit=3) for line in listing.splitlines()]
    row = ["tensorrt", "triton-core-tensorrt", "0.1.0", "backend:tensorrt, platform:tensorrt_plan"]
    assert row in rows, "the entry point is missing: pip install -e plugins/tensorrt\n" + listing
