"""Build small ONNX models for tests, examples and benchmarks.

Every builder writes a ``.onnx`` file to ``path`` (creating parent directories) and returns
the path.  Models are generated with the ``onnx`` package only (no downloads), use opset 17
and IR version 9, and draw their weights from ``numpy.random.default_rng(seed)`` so the same
arguments always produce the same file.

Datatypes are Triton wire names (``"FP32"``, ``"BYTES"`` ...); a ``TYPE_`` prefix as used in
``config.pbtxt`` is accepted too (``TYPE_STRING`` maps to ``BYTES``).

Dims: ``-1`` becomes a symbolic (variable-size) dimension.  Models built "with a batch
dimension" have a leading symbolic ``batch`` dim, as expected for ``max_batch_size > 0``.

onnxruntime notes (CPU execution provider, checked with onnxruntime 1.32):

* ``BYTES`` is an ONNX ``string`` tensor.  Feed numpy object arrays of ``str`` (or ``<U``
  arrays); outputs come back as object arrays of ``str``.  ``bytes`` objects in an object array
  are *not* decoded but converted with ``str()`` (``b"a"`` becomes ``"b'a'"``), and fixed-width
  ``|S`` arrays are read incorrectly, so decode to ``str`` before feeding.
* ``BF16`` cannot be fed or fetched as a numpy array; use
  ``OrtValue.ortvalue_from_numpy_with_onnx_type(uint16_array, TensorProto.BFLOAT16)`` and IO
  binding.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "ADD_SUB_DATATYPES",
    "IR_VERSION",
    "ONNX_TYPES",
    "OPSET",
    "add_sub",
    "identity",
    "mlp",
    "no_batch_identity",
    "sequence_accumulate",
    "two_inputs_mixed",
    "wide_mlp",
]

OPSET = 17
IR_VERSION = 9

# Triton wire datatype -> ONNX TensorProto element type.
ONNX_TYPES: dict[str, int] = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BF16": TensorProto.BFLOAT16,
    "BYTES": TensorProto.STRING,
}

# Datatypes for which onnxruntime's CPU provider has Add and Sub kernels.
ADD_SUB_DATATYPES: tuple[str, ...] = (
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
)

PathLike = str | os.PathLike[str]
Dim = int | str


def _onnx_type(datatype: str) -> int:
    name = datatype.upper()
    if name.startswith("TYPE_"):
        name = name[len("TYPE_") :]
        if name == "STRING":
            name = "BYTES"
    try:
        return ONNX_TYPES[name]
    except KeyError:
        raise ValueError(f"unsupported datatype {datatype!r} for an ONNX model") from None


def _canonical(datatype: str) -> str:
    elem_type = _onnx_type(datatype)
    return next(name for name, value in ONNX_TYPES.items() if value == elem_type)


def _shape(dims: Sequence[int], batch: bool) -> list[Dim]:
    shape: list[Dim] = ["batch"] if batch else []
    for i, dim in enumerate(dims):
        d = int(dim)
        if d == -1:
            shape.append(f"dim{i}")
        elif d >= 0:
            shape.append(d)
        else:
            raise ValueError(f"invalid dim {d} in {tuple(dims)}")
    return shape


def _value_info(name: str, elem_type: int, shape: Sequence[Dim]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, list(shape))


def _save(graph: onnx.GraphProto, path: PathLike) -> Path:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="triton-core",
    )
    onnx.checker.check_model(model, full_check=True)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, os.fspath(out))
    return out


def _gemm_stack(
    sizes: Sequence[int],
    seed: int,
    input_name: str,
    output_name: str,
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Gemm layers ``sizes[0] -> sizes[1] -> ... -> sizes[-1]`` with Relu in between."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    current = input_name
    n_layers = len(sizes) - 1
    for i in range(n_layers):
        fan_in, fan_out = sizes[i], sizes[i + 1]
        scale = np.float32(1.0 / np.sqrt(fan_in))
        w = rng.standard_normal((fan_in, fan_out), dtype=np.float32) * scale
        b = rng.standard_normal((fan_out,), dtype=np.float32) * np.float32(0.01)
        inits.append(numpy_helper.from_array(w, f"W{i}"))
        inits.append(numpy_helper.from_array(b, f"B{i}"))
        last = i == n_layers - 1
        gemm_out = output_name if last else f"gemm{i}"
        nodes.append(helper.make_node("Gemm", [current, f"W{i}", f"B{i}"], [gemm_out]))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm_out], [f"relu{i}"]))
            current = f"relu{i}"
    return nodes, inits


def mlp(
    path: PathLike,
    in_features: int = 64,
    hidden: int = 256,
    out_features: int = 10,
    seed: int = 0,
    input_name: str = "INPUT0",
    output_name: str = "OUTPUT0",
) -> Path:
    """FP32 ``Gemm -> Relu -> Gemm``: ``[batch, in_features] -> [batch, out_features]``."""
    nodes, inits = _gemm_stack([in_features, hidden, out_features], seed, input_name, output_name)
    graph = helper.make_graph(
        nodes,
        "mlp",
        [_value_info(input_name, TensorProto.FLOAT, ["batch", in_features])],
        [_value_info(output_name, TensorProto.FLOAT, ["batch", out_features])],
        initializer=inits,
    )
    return _save(graph, path)


def convnet(
    path: PathLike, width: int = 16, size: int = 64, classes: int = 10, seed: int = 0
) -> Path:
    """A ResNet-like FP32 CNN: ``INPUT0 [batch, 3, size, size] -> OUTPUT0 [batch, classes]``.

    Three 3x3 Conv + Relu blocks (``width``, 2x and 4x ``width`` channels, the last two with
    stride 2), global average pooling and a Gemm classifier: the layers of
    ``triton_core_torch.model_builders.ConvNet``, compute-bound on a GPU at ``width=64``.
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    current, channels = "INPUT0", 3
    for i, (out, stride) in enumerate(((width, 1), (2 * width, 2), (4 * width, 2))):
        scale = np.float32(1.0 / np.sqrt(channels * 9))
        w = rng.standard_normal((out, channels, 3, 3), dtype=np.float32) * scale
        inits.append(numpy_helper.from_array(w, f"conv{i}_w"))
        inits.append(numpy_helper.from_array(np.zeros(out, np.float32), f"conv{i}_b"))
        nodes.append(
            helper.make_node(
                "Conv",
                [current, f"conv{i}_w", f"conv{i}_b"],
                [f"conv{i}"],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
                strides=[stride, stride],
            )
        )
        nodes.append(helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"]))
        current, channels = f"relu{i}", out
    nodes.append(helper.make_node("GlobalAveragePool", [current], ["pooled"]))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["features"], axis=1))
    w = rng.standard_normal((channels, classes), dtype=np.float32) * np.float32(
        1.0 / np.sqrt(channels)
    )
    inits.append(numpy_helper.from_array(w, "fc_w"))
    inits.append(numpy_helper.from_array(np.zeros(classes, np.float32), "fc_b"))
    nodes.append(helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["OUTPUT0"]))
    graph = helper.make_graph(
        nodes,
        "convnet",
        [_value_info("INPUT0", TensorProto.FLOAT, ["batch", 3, size, size])],
        [_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", classes])],
        initializer=inits,
    )
    return _save(graph, path)


def wide_mlp(
    path: PathLike,
    features: int = 1024,
    hidden: int = 4096,
    layers: int = 2,
    seed: int = 0,
) -> Path:
    """Compute-heavier FP32 MLP for batching benchmarks.

    ``layers`` Gemm layers (Relu between them): ``features -> hidden -> ... -> hidden ->
    features``; input ``INPUT0`` ``[batch, features]``, output ``OUTPUT0`` ``[batch,
    features]``.  The defaults give about 8.4M parameters (about 34 MB) and 16.8 MFLOP
    per sample.
    """
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    sizes = [features] + [hidden] * (layers - 1) + [features]
    nodes, inits = _gemm_stack(sizes, seed, "INPUT0", "OUTPUT0")
    graph = helper.make_graph(
        nodes,
        "wide_mlp",
        [_value_info("INPUT0", TensorProto.FLOAT, ["batch", features])],
        [_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", features])],
        initializer=inits,
    )
    return _save(graph, path)


def add_sub(path: PathLike, datatype: str = "FP32", dims: int = 16) -> Path:
    """Triton's "simple" model: ``OUTPUT0 = INPUT0 + INPUT1``, ``OUTPUT1 = INPUT0 - INPUT1``.

    All tensors have shape ``[batch, dims]``.  ``datatype`` must be one of
    :data:`ADD_SUB_DATATYPES` (integer arithmetic wraps around).
    """
    try:
        name = _canonical(datatype)
    except ValueError:
        name = ""
    if name not in ADD_SUB_DATATYPES:
        raise ValueError(
            f"add_sub does not support datatype {datatype!r}; "
            f"supported: {', '.join(ADD_SUB_DATATYPES)}"
        )
    elem_type = ONNX_TYPES[name]
    shape: list[Dim] = ["batch", dims]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        [_value_info("INPUT0", elem_type, shape), _value_info("INPUT1", elem_type, shape)],
        [_value_info("OUTPUT0", elem_type, shape), _value_info("OUTPUT1", elem_type, shape)],
    )
    return _save(graph, path)


def _identity(path: PathLike, datatype: str, dims: Sequence[int], batch: bool) -> Path:
    elem_type = _onnx_type(datatype)
    shape = _shape(dims, batch)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity",
        [_value_info("INPUT0", elem_type, shape)],
        [_value_info("OUTPUT0", elem_type, shape)],
    )
    return _save(graph, path)


