"""Auto-complete: torch.export programs fill their configs; TorchScript ones say what to list."""

from __future__ import annotations

import pytest
import torch

from triton_core.errors import Status, TritonError
from triton_core.protos import model_config_pb2

TYPE = model_config_pb2.DataType


def dims(tensor) -> list[int]:
    return list(tensor.dims)


def test_export_program_fills_inputs_outputs_and_batching(builders, export_file, complete):
    builders.save(builders.seeded(builders.Mlp), export_file, "export", (torch.zeros(2, 64),))
    config = complete(path=export_file)
    assert config.platform == "pytorch_libtorch"
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    (x,) = config.input
    assert (x.name, x.data_type, dims(x)) == ("x", TYPE.Value("TYPE_FP32"), [64])
    (y,) = config.output
    assert (y.name, y.data_type, dims(y)) == ("OUTPUT__0", TYPE.Value("TYPE_FP32"), [10])


def test_default_max_batch_size_option(builders, export_file, complete):
    builders.save(builders.seeded(builders.Mlp), export_file, "export", (torch.zeros(2, 64),))
    config = complete(path=export_file, options={"default-max-batch-size": "16"})
    assert config.max_batch_size == 16
    config = complete(path=export_file, options={"default-max-batch-size": "1"})
    assert config.max_batch_size == 1
    assert not config.HasField("dynamic_batching")


def test_batch_dim_upper_bound_caps_max_batch_size(builders, export_file, complete):
    program = torch.export.export(
        builders.Identity(),
        (torch.zeros(2, 3),),
        dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=3)},),
    )
    torch.export.save(program, str(export_file))
    config = complete(path=export_file, options={"default-max-batch-size": "8"})
    assert config.max_batch_size == 3


def test_dict_outputs_and_mixed_inputs(builders, export_file, complete, tmp_path):
    builders.save(builders.DictOutputs(), export_file, "export", (torch.zeros(2, 4),))
    config = complete(path=export_file)
    assert [t.name for t in config.output] == ["sum", "scaled"]
    assert [dims(t) for t in config.output] == [[1], [4]]

    mixed = tmp_path / "mixed" / "1" / "model.pt2"
    example = (torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.int64))
    builders.save(builders.Mixed(), mixed, "export", example)
    config = complete(path=mixed)
    assert [(t.name, TYPE.Name(t.data_type)) for t in config.input] == [
        ("x", "TYPE_FP32"),
        ("y", "TYPE_INT64"),
    ]


def test_static_shapes_give_max_batch_size_zero(builders, export_file, complete):
    example = (torch.zeros(3, 5),)
    builders.save(builders.Identity(), export_file, "export", example, dynamic_batch=False)
    config = complete(path=export_file)
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert dims(config.input[0]) == [3, 5]


def test_max_batch_size_on_a_static_program_fails(builders, export_file, complete):
    example = (torch.zeros(3, 5),)
    builders.save(builders.Identity(), export_file, "export", example, dynamic_batch=False)
    with pytest.raises(TritonError) as info:
        complete("max_batch_size: 8", path=export_file)
    assert info.value.status == Status.INVALID_ARG
    assert "does not support batching" in info.value.message


def test_listed_inputs_are_checked_and_completed(builders, export_file, complete):
    builders.save(builders.seeded(builders.Mlp), export_file, "export", (torch.zeros(2, 64),))
    config = complete('input [ { name: "INPUT__0" } ]', path=export_file)
    assert TYPE.Name(config.input[0].data_type) == "TYPE_FP32"
    assert dims(config.input[0]) == [64]
    with pytest.raises(TritonError) as info:
        complete(
            'max_batch_size: 4 input [ { name: "x" data_type: TYPE_INT32 dims: [ 64 ] } ]',
            path=export_file,
        )
    message = info.value.message
    assert "'x'" in message and "TYPE_INT32" in message and "TYPE_FP32" in message
    with pytest.raises(TritonError) as info:
        complete(
            'max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [ 63 ] } ]',
            path=export_file,
        )
    assert "[63]" in info.value.message and "[-1, 64]" in info.value.message


def test_input_count_mismatch_names_both(builders, export_file, complete):
    example = (torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.int64))
    builders.save(builders.Mixed(), export_file, "export", example)
    with pytest.raises(TritonError) as info:
        complete('input [ { name: "x" } ]', path=export_file)
    message = info.value.message
    assert "1 input(s) (x)" in message and "forward(x: TYPE_FP32" in message
    assert "y: TYPE_INT64" in message


def test_model_pt2_is_found_beside_a_missing_model_pt(builders, model_file, export_file, complete):
    builders.save(builders.Identity(), export_file, "export", (torch.zeros(2, 3),))
    config = complete()  # model_path is .../1/model.pt, which does not exist
    assert config.default_model_filename == "model.pt2"
    assert config.max_batch_size == 4


def test_torchscript_without_inputs_shows_forward(builders, model_file, complete):
    builders.save(builders.AddSub(), model_file, "script")
    with pytest.raises(TritonError) as info:
        complete()
    message = info.value.message
    assert info.value.status == Status.INVALID_ARG
    assert "must list 'input' and 'output'" in message
    assert "forward(x: Tensor, y: Tensor)" in message


def test_torchscript_with_a_full_config_is_left_alone(builders, model_file, complete):
    builders.save(builders.Identity(), model_file, "script")
    text = """
      max_batch_size: 2
      input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
      output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
    """
    config = complete(text)
    assert config.max_batch_size == 2
    assert not config.HasField("dynamic_batching")


def test_missing_file_is_unavailable(model_file, complete):
    with pytest.raises(TritonError) as info:
        complete()
    assert info.value.status == Status.UNAVAILABLE
    assert "model.pt" in info.value.message and "model.pt2" in info.value.message
