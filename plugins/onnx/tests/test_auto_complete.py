"""auto_complete_config: filling a config from the model, and refusing one that contradicts it."""

from __future__ import annotations

import pytest
from triton_core_onnx.backend import OnnxRuntimeBackend

from triton_core.errors import Status, TritonError
from triton_core.protos import model_config_pb2

FP32 = model_config_pb2.DataType.Value("TYPE_FP32")
INT64 = model_config_pb2.DataType.Value("TYPE_INT64")
STRING = model_config_pb2.DataType.Value("TYPE_STRING")


def io(config: model_config_pb2.ModelConfig) -> dict[str, tuple[str, list[int]]]:
    tensors = [*config.input, *config.output]
    return {t.name: (model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in tensors}


def test_no_config_at_all(builders, model_file, complete):
    builders.mlp(model_file, in_features=64, out_features=10)
    config = complete()
    assert config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == 4
    assert io(config) == {"INPUT0": ("TYPE_FP32", [64]), "OUTPUT0": ("TYPE_FP32", [10])}
    assert [t.name for t in config.input] == ["INPUT0"]
    assert [t.name for t in config.output] == ["OUTPUT0"]
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"


def test_default_max_batch_size_option(builders, model_file, complete):
    builders.mlp(model_file)
    assert complete(options={"default-max-batch-size": "16"}).max_batch_size == 16


def test_default_max_batch_size_zero_keeps_full_shapes(builders, model_file, complete):
    builders.identity(model_file, "INT64", dims=(-1, 3))
    config = complete(options={"default-max-batch-size": "0"})
    assert config.max_batch_size == 0
    assert io(config) == {
        "INPUT0": ("TYPE_INT64", [-1, -1, 3]),
        "OUTPUT0": ("TYPE_INT64", [-1, -1, 3]),
    }
    assert config.WhichOneof("scheduling_choice") is None


def test_max_batch_size_one_adds_no_dynamic_batching(builders, model_file, complete):
    builders.mlp(model_file)
    config = complete(options={"default-max-batch-size": "1"})
    assert config.max_batch_size == 1
    assert config.WhichOneof("scheduling_choice") is None


def test_invalid_default_max_batch_size_option(builders, model_file, complete):
    builders.mlp(model_file)
    with pytest.raises(TritonError) as info:
        complete(options={"default-max-batch-size": "many"})
    assert info.value.status is Status.INVALID_ARG


def test_model_without_batch_dim(builders, model_file, complete):
    builders.no_batch_identity(model_file, "FP32", dims=(4,))
    config = complete()
    assert config.max_batch_size == 0
    assert io(config) == {"INPUT0": ("TYPE_FP32", [4]), "OUTPUT0": ("TYPE_FP32", [4])}
    assert config.WhichOneof("scheduling_choice") is None


def test_max_batch_size_on_model_without_batch_dim_fails(builders, model_file, complete):
    builders.no_batch_identity(model_file, "FP32", dims=(4,))
    with pytest.raises(TritonError) as info:
        complete("max_batch_size: 8")
    assert info.value.status is Status.INVALID_ARG
    assert "'m'" in info.value.message and "batching" in info.value.message


def test_configured_max_batch_size_is_kept(builders, model_file, complete):
    builders.mlp(model_file, in_features=8)
    config = complete("max_batch_size: 32")
    assert config.max_batch_size == 32
    assert io(config)["INPUT0"] == ("TYPE_FP32", [8])
    assert config.HasField("dynamic_batching")


def test_scheduling_choice_is_respected(builders, model_file, complete):
    builders.mlp(model_file)
    config = complete("sequence_batching {}")
    assert config.max_batch_size == 4
    assert config.WhichOneof("scheduling_choice") == "sequence_batching"


def test_folder_model_path(builders, model_dir, complete):
    folder = model_dir / "1" / "model.onnx"
    builders.mlp(folder / "model.onnx", in_features=5)
    config = OnnxRuntimeBackend().auto_complete_config
    cfg = model_config_pb2.ModelConfig(name="m")
    config(cfg, folder)
    assert io(cfg)["INPUT0"] == ("TYPE_FP32", [5])


def test_platform_is_kept_when_set(builders, model_file, complete):
    builders.mlp(model_file)
    assert complete('platform: "onnxruntime_onnx" backend: "onnxruntime"').platform == (
        "onnxruntime_onnx"
    )


def test_bytes_and_scalar_items(builders, model_file, complete):
    builders.identity(model_file, "BYTES", dims=(2,))
    assert io(complete()) == {"INPUT0": ("TYPE_STRING", [2]), "OUTPUT0": ("TYPE_STRING", [2])}


def test_scalar_per_item_gets_dims_one_and_empty_reshape(model_file, complete):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "scalar",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, model_file)
    config = complete()
    assert config.max_batch_size == 4
    x = config.input[0]
    assert list(x.dims) == [1] and x.HasField("reshape") and list(x.reshape.shape) == []