def identity(path: PathLike, datatype: str, dims: Sequence[int] = (-1,)) -> Path:
    """``OUTPUT0 = INPUT0`` with shape ``[batch, *dims]`` (``-1`` is a variable dim).

    Works for every datatype in :data:`ONNX_TYPES`, including ``BYTES`` (ONNX string) and
    ``BF16``.
    """
    return _identity(path, datatype, dims, batch=True)


def no_batch_identity(path: PathLike, datatype: str = "FP32", dims: Sequence[int] = (4,)) -> Path:
    """``OUTPUT0 = INPUT0`` with shape ``dims`` and no batch dim (for ``max_batch_size: 0``)."""
    return _identity(path, datatype, dims, batch=False)


def two_inputs_mixed(path: PathLike) -> Path:
    """``OUTPUT0 (FP32) = INPUT0 (FP32) * Cast<FP32>(INPUT1 (INT64))``, all ``[batch, 4]``."""
    shape: list[Dim] = ["batch", 4]
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["INPUT1"], ["input1_fp32"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["INPUT0", "input1_fp32"], ["OUTPUT0"]),
        ],
        "two_inputs_mixed",
        [
            _value_info("INPUT0", TensorProto.FLOAT, shape),
            _value_info("INPUT1", TensorProto.INT64, shape),
        ],
        [_value_info("OUTPUT0", TensorProto.FLOAT, shape)],
    )
    return _save(graph, path)


