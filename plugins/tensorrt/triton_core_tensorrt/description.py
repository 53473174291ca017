"""What a serialized TensorRT engine says about itself, as plain data.

An :class:`EngineDescription` is read once from a deserialized engine on a GPU
(:func:`triton_core_tensorrt.runtime.describe_engine`) and everything the backend decides
without a device (auto-complete, profile choice, shape checks, buffer plans) is computed from
it. Its JSON form (:meth:`EngineDescription.to_json`) is what the recorder writes, so the
unit tests run the same logic on recorded descriptions without TensorRT or a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

#: version of the JSON layout below
FORMAT_VERSION: Final = 1

#: ``tensorrt.DataType`` member name -> config datatype (Triton's ConvertTrtTypeToConfigDataType)
TRT_TO_CONFIG: Final[dict[str, str]] = {
    "FLOAT": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "BF16": "TYPE_BF16",
    "INT8": "TYPE_INT8",
    "UINT8": "TYPE_UINT8",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
}

#: ``tensorrt.DataType`` member name -> numpy dtype name of a host buffer (BF16 as bit patterns)
TRT_TO_NUMPY: Final[dict[str, str]] = {
    "FLOAT": "float32",
    "HALF": "float16",
    "BF16": "uint16",
    "INT8": "int8",
    "UINT8": "uint8",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
}


@dataclass(frozen=True, slots=True)
class TensorDescription:
    """One I/O tensor of the engine: a ``ReportedTensor`` for the framework kit."""

    name: str
    #: "INPUT" or "OUTPUT" (``tensorrt.TensorIOMode``)
    mode: str
    #: ``tensorrt.DataType`` member name: FLOAT, HALF, INT32 ...
    dtype: str
    #: the engine's shape, -1 for a dimension set at run time
    engine_shape: tuple[int, ...]
    #: ``tensorrt.TensorFormat`` member name; only LINEAR is served
    format: str = "LINEAR"
    #: a shape tensor (its values, not its shape, drive shape inference)
    is_shape_tensor: bool = False

    @property
    def is_input(self) -> bool:
        return self.mode == "INPUT"

    @property
    def config_type(self) -> str:
        """The config datatype, or "" for a TensorRT type Triton has none for (FP8, INT4)."""
        return TRT_TO_CONFIG.get(self.dtype, "")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.engine_shape


@dataclass(frozen=True, slots=True)
class ProfileDescription:
    """One optimization profile: the shape range of every input, the largest outputs."""

    #: input name -> (min, opt, max) shapes
    inputs: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]
    #: output name -> its shape when every input has its max shape (sizes device buffers)
    max_outputs: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EngineDescription:
    """A serialized engine's I/O tensors, profiles and what it was built with."""

    tensors: tuple[TensorDescription, ...]
    profiles: tuple[ProfileDescription, ...]
    #: ``tensorrt.__version__`` of the library that deserialized the engine
    tensorrt_version: str = ""
    #: (major, minor) of the device it was read on
    compute_capability: tuple[int, int] | None = None
    device_name: str = ""

    @property
    def inputs(self) -> dict[str, TensorDescription]:
        return {t.name: t for t in self.tensors if t.is_input}

    @property
    def outputs(self) -> dict[str, TensorDescription]:
        return {t.name: t for t in self.tensors if not t.is_input}

    def to_json(self) -> str:
        return json.dumps(_to_data(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> EngineDescription:
        return _from_data(json.loads(text))


def _to_data(description: EngineDescription) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "tensorrt_version": description.tensorrt_version,
        "compute_capability": (
            list(description.compute_capability) if description.compute_capability else None
        ),
        "device_name": description.device_name,
        "tensors": [
            {
                "name": t.name,
                "mode": t.mode,
                "dtype": t.dtype,
                "shape": list(t.engine_shape),
                "format": t.format,
                "is_shape_tensor": t.is_shape_tensor,
            }
            for t in description.tensors
        ],
        "profiles": [
            {
                "inputs": {
                    name: {"min": list(lo), "opt": list(opt), "max": list(hi)}
                    for name, (lo, opt, hi) in profile.inputs.items()
                },
                "max_outputs": {name: list(s) for name, s in profile.max_outputs.items()},
            }
            for profile in description.profiles
        ],
    }


def _from_data(data: dict[str, Any]) -> EngineDescription:
    if data.get("format") != FORMAT_VERSION:
        raise ValueError(f"engine description format {data.get('format')!r}, expected 1")
    capability = data.get("compute_capability")
    return EngineDescription(
        tensors=tuple(
            TensorDescription(
                name=t["name"],
                mode=t["mode"],
                dtype=t["dtype"],
                engine_shape=tuple(t["shape"]),
                format=t.get("format", "LINEAR"),
                is_shape_tensor=bool(t.get("is_shape_tensor", False)),
            )
            for t in data["tensors"]
        ),
        profiles=tuple(
            ProfileDescription(
                inputs={
                    name: (tuple(r["min"]), tuple(r["opt"]), tuple(r["max"]))
                    for name, r in p["inputs"].items()
                },
                max_outputs={name: tuple(s) for name, s in p.get("max_outputs", {}).items()},
            )
            for p in data["profiles"]
        ),
        tensorrt_version=data.get("tensorrt_version", ""),
        compute_capability=(capability[0], capability[1]) if capability else None,
        device_name=data.get("device_name", ""),
    )