# -- partial configs ---------------------------------------------------------------------------


def test_inputs_listed_outputs_filled(builders, model_file, complete):
    builders.two_inputs_mixed(model_file)
    config = complete(
        """
        max_batch_size: 8
        input [
          { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
          { name: "INPUT1" data_type: TYPE_INT64 dims: [ 4 ] }
        ]
        """
    )
    assert io(config) == {
        "INPUT0": ("TYPE_FP32", [4]),
        "INPUT1": ("TYPE_INT64", [4]),
        "OUTPUT0": ("TYPE_FP32", [4]),
    }
    assert config.max_batch_size == 8


def test_listed_tensor_without_type_or_dims_is_filled(builders, model_file, complete):
    builders.two_inputs_mixed(model_file)
    config = complete('input [ { name: "INPUT1" } ]')
    assert config.max_batch_size == 4
    assert io(config)["INPUT1"] == ("TYPE_INT64", [4])
    # the input section was not empty, so it is not completed with INPUT0 (as Triton)
    assert [t.name for t in config.input] == ["INPUT1"]
    assert io(config)["OUTPUT0"] == ("TYPE_FP32", [4])


def test_full_config_is_only_checked(builders, model_file, complete):
    builders.mlp(model_file, in_features=3, out_features=2)
    text = """
        max_batch_size: 0
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]
    """
    config = complete(text)
    assert config.max_batch_size == 0
    assert config.WhichOneof("scheduling_choice") is None
    assert io(config) == {"INPUT0": ("TYPE_FP32", [-1, 3]), "OUTPUT0": ("TYPE_FP32", [-1, 2])}


def test_listed_full_shape_keeps_max_batch_size_zero(builders, model_file, complete):
    builders.mlp(model_file, in_features=3, out_features=2)
    config = complete('input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]')
    assert config.max_batch_size == 0
    assert io(config)["OUTPUT0"] == ("TYPE_FP32", [-1, 2])


def test_variable_model_dim_accepts_fixed_config_dim(builders, model_file, complete):
    builders.identity(model_file, "FP32", dims=(-1,))
    config = complete(
        """
        max_batch_size: 2
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 7 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        """
    )
    assert io(config)["INPUT0"] == ("TYPE_FP32", [7])


# -- mismatches --------------------------------------------------------------------------------


def _error(complete, text: str) -> TritonError:
    with pytest.raises(TritonError) as info:
        complete(text)
    assert info.value.status is Status.INVALID_ARG
    return info.value


def test_datatype_mismatch(builders, model_file, complete):
    builders.mlp(model_file)
    error = _error(complete, 'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 64 ] } ]')
    for part in ("'m'", "'INPUT0'", "TYPE_INT32", "TYPE_FP32"):
        assert part in error.message


def test_dims_mismatch(builders, model_file, complete):
    builders.mlp(model_file, in_features=64)
    error = _error(
        complete,
        'max_batch_size: 4 output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 11 ] } ]',
    )
    for part in ("'m'", "'OUTPUT0'", "[11]", "[-1, 10]"):
        assert part in error.message


def test_rank_mismatch(builders, model_file, complete):
    builders.mlp(model_file, in_features=64)
    error = _error(
        complete,
        'max_batch_size: 4 input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 8, 8 ] } ]',
    )
    assert "[8, 8]" in error.message and "[-1, 64]" in error.message


def test_config_variable_dim_for_fixed_model_dim(builders, model_file, complete):
    builders.mlp(model_file, in_features=64)
    _error(
        complete, 'max_batch_size: 4 input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]'
    )


def test_unknown_tensor(builders, model_file, complete):
    builders.mlp(model_file)
    error = _error(complete, 'output [ { name: "PROBS" data_type: TYPE_FP32 dims: [ 10 ] } ]')
    assert "'PROBS'" in error.message and "OUTPUT0" in error.message


def test_missing_model_file(model_file, complete):
    with pytest.raises(TritonError) as info:
        complete()
    assert info.value.status is Status.UNAVAILABLE
    assert str(model_file) in info.value.message


def test_invalid_onnx_file(model_file, complete):
    model_file.write_bytes(b"not an onnx model")
    with pytest.raises(TritonError) as info:
        complete()
    assert info.value.status is Status.INVALID_ARG
    assert "'m'" in info.value.message
