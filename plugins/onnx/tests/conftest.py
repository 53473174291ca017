"""Fixtures for the ONNX Runtime backend tests: model files, configs, loaded models, requests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from triton_core_onnx.backend import OnnxRuntimeBackend, OnnxRuntimeInstance, OnnxRuntimeModel

from triton_core.backends.contract import InstanceSpec, ModelContext
from triton_core.protos import model_config_pb2
from triton_core.types import InferenceRequest, RequestedOutput, Tensor


@pytest.fixture
def builders() -> Any:
    """The model builders module (needs the ``onnx`` package: the ``testing`` extra)."""
    pytest.importorskip("onnx")
    from triton_core_onnx import model_builders

    return model_builders


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """``<repo>/<model>``: tests write ``1/model.onnx`` under it."""
    path = tmp_path / "repo" / "m"
    (path / "1").mkdir(parents=True)
    return path


@pytest.fixture
def model_file(model_dir: Path) -> Path:
    return model_dir / "1" / "model.onnx"


def parse_config(text: str = "", name: str = "m") -> model_config_pb2.ModelConfig:
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    if not config.name:
        config.name = name
    return config


@pytest.fixture
def make_config() -> Callable[..., model_config_pb2.ModelConfig]:
    """``make_config(pbtxt_text)`` -> a ModelConfig named ``m``."""
    return parse_config


@pytest.fixture
def complete(
    model_file: Path,
) -> Callable[..., model_config_pb2.ModelConfig]:
    """``complete(text="", options=None)``: auto-complete a config against ``model_file``."""

    def run(text: str = "", options: dict[str, str] | None = None) -> model_config_pb2.ModelConfig:
        config = parse_config(text)
        OnnxRuntimeBackend(options).auto_complete_config(config, model_file)
        return config

    return run


@pytest.fixture
def load(model_file: Path) -> Callable[..., OnnxRuntimeModel]:
    """``load(text="", auto_complete=True, options=None, model_path=None)`` -> a loaded model.

    Without an ``instance_group`` in the text, one KIND_CPU group of 2 is added, as the
    core's normalisation would.
    """

    def run(
        text: str = "",
        *,
        auto_complete: bool = True,
        options: dict[str, str] | None = None,
        model_path: Path | None = None,
    ) -> OnnxRuntimeModel:
        path = model_path or model_file
        backend = OnnxRuntimeBackend(options)
        config = parse_config(text)
        if auto_complete:
            backend.auto_complete_config(config, path)
        if not config.instance_group:
            group = config.instance_group.add(name="m", count=2)
            group.kind = model_config_pb2.ModelInstanceGroup.KIND_CPU
        context = ModelContext(
            name=config.name,
            version=1,
            config=config,
            model_dir=path.parent.parent,
            version_dir=path.parent,
            model_path=path,
            backend_options=dict(options or {}),
        )
        return backend.load_model(context)

    return run


@pytest.fixture
def instance(load: Callable[..., OnnxRuntimeModel]) -> Callable[..., OnnxRuntimeInstance]:
    """``instance(text="", **load_kwargs)`` -> the first CPU instance of a loaded model."""

    def run(text: str = "", **kwargs: Any) -> OnnxRuntimeInstance:
        model = load(text, **kwargs)
        return model.create_instance(cpu_spec())

    return run


def cpu_spec(index: int = 0) -> InstanceSpec:
    return InstanceSpec(name=f"m_{index}", kind="CPU", device_id=0, group_name="m")


def gpu_spec(device_id: int = 0) -> InstanceSpec:
    return InstanceSpec(name=f"m_gpu{device_id}", kind="GPU", device_id=device_id, group_name="m")


def request(
    inputs: dict[str, tuple[str, np.ndarray]], outputs: list[str] | None = None
) -> InferenceRequest:
    """A request from ``{name: (datatype, array)}``; ``outputs`` None asks for all."""
    return InferenceRequest(
        model_name="m",
        inputs={name: Tensor(name, dt, array) for name, (dt, array) in inputs.items()},
        outputs=None if outputs is None else [RequestedOutput(name) for name in outputs],
    )


@pytest.fixture
def make_request() -> Callable[..., InferenceRequest]:
    return request


@pytest.fixture
def specs() -> Any:
    """``specs.cpu(i)`` / ``specs.gpu(device)`` build InstanceSpecs."""

    class Specs:
        cpu = staticmethod(cpu_spec)
        gpu = staticmethod(gpu_spec)

    return Specs


def assert_instances_agree(
    gpu: OnnxRuntimeInstance, cpu: OnnxRuntimeInstance, x: np.ndarray, tolerance: float
) -> None:
    """The two instances answer a batch of two requests (``x[:1]``, ``x[1:]``) alike."""
    requests = [request({"INPUT0": ("FP32", x[:1])}), request({"INPUT0": ("FP32", x[1:])})]
    on_gpu = [r.output("OUTPUT0").data for r in gpu.execute(requests)]
    on_cpu = [r.output("OUTPUT0").data for r in cpu.execute(requests)]
    for a, b in zip(on_gpu, on_cpu, strict=True):
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance)


@pytest.fixture
def instances_agree() -> Callable[..., None]:
    """``instances_agree(gpu, cpu, x, tolerance)``: see :func:`assert_instances_agree`."""
    return assert_instances_agree