def sequence_accumulate(path: PathLike, datatype: str = "INT32", dims: int = 4) -> Path:
    """A stateful accumulator for the sequence batcher, with implicit state.

    ``OUTPUT = OUTPUT_STATE = INPUT`` where ``START`` is non-zero, else
    ``INPUT + INPUT_STATE``. ``INPUT``, ``INPUT_STATE``, ``OUTPUT`` and ``OUTPUT_STATE`` are
    ``[batch, dims]`` of ``datatype`` (one of :data:`ADD_SUB_DATATYPES`); ``START`` is the
    INT32 ``[batch, 1]`` control input. Serve it with ``sequence_batching`` naming ``START``
    (``int32_false_true: [0, 1]``) and a ``state`` from ``INPUT_STATE`` to ``OUTPUT_STATE``.
    """
    name = _canonical(datatype)
    if name not in ADD_SUB_DATATYPES:
        raise ValueError(f"sequence_accumulate does not support datatype {datatype!r}")
    elem_type = ONNX_TYPES[name]
    shape: list[Dim] = ["batch", dims]
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["START"], ["starting"], to=TensorProto.BOOL),
            helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["sum"]),
            helper.make_node("Where", ["starting", "INPUT", "sum"], ["accumulated"]),
            helper.make_node("Identity", ["accumulated"], ["OUTPUT"]),
            helper.make_node("Identity", ["accumulated"], ["OUTPUT_STATE"]),
        ],
        "sequence_accumulate",
        [
            _value_info("INPUT", elem_type, shape),
            _value_info("INPUT_STATE", elem_type, shape),
            _value_info("START", TensorProto.INT32, ["batch", 1]),
        ],
        [_value_info("OUTPUT", elem_type, shape), _value_info("OUTPUT_STATE", elem_type, shape)],
    )
    return _save(graph, path)


def ragged_scatter(path: PathLike) -> Path:
    """A ragged-batch model: ``DOUBLED = INPUT * 2`` and ``ENDS = INDEX`` as a column.

    ``INPUT`` is the batch's ragged input joined end to end (1-D FP32), ``INDEX`` a batch
    input with one FP32 value per request; ``DOUBLED`` is 1-D like ``INPUT`` (a batch output
    to scatter), ``ENDS`` has shape ``[requests, 1]``.
    """
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "INPUT"], ["DOUBLED"]),
            helper.make_node("Reshape", ["INDEX", "column"], ["ENDS"]),
        ],
        "ragged_scatter",
        [
            _value_info("INPUT", TensorProto.FLOAT, ["total"]),
            _value_info("INDEX", TensorProto.FLOAT, ["requests"]),
        ],
        [
            _value_info("DOUBLED", TensorProto.FLOAT, ["total"]),
            _value_info("ENDS", TensorProto.FLOAT, ["requests", 1]),
        ],
        initializer=[helper.make_tensor("column", TensorProto.INT64, [2], [-1, 1])],
    )
    return _save(graph, path)
