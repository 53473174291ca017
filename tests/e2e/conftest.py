"""A real ``triton-core serve`` process on an ONNX model repository the tests generate."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import ServerProcess, serve_until_done

onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")

#: every Triton datatype, each served by an auto-completed identity model "identity_<type>"
DATATYPES = (
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BF16", "BYTES",
)  # fmt: skip

SIMPLE_CONFIG = """
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] label_filename: "labels.txt" },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""


def build_repository(root: Path) -> Path:
    simple = root / "simple"
    onnx_builders.add_sub(simple / "1" / "model.onnx", "INT32", 16)
    (simple / "config.pbtxt").write_text(SIMPLE_CONFIG)
    (simple / "labels.txt").write_text("\n".join(f"label{i}" for i in range(16)))
    onnx_builders.mlp(root / "mlp" / "1" / "model.onnx")
    for datatype in DATATYPES:
        onnx_builders.identity(root / f"identity_{datatype.lower()}" / "1" / "model.onnx", datatype)
    onnx_builders.no_batch_identity(root / "nobatch" / "1" / "model.onnx", "FP32", (4,))
    versioned = root / "versioned"
    for version in (1, 2, 3):
        onnx_builders.add_sub(versioned / str(version) / "model.onnx", "FP32", 4)
    (versioned / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nversion_policy { latest { num_versions: 2 } }\n'
    )
    onnx_builders.two_inputs_mixed(root / "mixed" / "1" / "model.onnx")
    return root


@pytest.fixture(scope="session")
def onnx_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("onnx_models"))


@pytest.fixture(scope="session")
def server(onnx_repository: Path):
    process = ServerProcess([onnx_repository], "--http-max-input-size", str(1 << 20))
    yield from serve_until_done(process)
