"""On a GPU: engines built here with TensorRT's builder from ONNX models, served, and
compared with onnxruntime on the CPU; the recorder checked against the CPU tests' fixtures.

Skipped where tensorrt or a CUDA device is missing (run them with scripts/gpu-check.sh).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from triton_core import InferenceRequest, InstanceSpec, ModelContext, Status, Tensor, TritonError
from triton_core.tensors.devices import gpu_count
from triton_core.testing import ModelRepository, ServerProcess, http_inputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorrt") is None, reason="the tensorrt package is missing"
    ),
    pytest.mark.skipif(gpu_count() == 0, reason="no CUDA device"),
]

CONVNET_PROFILES = {"INPUT0": [((1, 3, 64, 64), (32, 3, 64, 64), (64, 3, 64, 64))]}
MLP_PROFILES = {"INPUT0": [((1, 64), (8, 64), (16, 64)), ((16, 64), (64, 64), (128, 64))]}


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """name -> (ONNX model, plan built from it): the models of the fixtures."""
    from triton_core_onnx import model_builders as mb
    from triton_core_tensorrt.builders import build_engine

    root = tmp_path_factory.mktemp("trt")
    models = {
        "convnet": (mb.convnet(root / "convnet.onnx"), CONVNET_PROFILES, False),
        "convnet_fp16": (mb.convnet(root / "convnet.onnx"), CONVNET_PROFILES, True),
        "mlp_two_profiles": (mb.mlp(root / "mlp.onnx"), MLP_PROFILES, False),
    }
    return {
        name: (onnx, build_engine(onnx, root / f"{name}.plan", profiles, fp16=fp16))
        for name, (onnx, profiles, fp16) in models.items()
    }


def reference(onnx_path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return session.run(None, {"INPUT0": x})[0]


@pytest.mark.parametrize("name", ["convnet", "mlp_two_profiles"])
def test_the_recorder_reads_what_the_fixtures_say(engines, describe, name):
    from triton_core_tensorrt import runtime

    recorded = runtime.read_description("m", engines[name][1])
    fixture = describe(name)
    # The library version and the device are the machine's; the structure is the engine's.
    machine = {"tensorrt_version": "", "compute_capability": None, "device_name": ""}
    assert dataclasses.replace(recorded, **machine) == dataclasses.replace(fixture, **machine)
    assert recorded.compute_capability is not None and recorded.tensorrt_version


def load(
    plan: Path, text: str = "", groups: str = 'instance_group [ { name: "m" kind: KIND_GPU } ]'
) -> Any:
    from google.protobuf import text_format
    from triton_core_tensorrt.backend import TensorRTBackend

    from triton_core import ModelConfig

    config = text_format.Parse(text + groups, ModelConfig(name="m"))
    backend = TensorRTBackend()
    backend.auto_complete_config(config, plan)
    context = ModelContext(
        name="m",
        version=1,
        config=config,
        model_dir=plan.parent,
        version_dir=plan.parent,
        model_path=plan,
    )
    return backend.load_model(context)


def requests_of(*arrays: np.ndarray) -> list[InferenceRequest]:
    return [
        InferenceRequest(model_name="m", inputs={"INPUT0": Tensor("INPUT0", "FP32", a)})
        for a in arrays
    ]


GPU0 = InstanceSpec(name="m_0", kind="GPU", device_id=0, group_name="m")


def run_batches(instance: Any, arrays: list[np.ndarray]) -> list[np.ndarray]:
    return [r.output("OUTPUT0").data for r in instance.execute(requests_of(*arrays))]


@pytest.mark.parametrize("graphs", [False, True])
def test_a_batch_matches_onnxruntime_on_the_cpu(engines, graphs):
    onnx, plan = engines["convnet"]
    text = "optimization { cuda { graphs: true } }\n" if graphs else ""
    instance = load(plan, text).create_instance(GPU0)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((n, 3, 64, 64), dtype=np.float32) for n in (1, 3, 4)]
    try:
        for _ in range(3):  # the second and third runs replay captured graphs
            outputs = run_batches(instance, arrays)
            for x, y in zip(arrays, outputs, strict=True):
                np.testing.assert_allclose(y, reference(onnx, x), rtol=1e-3, atol=1e-3)
    finally:
        instance.finalize()


def test_fp16_engine_is_close_to_fp32(engines):
    onnx, plan = engines["convnet_fp16"]
    instance = load(plan).create_instance(GPU0)
    x = np.random.default_rng(1).standard_normal((8, 3, 64, 64), dtype=np.float32)
    try:
        (y,) = run_batches(instance, [x])
        np.testing.assert_allclose(y, reference(onnx, x), rtol=5e-2, atol=5e-2)
    finally:
        instance.finalize()


def test_an_instance_uses_its_group_profile(engines):
    onnx, plan = engines["mlp_two_profiles"]
    groups = 'instance_group [ { name: "m" kind: KIND_GPU profile: [ "1" ] } ]'
    model = load(plan, groups=groups)
    assert model.config.max_batch_size == 128
    instance = model.create_instance(GPU0)
    rng = np.random.default_rng(2)
    try:
        x = rng.standard_normal((100, 64), dtype=np.float32)
        (y,) = run_batches(instance, [x])
        np.testing.assert_allclose(y, reference(onnx, x), rtol=1e-3, atol=1e-4)
        with pytest.raises(TritonError) as info:
            run_batches(instance, [x[:4]])
        assert info.value.status is Status.INVALID_ARG
        assert "between 16 and 128 but received 4" in info.value.message
    finally:
        instance.finalize()


def test_a_cpu_instance_is_refused(engines):
    with pytest.raises(TritonError) as info:
        load(engines["convnet"][1]).create_instance(
            InstanceSpec(name="m_0", kind="CPU", device_id=0, group_name="m")
        )
    assert "runs on GPUs only (KIND_GPU), not CPU" in info.value.message


def test_served_with_dynamic_batching_and_the_stock_client(engines, tmp_path: Path):
    onnx, plan = engines["convnet"]
    repository = ModelRepository(tmp_path / "models")
    repository.add_model("convnet", None, versions={1: {"model.plan": plan.read_bytes()}})
    x = np.random.default_rng(3).standard_normal((2, 3, 64, 64), dtype=np.float32)
    with ServerProcess([repository]) as process:
        process.wait_ready(timeout=180)
        with process.http_client() as http:
            config = http.get_model_config("convnet")
            y = http.infer("convnet", http_inputs({"INPUT0": x})).as_numpy("OUTPUT0")
            too_big = np.zeros((65, 3, 64, 64), np.float32)
            with pytest.raises(Exception, match=r"batch-size must be <= 64"):
                http.infer("convnet", http_inputs({"INPUT0": too_big}))
    assert config["platform"] == "tensorrt_plan" and config["max_batch_size"] == 64
    assert "dynamic_batching" in config
    np.testing.assert_allclose(y, reference(onnx, x), rtol=1e-3, atol=1e-3)
