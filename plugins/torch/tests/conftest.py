"""Fixtures for the PyTorch backend tests: model files, configs, loaded models, requests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format

torch = pytest.importorskip("torch")

from triton_core_torch.backend import PyTorchBackend  # noqa: E402
from triton_core_torch.runtime import PyTorchInstance, PyTorchModel  # noqa: E402

from triton_core.backends.contract import InstanceSpec, ModelContext  # noqa: E402
from triton_core.protos import model_config_pb2  # noqa: E402
from triton_core.types import InferenceRequest, RequestedOutput, Tensor  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    # torch 2.13 deprecates torch.jit; serving TorchScript is what these tests are about.
    config.addinivalue_line(
        "filterwarnings", r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"
    )
    # runtime.py silences this at import, but pytest resets warning filters around each test.
    config.addinivalue_line(
        "filterwarnings", "ignore:The given NumPy array is not writable:UserWarning"
    )


@pytest.fixture
def builders() -> Any:
    from triton_core_torch import model_builders

    return model_builders


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """``<repo>/<model>``: tests write ``1/model.pt`` or ``1/model.pt2`` under it."""
    path = tmp_path / "repo" / "m"
    (path / "1").mkdir(parents=True)
    return path


@pytest.fixture
def model_file(model_dir: Path) -> Path:
    return model_dir / "1" / "model.pt"


@pytest.fixture
def export_file(model_dir: Path) -> Path:
    return model_dir / "1" / "model.pt2"


def parse_config(text: str = "", name: str = "m") -> model_config_pb2.ModelConfig:
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    if not config.name:
        config.name = name
    return config


@pytest.fixture
def complete(model_file: Path) -> Callable[..., model_config_pb2.ModelConfig]:
    """``complete(text="", options=None, path=model_file)``: auto-complete a config."""

    def run(
        text: str = "", options: dict[str, str] | None = None, path: Path | None = None
    ) -> model_config_pb2.ModelConfig:
        config = parse_config(text)
        if not config.default_model_filename:
            config.default_model_filename = "model.pt"
        PyTorchBackend(options).auto_complete_config(config, path or model_file)
        return config

    return run


@pytest.fixture
def load(model_file: Path) -> Callable[..., PyTorchModel]:
    """``load(text="", auto_complete=True, options=None, path=None)`` -> a loaded model.

    Without an ``instance_group`` in the text, one KIND_CPU group of 1 is added, as the
    core's normalisation would.
    """

    def run(
        text: str = "",
        *,
        auto_complete: bool = True,
        options: dict[str, str] | None = None,
        path: Path | None = None,
    ) -> PyTorchModel:
        path = path or model_file
        backend = PyTorchBackend(options)
        config = parse_config(text)
        if auto_complete:
            backend.auto_complete_config(config, path)
        if not config.instance_group:
            group = config.instance_group.add(name="m", count=1)
            group.kind = model_config_pb2.ModelInstanceGroup.KIND_CPU
        context = ModelContext(
            name=config.name,
            version=1,
            config=config,
            model_dir=path.parent.parent,
            version_dir=path.parent,
            model_path=path.parent / (config.default_model_filename or path.name),
            backend_options=dict(options or {}),
        )
        return backend.load_model(context)

    return run


def cpu_spec(index: int = 0) -> InstanceSpec:
    return InstanceSpec(name=f"m_{index}", kind="CPU", device_id=0, group_name="m")


def gpu_spec(device_id: int = 0) -> InstanceSpec:
    return InstanceSpec(name=f"m_gpu{device_id}", kind="GPU", device_id=device_id, group_name="m")


@pytest.fixture
def instance(load: Callable[..., PyTorchModel]) -> Callable[..., PyTorchInstance]:
    """``instance(text="", **load_kwargs)`` -> the first CPU instance of a loaded model."""

    def run(text: str = "", **kwargs: Any) -> PyTorchInstance:
        return load(text, **kwargs).create_instance(cpu_spec())

    return run


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
